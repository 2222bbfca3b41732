#include "server/model_dispatcher.h"

#include "jinja/value_nlohmann.h"

#include <httplib.h>

#include <chrono>
#include <ctime>
#include <random>

#include "server/peer.h"
#include "server/reply.h"
#include "server/tool_grammar.h"

namespace strata::server {
namespace {

using httplib::Request;
using httplib::Response;

constexpr std::chrono::milliseconds kDispatchPoll{250};
// Instances of one Vertex AI prediction request: each becomes a task of its own.
constexpr size_t kMaxAipInstances = 64;

uint64_t fresh_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// What a streamed response carries from one call of the content provider to the next.
struct StreamState {
  CompletionRequest req;
  ResponseMeta meta;
  std::shared_ptr<ResultChannel> channel;
  std::shared_ptr<StreamWriter> writer;
  std::vector<bool> first;
  std::vector<std::string> texts;    // chat: each choice's text so far
  std::vector<ReplyStream> replies;  // chat: each choice's reply parser
  int32_t n_done = 0;
  int32_t n_generated = 0;
  double prompt_ms = 0;
  double predicted_ms = 0;
  bool finished = false;
};

bool write_event(httplib::DataSink& sink, const std::string& data) {
  const std::string s = "data: " + data + "\n\n";
  return sink.write(s.data(), s.size());
}

// OpenAI's stream: each chunk a data line, [DONE] at the end.
class OpenAiWriter : public StreamWriter {
 public:
  bool chunk(httplib::DataSink& sink, const Json& c) override { return write_event(sink, dump(c)); }
  bool end(httplib::DataSink& sink) override { return write_event(sink, "[DONE]"); }
};

}  // namespace

ModelDispatcher::ModelDispatcher(ModelServing serving, const Model& model,
                                 std::vector<std::unique_ptr<PipelineGroup>>& groups,
                                 std::unique_ptr<ChatFormatter> chat, Metrics& metrics)
    : serving_(std::move(serving)),
      model_(model),
      tok_(model.tokenizer()),
      groups_(groups),
      chat_(std::move(chat)),
      tool_format_(tool_call_format_detect(chat_->source())),
      template_thinks_(chat_->source().find("<think>") != std::string::npos),
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
  auto with_req = [this](void (ModelDispatcher::*f)(const Request&, Response&)) {
    return [this, f](const Request& req, Response& res) { (this->*f)(req, res); };
  };
  auto no_req = [this](void (ModelDispatcher::*f)(Response&)) {
    return [this, f](const Request&, Response& res) { (this->*f)(res); };
  };
  auto count = [this](int kind) {
    return [this, kind](const Request& req, Response& res) { count_tokens(req, res, kind); };
  };
  // Paths as llama-server serves them, with and without /v1. Tool calls, /v1/messages and
  // /v1/responses join as rows of their own (generation routes over the same prepare/collect).
  std::vector<Route> r = {
      {M::kGet, "/health", A::kPublic, no_req(&ModelDispatcher::health)},
      {M::kGet, "/v1/health", A::kPublic, no_req(&ModelDispatcher::health)},
      {M::kGet, "/models", A::kKeyed, no_req(&ModelDispatcher::models)},
      {M::kGet, "/v1/models", A::kKeyed, no_req(&ModelDispatcher::models)},
      {M::kPost, "/completion", A::kKeyed, gen(Endpoint::kNative)},
      {M::kPost, "/completions", A::kKeyed, gen(Endpoint::kCompletions)},
      {M::kPost, "/v1/completions", A::kKeyed, gen(Endpoint::kCompletions)},
      {M::kPost, "/chat/completions", A::kKeyed, gen(Endpoint::kChat)},
      {M::kPost, "/v1/chat/completions", A::kKeyed, gen(Endpoint::kChat)},
      {M::kPost, "/infill", A::kKeyed, gen(Endpoint::kInfill)},
      {M::kPost, "/tokenize", A::kKeyed, with_req(&ModelDispatcher::tokenize)},
      {M::kPost, "/detokenize", A::kKeyed, with_req(&ModelDispatcher::detokenize)},
      {M::kPost, "/apply-template", A::kKeyed, with_req(&ModelDispatcher::apply_template)},
      {M::kGet, "/props", A::kKeyed, no_req(&ModelDispatcher::props)},
      {M::kPost, "/props", A::kKeyed, with_req(&ModelDispatcher::props_post)},
      {M::kGet, "/slots", A::kKeyed, with_req(&ModelDispatcher::slots)},
      {M::kPost, R"(/slots/(-?\d+))", A::kKeyed, with_req(&ModelDispatcher::slot_action)},
      {M::kGet, "/metrics", A::kKeyed, no_req(&ModelDispatcher::metrics)},
      {M::kGet, "/lora-adapters", A::kKeyed, with_req(&ModelDispatcher::lora_adapters)},
      {M::kPost, "/lora-adapters", A::kKeyed, with_req(&ModelDispatcher::lora_adapters)},
      {M::kPost, "/v1/messages", A::kKeyed, with_req(&ModelDispatcher::messages)},
      {M::kPost, "/v1/responses", A::kKeyed, with_req(&ModelDispatcher::responses)},
      {M::kPost, "/v1/messages/count_tokens", A::kKeyed, count(0)},
      {M::kPost, "/v1/responses/input_tokens", A::kKeyed, count(1)},
      {M::kPost, "/v1/chat/completions/input_tokens", A::kKeyed, count(2)},
  };
  for (const char* path : {"/v1/embeddings", "/embeddings", "/embedding"}) {
    r.push_back({M::kPost, path, A::kKeyed, [](const Request&, Response& res) {
                   send_error(res, ApiError{501,
                                            "this server does not serve embeddings: start it with "
                                            "--embedding"});
                 }});
  }
  if (!serving_.aip_predict_route.empty()) {
    r.push_back({M::kGet, serving_.aip_health_route, A::kPublic, no_req(&ModelDispatcher::health)});
    r.push_back(
        {M::kPost, serving_.aip_predict_route, A::kKeyed, with_req(&ModelDispatcher::aip_predict)});
  }
  return r;
}

// A server whose worker is gone is up but cannot generate: a load balancer must hear that.
void ModelDispatcher::health(Response& res) {
  Json body = {{"status", "ok"}};
  if (serving_.backend_status) {
    if (Status s = serving_.backend_status(); !s.is_ok()) {
      res.status = 503;
      body = {{"status", "error"}, {"error", s.message()}};
      const int after = serving_.backend_retry_after ? serving_.backend_retry_after() : 0;
      if (after > 0) res.set_header("Retry-After", std::to_string(after));
    }
  }
  if (serving_.backend_workers) body["workers"] = serving_.backend_workers();
  send_json(res, body);
}

bool ModelDispatcher::prefills(const ChatRequest& chat) const {
  if (!serving_.prefill_assistant || !chat.add_generation_prompt || chat.messages.size() < 2) {
    return false;
  }
  const Json& last = chat.messages.back();
  return last["role"] == "assistant" && !last.contains("tool_calls");
}

std::optional<ApiError> ModelDispatcher::render_chat(const CompletionRequest& creq,
                                                     std::string& text) const {
  const ChatRequest& chat = creq.chat;
  // A final assistant message is a prefill, as llama-server has it: the conversation before it
  // with the opening of the assistant's turn, then its text, which the model continues.
  const bool prefill = prefills(chat);
  const size_t n = chat.messages.size() - (prefill ? 1 : 0);
  std::string continued;
  if (prefill && chat.messages.back()["content"].is_string()) {
    continued = chat.messages.back()["content"].get<std::string>();
  }
  if (chat_->source().empty()) {
    // A named family renders plain turns only.
    if (chat.needs_tools_template || !chat.tools.empty()) {
      return ApiError{400,
                      "tools and tool messages need a Jinja chat template (--jinja; the "
                      "named format '" +
                          chat_->name() + "' renders text turns only)"};
    }
    const std::vector<ChatTurn> turns(chat.turns.begin(),
                                      chat.turns.begin() + static_cast<std::ptrdiff_t>(n));
    Result<std::string> rendered = chat_->render(turns);
    if (!rendered) return ApiError{400, "'messages': " + rendered.status().message()};
    text = std::move(*rendered) + continued;
    return std::nullopt;
  }
  ChatInputs in;
  Json messages = chat.messages;
  if (prefill) messages.erase(messages.size() - 1);
  Result<jinja::Value> values = jinja::from_nlohmann(messages);
  if (!values) return ApiError{400, "'messages': " + values.status().message()};
  in.messages = std::move(*values);
  if (!chat.tools.empty()) {
    Result<jinja::Value> tools = jinja::from_nlohmann(chat.tools);
    if (!tools) return ApiError{400, "'tools': " + tools.status().message()};
    in.tools = std::move(*tools);
  }
  in.add_generation_prompt = chat.add_generation_prompt;
  Result<jinja::Value> kwargs = jinja::from_nlohmann(chat.template_kwargs);
  if (!kwargs) return ApiError{400, "'chat_template_kwargs': " + kwargs.status().message()};
  in.kwargs = kwargs->as_dict();
  Result<std::string> rendered = chat_->render(in);
  if (!rendered) return ApiError{400, rendered.status().message()};
  text = std::move(*rendered) + continued;
  return std::nullopt;
}

std::optional<ApiError> ModelDispatcher::prompt_ids(const CompletionRequest& creq,
                                                    std::vector<int32_t>& ids, std::string& text) {
  if (creq.endpoint == Endpoint::kChat) {
    if (auto e = render_chat(creq, text)) return e;
    ids = chat_->tokenize(text, tok_);
  } else if (creq.endpoint == Endpoint::kInfill) {
    if (auto e = infill_ids(creq, ids)) return e;
    text = tok_.decode(ids);
  } else if (creq.prompt_is_ids) {
    if (Status st = tok_.check_ids(creq.prompt_ids); !st) {
      return ApiError{400, "'prompt': " + st.message()};
    }
    ids = creq.prompt_ids;
    text = tok_.decode(ids);
  } else {
    ids = tok_.encode(creq.prompt_text, true, true);
    text = creq.prompt_text;
  }
  return std::nullopt;
}

// llama-server's infill prompt: [extra context] PRE prefix SUF suffix MID prompt (SUF first with
// --spm-infill); with repo and file-separator tokens, the extra chunks as files of a repository.
std::optional<ApiError> ModelDispatcher::infill_ids(const CompletionRequest& creq,
                                                    std::vector<int32_t>& ids) {
  if (tok_.fim_pre() < 0 || tok_.fim_suf() < 0 || tok_.fim_mid() < 0) {
    return ApiError{501,
                    "this model has no fill-in-the-middle tokens (tokenizer.ggml.fim_pre/"
                    "suf/mid_token_id), so /infill cannot serve it"};
  }
  auto append = [&](const std::string& text) {
    for (int32_t id : tok_.encode(text, false, false)) ids.push_back(id);
  };
  if (tok_.add_bos() && tok_.bos() >= 0) ids.push_back(tok_.bos());
  const bool repo = tok_.fim_rep() >= 0 && tok_.fim_sep() >= 0;
  if (repo) {
    ids.push_back(tok_.fim_rep());
    append("myproject\n");
    for (const InfillChunk& c : creq.input_extra) {
      ids.push_back(tok_.fim_sep());
      append(c.filename + "\n" + c.text);
    }
    ids.push_back(tok_.fim_sep());
    append("filename\n");
  } else {
    for (const InfillChunk& c : creq.input_extra) append(c.filename + "\n" + c.text);
  }
  auto part = [&](int32_t marker, const std::string& text) {
    ids.push_back(marker);
    append(text);
  };
  if (serving_.spm_infill) {
    part(tok_.fim_suf(), creq.input_suffix);
    part(tok_.fim_pre(), creq.input_prefix);
  } else {
    part(tok_.fim_pre(), creq.input_prefix);
    part(tok_.fim_suf(), creq.input_suffix);
  }
  part(tok_.fim_mid(), creq.prompt_text);
  return std::nullopt;
}

std::optional<ApiError> ModelDispatcher::prepare(const Json& body, Endpoint endpoint,
                                                 Prepared& out) {
  CompletionRequest& creq = out.creq;
  if (auto e = parse_completion(body, endpoint, serving_.defaults, fresh_seed(), &tok_, creq)) {
    return e;
  }
  // One model is served: the name a client asks for is not checked (OpenAI SDKs send their
  // own, "gpt-4o"), and is echoed back as llama-server does.
  if (creq.params.n > max_n_) {
    return ApiError{400, "'n' = " + std::to_string(creq.params.n) + " is more than the " +
                             std::to_string(max_n_) + " slots of a pipeline group (raise -np)"};
  }
  if (serving_.backend_status) {
    if (Status s = serving_.backend_status(); !s.is_ok()) {
      return ApiError{503, s.message(),
                      serving_.backend_retry_after ? serving_.backend_retry_after() : 0};
    }
  }
  if (serving_.before_work) {
    if (Status s = serving_.before_work(); !s.is_ok()) return ApiError{503, s.message()};
  }
  std::vector<int32_t> ids;
  std::string text;
  if (auto e = prompt_ids(creq, ids, text)) return e;
  if (ids.empty()) return ApiError{400, "the prompt is empty (and the model adds no BOS token)"};
  if (static_cast<int64_t>(ids.size()) > n_ctx_slot_) {
    return ApiError{400, "the prompt has " + std::to_string(ids.size()) +
                             " tokens; the context of a slot holds " + std::to_string(n_ctx_slot_) +
                             " (-c divided by -np)"};
  }
  Task& task = out.task;
  task.id = next_id_.fetch_add(1, std::memory_order_relaxed);
  task.prompt = std::move(ids);
  task.params = creq.params;
  if (endpoint == Endpoint::kChat) {
    for (std::string& s : chat_->stop_strings()) task.params.stop.push_back(std::move(s));
    // A template that opens <think> for the model (DeepSeek R1, Qwen3 with thinking on): the
    // reply starts as reasoning without an opening tag.
    std::string_view tail = text;
    while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.remove_suffix(1);
    creq.reply.thinking_forced_open = tail.size() >= 7 && tail.substr(tail.size() - 7) == "<think>";
    creq.reply.parallel_tool_calls = creq.chat.parallel_tool_calls;
    // Calls are parsed when the model was shown tools (tool_choice none shows none); the
    // format's other structure (gpt-oss's channels) always.
    creq.reply.tools = tool_format_;
    creq.reply.parse_tool_calls = !creq.chat.tools.empty() && creq.chat.parse_tool_calls;
    // A prefilled reply is taken as it comes (llama-server parses no reasoning there either).
    if (serving_.skip_chat_parsing || prefills(creq.chat)) creq.reply = ReplyParseOptions{};
    tool_grammar(creq, task.params);
  }
  task.channel = std::make_shared<ResultChannel>();
  ResponseMeta& meta = out.meta;
  meta.id = (endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + std::to_string(task.id);
  meta.created = static_cast<int64_t>(std::time(nullptr));
  meta.model = creq.model && !creq.model->empty() ? *creq.model : serving_.model_name;
  meta.n_prompt = static_cast<int32_t>(task.prompt.size());
  meta.n_ctx = n_ctx_slot_;
  if (native_shape(endpoint)) meta.prompt_text = std::move(text);
  return std::nullopt;
}

void ModelDispatcher::tool_grammar(const CompletionRequest& creq, GenParams& params) const {
  const ChatRequest& chat = creq.chat;
  const bool forced =
      chat.tool_choice == ToolChoice::kRequired || chat.tool_choice == ToolChoice::kNamed;
  // The request's own grammar (or json_schema, response_format) is what it asked for; a
  // server-wide default (--grammar) gives way to the tools only where a call is demanded.
  const bool own_grammar =
      params.grammar != nullptr && (params.grammar != serving_.defaults.params.grammar || !forced);
  if (chat.tools.empty() || !creq.reply.parse_tool_calls || own_grammar) return;
  ToolGrammarOptions o;
  o.format = creq.reply.tools;
  o.parallel = chat.parallel_tool_calls;
  o.thinking_forced_open = creq.reply.thinking_forced_open;
  o.may_think = template_thinks_;
  o.lazy = !forced;  // auto: free text until a call opens
  std::optional<std::string> text = tool_call_grammar(chat.tools, o);
  if (!text) return;  // a format without a grammar here: unconstrained, as before
  auto g = Grammar::parse(*text);
  // Tools too large for a grammar's limits stay unconstrained, as before, rather than fail a
  // request that works without one.
  if (!g.is_ok()) return;
  params.grammar = std::move(g).value();
  if (o.lazy) {
    params.grammar_trigger = std::make_shared<const GrammarTrigger>(*tool_call_trigger(o));
  }
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

std::optional<ApiError> ModelDispatcher::collect(Prepared& p, const Request* req,
                                                 std::vector<ChoiceResult>& choices) {
  const int32_t n = p.creq.params.n;
  choices.assign(n, ChoiceResult{});
  // The connection's socket, looked up once the request has run for a poll interval; then
  // checked every interval, whether events arrive or not.
  int fd = -2;
  Clock::time_point next_check = Clock::now() + kDispatchPoll;
  for (int32_t done = 0; done < n;) {
    std::optional<Event> e = p.task.channel->pop(kDispatchPoll);
    if (req != nullptr && Clock::now() >= next_check) {
      next_check = Clock::now() + kDispatchPoll;
      if (fd == -2) {
        fd =
            connection_socket(req->local_addr, req->local_port, req->remote_addr, req->remote_port);
      }
      if (fd >= 0 && peer_closed(fd)) {
        // Nobody will read the answer: free the slots now rather than at the last token.
        p.task.channel->cancel();
        return ApiError{499, "the client closed the connection"};
      }
    }
    if (!e) continue;
    if (e->kind == Event::Kind::kError) return ApiError{e->http_status, e->error};
    ChoiceResult& c = choices.at(e->index);
    c.text += e->text;
    c.tokens.insert(c.tokens.end(), e->tokens.begin(), e->tokens.end());
    c.ids.insert(c.ids.end(), e->ids.begin(), e->ids.end());
    if (e->kind == Event::Kind::kDone) {
      c.finish_reason = e->finish_reason;
      c.stop_type = e->stop_type;
      c.stopping_word = e->stopping_word;
      c.truncated = e->truncated;
      c.n_generated = e->n_generated;
      c.prompt_ms = e->prompt_ms;
      c.predicted_ms = e->predicted_ms;
      p.meta.n_cached = e->n_cached;
      ++done;
    }
  }
  return std::nullopt;
}

void ModelDispatcher::generate(const Request& req, Response& res, Endpoint endpoint) {
  const Json body = Json::parse(req.body, nullptr, false);
  if (body.is_discarded()) {
    return send_error(res, ApiError{400, "the request body is not valid JSON"});
  }
  Prepared p;
  if (auto e = prepare(body, endpoint, p)) return send_error(res, *e);
  metrics_.requests.fetch_add(1, std::memory_order_relaxed);
  PipelineGroup& group = pick_group(p.task.prompt);
  Task task_copy_for_post = p.task;
  group.post(std::move(task_copy_for_post));
  if (p.creq.stream) return stream(std::move(p), res);
  std::vector<ChoiceResult> choices;
  if (auto e = collect(p, &req, choices)) return send_error(res, *e);
  send_json(res, response_json(p.creq, p.meta, choices, tok_));
}

// Vertex AI's prediction route: {"instances": [...], "parameters": {...}} -> {"predictions":
// [...]}; an instance with "messages" is a chat request, else a completion, each answered as its
// OpenAI endpoint would.
void ModelDispatcher::aip_predict(const Request& req, Response& res) {
  const Json body = Json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return send_error(res, ApiError{400, "the request body is not a valid JSON object"});
  }
  auto instances = body.find("instances");
  if (instances == body.end() || !instances->is_array() || instances->empty()) {
    return send_error(res, ApiError{400, "'instances' must be a non-empty array"});
  }
  if (instances->size() > kMaxAipInstances) {
    return send_error(
        res, ApiError{400, "'instances' has " + std::to_string(instances->size()) +
                               " entries; the limit is " + std::to_string(kMaxAipInstances)});
  }
  Json parameters = Json::object();
  if (auto it = body.find("parameters"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return send_error(res, ApiError{400, "'parameters' must be an object"});
    parameters = *it;
  }
  std::vector<Prepared> all(instances->size());
  for (size_t i = 0; i < instances->size(); ++i) {
    const Json& inst = (*instances)[i];
    if (!inst.is_object()) {
      return send_error(res,
                        ApiError{400, "'instances[" + std::to_string(i) + "]' must be an object"});
    }
    Json merged = parameters;
    for (auto it = inst.begin(); it != inst.end(); ++it) merged[it.key()] = it.value();
    merged["stream"] = false;
    const Endpoint e = merged.contains("messages") ? Endpoint::kChat : Endpoint::kCompletions;
    if (auto err = prepare(merged, e, all[i])) {
      err->message = "'instances[" + std::to_string(i) + "]': " + err->message;
      return send_error(res, *err);
    }
  }
  for (Prepared& p : all) {
    metrics_.requests.fetch_add(1, std::memory_order_relaxed);
    Task t = p.task;
    pick_group(p.task.prompt).post(std::move(t));
  }
  Json predictions = Json::array();
  for (Prepared& p : all) {
    std::vector<ChoiceResult> choices;
    if (auto e = collect(p, &req, choices)) {
      for (Prepared& q : all) q.task.channel->cancel();
      return send_error(res, *e);
    }
    predictions.push_back(response_json(p.creq, p.meta, choices, tok_));
  }
  send_json(res, {{"predictions", predictions}});
}

void ModelDispatcher::stream(Prepared p, Response& res, std::shared_ptr<StreamWriter> writer) {
  auto state = std::make_shared<StreamState>();
  state->req = std::move(p.creq);
  state->meta = p.meta;
  state->channel = p.task.channel;
  state->writer = writer ? std::move(writer) : std::make_shared<OpenAiWriter>();
  state->first.assign(state->req.params.n, true);
  if (state->req.endpoint == Endpoint::kChat) {
    state->texts.resize(state->req.params.n);
    for (int32_t i = 0; i < state->req.params.n; ++i) {
      state->replies.emplace_back(state->req.reply, state->meta.id + "-" + std::to_string(i) + "-");
    }
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, state](size_t, httplib::DataSink& sink) {
        StreamState& st = *state;
        std::optional<Event> e = st.channel->pop(kDispatchPoll);
        if (!e) return true;
        const bool native = native_shape(st.req.endpoint);
        bool ok = true;
        if (e->kind == Event::Kind::kError) {
          ok = write_event(sink, error_body(ApiError{e->http_status, e->error}));
          st.finished = true;
          sink.done();
          return ok;
        }
        const bool chat = st.req.endpoint == Endpoint::kChat;
        if ((!e->text.empty() || !e->tokens.empty()) && chat) {
          // The reply so far, re-parsed: content, reasoning and whole tool calls as deltas.
          st.texts.at(e->index) += e->text;
          const ReplyDelta d = st.replies.at(e->index).update(st.texts[e->index], false);
          if (!d.empty() || !e->tokens.empty() || st.first.at(e->index)) {
            ok = st.writer->chunk(sink, chat_delta_chunk(st.req, st.meta, e->index, d, e->tokens,
                                                         "", st.first[e->index], tok_));
            st.first[e->index] = false;
          }
        } else if (!e->text.empty() || !e->tokens.empty()) {
          const Json c = chunk_json(st.req, st.meta, e->index, e->text, e->tokens, e->ids, "",
                                    st.first.at(e->index), tok_);
          ok = native ? write_event(sink, dump(c)) : st.writer->chunk(sink, c);
          st.first[e->index] = false;
        }
        if (ok && e->kind == Event::Kind::kDone) {
          st.meta.n_cached = e->n_cached;
          st.n_generated += e->n_generated;
          st.prompt_ms = std::max(st.prompt_ms, e->prompt_ms);
          st.predicted_ms = std::max(st.predicted_ms, e->predicted_ms);
          ++st.n_done;
          const Json timings = timings_json(st.meta.n_prompt - st.meta.n_cached, e->prompt_ms,
                                            e->n_generated, e->predicted_ms);
          if (native) {
            ok = write_event(sink,
                             dump(Json{{"content", ""},
                                       {"tokens", Json::array()},
                                       {"stop", true},
                                       {"id_slot", -1},
                                       {"model", st.meta.model},
                                       {"finish_reason", e->finish_reason},
                                       {"stop_type", e->stop_type},
                                       {"stopping_word", e->stopping_word},
                                       {"stopped_eos", e->stop_type == "eos"},
                                       {"stopped_word", e->stop_type == "word"},
                                       {"stopped_limit", e->stop_type == "limit"},
                                       {"tokens_predicted", e->n_generated},
                                       {"tokens_evaluated", st.meta.n_prompt},
                                       {"tokens_cached", st.meta.n_cached},
                                       {"truncated", e->truncated},
                                       {"generation_settings",
                                        generation_settings_json(st.req.params, true, st.meta.n_ctx,
                                                                 st.meta.model)},
                                       {"timings", timings}}));
          } else {
            Json chunk;
            if (chat) {
              ReplyStream& reply = st.replies.at(e->index);
              const ReplyDelta d = reply.update(st.texts.at(e->index), true);
              const std::string finish =
                  !reply.sent().tool_calls.empty() && e->finish_reason == "stop" ? "tool_calls"
                                                                                 : e->finish_reason;
              chunk = chat_delta_chunk(st.req, st.meta, e->index, d, {}, finish,
                                       st.first.at(e->index), tok_);
            } else {
              chunk = chunk_json(st.req, st.meta, e->index, "", {}, {}, e->finish_reason,
                                 st.first.at(e->index), tok_);
            }
            chunk["timings"] = timings;
            ok = st.writer->chunk(sink, chunk);
          }
          st.first[e->index] = false;
          if (ok && st.n_done == static_cast<int32_t>(st.first.size())) {
            if (!native && st.req.include_usage) {
              ok = st.writer->chunk(
                  sink, Json{{"id", st.meta.id},
                             {"object", st.req.endpoint == Endpoint::kChat ? "chat.completion.chunk"
                                                                           : "text_completion"},
                             {"created", st.meta.created},
                             {"model", st.meta.model},
                             {"system_fingerprint", kSystemFingerprint},
                             {"choices", Json::array()},
                             {"usage", usage_json(st.meta, st.n_generated)}});
            }
            if (ok && !native) ok = st.writer->end(sink);
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

}  // namespace strata::server
