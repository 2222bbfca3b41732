// Worker-to-worker hand-off, the worker's side: the inbox of a session that receives, the links
// of a session that sends, and the HANDOFF_* commands of both (protocol.h has the messages).
//
// Goals: a stage's output goes from its worker straight into the next stage's buffer on another
// worker; a hand-off is checked like any client write (against the receiving session's buffers,
// offsets and sizes) when it is applied, on the receiving session's own thread, so buffers and
// graphs stay per connection; a peer that fails, stalls or leaves becomes an error of the step
// that waited for it, never a hang. Non-goals: routes of more than one hop; links shared by the
// sessions of several clients (each client session opens its own).
//
// Authentication: a worker opens a link with its own token (--auth-token-file), the one its
// client proved it knows, never one that crossed the wire; the link then attaches to one session
// of the peer with that session's ticket (32 random bytes the peer issued to the client over the
// client's own authenticated connection). Knowing the token lets a peer open sessions; only the
// ticket lets it write into a given client's session.
//
// Threads: a session's thread owns its SessionHandoff. On the receiving worker, each link is a
// connection with a thread of its own that only delivers into the session's inbox; the inbox is
// the one object that both threads touch, under its lock.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "core/mutex_guarded.h"
#include "core/status.h"
#include "rpc/client.h"
#include "rpc/protocol.h"
#include "rpc/transport.h"

namespace strata::rpc {

// Links a session may open to peers. A client opens one per next stage on another worker.
constexpr uint32_t kMaxHandoffLinks = 16;
// Hand-offs landed and not yet taken, per session: one per pipeline group in flight in normal
// use. A link that brings more is closed (a broken or hostile peer).
constexpr uint32_t kMaxHandoffPending = 64;
// Sequence numbers given up after a timeout (or skipped behind an error) that are remembered, so
// that a late hand-off is dropped when it lands instead of being held.
constexpr uint32_t kMaxHandoffAbandoned = 1024;

// A hand-off that a peer delivered, until the computation waiting for it takes it.
struct HandoffArrival {
  Message message;   // owns the bytes
  HandoffData data;  // points into message.payload
  std::string from;  // the sending peer, for errors
};

// The hand-offs that peers' links deliver into one session.
class HandoffInbox {
 public:
  // Held bytes are bounded by `max_bytes` (the worker's ceiling on one message): a peer can make
  // a session hold no more than a client could send in one message.
  HandoffInbox(uint64_t session, const Ticket& ticket, uint64_t max_bytes)
      : session_(session), ticket_(ticket), max_bytes_(max_bytes) {}
  uint64_t session() const { return session_; }
  const Ticket& ticket() const { return ticket_; }

  // Links' threads.
  void link_opened();
  void link_closed(const std::string& from, const std::string& why);
  // Holds a hand-off until it is taken. An error (a step delivered twice, too many held, the
  // session gone) closes the delivering link.
  Status deliver(HandoffArrival a);

  // The session's thread: the hand-off of step `seq`, waiting up to timeout_ms for it. The wait
  // ends at once when no link is open and one has closed (the sender is gone). A step that is
  // not taken is abandoned.
  Result<HandoffArrival> take(uint64_t seq, int timeout_ms);
  // Drops the hand-off of step `seq`, now if it is held, else when it lands.
  void abandon(uint64_t seq);
  // The session ended (or the worker stops): waits end with `why`, deliveries fail.
  void close(const std::string& why);

 private:
  struct State {
    std::string closed;  // why, once closed
    int links = 0;
    std::string last_link_closed;
    std::map<uint64_t, HandoffArrival> held;
    uint64_t held_bytes = 0;
    std::set<uint64_t> abandoned;
    std::deque<uint64_t> abandoned_order;  // oldest first, to bound `abandoned`

    void abandon(uint64_t seq);
  };

  const uint64_t session_;
  const Ticket ticket_;
  const uint64_t max_bytes_;
  MutexGuarded<State> state_;  // its condition variable wakes take()
};

// The worker's sessions that issued a ticket, by session id.
class HandoffRegistry {
 public:
  // A new inbox with a fresh session id and a random ticket.
  Result<std::shared_ptr<HandoffInbox>> open(uint64_t max_bytes);
  // The inbox of `session` when `ticket` is its ticket (compared in constant time).
  Result<std::shared_ptr<HandoffInbox>> find(uint64_t session, const Ticket& ticket) const;
  void remove(uint64_t session);
  // The worker stops: every inbox is closed and no new one opens.
  void close_all(const std::string& why);

 private:
  struct State {
    uint64_t next_session = 1;
    std::map<uint64_t, std::shared_ptr<HandoffInbox>> inboxes;
    bool closed = false;
  };
  MutexGuarded<State> state_;
};

// This worker's connection to a peer worker, attached to one session there.
class HandoffLink {
 public:
  static Result<std::unique_ptr<HandoffLink>> open(const HandoffConnectRequest& req,
                                                   const std::string& token);
  // Sends one hand-off. A link found broken is opened again first, once: the peer's session and
  // its ticket live as long as the client's connection to the peer.
  Status send(const HandoffData& d);
  std::string label() const { return "peer " + req_.address; }

 private:
  HandoffLink(const HandoffConnectRequest& req, const std::string& token)
      : req_(req), token_(token) {}
  Status connect();

  HandoffConnectRequest req_;
  std::string token_;
  std::shared_ptr<Connection> conn_;
};

// What a hand-off needs of the session it belongs to.
class HandoffHost {
 public:
  // A region of the session's buffers, checked as for any command (`field` names it in errors).
  virtual Result<uint8_t*> region(const Region& r, const char* field) const = 0;
  // Runs the request's graph as GRAPH_COMPUTE (kHandoffGraph) or GRAPH_RECOMPUTE would.
  virtual Status run_graph(const HandoffComputeRequest& req) = 0;

 protected:
  ~HandoffHost() = default;
};

// One session's hand-off state: its inbox (when it receives), its links (when it sends), or the
// session it delivers into (when the connection is itself a peer's link).
class SessionHandoff {
 public:
  SessionHandoff(HandoffRegistry& registry, std::string token, uint64_t max_held_bytes,
                 std::string peer)
      : registry_(registry),
        token_(std::move(token)),
        max_held_bytes_(max_held_bytes),
        peer_(std::move(peer)) {}
  SessionHandoff(const SessionHandoff&) = delete;
  SessionHandoff& operator=(const SessionHandoff&) = delete;
  ~SessionHandoff() { closed("the connection closed"); }

  Result<HandoffTicketResponse> ticket();
  Status connect(const HandoffConnectRequest& req);
  // `fresh`: the session holds no buffer, graph, ticket or link yet.
  Status attach(const HandoffAttachRequest& req, bool fresh);
  bool is_link() const { return into_ != nullptr; }
  // A HANDOFF_DATA on this link; an error closes the link.
  Status deliver(Message m);
  Status compute(HandoffHost& host, const HandoffComputeRequest& req);
  // A HANDOFF_COMPUTE skipped behind the sticky error of its stream: its wait is abandoned and
  // its send carries the error on, so that the next stage fails now rather than at a timeout.
  void skipped(const HandoffComputeRequest& req, const Status& sticky);
  bool empty() const { return inbox_ == nullptr && links_.empty(); }
  // The connection ends: the inbox closes, a link reports why it closed. Idempotent.
  void closed(const std::string& why);

 private:
  Status take(HandoffHost& host, const HandoffComputeRequest& req);
  Status send(HandoffHost& host, const HandoffComputeRequest& req);
  void send_error(const HandoffComputeRequest& req, const Status& s);

  HandoffRegistry& registry_;
  const std::string token_;
  const uint64_t max_held_bytes_;
  const std::string peer_;
  std::shared_ptr<HandoffInbox> inbox_;  // this session's, once it issued a ticket
  std::shared_ptr<HandoffInbox> into_;   // the session this link delivers into
  std::map<uint32_t, std::unique_ptr<HandoffLink>> links_;
};

}  // namespace strata::rpc
