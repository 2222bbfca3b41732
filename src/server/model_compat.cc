// Anthropic's Messages API and OpenAI's Responses API over the chat completions path
// (compat_anthropic.h, compat_responses.h), and the token-counting endpoints beside them.
#include <httplib.h>

#include <memory>
#include <string>

#include "server/compat_anthropic.h"
#include "server/compat_responses.h"
#include "server/model_dispatcher.h"
#include "server/reply.h"

namespace strata::server {
namespace {

using httplib::Request;
using httplib::Response;

// A stream of chat chunks written as the typed events a converter makes of them.
template <typename Converter>
class EventWriter : public StreamWriter {
 public:
  explicit EventWriter(Converter c) : c_(std::move(c)) {}
  bool chunk(httplib::DataSink& sink, const Json& chunk) override {
    return write(sink, c_.on_chunk(chunk));
  }
  bool end(httplib::DataSink& sink) override { return write(sink, c_.finish()); }

 private:
  static bool write(httplib::DataSink& sink, const std::vector<SseEvent>& events) {
    for (const SseEvent& e : events) {
      const std::string s = "event: " + e.event + "\ndata: " + dump(e.data) + "\n\n";
      if (!sink.write(s.data(), s.size())) return false;
    }
    return true;
  }
  Converter c_;
};

// Anthropic's error shape, with the status of the OpenAI one.
void send_anthropic_error(Response& res, const ApiError& e) {
  const char* type = e.status == 401   ? "authentication_error"
                     : e.status == 404 ? "not_found_error"
                     : e.status >= 500 ? "api_error"
                                       : "invalid_request_error";
  res.status = e.status;
  if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
  res.set_content(
      dump(Json{{"type", "error"}, {"error", {{"type", type}, {"message", e.message}}}}),
      "application/json");
}

Json parse_body(const Request& req, std::optional<ApiError>& error) {
  Json body = Json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    error = ApiError{400, "the request body is not a valid JSON object"};
  }
  return body;
}

}  // namespace

void ModelDispatcher::messages(const Request& req, Response& res) {
  std::optional<ApiError> error;
  const Json body = parse_body(req, error);
  if (error) return send_anthropic_error(res, *error);
  Json chat;
  if (std::optional<std::string> e = anthropic_to_chat(body, true, chat)) {
    return send_anthropic_error(res, ApiError{400, *e});
  }
  const bool streamed = chat.value("stream", false);
  if (streamed) chat["stream_options"] = {{"include_usage", true}};
  Prepared p;
  if (auto e = prepare(chat, Endpoint::kChat, p)) return send_anthropic_error(res, *e);
  metrics_.requests.fetch_add(1, std::memory_order_relaxed);
  Task task = p.task;
  pick_group(p.task.prompt).post(std::move(task));
  const std::string id = "msg_" + p.meta.id;
  if (streamed) {
    auto writer = std::make_shared<EventWriter<AnthropicStream>>(
        AnthropicStream(id, p.meta.model, p.meta.n_prompt));
    return stream(std::move(p), res, std::move(writer));
  }
  std::vector<ChoiceResult> choices;
  if (auto e = collect(p, &req, choices)) return send_anthropic_error(res, *e);
  Json message = chat_to_anthropic(response_json(p.creq, p.meta, choices, tok_));
  message["id"] = id;
  send_json(res, message);
}

void ModelDispatcher::responses(const Request& req, Response& res) {
  std::optional<ApiError> error;
  const Json body = parse_body(req, error);
  if (error) return send_error(res, *error);
  Json chat;
  if (std::optional<std::string> e = responses_to_chat(body, chat)) {
    return send_error(res, ApiError{400, *e});
  }
  Prepared p;
  if (auto e = prepare(chat, Endpoint::kChat, p)) return send_error(res, *e);
  metrics_.requests.fetch_add(1, std::memory_order_relaxed);
  Task task = p.task;
  pick_group(p.task.prompt).post(std::move(task));
  if (p.creq.stream) {
    auto writer = std::make_shared<EventWriter<ResponsesStream>>(
        ResponsesStream(p.meta.id, p.meta.model, p.meta.created));
    return stream(std::move(p), res, std::move(writer));
  }
  std::vector<ChoiceResult> choices;
  if (auto e = collect(p, &req, choices)) return send_error(res, *e);
  send_json(res, chat_to_response(response_json(p.creq, p.meta, choices, tok_), p.meta.id,
                                  p.meta.created));
}

// kind 0: /v1/messages/count_tokens; 1: /v1/responses/input_tokens;
// 2: /v1/chat/completions/input_tokens. The prompt is rendered and tokenized as the request would
// be, nothing is generated.
void ModelDispatcher::count_tokens(const Request& req, Response& res, int kind) {
  std::optional<ApiError> error;
  const Json body = parse_body(req, error);
  auto fail = [&](const ApiError& e) {
    return kind == 0 ? send_anthropic_error(res, e) : send_error(res, e);
  };
  if (error) return fail(*error);
  Json chat = body;
  std::optional<std::string> e = kind == 0   ? anthropic_to_chat(body, false, chat)
                                 : kind == 1 ? responses_to_chat(body, chat)
                                             : std::nullopt;
  if (e) return fail(ApiError{400, *e});
  chat["stream"] = false;
  chat.erase("max_tokens");
  Prepared p;
  if (auto err = prepare(chat, Endpoint::kChat, p)) return fail(*err);
  if (kind == 0) return send_json(res, {{"input_tokens", p.meta.n_prompt}});
  send_json(res, {{"object", "response.input_tokens"}, {"input_tokens", p.meta.n_prompt}});
}

}  // namespace strata::server
