// The client's side of hand-off: the links from one worker's session to the sessions of the next
// stages' workers, opened on first use and kept for the life of the connections.
//
// Opening a link costs two round trips, once per pair of workers: HANDOFF_TICKET on the
// receiver, then HANDOFF_CONNECT on the sender with the receiver's endpoint as this client names
// it. A link that cannot be opened (a worker that cannot reach the other at that address, tokens
// that differ) is said once on stderr and the pair keeps moving its values through this host.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/mutex_guarded.h"
#include "rpc/client.h"

namespace strata::rpc {

// The longest a worker waits for a hand-off, or lets a send to its peer stall: three quarters of
// the client's request timeout, so that the receiver reports a missing hand-off (naming the
// peer) before the client gives up on the receiver with a bare timeout.
uint32_t handoff_timeout_ms(const ClientOptions& o);

class HandoffLinks {
 public:
  // The id of `from`'s link to `to`, opened on first use; nullopt when it cannot be opened. A
  // link belongs to the pair of connections: a new connection to either worker gets a new one.
  std::optional<uint32_t> link(const std::shared_ptr<Connection>& from,
                               const std::shared_ptr<Connection>& to);

 private:
  struct Entry {
    std::weak_ptr<Connection> from, to;
    uint32_t id = 0;
    bool open = false;
  };
  struct State {
    std::vector<Entry> entries;
    uint32_t next_id = 1;
  };
  // Held while a link opens: two threads that want the same link open it once.
  MutexGuarded<State> state_;
};

}  // namespace strata::rpc
