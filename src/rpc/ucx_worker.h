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
