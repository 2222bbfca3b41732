// The address-scheme table, and what every transport shares.
#include "rpc/transport.h"

#include <string_view>

#include "rpc/transport_kinds.h"

namespace strata::rpc {
namespace {

// One row per transport. An address without a scheme is TCP.
constexpr TransportKind kKinds[] = {
    {"tcp", tcp_connect, tcp_listen},
    {"unix", seqpacket_connect, seqpacket_listen},
};
constexpr const TransportKind& kDefaultKind = kKinds[0];

struct Chosen {
  const TransportKind* kind;
  std::string where;
};

Chosen choose(const std::string& address) {
  for (const TransportKind& k : kKinds) {
    const std::string_view scheme = k.scheme;
    const std::string_view a = address;
    if (a.size() > scheme.size() && a.substr(0, scheme.size()) == scheme &&
        a[scheme.size()] == ':') {
      const std::string_view rest = a.substr(scheme.size() + 1);
      return {&k, std::string(rest.substr(0, 2) == "//" ? rest.substr(2) : rest)};
    }
  }
  return {&kDefaultKind, address};
}

}  // namespace

Result<std::unique_ptr<Transport>> transport_connect(const std::string& address, int timeout_ms) {
  const Chosen c = choose(address);
  return c.kind->connect(address, c.where, timeout_ms);
}

Result<std::unique_ptr<Listener>> transport_listen(const std::string& address) {
  const Chosen c = choose(address);
  return c.kind->listen(address, c.where);
}

Result<Message> Transport::recv(int timeout_ms) {
  STRATA_ASSIGN_OR_RETURN(std::optional<Message> m, try_recv(timeout_ms, timeout_ms));
  if (!m) {
    return unavailable("recv from " + peer() + ": no message within " + std::to_string(timeout_ms) +
                       " ms");
  }
  return std::move(*m);
}

Status send_message(Transport& t, const Header& header, std::span<const uint8_t> payload) {
  const Piece piece = payload;
  return t.send(header, std::span<const Piece>(&piece, payload.empty() ? 0 : 1));
}

Status set_payload_size(Header* h, std::span<const Piece> pieces) {
  h->payload_size = 0;
  for (const Piece& p : pieces) {
    if (__builtin_add_overflow(h->payload_size, uint64_t{p.size()}, &h->payload_size)) {
      return internal_error("send: payload size wraps");
    }
  }
  if (h->payload_size > kMaxMessageBytes) {
    return out_of_range(std::string("send ") + command_name(h->command) + ": payload " +
                        std::to_string(h->payload_size) + " bytes, limit " +
                        std::to_string(kMaxMessageBytes));
  }
  return Status::ok();
}

}  // namespace strata::rpc
