#include "server/metrics.h"

#include <cinttypes>
#include <cstdio>

#include "core/check.h"

namespace strata::server {
namespace {

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      counts_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {
  for (size_t i = 1; i < bounds_.size(); ++i) STRATA_CHECK(bounds_[i - 1] < bounds_[i]);
}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i].load(std::memory_order_relaxed);
    const std::string le = i < bounds_.size() ? number(bounds_[i]) : "+Inf";
    out += name + "_bucket{le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  // Buckets and count are read at slightly different moments; report the count the buckets
  // add up to so that the +Inf bucket always equals _count, as Prometheus requires.
  out += name + "_sum " + number(sum_.load(std::memory_order_relaxed)) + "\n";
  out += name + "_count " + std::to_string(cumulative) + "\n";
}

void prometheus_scalar(std::string& out, const std::string& name, const char* type,
                       const std::string& help, double value) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  out += name + " " + number(value) + "\n";
}

void render_group_metrics(std::string& out, const std::vector<GroupGauges>& groups) {
  auto family = [&out, &groups](const char* name, const char* type, const char* help,
                                double (*value)(const GroupGauges&)) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    for (const GroupGauges& g : groups) {
      out += std::string(name) + "{group=\"" + std::to_string(g.group) + "\"} " + number(value(g)) +
             "\n";
    }
  };
  family("strata_group_decode_steps_total", "counter", "Decode steps of the pipeline group.",
         [](const GroupGauges& g) { return static_cast<double>(g.decode_steps); });
  family("strata_group_busy_slots_per_decode", "gauge",
         "Average number of busy slots per decode step of the pipeline group.",
         [](const GroupGauges& g) {
           return g.decode_steps > 0 ? static_cast<double>(g.busy_slots_summed) /
                                           static_cast<double>(g.decode_steps)
                                     : 0.0;
         });
  family("strata_group_requests_queued", "gauge",
         "Requests waiting for a slot of the pipeline group.",
         [](const GroupGauges& g) { return static_cast<double>(g.requests_queued); });
  family("strata_group_slots_busy", "gauge", "Slots of the pipeline group serving a request.",
         [](const GroupGauges& g) { return static_cast<double>(g.slots_busy); });
  family("strata_group_slots", "gauge", "Slots of the pipeline group.",
         [](const GroupGauges& g) { return static_cast<double>(g.slots_total); });
}

Metrics::Metrics()
    : ttft_seconds({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      tpot_seconds({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}),
      batch_tokens({1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096}),
      busy_slots({1, 2, 4, 8, 16, 32, 64, 128}) {}

std::string Metrics::render(const Gauges& g) const {
  std::string out;
  auto counter = [&out](const char* name, const char* help, const std::atomic<uint64_t>& v) {
    prometheus_scalar(out, name, "counter", help,
                      static_cast<double>(v.load(std::memory_order_relaxed)));
  };
  counter("strata_requests_total", "Generation requests accepted.", requests);
  counter("strata_requests_failed_total", "Generation requests ended by a decode error.",
          requests_failed);
  counter("strata_requests_cancelled_total", "Generation requests cancelled by the client.",
          requests_cancelled);
  counter("strata_prompt_tokens_total", "Prompt tokens evaluated.", prompt_tokens);
  counter("strata_prompt_tokens_cached_total", "Prompt tokens reused from the prompt cache.",
          prompt_tokens_cached);
  counter("strata_generated_tokens_total", "Tokens generated.", generated_tokens);
  counter("strata_decode_steps_total", "Decode steps (one batch each).", decode_steps);
  counter("strata_decode_errors_total", "Decode steps that failed.", decode_errors);
  counter("strata_backend_sampling_rows_total",
          "Tokens sampled on the last stage's device (--backend-sampling).", backend_sampled_rows);
  counter("strata_backend_sampling_fallback_rows_total",
          "Rows sampled on the CPU under --backend-sampling: the device could not take them.",
          backend_sampling_fallback_rows);
  counter("strata_spec_drafts_total", "Slot steps that checked a draft (speculative decoding).",
          spec_drafts);
  counter("strata_spec_draft_tokens_total", "Tokens drafted for speculative decoding.",
          spec_draft_tokens);
  counter("strata_spec_accepted_tokens_total", "Drafted tokens the model kept.",
          spec_accepted_tokens);
  counter("strata_spec_draft_errors_total",
          "Steps whose draft model failed (they checked no drafts).", spec_draft_errors);
  ttft_seconds.render(out, "strata_time_to_first_token_seconds",
                      "Time from request arrival to its first generated token.");
  tpot_seconds.render(out, "strata_time_per_output_token_seconds",
                      "Mean time per generated token after the first, per request.");
  batch_tokens.render(out, "strata_decode_batch_tokens", "Tokens per decode step.");
  busy_slots.render(out, "strata_decode_busy_slots", "Busy slots per decode step.");
  prometheus_scalar(out, "strata_slots_busy", "gauge", "Slots serving a request.",
                    static_cast<double>(g.slots_busy));
  prometheus_scalar(out, "strata_slots_total", "gauge", "Slots over all pipeline groups.",
                    static_cast<double>(g.slots_total));
  prometheus_scalar(out, "strata_kv_cache_used_cells", "gauge", "KV cache cells in use.",
                    static_cast<double>(g.kv_used));
  prometheus_scalar(out, "strata_kv_cache_cells", "gauge", "KV cache cells in total.",
                    static_cast<double>(g.kv_total));
  prometheus_scalar(out, "strata_kv_cache_usage_ratio", "gauge", "KV cache cells in use / total.",
                    g.kv_total > 0 ? static_cast<double>(g.kv_used) / g.kv_total : 0.0);
  prometheus_scalar(out, "strata_requests_queued", "gauge", "Requests waiting for a slot.",
                    static_cast<double>(g.requests_queued));
  for (const Hook& hook : hooks_) hook(out);
  return out;
}

}  // namespace strata::server
