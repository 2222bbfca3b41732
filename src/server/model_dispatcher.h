// The dispatcher of a server that serves one model: completions and chat (collected or streamed
// as SSE), tokenizer endpoints, properties, slots and metrics.
//
// Handlers run on cpp-httplib's thread pool and never touch a Context: a request becomes a
// Task posted to one group (least loaded, then longest cached prefix), and its results come
// back on the task's ResultChannel.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model.h"
#include "server/api.h"
#include "server/chat_format.h"
#include "server/dispatcher.h"
#include "server/group.h"
#include "server/log.h"
#include "server/metrics.h"
#include "server/reply_parse.h"
#include "server/slot_store.h"

namespace httplib {
class DataSink;
}  // namespace httplib

namespace strata::server {

struct ModelServing {
  std::string model_name;            // the first --alias, or the model file's name
  std::vector<std::string> aliases;  // names the model also answers to
  std::vector<std::string> tags;
  std::string model_path;
  RequestDefaults defaults;
  bool endpoint_slots = true;
  bool endpoint_metrics = false;
  bool endpoint_props = false;
  bool spm_infill = false;
  std::string slot_save_path;
  SlotStore* slot_store = nullptr;  // null: slot actions answer 501
  Log* log = nullptr;
  // Vertex AI prediction (AIP_MODE=PREDICTION): routes of their own; "" when off.
  std::string aip_health_route;
  std::string aip_predict_route;
  // --fit was on, and what it chose (empty: the plan fitted as asked); /props reports both.
  bool fit = false;
  std::string fit_note;
  // Whether the devices the model runs on can still serve (e.g. RemoteWorkers::status); when it
  // fails, generation requests get 503 with its message at once and /health answers 503.
  std::function<Status()> backend_status;
  // With backend_status: the seconds of the Retry-After header of such a 503 (0: none), and the
  // state of each worker for /health and /props ("workers"). Null: none.
  std::function<int()> backend_retry_after;
  std::function<Json()> backend_workers;
  // Called before a request that needs the model (generation, slot actions): wakes it from
  // --sleep-idle-seconds; its error is a 503. Null: nothing to do.
  std::function<Status()> before_work;
  // Whether the model sleeps now (GET /props "is_sleeping"); null: never.
  std::function<bool()> is_sleeping;
  bool prefill_assistant = true;   // --prefill-assistant
  bool skip_chat_parsing = false;  // --skip-chat-parsing
};

// How a stream of chat or completion chunks goes on the wire: OpenAI's data lines, or the
// typed events of Anthropic's Messages and OpenAI's Responses APIs made from the same chunks.
class StreamWriter {
 public:
  virtual ~StreamWriter() = default;
  virtual bool chunk(httplib::DataSink& sink, const Json& chunk) = 0;
  virtual bool end(httplib::DataSink& sink) = 0;
};

class ModelDispatcher : public Dispatcher {
 public:
  // The groups must be started; they and the model outlive the dispatcher.
  ModelDispatcher(ModelServing serving, const Model& model,
                  std::vector<std::unique_ptr<PipelineGroup>>& groups,
                  std::unique_ptr<ChatFormatter> chat, Metrics& metrics);

  std::vector<Route> routes() override;
  void stop() override;

 private:
  // A request made ready to post: its task and what the response needs.
  struct Prepared {
    CompletionRequest creq;
    Task task;
    ResponseMeta meta;
  };
  // Parses `body` for `endpoint` and builds its task; the ApiError is the answer otherwise.
  std::optional<ApiError> prepare(const Json& body, Endpoint endpoint, Prepared& out);
  std::optional<ApiError> prompt_ids(const CompletionRequest& creq, std::vector<int32_t>& ids,
                                     std::string& text);
  std::optional<ApiError> infill_ids(const CompletionRequest& creq, std::vector<int32_t>& ids);
  // Waits for every choice of a posted task; polls the connection (when `req` is given) and
  // cancels the task once its client is gone.
  std::optional<ApiError> collect(Prepared& p, const httplib::Request* req,
                                  std::vector<ChoiceResult>& choices);
  PipelineGroup& pick_group(const std::vector<int32_t>& prompt);

  // Endpoints (model_dispatcher.cc: generation; model_endpoints.cc: the rest).
  // The prompt text of a chat request: its messages, tools and template options through the
  // chat template.
  std::optional<ApiError> render_chat(const CompletionRequest& creq, std::string& text) const;
  // Whether a chat ends with an assistant message to continue (--prefill-assistant).
  bool prefills(const ChatRequest& chat) const;
  void generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  void stream(Prepared p, httplib::Response& res, std::shared_ptr<StreamWriter> writer = nullptr);
  // Anthropic Messages and OpenAI Responses over the chat path, and token counts
  // (model_compat.cc).
  void messages(const httplib::Request& req, httplib::Response& res);
  void responses(const httplib::Request& req, httplib::Response& res);
  void count_tokens(const httplib::Request& req, httplib::Response& res, int kind);
  void aip_predict(const httplib::Request& req, httplib::Response& res);
  // No LoRA adapters are loaded: GET lists none, POST accepts only an empty list.
  void lora_adapters(const httplib::Request& req, httplib::Response& res);
  void health(httplib::Response& res);
  void tokenize(const httplib::Request& req, httplib::Response& res);
  void detokenize(const httplib::Request& req, httplib::Response& res);
  void apply_template(const httplib::Request& req, httplib::Response& res);
  // A chat request with tools: the grammar of calls of its tools (server/tool_grammar.h) into
  // params, from the first token for tool_choice "required" or a named function, lazy (from a
  // call's opening) for "auto"; not where the request brought a grammar of its own.
  void tool_grammar(const CompletionRequest& creq, GenParams& params) const;
  void props(httplib::Response& res);
  void props_post(const httplib::Request& req, httplib::Response& res);
  void slots(const httplib::Request& req, httplib::Response& res);
  void slot_action(const httplib::Request& req, httplib::Response& res);
  void metrics(httplib::Response& res);
  void models(httplib::Response& res);

  ModelServing serving_;
  const Model& model_;
  const Tokenizer& tok_;
  std::vector<std::unique_ptr<PipelineGroup>>& groups_;
  std::unique_ptr<ChatFormatter> chat_;
  // How the template's model writes tool calls (from its source; kNone for a named family).
  ToolCallFormat tool_format_ = ToolCallFormat::kNone;
  // The template knows <think>: a forced tool call may come after a reasoning block.
  bool template_thinks_ = false;
  Metrics& metrics_;
  int32_t max_n_ = 1;  // the smallest group's slots: one task runs within one group
  int32_t n_ctx_slot_ = 0;
  std::atomic<uint64_t> next_id_{1};
  const int64_t created_;
};

}  // namespace strata::server
