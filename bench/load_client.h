// The load client behind `strata bench serve`: closed-loop concurrent requests against an
// OpenAI-compatible /v1/completions endpoint (strata serve, llama-server, vLLM), measuring
// throughput, time to first token (TTFT) and time per output token after the first (TPOT).
//
// Goal: numbers comparable across servers: a prompt of exactly N tokens (verified with the
// server's /tokenize), greedy sampling, max_tokens M with "ignore_eos" so every request
// generates M tokens where the server honours it. For soaks it also mixes streamed and plain
// requests and clients that go away mid-request (bench/soak.sh). Non-goals: open-loop
// (Poisson) arrivals, chat completions, TLS.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace strata::bench {

struct LoadConfig {
  std::string url = "http://127.0.0.1:8080";  // scheme://host:port
  int concurrency = 1;                        // clients, each with one request in flight
  int64_t n_requests = 0;                     // total requests; 0: run for duration_s
  double duration_s = 0;                      // start no request after this many seconds
  int prompt_tokens = 128;
  int max_tokens = 256;
  bool stream = true;      // without streaming TTFT and TPOT cannot be measured
  std::string model;       // the request's "model" field; empty: not sent
  double timeout_s = 600;  // per request
  // Soak mixes, drawn per request from `seed`: the share of requests streamed (< 0: all as
  // `stream` says), and the share whose client goes away mid-request (while sending the body,
  // after the first streamed event, or while waiting for a plain answer).
  double stream_fraction = -1;
  double disconnect_fraction = 0;
  uint64_t seed = 1;
};

// What one request does: streamed or not, and whether (and how) its client goes away.
struct RequestPlan {
  enum class Leave { kNever, kWhileSending, kAfterFirstEvent, kWhileWaiting };
  bool stream = true;
  Leave leave = Leave::kNever;
  int wait_ms = 0;  // kWhileWaiting: gives up after this long without an answer
};

// The plan of request number `index` (the same for the same config and index).
RequestPlan plan_request(const LoadConfig& config, int64_t index);

// One request as the client saw it. Times in seconds from sending the request.
struct RequestSample {
  bool ok = false;
  bool left = false;           // the client went away as planned (neither ok nor an error)
  std::string error;           // when !ok and !left
  double latency_s = 0;        // until the response is complete
  double ttft_s = -1;          // first streamed token; -1: not measured
  double tpot_s = -1;          // (last token - first token) / (tokens - 1); -1: < 2 tokens
  int64_t output_tokens = 0;   // usage.completion_tokens, else streamed chunks with text
  int64_t prompt_tokens = -1;  // usage.prompt_tokens when the server reports it
};

struct Distribution {
  int64_t n = 0;  // samples
  double mean = 0, p50 = 0, p99 = 0;
};

// Nearest-rank percentiles (the smallest sample with at least q of the samples at or below
// it): no interpolation, so every reported value is one that was measured.
Distribution distribution(std::vector<double> values);

struct LoadReport {
  int64_t requests_ok = 0;
  int64_t errors = 0;
  int64_t left = 0;   // requests whose client went away as planned
  double wall_s = 0;  // first request sent to last response complete
  int64_t output_tokens = 0;
  double output_tok_s = 0;  // output tokens of successful requests / wall_s
  double requests_s = 0;    // successful requests / wall_s
  Distribution ttft_s, tpot_s, latency_s;
  std::vector<std::string> error_samples;  // the first few distinct error texts
};

LoadReport summarize(const std::vector<RequestSample>& samples, double wall_s);

// Incremental parser of a text/event-stream body: feed bytes as they arrive, get back the
// payloads of complete "data:" events.
class SseParser {
 public:
  std::vector<std::string> feed(std::string_view bytes);

 private:
  std::string pending_;
};

// A prompt whose token count, by the server's /tokenize, is exactly `n_tokens`; an error when
// the server cannot tokenize or no such text is found.
Result<std::string> build_prompt(const LoadConfig& config);

// One request of `prompt`, timed.
RequestSample send_completion(const LoadConfig& config, const std::string& prompt,
                              const RequestPlan& plan);
inline RequestSample send_completion(const LoadConfig& config, const std::string& prompt) {
  return send_completion(config, prompt, RequestPlan{config.stream});
}

// Runs the whole load (config.concurrency threads) and summarises it.
Result<LoadReport> run_load(const LoadConfig& config);

std::string report_text(const LoadConfig& config, const LoadReport& report);
std::string report_json(const LoadConfig& config, const LoadReport& report);

}  // namespace strata::bench
