// Server metrics in the Prometheus text format (version 0.0.4).
//
// Counters and histograms are updated from decode threads with relaxed atomics only: a metric
// must never add a lock to the decode path. Gauges (busy slots, KV use, queue length) are read
// from their owners when /metrics is rendered.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace strata::server {

class Histogram {
 public:
  // Upper bounds of the buckets, increasing; +Inf is implied.
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  void render(std::string& out, const std::string& name, const std::string& help) const;
  // Mean of the observed values (0 before any).
  double mean() const {
    const uint64_t n = count_.load(std::memory_order_relaxed);
    return n > 0 ? sum_.load(std::memory_order_relaxed) / static_cast<double>(n) : 0.0;
  }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // per bucket, not cumulative; +Inf last
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0.0};
};

struct Gauges {
  int64_t slots_busy = 0;
  int64_t slots_total = 0;
  int64_t kv_used = 0;
  int64_t kv_total = 0;
  int64_t requests_queued = 0;
};

// What /metrics shows of one pipeline group, read from it when rendered.
struct GroupGauges {
  int32_t group = 0;
  uint64_t decode_steps = 0;       // Context::decode calls
  uint64_t busy_slots_summed = 0;  // over those calls: the slots each carried
  int64_t requests_queued = 0;     // tasks waiting for the group's slots
  int64_t slots_busy = 0;
  int64_t slots_total = 0;
};

// Appends the per-group series (strata_group_*{group="N"}): decode steps, busy slots per decode
// (llama-server's n_busy_slots_per_decode, per group), queue depth, busy and total slots.
void render_group_metrics(std::string& out, const std::vector<GroupGauges>& groups);

class Metrics {
 public:
  Metrics();

  std::atomic<uint64_t> requests{0};         // generation requests accepted
  std::atomic<uint64_t> requests_failed{0};  // ended by a decode error
  std::atomic<uint64_t> requests_cancelled{0};
  std::atomic<uint64_t> prompt_tokens{0};  // evaluated (cached ones are not counted)
  std::atomic<uint64_t> prompt_tokens_cached{0};
  std::atomic<uint64_t> generated_tokens{0};
  std::atomic<uint64_t> decode_steps{0};
  std::atomic<uint64_t> decode_errors{0};
  // Backend sampling: tokens sampled on the last stage's device, and rows sampled on the CPU
  // instead because the device could not take them (their logits were read back).
  std::atomic<uint64_t> backend_sampled_rows{0};
  std::atomic<uint64_t> backend_sampling_fallback_rows{0};
  // Speculative decoding: steps of a slot that checked a draft, the tokens drafted in them,
  // and the drafted tokens kept.
  std::atomic<uint64_t> spec_drafts{0};
  std::atomic<uint64_t> spec_draft_tokens{0};
  std::atomic<uint64_t> spec_accepted_tokens{0};
  std::atomic<uint64_t> spec_draft_errors{0};  // steps whose draft model failed (no drafts)
  // Summed over finished requests: arrival to first token, first token to last (microseconds).
  std::atomic<uint64_t> prompt_us{0};
  std::atomic<uint64_t> predicted_us{0};
  Histogram ttft_seconds;
  Histogram tpot_seconds;
  Histogram batch_tokens;  // tokens per decode step
  Histogram busy_slots;    // busy slots per decode step

  // Appends more metrics (e.g. the RPC client's counters) to every render. Set before the
  // server starts; called from HTTP threads, so it must be thread-safe.
  using Hook = std::function<void(std::string& out)>;
  void add_hook(Hook hook) { hooks_.push_back(std::move(hook)); }

  std::string render(const Gauges& gauges) const;

 private:
  std::vector<Hook> hooks_;
};

// Appends "# HELP", "# TYPE" and one sample line.
void prometheus_scalar(std::string& out, const std::string& name, const char* type,
                       const std::string& help, double value);

}  // namespace strata::server
