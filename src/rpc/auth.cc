#include "rpc/auth.h"

#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

namespace strata::rpc {
namespace {

Mac hmac(std::string_view token, std::string_view label, const Nonce& a, const Nonce& b) {
  std::vector<uint8_t> msg(label.begin(), label.end());
  msg.insert(msg.end(), a.begin(), a.end());
  msg.insert(msg.end(), b.begin(), b.end());
  Mac out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()), msg.data(), msg.size(),
       out.data(), &len);
  return out;
}

}  // namespace

Result<Nonce> auth_nonce() {
  Nonce n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) {
    return internal_error("RAND_bytes failed: no random nonce for the handshake");
  }
  return n;
}

Mac auth_client_mac(std::string_view token, const Nonce& server_nonce, const Nonce& client_nonce) {
  return hmac(token, "strata-rpc-client", server_nonce, client_nonce);
}

Mac auth_server_mac(std::string_view token, const Nonce& client_nonce, const Nonce& server_nonce) {
  return hmac(token, "strata-rpc-server", client_nonce, server_nonce);
}

bool auth_mac_equal(const Mac& a, const Mac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Result<std::string> auth_token_load(const std::string& file) {
  std::string token;
  if (file.empty()) {
    const char* env = std::getenv(kTokenEnv);
    if (env == nullptr) return std::string();
    token = env;
  } else {
    std::ifstream in(file, std::ios::binary);
    if (!in) return io_error("cannot read the token file '" + file + "'");
    token.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (token.size() > kMaxTokenBytes) {
      return out_of_range("token file '" + file + "' has " + std::to_string(token.size()) +
                          " bytes, limit " + std::to_string(kMaxTokenBytes));
    }
  }
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ' ||
                            token.back() == '\t')) {
    token.pop_back();
  }
  if (token.size() > kMaxTokenBytes) {
    return out_of_range(std::string(kTokenEnv) + " longer than " + std::to_string(kMaxTokenBytes));
  }
  if (token.empty()) {
    return invalid_argument(file.empty() ? std::string(kTokenEnv) + " is set but empty"
                                         : "token file '" + file + "' is empty");
  }
  return token;
}

}  // namespace strata::rpc
