#include "core/thread_pool.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "core/check.h"
#include "core/mutex_guarded.h"

namespace strata {

namespace {

// Poll rounds per --poll level: level 50, the default, polls as this pool always did.
constexpr int kPollRoundsPerLevel = 400;

// One step of a wait: pause while the wait is young, then yield. When the machine has more
// runnable threads than cores, the thread we wait for may need this core to finish.
void backoff(int spin) {
  if (spin < 2000) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  } else {
    std::this_thread::yield();
  }
}

int this_tid() { return static_cast<int>(::syscall(SYS_gettid)); }

bool needs_setup(const ThreadPoolOptions& o) { return !o.cpus.empty() || o.priority != 0; }

// Pins the calling thread, pool thread `index`, as the options say.
Status apply_affinity(const ThreadPoolOptions& o, int index) {
  if (o.cpus.empty()) return Status::ok();
  cpu_set_t set;
  CPU_ZERO(&set);
  if (o.strict) {
    CPU_SET(o.cpus[static_cast<size_t>(index) % o.cpus.size()], &set);
  } else {
    for (int c : o.cpus) CPU_SET(c, &set);
  }
  const int err = ::pthread_setaffinity_np(::pthread_self(), sizeof(set), &set);
  if (err != 0) {
    return invalid_argument("CPU affinity of thread " + std::to_string(index) + ": " +
                            std::strerror(err) + " (are the CPUs allowed to this process?)");
  }
  return Status::ok();
}

// llama.cpp's levels on the calling thread: low is a nice of 5, medium, high and realtime are
// SCHED_FIFO at 40, 80 and 90. Returns what the system refused (no permission), or "".
std::string apply_priority(int priority) {
  if (priority == 0) return "";
  if (priority < 0) {
    if (::setpriority(PRIO_PROCESS, static_cast<id_t>(this_tid()), 5) != 0) {
      return std::string("--prio -1: nice 5 refused: ") + std::strerror(errno);
    }
    return "";
  }
  sched_param p{};
  p.sched_priority = priority == 1 ? 40 : priority == 2 ? 80 : 90;
  const int err = ::pthread_setschedparam(::pthread_self(), SCHED_FIFO, &p);
  if (err != 0) {
    return "--prio " + std::to_string(priority) + ": SCHED_FIFO " +
           std::to_string(p.sched_priority) + " refused (" + std::strerror(err) +
           "); the threads keep the normal priority";
  }
  return "";
}

}  // namespace

Result<std::vector<int>> cpu_list_from_range(const std::string& text) {
  std::vector<int> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string part = text.substr(start, comma - start);
    start = comma + 1;
    const size_t dash = part.find('-');
    auto num = [&part](const std::string& s) -> Result<int> {
      if (s.empty() || s.size() > 6 || s.find_first_not_of("0123456789") != std::string::npos) {
        return invalid_argument("CPU range '" + part + "': '" + s + "' is not a CPU number");
      }
      return std::stoi(s);
    };
    STRATA_ASSIGN_OR_RETURN(int lo, num(part.substr(0, dash)));
    int hi = lo;
    if (dash != std::string::npos) {
      STRATA_ASSIGN_OR_RETURN(hi, num(part.substr(dash + 1)));
    }
    if (hi < lo) return invalid_argument("CPU range '" + part + "': the end is below the start");
    for (int c = lo; c <= hi; ++c) out.push_back(c);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Result<std::vector<int>> cpu_list_from_mask(const std::string& text) {
  std::string hex = text;
  if (hex.rfind("0x", 0) == 0 || hex.rfind("0X", 0) == 0) hex = hex.substr(2);
  // A mask of more than 4096 CPUs names none that exist: refuse it before looping over it.
  if (hex.empty() || hex.size() > 1024) {
    return invalid_argument("CPU mask '" + text + "': 1 to 1024 hex digits");
  }
  std::vector<int> out;
  for (size_t i = 0; i < hex.size(); ++i) {
    const char c = hex[hex.size() - 1 - i];
    int v = 0;
    if (c >= '0' && c <= '9') {
      v = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      v = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      v = c - 'A' + 10;
    } else {
      return invalid_argument("CPU mask '" + text + "': '" + std::string(1, c) +
                              "' is not a hex digit");
    }
    for (int b = 0; b < 4; ++b) {
      if (v & (1 << b)) out.push_back(static_cast<int>(4 * i) + b);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

int cpu_count() {
  const long n = ::sysconf(_SC_NPROCESSORS_CONF);
  return n > 0 ? static_cast<int>(n) : 1;
}

// Workers poll a generation counter before sleeping: a decode step runs hundreds of small
// kernels back to back, and a futex wake per kernel would cost more than the kernel.
struct ThreadPool::Impl {
  // What the threads report while the pool starts: reachable only under its lock. Sleepers
  // wait on the guard's condition variable for a new generation (the stop bumps it too).
  struct Shared {
    int started = 0;  // threads that applied their settings
    Status setup_error;
    std::string note;
  };
  // One per thread, on its own cache lines.
  struct alignas(64) Scratch {
    std::vector<uint8_t> bytes;
  };

  explicit Impl(const ThreadPoolOptions& o)
      : options(o),
        n_threads(o.n_threads),
        poll_rounds(std::clamp(o.poll, 0, 100) * kPollRoundsPerLevel),
        scratch(static_cast<size_t>(o.n_threads)),
        tids(static_cast<size_t>(o.n_threads), 0) {}

  void start() {
    for (int i = 1; i < n_threads; ++i) threads.emplace_back([this, i] { worker(i); });
    auto s = shared.lock();
    s.wait([this](const Shared& st) { return st.started == n_threads - 1; });
  }

  ~Impl() {
    {
      auto s = shared.lock();
      stop.store(true, std::memory_order_relaxed);
      generation.fetch_add(1, std::memory_order_release);
    }
    shared.notify_all();
    for (std::thread& t : threads) t.join();
  }

  void run_share(int thread) {
    const int64_t per = (n + n_threads - 1) / n_threads;
    const int64_t chunk = std::max(grain, ((per + grain - 1) / grain) * grain);
    const int64_t begin = std::min(n, chunk * thread);
    const int64_t end = std::min(n, begin + chunk);
    if (begin < end) (*fn)(thread, begin, end);
  }

  void worker(int index) {
    tids[static_cast<size_t>(index)] = this_tid();
    if (!options.name.empty()) {
      const std::string name = (options.name + "." + std::to_string(index)).substr(0, 15);
      ::pthread_setname_np(::pthread_self(), name.c_str());
    }
    Status st = apply_affinity(options, index);
    const std::string note = st.is_ok() ? apply_priority(options.priority) : "";
    {
      auto s = shared.lock();
      if (!st.is_ok() && s->setup_error.is_ok()) s->setup_error = st;
      if (!note.empty() && s->note.empty()) s->note = note;
      ++s->started;
    }
    shared.notify_all();
    uint64_t seen = 0;
    for (;;) {
      uint64_t gen = generation.load(std::memory_order_acquire);
      for (int spin = 0; gen == seen && spin < poll_rounds; ++spin) {
        backoff(spin);
        gen = generation.load(std::memory_order_acquire);
      }
      if (gen == seen) {
        auto s = shared.lock();
        // Counted before the generation is read again, so that a caller either sees the sleeper
        // (and notifies, under the lock) or bumped the generation before this read (both
        // sequentially consistent).
        sleepers.fetch_add(1, std::memory_order_seq_cst);
        s.wait([&](const Shared&) { return generation.load(std::memory_order_seq_cst) != seen; });
        sleepers.fetch_sub(1, std::memory_order_relaxed);
        gen = generation.load(std::memory_order_acquire);
      }
      seen = gen;
      if (stop.load(std::memory_order_relaxed)) return;
      run_share(index);
      shares_done.fetch_add(1, std::memory_order_acq_rel);
    }
  }

  // The caller is thread 0: it gets thread 0's CPU and priority the first time it calls.
  void setup_caller() {
    const std::thread::id me = std::this_thread::get_id();
    if (caller.load(std::memory_order_relaxed) == me) return;
    caller.store(me, std::memory_order_relaxed);
    tids[0] = this_tid();
    (void)apply_affinity(options, 0);  // the same CPUs its threads were pinned to
    (void)apply_priority(options.priority);
  }

  const ThreadPoolOptions options;
  const int n_threads;
  const int poll_rounds;
  std::vector<std::thread> threads;
  MutexGuarded<Shared> shared;
  std::vector<Scratch> scratch;
  std::vector<int> tids;  // each written once by its thread before `started` counts it

  // The members a call touches sit on three cache lines by who writes them. A line another
  // core has read costs the writer a transfer (~0.1-0.2 us between the cores of a VM), so a
  // call pays for each line it dirties that a worker read since the last call; with these
  // members spread over the lines as they happened to fall, a call of two threads took 2 us,
  // four times a bare round trip between the cores.
  //
  // The caller's own counters: written by the caller only (one at a time); atomic so that any
  // thread may read them.
  alignas(64) std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> barriers{0};
  std::atomic<std::thread::id> caller{};
  uint64_t shares_expected = 0;  // what `shares_done` reaches when this call's shares are done
  // The job of the current generation and the generation, written together by the caller (one
  // transfer of the line) and read together by each worker. The job is written before the bump
  // and read after it.
  alignas(64) const PoolTask* fn = nullptr;
  int64_t n = 0;
  int64_t grain = 1;
  std::atomic<uint64_t> generation{0};
  std::atomic<bool> stop{false};  // set before the last generation bump
  std::atomic<int> sleepers{0};   // workers past polling, about to wait or waiting
  // The shares workers have finished, ever: counted up by the workers, read by the caller.
  // (The last member: alignas(64) rounds the struct's size up, so the line is its own.)
  alignas(64) std::atomic<uint64_t> shares_done{0};
};

ThreadPool::ThreadPool(int n_threads) {
  STRATA_CHECK(n_threads >= 1 && n_threads <= 1024, "thread count out of range");
  ThreadPoolOptions o;
  o.n_threads = n_threads;
  impl_ = std::make_unique<Impl>(o);
  impl_->start();
}

ThreadPool::ThreadPool(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<ThreadPool>> ThreadPool::create(const ThreadPoolOptions& options) {
  if (options.n_threads < 1 || options.n_threads > 1024) {
    return invalid_argument("threads: " + std::to_string(options.n_threads) + " outside [1, 1024]");
  }
  if (options.priority < -1 || options.priority > 3) {
    return invalid_argument("priority " + std::to_string(options.priority) +
                            " outside [-1, 3] (low, normal, medium, high, realtime)");
  }
  if (options.poll < 0 || options.poll > 100) {
    return invalid_argument("poll level " + std::to_string(options.poll) + " outside [0, 100]");
  }
  const int n_cpus = cpu_count();
  for (int c : options.cpus) {
    if (c < 0 || c >= n_cpus) {
      return invalid_argument("CPU " + std::to_string(c) + " does not exist: this machine has " +
                              std::to_string(n_cpus) + " CPUs (0-" + std::to_string(n_cpus - 1) +
                              ")");
    }
  }
  auto impl = std::make_unique<Impl>(options);
  impl->start();
  Status error = impl->shared.lock()->setup_error;
  if (!error.is_ok()) return error;  // ~Impl stops the threads
  return std::unique_ptr<ThreadPool>(new ThreadPool(std::move(impl)));
}

ThreadPool::~ThreadPool() = default;

int ThreadPool::size() const { return impl_->n_threads; }
const ThreadPoolOptions& ThreadPool::options() const { return impl_->options; }

std::vector<int> ThreadPool::thread_ids() const {
  return std::vector<int>(impl_->tids.begin() + 1, impl_->tids.end());
}

const std::string& ThreadPool::setup_note() const {
  // Written only while the pool starts, before create() returns.
  return impl_->shared.lock()->note;
}

ThreadPool::Counts ThreadPool::counts() const {
  return {impl_->calls.load(std::memory_order_relaxed),
          impl_->barriers.load(std::memory_order_relaxed)};
}

uint8_t* ThreadPool::scratch(int thread, size_t bytes) {
  STRATA_CHECK(thread >= 0 && thread < impl_->n_threads, "scratch of a thread not in the pool");
  std::vector<uint8_t>& v = impl_->scratch[static_cast<size_t>(thread)].bytes;
  if (v.size() < bytes + 63) v = std::vector<uint8_t>(bytes + 63);  // scratch: nothing to keep
  const uintptr_t p = reinterpret_cast<uintptr_t>(v.data());
  return v.data() + ((64 - p % 64) % 64);
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, PoolTask fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  Impl& p = *impl_;
  p.calls.fetch_add(1, std::memory_order_relaxed);
  if (needs_setup(p.options)) p.setup_caller();
  if (p.n_threads == 1 || n <= grain) {
    fn(0, 0, n);
    return;
  }
  p.barriers.fetch_add(1, std::memory_order_relaxed);
  p.fn = &fn;
  p.n = n;
  p.grain = grain;
  p.shares_expected += static_cast<uint64_t>(p.n_threads - 1);
  p.generation.fetch_add(1, std::memory_order_seq_cst);
  if (p.sleepers.load(std::memory_order_seq_cst) != 0) {
    // The lock orders the notification after a sleeper's check of the generation: it holds the
    // lock from its check until it waits.
    { auto s = p.shared.lock(); }
    p.shared.notify_all();
  }
  p.run_share(0);
  for (int spin = 0; p.shares_done.load(std::memory_order_acquire) != p.shares_expected; ++spin) {
    backoff(spin);
  }
}

}  // namespace strata
