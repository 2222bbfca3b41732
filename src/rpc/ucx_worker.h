// What the ucx: transport (transport_ucx.cc) needs of UCX besides its endpoints and messages:
// the context, workers made for use from several threads, UCX's log on stderr, and the round
// of progress that every wait of the transport is made of. Internal to src/rpc.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "core/status.h"

#if STRATA_HAVE_UCX
#include <ucp/api/ucp.h>
#endif

namespace strata::rpc {

// One round of progress: progress() (a ucp_worker_progress) again as long as it reports work
// done, but not past `end`. UCX may always have more to do (a peer that never stops sending, an
// event that never clears), and a thread that waits must look at what it waits for, and at its
// deadline, between rounds: a round that ran until UCX was idle could run forever. True if
// anything moved.
template <typename Progress>
bool ucx_progress_round(Progress&& progress, std::chrono::steady_clock::time_point end) {
  bool moved = false;
  while (progress() != 0) {
    moved = true;
    if (std::chrono::steady_clock::now() >= end) break;
  }
  return moved;
}

#if STRATA_HAVE_UCX

std::string ucs_text(ucs_status_t s);

// UCX up to 1.16 (Debian 12 has 1.13) aborts a process with several workers ("async.c: Assertion
// `handler->async == async' failed"): an event that UCX's thread could not hand to a worker
// (another thread was inside the worker) waits in that worker's queue of missed events, keyed by
// the socket's descriptor number; if the worker closes that socket, and another worker's new
// socket takes the freed number, before the first looks at its queue, it finds the other's handler
// and asserts. Each connection here has its own worker, so a connection that closed while the
// next one opened met it (about one run in 40 of the worker tests over ucx-tcp).
//
// A worker looks at its queue at the end of every ucp_worker_progress, in the same call that may
// have closed its sockets. So the calls that open or close sockets (creating and destroying
// workers, listeners and endpoints, refusing a connection request, a listener's progress, which
// accepts, and every progress of a connection that is closing) hold the process's socket lock
// exclusively, and every other progress holds it shared: no socket opens between a worker's close
// and its look, except when the progress of a connection whose peer just failed closes its
// sockets beside that of a connection being set up, which opens them. A call that may close sockets
// outside progress (an endpoint's close, a refused connection request) is followed, under the
// same hold, by one progress of its worker (ucx_close_and_look). A shared hold costs a thread only
// its own counter, so that established connections progress side by side as before.
//
// The exclusive hold is recursive and may take a shared one inside; a shared one must not take
// the exclusive (it would wait for itself). Neither is taken by a callback that UCX calls, nor
// while holding a lock that one of those callbacks takes.
class UcxSocketHold {
 public:
  UcxSocketHold();
  ~UcxSocketHold();
  UcxSocketHold(const UcxSocketHold&) = delete;
  UcxSocketHold& operator=(const UcxSocketHold&) = delete;
};

class UcxSocketShare {
 public:
  UcxSocketShare();
  ~UcxSocketShare();
  UcxSocketShare(const UcxSocketShare&) = delete;
  UcxSocketShare& operator=(const UcxSocketShare&) = delete;

 private:
  bool inside_hold_;  // this thread holds the lock exclusively: nothing to take
};

template <typename Call>
auto ucx_serialized(Call&& call) {
  UcxSocketHold hold;
  return call();
}

template <typename Call>
auto ucx_shared(Call&& call) {
  UcxSocketShare share;
  return call();
}

// A call that may close sockets of `worker` at once (a forced or flushing endpoint close, a
// refused connection request), then one progress of the worker, which looks at what it missed,
// in one exclusive hold: no other socket opens between the two.
template <typename Close>
auto ucx_close_and_look(ucp_worker_h worker, Close&& close) {
  UcxSocketHold hold;
  auto result = close();
  ucp_worker_progress(worker);
  return result;
}

// The UCP context (active messages, and the wakeup feature for blocking waits), shared by a
// listener and the connections it accepted. The first one sends UCX's log to stderr.
class UcxContext {
 public:
  static Result<std::shared_ptr<UcxContext>> create();
  explicit UcxContext(ucp_context_h ctx) : ctx_(ctx) {}
  ~UcxContext() { ucp_cleanup(ctx_); }
  UcxContext(const UcxContext&) = delete;
  UcxContext& operator=(const UcxContext&) = delete;

  // A worker used from several threads, with an event descriptor for blocking waits, whose
  // active-message headers hold a strata header and its lead.
  Result<ucp_worker_h> new_worker() const;

 private:
  ucp_context_h ctx_;
};

// Frees a request if it is one (not nullptr, not an error).
void ucx_request_free(ucs_status_ptr_t r);

// ucp_worker_destroy for a worker that still holds `abandoned` requests: ones left to UCX when
// a peer did not answer in time. UCX reports each as not returned to its pool; that is
// expected, and not said again.
void ucx_worker_destroy(ucp_worker_h worker, int abandoned);

#endif

}  // namespace strata::rpc
