#include "server/model_dispatcher.h"

#include <httplib.h>

#include <chrono>
#include <ctime>
#include <random>

#include "server/peer.h"
#include "server/reply.h"

namespace strata::server {
namespace {

using httplib::Request;
using httplib::Response;

constexpr std::chrono::milliseconds kPollInterval{250};

uint64_t fresh_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// What a streamed response carries from one call of the content provider to the next.
struct StreamState {
  CompletionRequest req;
  ResponseMeta meta;
  std::shared_ptr<ResultChannel> channel;
  std::vector<bool> first;
  int32_t n_done = 0;
  int32_t n_generated = 0;
  bool finished = false;
};

bool write_event(httplib::DataSink& sink, const std::string& data) {
  const std::string s = "data: " + data + "\n\n";
  return sink.write(s.data(), s.size());
}

}  // namespace

ModelDispatcher::ModelDispatcher(ModelServing serving, const Model& model,
                                 std::vector<std::unique_ptr<PipelineGroup>>& groups,
                                 std::unique_ptr<ChatFormatter> chat, Metrics& metrics)
    : serving_(std::move(serving)),
      model_(model),
      tok_(model.tokenizer()),
      groups_(groups),
      chat_(std::move(chat)),
      metrics_(metrics),
      created_(static_cast<int64_t>(std::time(nullptr))) {
  max_n_ = groups_.at(0)->n_slots();
  n_ctx_slot_ = groups_.at(0)->n_ctx_slot();
  for (const auto& g : groups_) {
    max_n_ = std::min(max_n_, g->n_slots());
    n_ctx_slot_ = std::min(n_ctx_slot_, g->n_ctx_slot());
  }
}

void ModelDispatcher::stop() {
  for (auto& g : groups_) g->stop();
}

std::vector<Route> ModelDispatcher::routes() {
  using M = Route::Method;
  using A = Route::Access;
  auto gen = [this](Endpoint e) {
    return [this, e](const Request& req, Response& res) { generate(req, res, e); };
  };
  auto models_h = [this](const Request&, Response& res) { models(res); };
  auto health_h = [this](const Request&, Response& res) { health(res); };
  return {
      {M::kGet, "/health", A::kPublic, health_h},
      {M::kGet, "/v1/health", A::kPublic, health_h},
      {M::kGet, "/v1/models", A::kKeyed, models_h},
      {M::kGet, "/models", A::kKeyed, models_h},
      {M::kPost, "/v1/completions", A::kKeyed, gen(Endpoint::kCompletions)},
      {M::kPost, "/v1/chat/completions", A::kKeyed, gen(Endpoint::kChat)},
      {M::kPost, "/completion", A::kKeyed, gen(Endpoint::kNative)},
      {M::kPost, "/tokenize", A::kKeyed,
       [this](const Request& req, Response& res) { tokenize(req, res); }},
      {M::kPost, "/detokenize", A::kKeyed,
       [this](const Request& req, Response& res) { detokenize(req, res); }},
      {M::kGet, "/props", A::kKeyed, [this](const Request&, Response& res) { props(res); }},
      {M::kGet, "/slots", A::kKeyed,
       [this](const Request&, Response& res) {
         if (!serving_.endpoint_slots) {
           return send_error(res, ApiError{501, "the /slots endpoint is off (start with --slots)"});
         }
         slots(res);
       }},
      {M::kGet, "/metrics", A::kKeyed,
       [this](const Request&, Response& res) {
         if (!serving_.endpoint_metrics) {
           return send_error(res,
                             ApiError{501, "the /metrics endpoint is off (start with --metrics)"});
         }
         metrics(res);
       }},
  };
}

// A server whose worker is gone is up but cannot generate: a load balancer must hear that.
void ModelDispatcher::health(Response& res) {
  if (serving_.backend_status) {
    if (Status s = serving_.backend_status(); !s.is_ok()) {
      res.status = 503;
      return send_json(res, {{"status", "error"}, {"error", s.message()}});
    }
  }
  send_json(res, {{"status", "ok"}});
}

bool ModelDispatcher::model_known(const std::string& name) const {
  for (const std::string& a : serving_.aliases) {
    if (name == a) return true;
  }
  return name == serving_.model_name || name == serving_.model_path ||
         name == base_name(serving_.model_path);
}

std::optional<ApiError> ModelDispatcher::make_task(const CompletionRequest& creq, Task& task) {
  std::vector<int32_t> ids;
  if (creq.endpoint == Endpoint::kChat) {
    Result<std::vector<int32_t>> chat_ids = chat_->prompt(creq.messages, tok_);
    if (!chat_ids) return ApiError{400, "'messages': " + chat_ids.status().message()};
    ids = std::move(*chat_ids);
  } else if (creq.prompt_is_ids) {
    if (Status st = tok_.check_ids(creq.prompt_ids); !st)
      return ApiError{400, "'prompt': " + st.message()};
    ids = creq.prompt_ids;
  } else {
    ids = tok_.encode(creq.prompt_text, true, true);
  }
  if (ids.empty()) return ApiError{400, "the prompt is empty (and the model adds no BOS token)"};
  if (static_cast<int64_t>(ids.size()) > n_ctx_slot_) {
    return ApiError{400, "the prompt has " + std::to_string(ids.size()) +
                             " tokens; the context of a slot holds " + std::to_string(n_ctx_slot_) +
                             " (-c divided by -np)"};
  }
  task.id = next_id_.fetch_add(1, std::memory_order_relaxed);
  task.prompt = std::move(ids);
  task.params = creq.params;
  if (creq.endpoint == Endpoint::kChat) {
    for (std::string& s : chat_->stop_strings()) task.params.stop.push_back(std::move(s));
  }
  task.channel = std::make_shared<ResultChannel>();
  return std::nullopt;
}

PipelineGroup& ModelDispatcher::pick_group(const std::vector<int32_t>& prompt) {
  if (groups_.size() == 1) return *groups_[0];
  // Among groups with a free slot, the longest cached prefix (then the most free slots); when
  // all are full, the shortest queue.
  PipelineGroup* best = nullptr;
  int64_t best_free = 0;
  size_t best_lcp = 0;
  for (const auto& g : groups_) {
    const int64_t free = g->n_slots() - g->load();
    const size_t lcp = free > 0 ? g->cache_match(prompt) : 0;
    const bool better = best == nullptr || (free > 0 && best_free <= 0) ||
                        (free > 0 && (lcp > best_lcp || (lcp == best_lcp && free > best_free))) ||
                        (free <= 0 && best_free <= 0 && free > best_free);
    if (better) {
      best = g.get();
      best_free = free;
      best_lcp = lcp;
    }
  }
  return *best;
}

void ModelDispatcher::generate(const Request& req, Response& res, Endpoint endpoint) {
  const Json body = Json::parse(req.body, nullptr, false);
  if (body.is_discarded())
    return send_error(res, ApiError{400, "the request body is not valid JSON"});
  CompletionRequest creq;
  if (auto e = parse_completion(body, endpoint, serving_.defaults, fresh_seed(), creq))
    return send_error(res, *e);
  if (creq.model && !model_known(*creq.model)) {
    return send_error(res,
                      ApiError{404, "model '" + *creq.model + "' not found; this server has '" +
                                        serving_.model_name + "'"});
  }
  if (creq.params.n > max_n_) {
    return send_error(
        res, ApiError{400, "'n' = " + std::to_string(creq.params.n) + " is more than the " +
                               std::to_string(max_n_) + " slots of a pipeline group (raise -np)"});
  }
  if (serving_.backend_status) {
    if (Status s = serving_.backend_status(); !s.is_ok())
      return send_error(res, ApiError{503, s.message()});
  }
  Task task;
  if (auto e = make_task(creq, task)) return send_error(res, *e);
  ResponseMeta meta;
  meta.id = (endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + std::to_string(task.id);
  meta.created = static_cast<int64_t>(std::time(nullptr));
  meta.model = serving_.model_name;
  meta.n_prompt = static_cast<int32_t>(task.prompt.size());
  std::shared_ptr<ResultChannel> channel = task.channel;
  const int32_t n = creq.params.n;
  PipelineGroup& group = pick_group(task.prompt);
  metrics_.requests.fetch_add(1, std::memory_order_relaxed);
  group.post(std::move(task));

  if (!creq.stream) {
    std::vector<ChoiceResult> choices(n);
    // The connection's socket, looked up once the request has run for a poll interval; then
    // checked every interval, whether events arrive or not.
    int fd = -2;
    Clock::time_point next_check = Clock::now() + kPollInterval;
    for (int32_t done = 0; done < n;) {
      std::optional<Event> e = channel->pop(kPollInterval);
      if (Clock::now() >= next_check) {
        next_check = Clock::now() + kPollInterval;
        if (fd == -2) {
          fd = connection_socket(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
        }
        if (fd >= 0 && peer_closed(fd)) {
          // Nobody will read the answer: free the slots now rather than at the last token.
          channel->cancel();
          return send_error(res, ApiError{499, "the client closed the connection"});
        }
      }
      if (!e) continue;
      if (e->kind == Event::Kind::kError)
        return send_error(res, ApiError{e->http_status, e->error});
      ChoiceResult& c = choices.at(e->index);
      c.text += e->text;
      c.tokens.insert(c.tokens.end(), e->tokens.begin(), e->tokens.end());
      if (e->kind == Event::Kind::kDone) {
        c.finish_reason = e->finish_reason;
        c.n_generated = e->n_generated;
        meta.n_cached = e->n_cached;
        ++done;
      }
    }
    return send_json(res, response_json(creq, meta, choices, tok_));
  }

  auto state = std::make_shared<StreamState>();
  state->req = std::move(creq);
  state->meta = meta;
  state->channel = channel;
  state->first.assign(n, true);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, state](size_t, httplib::DataSink& sink) {
        StreamState& st = *state;
        std::optional<Event> e = st.channel->pop(kPollInterval);
        if (!e) return true;
        const bool native = st.req.endpoint == Endpoint::kNative;
        bool ok = true;
        if (e->kind == Event::Kind::kError) {
          ok = write_event(sink, error_body(ApiError{e->http_status, e->error}));
          st.finished = true;
          sink.done();
          return ok;
        }
        if (!e->text.empty() || !e->tokens.empty()) {
          ok = write_event(sink, dump(chunk_json(st.req, st.meta, e->index, e->text, e->tokens, "",
                                                 st.first.at(e->index), tok_)));
          st.first[e->index] = false;
        }
        if (ok && e->kind == Event::Kind::kDone) {
          st.meta.n_cached = e->n_cached;
          st.n_generated += e->n_generated;
          ++st.n_done;
          if (native) {
            ok = write_event(sink, dump(Json{{"content", ""},
                                             {"stop", true},
                                             {"finish_reason", e->finish_reason},
                                             {"stopped_limit", e->finish_reason == "length"},
                                             {"tokens_predicted", e->n_generated},
                                             {"tokens_evaluated", st.meta.n_prompt},
                                             {"tokens_cached", st.meta.n_cached},
                                             {"model", st.meta.model}}));
          } else {
            ok = write_event(sink, dump(chunk_json(st.req, st.meta, e->index, "", {},
                                                   e->finish_reason, st.first.at(e->index), tok_)));
          }
          st.first[e->index] = false;
          if (ok && st.n_done == static_cast<int32_t>(st.first.size())) {
            if (!native && st.req.include_usage) {
              ok = write_event(sink, dump(Json{{"id", st.meta.id},
                                               {"object", st.req.endpoint == Endpoint::kChat
                                                              ? "chat.completion.chunk"
                                                              : "text_completion"},
                                               {"created", st.meta.created},
                                               {"model", st.meta.model},
                                               {"choices", Json::array()},
                                               {"usage", usage_json(st.meta, st.n_generated)}}));
            }
            if (ok && !native) ok = write_event(sink, "[DONE]");
            st.finished = true;
            sink.done();
          }
        }
        // A failed write means the client went away: its slots are freed at the next step.
        if (!ok) st.channel->cancel();
        return ok;
      },
      [state](bool) {
        if (!state->finished) state->channel->cancel();
      });
}

void ModelDispatcher::tokenize(const Request& req, Response& res) {
  const Json body = Json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return send_error(res, ApiError{400, "the request body is not a valid JSON object"});
  }
  auto content = body.find("content");
  if (content == body.end() || !content->is_string()) {
    return send_error(res, ApiError{400, "'content' must be a string"});
  }
  bool add_special = false, parse_special = true, with_pieces = false;
  for (auto [key, out] : {std::pair<const char*, bool*>{"add_special", &add_special},
                          {"parse_special", &parse_special},
                          {"with_pieces", &with_pieces}}) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) continue;
    if (!it->is_boolean())
      return send_error(res, ApiError{400, std::string("'") + key + "' must be a boolean"});
    *out = it->get<bool>();
  }
  const std::vector<int32_t> ids =
      tok_.encode(content->get_ref<const std::string&>(), add_special, parse_special);
  Json tokens = Json::array();
  for (int32_t id : ids) {
    if (with_pieces) {
      tokens.push_back({{"id", id}, {"piece", tok_.token_to_piece(id, true)}});
    } else {
      tokens.push_back(id);
    }
  }
  send_json(res, {{"tokens", tokens}});
}

void ModelDispatcher::detokenize(const Request& req, Response& res) {
  const Json body = Json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return send_error(res, ApiError{400, "the request body is not a valid JSON object"});
  }
  auto tokens = body.find("tokens");
  if (tokens == body.end() || !tokens->is_array()) {
    return send_error(res, ApiError{400, "'tokens' must be an array of token ids"});
  }
  std::vector<int32_t> ids;
  for (const Json& t : *tokens) {
    if (!t.is_number_integer() || t.get<int64_t>() < INT32_MIN || t.get<int64_t>() > INT32_MAX) {
      return send_error(res, ApiError{400, "'tokens' must hold integer token ids, not " + dump(t)});
    }
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  if (Status st = tok_.check_ids(ids); !st)
    return send_error(res, ApiError{400, "'tokens': " + st.message()});
  send_json(res, {{"content", tok_.decode(ids)}});
}

void ModelDispatcher::models(Response& res) {
  const HParams& hp = model_.hparams();
  send_json(res, {{"object", "list"},
                  {"data", Json::array({{{"id", serving_.model_name},
                                         {"object", "model"},
                                         {"created", created_},
                                         {"owned_by", "strata"},
                                         {"meta",
                                          {{"n_vocab", tok_.n_vocab()},
                                           {"n_ctx_train", hp.n_ctx_train},
                                           {"n_embd", hp.n_embd}}}}})}});
}

void ModelDispatcher::props(Response& res) {
  const SamplerParams d;
  int64_t total_slots = 0;
  int64_t n_ctx = 0;
  for (const auto& g : groups_) {
    total_slots += g->n_slots();
    n_ctx += g->n_ctx();
  }
  send_json(res, {{"default_generation_settings",
                   {{"n_ctx", n_ctx_slot_},
                    {"params",
                     {{"temperature", d.temperature},
                      {"top_k", d.top_k},
                      {"top_p", d.top_p},
                      {"min_p", d.min_p},
                      {"repeat_penalty", d.repeat_penalty},
                      {"repeat_last_n", d.repeat_last_n},
                      {"presence_penalty", d.presence_penalty},
                      {"frequency_penalty", d.frequency_penalty},
                      {"n_predict", -1}}}}},
                  {"total_slots", total_slots},
                  {"n_ctx", n_ctx},
                  {"pipeline_groups", groups_.size()},
                  {"model_path", serving_.model_path},
                  {"model_alias", serving_.model_name},
                  {"chat_template", chat_->name()},
                  {"build_info", "strata"}});
}

void ModelDispatcher::slots(Response& res) {
  Json out = Json::array();
  int32_t base = 0;
  for (const auto& g : groups_) {
    for (const SlotView& v : g->slot_views()) {
      out.push_back({{"id", base + v.id},
                     {"group", g->index()},
                     {"is_processing", v.busy},
                     {"id_task", v.task_id},
                     {"n_ctx", g->n_ctx_slot()},
                     {"n_cached", v.n_cached}});
    }
    base += g->n_slots();
  }
  send_json(res, out);
}

void ModelDispatcher::metrics(Response& res) {
  Gauges gauges;
  for (const auto& g : groups_) {
    gauges.slots_busy += g->busy_slots();
    gauges.slots_total += g->n_slots();
    gauges.kv_used += g->kv_used();
    gauges.kv_total += g->n_ctx();
    gauges.requests_queued += g->queued();
  }
  res.set_content(metrics_.render(gauges), "text/plain; version=0.0.4");
}

}  // namespace strata::server
