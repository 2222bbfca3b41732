#include "server/embed_dispatcher.h"

#include <httplib.h>
#include <openssl/evp.h>

#include <cstring>

#include "server/reply.h"

namespace strata::server {
namespace {

using httplib::Request;
using httplib::Response;

// A vector as OpenAI's base64 form: its float32 values, little-endian, base64-encoded.
std::string base64_floats(const std::vector<float>& v) {
  const size_t bytes = v.size() * sizeof(float);
  std::string out(4 * ((bytes + 2) / 3), '\0');
  const int n =
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(v.data()), static_cast<int>(bytes));
  out.resize(static_cast<size_t>(n));
  return out;
}

// The request's inputs as token lists: a string, an array of strings, an array of token ids
// (one input), or an array of such arrays. Strings are tokenized as llama-server does (the
// model's BOS/EOS, special tokens parsed).
std::optional<ApiError> read_inputs(const Json& v, const char* field, const Tokenizer& tok,
                                    std::vector<std::vector<int32_t>>& out) {
  const std::string f = std::string("'") + field + "'";
  const auto ids_of = [&](const Json& arr, std::vector<int32_t>& ids) -> std::optional<ApiError> {
    for (const Json& x : arr) {
      if (!x.is_number_integer()) return ApiError{400, f + ": token ids must be integers"};
      const int64_t id = x.get<int64_t>();
      if (id < 0 || id >= tok.n_vocab()) {
        return ApiError{400, f + ": token " + std::to_string(id) +
                                 " is outside the vocabulary [0, " + std::to_string(tok.n_vocab()) +
                                 ")"};
      }
      ids.push_back(static_cast<int32_t>(id));
    }
    return std::nullopt;
  };
  if (v.is_string()) {
    out.push_back(tok.encode(v.get_ref<const std::string&>(), true, true));
  } else if (v.is_array() && !v.empty() && v[0].is_number()) {
    out.emplace_back();
    if (auto e = ids_of(v, out.back())) return e;
  } else if (v.is_array()) {
    if (v.size() > kMaxEmbeddingInputs) {
      return ApiError{400, f + " has " + std::to_string(v.size()) + " inputs; the limit is " +
                               std::to_string(kMaxEmbeddingInputs)};
    }
    for (const Json& x : v) {
      out.emplace_back();
      if (x.is_string()) {
        out.back() = tok.encode(x.get_ref<const std::string&>(), true, true);
      } else if (x.is_array()) {
        if (auto e = ids_of(x, out.back())) return e;
      } else {
        return ApiError{400, f + ": each input must be a string or an array of token ids"};
      }
    }
  } else {
    return ApiError{400, f + " must be a string, an array of strings or token ids"};
  }
  if (out.empty()) return ApiError{400, f + " holds no input"};
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].empty()) return ApiError{400, f + ": input " + std::to_string(i) + " has no tokens"};
  }
  return std::nullopt;
}

}  // namespace

EmbeddingDispatcher::EmbeddingDispatcher(EmbeddingServing serving, std::unique_ptr<Context> context,
                                         Metrics& metrics)
    : serving_(std::move(serving)),
      ctx_(std::move(context)),
      tok_(ctx_->model().tokenizer()),
      metrics_(metrics) {}

void EmbeddingDispatcher::stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stopped_ = true;
}

std::vector<Route> EmbeddingDispatcher::routes() {
  using M = Route::Method;
  using A = Route::Access;
  const auto health = [this](const Request&, Response& res) {
    Json body = {{"status", "ok"}};
    if (serving_.backend_status) {
      if (Status s = serving_.backend_status(); !s.is_ok()) {
        res.status = 503;
        body = {{"status", "error"}, {"error", s.message()}};
      }
    }
    send_json(res, body);
  };
  const auto models = [this](const Request&, Response& res) {
    send_json(res, {{"object", "list"},
                    {"data", Json::array({{{"id", serving_.model_name},
                                           {"object", "model"},
                                           {"owned_by", "strata"},
                                           {"meta",
                                            {{"n_embd", ctx_->model().hparams().n_embd},
                                             {"pooling", pooling_name(serving_.pooling)}}}}})}});
  };
  const auto tokenize = [this](const Request& req, Response& res) {
    const Json body = Json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object() || !body.contains("content") ||
        !body["content"].is_string()) {
      return send_error(res, ApiError{400, "'content' must be a string"});
    }
    send_json(
        res, {{"tokens", tok_.encode(body["content"].get_ref<const std::string&>(), false, true)}});
  };
  const auto embed = [this](bool openai) {
    return [this, openai](const Request& req, Response& res) { embeddings(req, res, openai); };
  };
  const auto no_generation = [](const Request&, Response& res) {
    send_error(res, ApiError{501,
                             "this server serves embeddings only (--embedding): start it without "
                             "--embedding to generate"});
  };
  std::vector<Route> r = {
      {M::kGet, "/health", A::kPublic, health},
      {M::kGet, "/v1/health", A::kPublic, health},
      {M::kGet, "/models", A::kKeyed, models},
      {M::kGet, "/v1/models", A::kKeyed, models},
      {M::kPost, "/tokenize", A::kKeyed, tokenize},
      {M::kPost, "/v1/embeddings", A::kKeyed, embed(true)},
      {M::kPost, "/embeddings", A::kKeyed, embed(false)},
      {M::kPost, "/embedding", A::kKeyed, embed(false)},
  };
  for (const char* path : {"/completion", "/completions", "/v1/completions", "/chat/completions",
                           "/v1/chat/completions", "/infill", "/v1/messages", "/v1/responses"}) {
    r.push_back({M::kPost, path, A::kKeyed, no_generation});
  }
  return r;
}

Result<std::vector<std::vector<float>>> EmbeddingDispatcher::embed(
    const std::vector<std::vector<int32_t>>& inputs, int normalize) {
  // An input too long fails its own request here, never a step shared with others.
  const int64_t n_ctx = ctx_->params().n_ctx;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (static_cast<int64_t>(inputs[i].size()) > n_ctx) {
      return invalid_argument("input " + std::to_string(i) + " has " +
                              std::to_string(inputs[i].size()) + " tokens; the context holds " +
                              std::to_string(n_ctx) + " (-c)");
    }
  }
  Job job{&inputs, normalize};
  std::unique_lock<std::mutex> lock(mu_);
  if (stopped_) return unavailable("the server is stopping");
  queue_.push_back(&job);
  while (!job.done) {
    if (running_) {
      done_.wait(lock);
      continue;
    }
    running_ = true;
    std::vector<Job*> jobs;
    jobs.swap(queue_);
    lock.unlock();
    run_jobs(jobs);
    lock.lock();
    for (Job* j : jobs) j->done = true;
    running_ = false;
    done_.notify_all();
  }
  return std::move(job.result);
}

// One step for the jobs' inputs together (a vector does not depend on the inputs beside it),
// then each job's vectors normalised as it asked; pooling none gives every token's vector as it
// is, as llama-server does.
void EmbeddingDispatcher::run_jobs(const std::vector<Job*>& jobs) {
  std::vector<std::vector<int32_t>> all;
  int64_t n_tokens = 0;
  for (const Job* j : jobs) {
    for (const auto& ids : *j->inputs) {
      all.push_back(ids);
      n_tokens += static_cast<int64_t>(ids.size());
    }
  }
  auto vectors = embed_inputs(*ctx_, all, serving_.pooling, -1);
  if (!vectors) {
    for (Job* j : jobs) j->result = vectors.status();
    return;
  }
  metrics_.prompt_tokens.fetch_add(static_cast<uint64_t>(n_tokens), std::memory_order_relaxed);
  const int64_t n_embd = ctx_->model().hparams().n_embd;
  size_t at = 0;
  for (Job* j : jobs) {
    std::vector<std::vector<float>> mine;
    for (size_t i = 0; i < j->inputs->size(); ++i) {
      std::vector<float>& v = (*vectors)[at++];
      if (serving_.pooling != Pooling::kNone) normalize_embeddings(v, n_embd, j->normalize);
      mine.push_back(std::move(v));
    }
    j->result = std::move(mine);
  }
}

void EmbeddingDispatcher::embeddings(const Request& req, Response& res, bool openai) {
  const Json body = Json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return send_error(res, ApiError{400, "the request body is not a valid JSON object"});
  }
  if (openai && serving_.pooling == Pooling::kNone) {
    return send_error(res, ApiError{400,
                                    "pooling 'none' gives a vector per token, which /v1/embeddings "
                                    "cannot return: use /embeddings, or --pooling mean|cls|last"});
  }
  const char* field = body.contains("input") ? "input" : "content";
  auto in = body.find(field);
  if (in == body.end()) return send_error(res, ApiError{400, "'input' is required"});
  std::vector<std::vector<int32_t>> inputs;
  if (auto e = read_inputs(*in, field, tok_, inputs)) return send_error(res, *e);
  int normalize = serving_.embd_normalize;
  if (auto it = body.find("embd_normalize"); it != body.end() && !it->is_null()) {
    // An unsigned value past int64_t's range would wrap: judge it as unsigned.
    const bool in_range = it->is_number_unsigned() ? it->get<uint64_t>() <= 64
                          : it->is_number_integer()
                              ? it->get<int64_t>() >= -1 && it->get<int64_t>() <= 64
                              : false;
    if (!in_range) {
      return send_error(res, ApiError{400, "'embd_normalize' must be an integer in [-1, 64]"});
    }
    normalize = static_cast<int>(it->get<int64_t>());
  }
  bool base64 = false;
  if (auto it = body.find("encoding_format"); it != body.end() && !it->is_null()) {
    if (!it->is_string() || (*it != "float" && *it != "base64")) {
      return send_error(res, ApiError{400, "'encoding_format' must be 'float' or 'base64'"});
    }
    base64 = *it == "base64";
  }
  metrics_.requests.fetch_add(1, std::memory_order_relaxed);
  Result<std::vector<std::vector<float>>> vectors = embed(inputs, normalize);
  if (!vectors) {
    metrics_.requests_failed.fetch_add(1, std::memory_order_relaxed);
    const ErrorKind kind = vectors.status().kind();
    return send_error(res, ApiError{kind == ErrorKind::kInvalidArgument ? 400
                                    : kind == ErrorKind::kUnavailable   ? 503
                                                                        : 500,
                                    vectors.status().message()});
  }
  int64_t n_tokens = 0;
  for (const auto& ids : inputs) n_tokens += static_cast<int64_t>(ids.size());
  const int64_t n_embd = ctx_->model().hparams().n_embd;
  if (openai) {
    Json data = Json::array();
    for (size_t i = 0; i < vectors->size(); ++i) {
      const std::vector<float>& v = (*vectors)[i];
      data.push_back({{"object", "embedding"},
                      {"index", i},
                      {"embedding", base64 ? Json(base64_floats(v)) : Json(v)}});
    }
    return send_json(res, {{"object", "list"},
                           {"data", data},
                           {"model", body.contains("model") && body["model"].is_string()
                                         ? body["model"].get<std::string>()
                                         : serving_.model_name},
                           {"usage", {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}}});
  }
  // llama.cpp's own form: each input's vectors (one, or one per token under pooling none).
  Json out = Json::array();
  for (size_t i = 0; i < vectors->size(); ++i) {
    const std::vector<float>& v = (*vectors)[i];
    Json rows = Json::array();
    for (size_t at = 0; at < v.size(); at += static_cast<size_t>(n_embd)) {
      rows.push_back(std::vector<float>(v.begin() + static_cast<std::ptrdiff_t>(at),
                                        v.begin() + static_cast<std::ptrdiff_t>(at) + n_embd));
    }
    out.push_back({{"index", i}, {"embedding", rows}});
  }
  send_json(res, out);
}

}  // namespace strata::server
