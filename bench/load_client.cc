#include "load_client.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/mutex_guarded.h"

namespace strata::bench {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Error texts quote at most this much of a response body: a server may send megabytes.
constexpr size_t kMaxErrorBody = 300;
constexpr size_t kMaxErrorSamples = 5;

// A paragraph of ordinary words: tokenizers split it into many distinct tokens, as real text.
constexpr const char* kFiller =
    "The old lighthouse keeper walked along the rocky shore every morning, counting the boats "
    "that returned with the tide. Seven gulls followed him, hoping for bread, while the wind "
    "carried salt and the smell of pine from the hills behind the village. He wrote the "
    "weather in a small notebook, noted the colour of the sky at dawn, and wondered whether "
    "the winter would be as long as the last one. ";

void configure(httplib::Client& cli, double timeout_s) {
  const auto secs = static_cast<time_t>(std::max(1.0, std::ceil(timeout_s)));
  cli.set_connection_timeout(std::min<time_t>(secs, 10), 0);
  cli.set_read_timeout(secs, 0);
  cli.set_write_timeout(secs, 0);
}

std::string http_error(int status, const std::string& body) {
  return "HTTP " + std::to_string(status) + ": " + body.substr(0, kMaxErrorBody);
}

Result<Json> post_json(httplib::Client& cli, const std::string& path, const Json& body) {
  auto res = cli.Post(path, body.dump(), "application/json");
  if (!res) {
    return unavailable("POST " + path + ": " + httplib::to_string(res.error()) +
                       " error (is a server running at --url?)");
  }
  if (res->status != 200) {
    return unavailable("POST " + path + ": " + http_error(res->status, res->body));
  }
  Json out = Json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  if (out.is_discarded()) return invalid_argument("POST " + path + ": response is not JSON");
  return out;
}

Result<std::vector<int64_t>> tokenize(httplib::Client& cli, const std::string& text) {
  STRATA_ASSIGN_OR_RETURN(Json out, post_json(cli, "/tokenize", Json{{"content", text}}));
  if (!out.contains("tokens") || !out["tokens"].is_array()) {
    return invalid_argument("POST /tokenize: no 'tokens' array in the response");
  }
  std::vector<int64_t> ids;
  for (const Json& t : out["tokens"]) {
    // llama-server answers {"id": .., "piece": ..} objects when asked for pieces.
    const Json& id = t.is_object() && t.contains("id") ? t["id"] : t;
    if (!id.is_number_integer()) return invalid_argument("POST /tokenize: a token is not an id");
    ids.push_back(id.get<int64_t>());
  }
  return ids;
}

Result<std::string> detokenize(httplib::Client& cli, const std::vector<int64_t>& ids) {
  STRATA_ASSIGN_OR_RETURN(Json out, post_json(cli, "/detokenize", Json{{"tokens", ids}}));
  if (!out.contains("content") || !out["content"].is_string()) {
    return invalid_argument("POST /detokenize: no 'content' string in the response");
  }
  return out["content"].get<std::string>();
}

}  // namespace

Distribution distribution(std::vector<double> values) {
  Distribution d;
  d.n = static_cast<int64_t>(values.size());
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (double v : values) sum += v;
  d.mean = sum / static_cast<double>(values.size());
  auto rank = [&](double q) {
    const auto k = static_cast<size_t>(std::ceil(q * static_cast<double>(values.size())));
    return values[std::clamp<size_t>(k, 1, values.size()) - 1];
  };
  d.p50 = rank(0.50);
  d.p99 = rank(0.99);
  return d;
}

LoadReport summarize(const std::vector<RequestSample>& samples, double wall_s) {
  LoadReport r;
  r.wall_s = wall_s;
  std::vector<double> ttft, tpot, latency;
  for (const RequestSample& s : samples) {
    if (s.left) {
      ++r.left;
      continue;
    }
    if (!s.ok) {
      ++r.errors;
      if (r.error_samples.size() < kMaxErrorSamples &&
          std::find(r.error_samples.begin(), r.error_samples.end(), s.error) ==
              r.error_samples.end()) {
        r.error_samples.push_back(s.error);
      }
      continue;
    }
    ++r.requests_ok;
    r.output_tokens += s.output_tokens;
    latency.push_back(s.latency_s);
    if (s.ttft_s >= 0) ttft.push_back(s.ttft_s);
    if (s.tpot_s >= 0) tpot.push_back(s.tpot_s);
  }
  if (wall_s > 0) {
    r.output_tok_s = static_cast<double>(r.output_tokens) / wall_s;
    r.requests_s = static_cast<double>(r.requests_ok) / wall_s;
  }
  r.ttft_s = distribution(std::move(ttft));
  r.tpot_s = distribution(std::move(tpot));
  r.latency_s = distribution(std::move(latency));
  return r;
}

std::vector<std::string> SseParser::feed(std::string_view bytes) {
  pending_.append(bytes);
  std::vector<std::string> out;
  // Events end with a blank line; lines may end with "\n" or "\r\n".
  size_t start = 0;
  while (true) {
    const size_t nl = pending_.find('\n', start);
    if (nl == std::string::npos) break;
    std::string_view line(pending_.data() + start, nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    start = nl + 1;
    if (line.starts_with("data:")) {
      line.remove_prefix(5);
      if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
      out.emplace_back(line);
    }
  }
  pending_.erase(0, start);
  return out;
}

Result<std::string> build_prompt(const LoadConfig& config) {
  const int64_t n = config.prompt_tokens;
  httplib::Client cli(config.url);
  configure(cli, config.timeout_s);
  STRATA_ASSIGN_OR_RETURN(std::vector<int64_t> per_para, tokenize(cli, kFiller));
  if (per_para.empty()) return invalid_argument("POST /tokenize: the filler text has no tokens");
  std::string text;
  const int64_t reps = n / static_cast<int64_t>(per_para.size()) + 2;
  for (int64_t i = 0; i < reps; ++i) text += kFiller;
  STRATA_ASSIGN_OR_RETURN(std::vector<int64_t> ids, tokenize(cli, text));
  // Cutting the ids and decoding them can re-tokenise to a different count at the cut (a
  // word split in two merges back); move the cut until the count is exact.
  int64_t cut = n;
  int64_t got = -1;
  for (int attempt = 0; attempt < 16; ++attempt) {
    cut = std::clamp<int64_t>(cut, 1, static_cast<int64_t>(ids.size()));
    STRATA_ASSIGN_OR_RETURN(std::string candidate,
                            detokenize(cli, std::vector<int64_t>(ids.begin(), ids.begin() + cut)));
    STRATA_ASSIGN_OR_RETURN(std::vector<int64_t> check, tokenize(cli, candidate));
    got = static_cast<int64_t>(check.size());
    if (got == n) return candidate;
    cut += n - got;
  }
  return invalid_argument("no prompt of exactly " + std::to_string(n) +
                          " tokens found (closest: " + std::to_string(got) + ")");
}

RequestPlan plan_request(const LoadConfig& config, int64_t index) {
  // Draws from a hash of (seed, index): the same plans whatever the threads' timing.
  uint64_t x = config.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(index);
  auto draw = [&x] {
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
  };
  RequestPlan p;
  p.stream = config.stream_fraction < 0 ? config.stream : draw() < config.stream_fraction;
  if (draw() < config.disconnect_fraction) {
    const double kind = draw();
    if (kind < 1.0 / 3) {
      p.leave = RequestPlan::Leave::kWhileSending;
    } else if (p.stream) {
      p.leave = RequestPlan::Leave::kAfterFirstEvent;
    } else {
      p.leave = RequestPlan::Leave::kWhileWaiting;
      p.wait_ms = 1 + static_cast<int>(draw() * 50);
    }
  }
  return p;
}

RequestSample send_completion(const LoadConfig& config, const std::string& prompt,
                              const RequestPlan& plan) {
  using Leave = RequestPlan::Leave;
  RequestSample s;
  Json body = {{"prompt", prompt},
               {"max_tokens", config.max_tokens},
               {"temperature", 0},
               {"stream", plan.stream},
               // Extensions of llama-server, ignored by servers that do not know them: every
               // request generates max_tokens, and repeating the prompt reuses no KV cache.
               {"ignore_eos", true},
               {"cache_prompt", false}};
  if (plan.stream) body["stream_options"] = {{"include_usage", true}};
  if (!config.model.empty()) body["model"] = config.model;

  httplib::Client cli(config.url);
  configure(cli, config.timeout_s);
  if (plan.leave == Leave::kWhileSending) {
    // Half the body, then the client closes: the server must drop the request.
    const std::string text = body.dump();
    auto res = cli.Post(
        "/v1/completions", text.size(),
        [&text](size_t offset, size_t, httplib::DataSink& sink) {
          if (offset > 0) return false;
          sink.write(text.data(), text.size() / 2);
          return true;
        },
        "application/json");
    s.left = !res;
    if (res)
      s.error = "POST /v1/completions: answered " + std::to_string(res->status) + " to half a body";
    return s;
  }
  if (plan.leave == Leave::kWhileWaiting) cli.set_read_timeout(0, plan.wait_ms * 1000);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Content-Type", "application/json");
  req.body = body.dump();

  int status = 0;
  std::string error_body;
  std::string whole_body;  // without streaming
  SseParser sse;
  int64_t chunks = 0, usage_tokens = -1;
  Clock::time_point first{}, last{};
  std::string event_error;
  bool left_on_purpose = false;

  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  const Clock::time_point t0 = Clock::now();
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    if (status != 200) {
      if (error_body.size() < kMaxErrorBody) error_body.append(data, len);
      return true;
    }
    if (!plan.stream) {
      whole_body.append(data, len);
      return true;
    }
    if (plan.leave == Leave::kAfterFirstEvent) {
      left_on_purpose = true;
      return false;
    }
    const Clock::time_point now = Clock::now();
    for (const std::string& payload : sse.feed(std::string_view(data, len))) {
      if (payload == "[DONE]") continue;
      Json ev = Json::parse(payload, nullptr, false);
      if (ev.is_discarded()) {
        event_error = "a streamed event is not JSON: " + payload.substr(0, kMaxErrorBody);
        return false;
      }
      if (ev.contains("error")) {
        event_error = "error event: " + ev["error"].dump().substr(0, kMaxErrorBody);
        return false;
      }
      if (ev.contains("usage") && ev["usage"].is_object()) {
        const Json& u = ev["usage"];
        if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer()) {
          usage_tokens = u["completion_tokens"].get<int64_t>();
        }
        if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer()) {
          s.prompt_tokens = u["prompt_tokens"].get<int64_t>();
        }
      }
      if (!ev.contains("choices") || !ev["choices"].is_array() || ev["choices"].empty()) continue;
      const Json& c = ev["choices"][0];
      if (!c.contains("text") || !c["text"].is_string() ||
          c["text"].get_ref<const std::string&>().empty()) {
        continue;
      }
      if (chunks == 0) first = now;
      last = now;
      ++chunks;
    }
    return true;
  };

  auto res = cli.send(req);
  s.latency_s = seconds_between(t0, Clock::now());
  // Gone as planned: before an answer came (a plain request giving up), or on the first event.
  if (left_on_purpose ||
      (plan.leave == Leave::kWhileWaiting && !res && res.error() == httplib::Error::Read)) {
    s.left = true;
    return s;
  }
  if (!event_error.empty()) {
    s.error = event_error;
    return s;
  }
  if (!res) {
    s.error = "POST /v1/completions: " + httplib::to_string(res.error()) + " error";
    return s;
  }
  if (status != 200) {
    s.error = http_error(status, error_body);
    return s;
  }
  if (!plan.stream) {
    Json out = Json::parse(whole_body, nullptr, false);
    if (out.is_discarded()) {
      s.error = "response is not JSON";
      return s;
    }
    if (out.contains("usage") && out["usage"].is_object()) {
      const Json& u = out["usage"];
      if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer()) {
        s.output_tokens = u["completion_tokens"].get<int64_t>();
      }
      if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer()) {
        s.prompt_tokens = u["prompt_tokens"].get<int64_t>();
      }
    }
    s.ok = true;
    return s;
  }
  // A chunk may carry several tokens (or a token may wait for the rest of its UTF-8 bytes):
  // the usage count, when the server sends it, is the true number.
  s.output_tokens = usage_tokens >= 0 ? usage_tokens : chunks;
  if (chunks > 0) s.ttft_s = seconds_between(t0, first);
  if (chunks > 1 && s.output_tokens > 1) {
    s.tpot_s = seconds_between(first, last) / static_cast<double>(s.output_tokens - 1);
  }
  s.ok = true;
  return s;
}

Result<LoadReport> run_load(const LoadConfig& config) {
  if (!config.url.starts_with("http://") && !config.url.starts_with("https://")) {
    return invalid_argument("--url: '" + config.url + "' does not start with http:// or https://");
  }
  if (config.concurrency < 1 || config.concurrency > 4096) {
    return invalid_argument("concurrency " + std::to_string(config.concurrency) +
                            " is not in [1, 4096]");
  }
  if ((config.n_requests > 0) == (config.duration_s > 0)) {
    return invalid_argument("give either a number of requests or a duration, not both");
  }
  STRATA_ASSIGN_OR_RETURN(std::string prompt, build_prompt(config));

  MutexGuarded<std::vector<RequestSample>> samples;
  std::atomic<int64_t> next{0};
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + std::chrono::duration_cast<Clock::duration>(
                                                 std::chrono::duration<double>(config.duration_s));
  auto client = [&] {
    while (true) {
      const int64_t index = next.fetch_add(1);
      if (config.n_requests > 0 ? index >= config.n_requests : Clock::now() >= deadline) return;
      RequestSample s = send_completion(config, prompt, plan_request(config, index));
      samples.lock()->push_back(std::move(s));
    }
  };
  {
    std::vector<std::jthread> threads;
    for (int i = 0; i < config.concurrency; ++i) threads.emplace_back(client);
  }
  return summarize(*samples.lock(), seconds_between(start, Clock::now()));
}

std::string report_text(const LoadConfig& config, const LoadReport& r) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof(line),
                "%lld requests ok, %lld errors, %d clients, prompt %d tokens, max_tokens %d%s\n",
                static_cast<long long>(r.requests_ok), static_cast<long long>(r.errors),
                config.concurrency, config.prompt_tokens, config.max_tokens,
                config.stream_fraction >= 0 ? ", some streamed"
                : config.stream             ? ", streamed"
                                            : "");
  out += line;
  if (config.disconnect_fraction > 0) {
    std::snprintf(line, sizeof(line), "%lld requests left mid-way by their clients, as planned\n",
                  static_cast<long long>(r.left));
    out += line;
  }
  std::snprintf(line, sizeof(line),
                "wall %.2f s   output %.1f tok/s (%lld tokens)   %.2f requests/s\n", r.wall_s,
                r.output_tok_s, static_cast<long long>(r.output_tokens), r.requests_s);
  out += line;
  auto row = [&](const char* what, const Distribution& d) {
    if (d.n == 0) {
      std::snprintf(line, sizeof(line), "%-11s not measured\n", what);
    } else {
      std::snprintf(line, sizeof(line), "%-11s mean %9.2f   p50 %9.2f   p99 %9.2f\n", what,
                    d.mean * 1e3, d.p50 * 1e3, d.p99 * 1e3);
    }
    out += line;
  };
  row("TTFT ms", r.ttft_s);
  row("TPOT ms", r.tpot_s);
  row("latency ms", r.latency_s);
  for (const std::string& e : r.error_samples) out += "error: " + e + "\n";
  return out;
}

std::string report_json(const LoadConfig& config, const LoadReport& r) {
  auto ms = [](const Distribution& d) {
    return Json{{"n", d.n}, {"mean", d.mean * 1e3}, {"p50", d.p50 * 1e3}, {"p99", d.p99 * 1e3}};
  };
  Json out = {
      {"config",
       {{"url", config.url},
        {"concurrency", config.concurrency},
        {"requests", config.n_requests},
        {"duration_s", config.duration_s},
        {"prompt_tokens", config.prompt_tokens},
        {"max_tokens", config.max_tokens},
        {"stream", config.stream},
        {"stream_fraction", config.stream_fraction},
        {"disconnect_fraction", config.disconnect_fraction},
        {"seed", config.seed}}},
      {"requests_ok", r.requests_ok},
      {"errors", r.errors},
      {"left", r.left},
      {"wall_s", r.wall_s},
      {"output_tokens", r.output_tokens},
      {"output_tok_s", r.output_tok_s},
      {"requests_s", r.requests_s},
      {"ttft_ms", ms(r.ttft_s)},
      {"tpot_ms", ms(r.tpot_s)},
      {"latency_ms", ms(r.latency_s)},
      {"error_samples", r.error_samples},
  };
  return out.dump(2) + "\n";
}

}  // namespace strata::bench
