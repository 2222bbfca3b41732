#include "rpc/ucx_worker.h"

#if STRATA_HAVE_UCX

#include <ucs/debug/log_def.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "rpc/transport.h"

namespace strata::rpc {

namespace {

// What ucx_worker_destroy tells the log handler, which UCX calls on the destroying thread and
// without an argument of ours: hence thread_local. Not scratch memory.
thread_local int ucx_abandoned_requests = 0;

// UCX logs to stdout unless told otherwise, where it would mix with a command's output (the
// text of `strata run`, the address `strata worker` prints): its messages go to stderr. UCX
// filters by UCX_LOG_LEVEL before it calls a handler.
ucs_log_func_rc_t ucx_log_to_stderr(const char* file, unsigned line, const char*,
                                    ucs_log_level_t level, const ucs_log_component_config_t*,
                                    const char* message, va_list ap) {
  char text[1024];
  std::vsnprintf(text, sizeof(text), message, ap);
  if (ucx_abandoned_requests > 0 && std::strstr(text, "not returned to mpool ucp_requests")) {
    --ucx_abandoned_requests;
    return UCS_LOG_FUNC_RC_STOP;
  }
  std::fprintf(stderr, "strata: ucx %s: %s (%s:%u)\n", ucs_log_level_names[level], text, file,
               line);
  return UCS_LOG_FUNC_RC_STOP;
}

}  // namespace

std::string ucs_text(ucs_status_t s) { return ucs_status_string(s); }

namespace {

// The socket lock of ucx_worker.h. A shared hold is one thread's own counter, on its own cache
// line; an exclusive one raises `writing` and then waits for every thread's counter to fall to
// zero, while a thread that would take a shared hold meanwhile drops its count and waits for the
// writer (so that a writer is never held off by a stream of readers). The waits sleep on
// condition variables: with more threads than cores (a loaded machine, a test run beside
// others) a thread that spun would take the core from the one it waits for.
struct alignas(64) ReaderCount {
  std::atomic<int> active{0};
};

struct SocketLock {
  std::mutex writer;  // held by the exclusive holder for its whole hold
  std::atomic<bool> writing{false};
  std::atomic<std::thread::id> owner{};
  int depth = 0;  // the owner's recursion
  std::mutex m;   // the list, and the waits: `writing` falls and counters drop under it
  std::condition_variable readers_left;  // a reader left while `writing`
  std::condition_variable writer_left;   // `writing` fell
  std::vector<ReaderCount*> readers;     // one per thread that ever took a shared hold
};

// Never destroyed: threads may take and drop holds while the process exits.
SocketLock& socket_lock() {
  static auto* lock = new SocketLock;
  return *lock;
}

// This thread's counter, in the list for as long as the thread lives.
struct ThreadReader {
  ReaderCount* count = new ReaderCount;
  ThreadReader() {
    SocketLock& l = socket_lock();
    std::lock_guard<std::mutex> g(l.m);
    l.readers.push_back(count);
  }
  ~ThreadReader() {
    SocketLock& l = socket_lock();
    {
      std::lock_guard<std::mutex> g(l.m);
      l.readers.erase(std::find(l.readers.begin(), l.readers.end(), count));
    }
    delete count;
  }
};

ReaderCount& this_thread_reader() {
  thread_local ThreadReader reader;
  return *reader.count;
}

// A reader's count fell: a writer may be waiting for it.
void reader_left(SocketLock& l) {
  if (!l.writing.load()) return;
  std::lock_guard<std::mutex> g(l.m);
  l.readers_left.notify_all();
}

}  // namespace

UcxSocketHold::UcxSocketHold() {
  SocketLock& l = socket_lock();
  const std::thread::id me = std::this_thread::get_id();
  if (l.owner.load() == me) {
    ++l.depth;
    return;
  }
  l.writer.lock();
  l.owner.store(me);
  l.depth = 1;
  l.writing.store(true);
  std::unique_lock<std::mutex> g(l.m);
  l.readers_left.wait(g, [&l] {
    return std::none_of(l.readers.begin(), l.readers.end(),
                        [](const ReaderCount* r) { return r->active.load() != 0; });
  });
}

UcxSocketHold::~UcxSocketHold() {
  SocketLock& l = socket_lock();
  if (--l.depth > 0) return;
  l.owner.store(std::thread::id());
  {
    std::lock_guard<std::mutex> g(l.m);
    l.writing.store(false);
  }
  l.writer_left.notify_all();
  l.writer.unlock();
}

UcxSocketShare::UcxSocketShare() {
  SocketLock& l = socket_lock();
  inside_hold_ = l.owner.load() == std::this_thread::get_id();
  if (inside_hold_) return;
  ReaderCount& reader = this_thread_reader();
  for (;;) {
    reader.active.fetch_add(1);
    if (!l.writing.load()) return;
    reader.active.fetch_sub(1);
    reader_left(l);
    std::unique_lock<std::mutex> g(l.m);
    l.writer_left.wait(g, [&l] { return !l.writing.load(); });
  }
}

UcxSocketShare::~UcxSocketShare() {
  if (inside_hold_) return;
  this_thread_reader().active.fetch_sub(1);
  reader_left(socket_lock());
}

Result<std::shared_ptr<UcxContext>> UcxContext::create() {
  static std::once_flag log_once;
  std::call_once(log_once, [] { ucs_log_push_handler(ucx_log_to_stderr); });
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return unavailable("ucx: reading UCX_* settings: " + ucs_text(s));
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 1;
  ucp_context_h ctx = nullptr;
  s = ucx_serialized([&] { return ucp_init(&params, config, &ctx); });
  ucp_config_release(config);
  if (s != UCS_OK) {
    return unavailable("ucx: ucp_init: " + ucs_text(s) + " (check UCX_TLS and UCX_NET_DEVICES)");
  }
  return std::make_shared<UcxContext>(ctx);
}

Result<ucp_worker_h> UcxContext::new_worker() const {
  UcxSocketHold hold;
  ucp_worker_params_t p{};
  p.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  p.thread_mode = UCS_THREAD_MODE_MULTI;
  ucp_worker_h w = nullptr;
  const ucs_status_t s = ucp_worker_create(ctx_, &p, &w);
  if (s != UCS_OK) return unavailable("ucx: ucp_worker_create: " + ucs_text(s));
  ucp_worker_attr_t a{};
  a.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE | UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
  ucp_worker_query(w, &a);
  if (a.thread_mode != UCS_THREAD_MODE_MULTI) {
    ucp_worker_destroy(w);
    return unsupported("ucx: this UCX was built without multi-thread support");
  }
  if (a.max_am_header < kHeaderBytes + kRecvLeadBytes) {
    ucp_worker_destroy(w);
    return unsupported("ucx: active-message headers of at most " + std::to_string(a.max_am_header) +
                       " bytes; strata needs " + std::to_string(kHeaderBytes + kRecvLeadBytes));
  }
  return w;
}

void ucx_request_free(ucs_status_ptr_t r) {
  if (r != nullptr && !UCS_PTR_IS_ERR(r)) ucp_request_free(r);
}

void ucx_worker_destroy(ucp_worker_h worker, int abandoned) {
  ucx_abandoned_requests = abandoned;
  ucx_serialized([worker] { ucp_worker_destroy(worker); });
  ucx_abandoned_requests = 0;
}

}  // namespace strata::rpc

#endif
