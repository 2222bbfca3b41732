// Shared-secret authentication of RPC peers: the challenge-response of the HELLO exchange
// (protocol.h). The token never crosses the wire; each side proves it knows the token with an
// HMAC-SHA256 over both nonces, so a recorded exchange cannot be replayed to a new challenge.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "rpc/protocol.h"

namespace strata::rpc {

// The environment variable that holds a token when no file is given.
constexpr const char* kTokenEnv = "STRATA_RPC_TOKEN";
// A token file larger than this is refused (it is a secret, not a document).
constexpr size_t kMaxTokenBytes = 4096;

// Cryptographically random bytes (OpenSSL RAND_bytes).
Result<Nonce> auth_nonce();
// HMAC-SHA256(token, "strata-rpc-client" || server_nonce || client_nonce).
Mac auth_client_mac(std::string_view token, const Nonce& server_nonce, const Nonce& client_nonce);
// HMAC-SHA256(token, "strata-rpc-server" || client_nonce || server_nonce).
Mac auth_server_mac(std::string_view token, const Nonce& client_nonce, const Nonce& server_nonce);
// Constant-time comparison.
bool auth_mac_equal(const Mac& a, const Mac& b);

// The token from `file` (trailing whitespace removed) or, when file is empty, from
// STRATA_RPC_TOKEN; "" when neither is set. An empty or oversized file is an error.
Result<std::string> auth_token_load(const std::string& file);

}  // namespace strata::rpc
