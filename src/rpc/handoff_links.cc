#include "rpc/handoff_links.h"

#include <algorithm>
#include <cstdio>

namespace strata::rpc {
namespace {

Status link_open(Connection& from, Connection& to, uint32_t id) {
  Result<Message> m = to.call(Command::kHandoffTicket, {});
  if (!m) return m.status();
  Result<HandoffTicketResponse> ticket = decode_handoff_ticket_response(m->payload);
  if (!ticket) return ticket.status().with_context("worker " + to.label());
  HandoffConnectRequest req;
  req.link = id;
  req.timeout_ms = std::min<uint32_t>(static_cast<uint32_t>(std::max(1, from.options().timeout_ms)),
                                      kMaxHandoffTimeoutMs);
  req.session = ticket->session;
  req.ticket = ticket->ticket;
  req.address = to.options().endpoint;
  std::vector<uint8_t> payload;
  encode(req, &payload);
  const Piece piece(payload.data(), payload.size());
  return from.call(Command::kHandoffConnect, std::span<const Piece>(&piece, 1)).status();
}

}  // namespace

uint32_t handoff_timeout_ms(const ClientOptions& o) {
  const int64_t t = std::max<int64_t>(1, int64_t{o.timeout_ms} - o.timeout_ms / 4);
  return static_cast<uint32_t>(std::min<int64_t>(t, kMaxHandoffTimeoutMs));
}

std::optional<uint32_t> HandoffLinks::link(const std::shared_ptr<Connection>& from,
                                           const std::shared_ptr<Connection>& to) {
  auto s = state_.lock();
  std::erase_if(s->entries, [](const Entry& e) { return e.from.expired() || e.to.expired(); });
  for (const Entry& e : s->entries) {
    if (e.from.lock() == from && e.to.lock() == to) {
      return e.open ? std::optional<uint32_t>(e.id) : std::nullopt;
    }
  }
  Entry e{from, to, s->next_id++, false};
  const Status opened = link_open(*from, *to, e.id);
  e.open = opened.is_ok();
  s->entries.push_back(e);
  if (!e.open) {
    std::fprintf(stderr,
                 "strata: no hand-off from %s to %s, the values between them go through this "
                 "host: %s\n",
                 from->label().c_str(), to->label().c_str(), opened.message().c_str());
    return std::nullopt;
  }
  return e.id;
}

}  // namespace strata::rpc
