#include "rpc/handoff.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "rpc/auth.h"

namespace strata::rpc {
namespace {

std::string step_name(uint64_t seq) { return "the hand-off of step " + std::to_string(seq); }

std::string region_text(const Region& r) {
  return "buffer " + std::to_string(r.buffer) + " [" + std::to_string(r.offset) + ", +" +
         std::to_string(r.size) + ")";
}

}  // namespace

// --- HandoffInbox ------------------------------------------------------------------------------

void HandoffInbox::link_opened() { ++state_.lock()->links; }

void HandoffInbox::link_closed(const std::string& from, const std::string& why) {
  {
    auto s = state_.lock();
    --s->links;
    s->last_link_closed = from + ": " + why;
  }
  state_.notify_all();
}

Status HandoffInbox::deliver(HandoffArrival a) {
  const uint64_t seq = a.data.seq;
  const uint64_t bytes = a.message.payload.size();
  {
    auto s = state_.lock();
    if (!s->closed.empty()) return unavailable("the receiving session closed");
    if (s->abandoned.erase(seq) > 0) return Status::ok();  // late: its step gave up
    if (s->held.count(seq) > 0) {
      return invalid_argument("HANDOFF_DATA: step " + std::to_string(seq) + " delivered twice");
    }
    if (s->held.size() >= kMaxHandoffPending) {
      return out_of_range("HANDOFF_DATA: " + std::to_string(s->held.size()) +
                          " hand-offs held and not taken, limit " +
                          std::to_string(kMaxHandoffPending));
    }
    if (bytes > max_bytes_ || s->held_bytes > max_bytes_ - bytes) {
      return out_of_range("HANDOFF_DATA: " + std::to_string(s->held_bytes + bytes) +
                          " bytes of hand-offs held and not taken, limit " +
                          std::to_string(max_bytes_));
    }
    s->held_bytes += bytes;
    s->held.emplace(seq, std::move(a));
  }
  state_.notify_all();
  return Status::ok();
}

Result<HandoffArrival> HandoffInbox::take(uint64_t seq, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto s = state_.lock();
  // A link that closed with none open since means the sender's session is gone (its worker died,
  // or its client left): nothing more can come, so the wait ends now, not at its timeout.
  const bool woken = s.wait_until(deadline, [seq](const State& st) {
    const bool lost = st.links == 0 && !st.last_link_closed.empty();
    return !st.closed.empty() || st.held.count(seq) > 0 || lost;
  });
  if (auto it = s->held.find(seq); it != s->held.end()) {
    HandoffArrival a = std::move(it->second);
    s->held_bytes -= a.message.payload.size();
    s->held.erase(it);
    return a;
  }
  s->abandon(seq);
  if (!s->closed.empty()) return unavailable(step_name(seq) + ": " + s->closed);
  if (woken) {
    return unavailable(step_name(seq) +
                       " cannot arrive: no link from the previous stage's worker is open (one "
                       "closed: " +
                       s->last_link_closed + ")");
  }
  std::string why = step_name(seq) + " did not arrive within " + std::to_string(timeout_ms) +
                    " ms: the previous stage's worker is stalled or gone (" +
                    std::to_string(s->links) + " link(s) from it open";
  if (!s->last_link_closed.empty()) why += "; one closed: " + s->last_link_closed;
  return unavailable(why + ")");
}

void HandoffInbox::abandon(uint64_t seq) { state_.lock()->abandon(seq); }

void HandoffInbox::State::abandon(uint64_t seq) {
  if (auto it = held.find(seq); it != held.end()) {
    held_bytes -= it->second.message.payload.size();
    held.erase(it);
    return;
  }
  if (!abandoned.insert(seq).second) return;
  abandoned_order.push_back(seq);
  if (abandoned_order.size() > kMaxHandoffAbandoned) {
    abandoned.erase(abandoned_order.front());
    abandoned_order.pop_front();
  }
}

void HandoffInbox::close(const std::string& why) {
  {
    auto s = state_.lock();
    if (s->closed.empty()) s->closed = why.empty() ? "closed" : why;
    s->held.clear();
    s->held_bytes = 0;
  }
  state_.notify_all();
}

// --- HandoffRegistry ---------------------------------------------------------------------------

Result<std::shared_ptr<HandoffInbox>> HandoffRegistry::open(uint64_t max_bytes) {
  STRATA_ASSIGN_OR_RETURN(Nonce ticket, auth_nonce());
  auto s = state_.lock();
  if (s->closed) return unavailable("HANDOFF_TICKET: the worker is stopping");
  const uint64_t id = s->next_session++;
  auto inbox = std::make_shared<HandoffInbox>(id, ticket, max_bytes);
  s->inboxes.emplace(id, inbox);
  return inbox;
}

Result<std::shared_ptr<HandoffInbox>> HandoffRegistry::find(uint64_t session,
                                                            const Ticket& ticket) const {
  auto s = state_.lock();
  auto it = s->inboxes.find(session);
  if (it == s->inboxes.end()) {
    return invalid_argument("HANDOFF_ATTACH: no session " + std::to_string(session) +
                            " on this worker has issued a ticket");
  }
  if (!auth_mac_equal(it->second->ticket(), ticket)) {
    return invalid_argument("HANDOFF_ATTACH: wrong ticket for session " + std::to_string(session));
  }
  return it->second;
}

void HandoffRegistry::remove(uint64_t session) { state_.lock()->inboxes.erase(session); }

void HandoffRegistry::close_all(const std::string& why) {
  std::map<uint64_t, std::shared_ptr<HandoffInbox>> all;
  {
    auto s = state_.lock();
    s->closed = true;
    all.swap(s->inboxes);
  }
  for (auto& [id, inbox] : all) inbox->close(why);
}

// --- HandoffLink -------------------------------------------------------------------------------

Result<std::unique_ptr<HandoffLink>> HandoffLink::open(const HandoffConnectRequest& req,
                                                       const std::string& token) {
  std::unique_ptr<HandoffLink> link(new HandoffLink(req, token));
  STRATA_RETURN_IF_ERROR(link->connect());
  return link;
}

Status HandoffLink::connect() {
  conn_.reset();
  ClientOptions o;
  o.endpoint = req_.address;
  o.name = "peer";
  o.token = token_;
  o.timeout_ms = static_cast<int>(req_.timeout_ms);
  o.connect_timeout_ms = static_cast<int>(std::min<uint32_t>(req_.timeout_ms, 10000));
  const std::string what = "hand-off link to " + req_.address;
  Result<std::shared_ptr<Connection>> c = Connection::open(o);
  if (!c) {
    std::string hint;
    if (c.status().message().find("requires a token") != std::string::npos) {
      hint =
          " (a worker proves itself to its peers with its own token: start every worker of "
          "the split with the same --auth-token-file)";
    }
    return Status(c.status().kind(), what + ": " + c.status().message() + hint);
  }
  if (!(*c)->has(kCapHandoff)) {
    return unsupported(what + ": the peer does not offer hand-off (capability bit " +
                       std::to_string(kCapHandoff) + ")");
  }
  std::vector<uint8_t> payload;
  encode(HandoffAttachRequest{req_.session, req_.ticket}, &payload);
  const Piece piece(payload.data(), payload.size());
  Result<Message> r = (*c)->call(Command::kHandoffAttach, std::span<const Piece>(&piece, 1));
  if (!r) return r.status().with_context(what);
  conn_ = std::move(*c);
  return Status::ok();
}

Status HandoffLink::send(const HandoffData& d) {
  if (conn_ == nullptr || !conn_->broken().is_ok()) {
    const std::string before = conn_ ? conn_->broken().message() : "not open";
    Status s = connect();
    if (!s.is_ok()) return s.with_context("the link had closed (" + before + "); reopening it");
  }
  std::vector<uint8_t> head;
  encode(d, &head);
  const Piece pieces[2] = {Piece(head.data(), head.size()), d.bytes};
  return conn_->send_one_way(Command::kHandoffData, pieces, false);
}

// --- SessionHandoff ----------------------------------------------------------------------------

Result<HandoffTicketResponse> SessionHandoff::ticket() {
  if (into_ != nullptr) return invalid_argument("HANDOFF_TICKET on a hand-off link");
  if (inbox_ == nullptr) {
    STRATA_ASSIGN_OR_RETURN(inbox_, registry_.open(max_held_bytes_));
  }
  return HandoffTicketResponse{inbox_->session(), inbox_->ticket()};
}

Status SessionHandoff::connect(const HandoffConnectRequest& req) {
  if (into_ != nullptr) return invalid_argument("HANDOFF_CONNECT on a hand-off link");
  if (links_.count(req.link) == 0 && links_.size() >= kMaxHandoffLinks) {
    return out_of_range("HANDOFF_CONNECT: this connection has " + std::to_string(links_.size()) +
                        " links, limit " + std::to_string(kMaxHandoffLinks));
  }
  links_.erase(req.link);
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<HandoffLink> link, HandoffLink::open(req, token_));
  links_[req.link] = std::move(link);
  return Status::ok();
}

Status SessionHandoff::attach(const HandoffAttachRequest& req, bool fresh) {
  if (!fresh || !empty() || into_ != nullptr) {
    return invalid_argument(
        "HANDOFF_ATTACH: only a fresh connection (no buffers, graphs, ticket or links) can "
        "become a hand-off link");
  }
  STRATA_ASSIGN_OR_RETURN(into_, registry_.find(req.session, req.ticket));
  into_->link_opened();
  return Status::ok();
}

Status SessionHandoff::deliver(Message m) {
  HandoffArrival a;
  STRATA_ASSIGN_OR_RETURN(a.data, decode_handoff_data(m.payload));
  a.message = std::move(m);  // moves the payload's storage: a.data's span stays valid
  a.from = "peer " + peer_;
  return into_->deliver(std::move(a));
}

Status SessionHandoff::take(HandoffHost& host, const HandoffComputeRequest& req) {
  if (inbox_ == nullptr) {
    return invalid_argument("HANDOFF_COMPUTE waits for " + step_name(req.wait_seq) +
                            ", but this connection has issued no ticket (HANDOFF_TICKET)");
  }
  STRATA_ASSIGN_OR_RETURN(HandoffArrival a,
                          inbox_->take(req.wait_seq, static_cast<int>(req.timeout_ms)));
  const HandoffData& d = a.data;
  if (d.status != 0) {
    return status_from_wire(
               d.status,
               std::string_view(reinterpret_cast<const char*>(d.bytes.data()), d.bytes.size()))
        .with_context(step_name(req.wait_seq) + " from " + a.from + " failed there");
  }
  if (d.dst != req.wait_dst) {
    return invalid_argument(step_name(req.wait_seq) + " from " + a.from + " writes " +
                            region_text(d.dst) + ", where the computation expects " +
                            region_text(req.wait_dst));
  }
  STRATA_ASSIGN_OR_RETURN(uint8_t * dst, host.region(d.dst, "HANDOFF_DATA dst"));
  if (!d.bytes.empty()) std::memcpy(dst, d.bytes.data(), d.bytes.size());
  return Status::ok();
}

Status SessionHandoff::send(HandoffHost& host, const HandoffComputeRequest& req) {
  auto it = links_.find(req.link);
  if (it == links_.end()) {
    return invalid_argument("HANDOFF_COMPUTE: no link " + std::to_string(req.link) +
                            " on this connection (HANDOFF_CONNECT)");
  }
  STRATA_ASSIGN_OR_RETURN(uint8_t * src, host.region(req.send_src, "HANDOFF_COMPUTE send_src"));
  HandoffData d;
  d.seq = req.send_seq;
  d.dst = req.send_dst;
  d.bytes = std::span<const uint8_t>(src, static_cast<size_t>(req.send_src.size));
  Status s = it->second->send(d);
  if (!s.is_ok()) return s.with_context(step_name(req.send_seq) + " to " + it->second->label());
  return Status::ok();
}

void SessionHandoff::send_error(const HandoffComputeRequest& req, const Status& s) {
  auto it = links_.find(req.link);
  if (it == links_.end()) return;
  const std::string text = error_text(s);
  HandoffData d;
  d.seq = req.send_seq;
  d.status = static_cast<uint16_t>(wire_status_from(s));
  d.dst = req.send_dst;
  d.bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  (void)it->second->send(d);  // the next stage times out if this does not arrive either
}

Status SessionHandoff::compute(HandoffHost& host, const HandoffComputeRequest& req) {
  Status s;
  if ((req.flags & kHandoffWait) != 0) s = take(host, req);
  if (s.is_ok() && (req.flags & (kHandoffRecompute | kHandoffGraph)) != 0) s = host.run_graph(req);
  if ((req.flags & kHandoffSend) != 0) {
    if (s.is_ok()) return send(host, req);
    send_error(req, s);
  }
  return s;
}

void SessionHandoff::skipped(const HandoffComputeRequest& req, const Status& sticky) {
  if ((req.flags & kHandoffWait) != 0 && inbox_ != nullptr) inbox_->abandon(req.wait_seq);
  if ((req.flags & kHandoffSend) != 0) send_error(req, sticky);
}

void SessionHandoff::closed(const std::string& why) {
  if (inbox_ != nullptr) {
    registry_.remove(inbox_->session());
    inbox_->close("the receiving session closed (" + why + ")");
    inbox_.reset();
  }
  if (into_ != nullptr) {
    into_->link_closed("peer " + peer_, why);
    into_.reset();
  }
  links_.clear();
}

}  // namespace strata::rpc
