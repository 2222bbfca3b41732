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
  Log* log = nullptr;
  // Whether the devices the model runs on can still serve (e.g. RemoteWorkers::status); when it
  // fails, generation requests get 503 with its message at once and /health answers 503.
  std::function<Status()> backend_status;
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
  void generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  std::optional<ApiError> make_task(const CompletionRequest& creq, Task& task);
  PipelineGroup& pick_group(const std::vector<int32_t>& prompt);
  void health(httplib::Response& res);
  void tokenize(const httplib::Request& req, httplib::Response& res);
  void detokenize(const httplib::Request& req, httplib::Response& res);
  void props(httplib::Response& res);
  void slots(httplib::Response& res);
  void metrics(httplib::Response& res);
  void models(httplib::Response& res);
  bool model_known(const std::string& name) const;

  ModelServing serving_;
  const Model& model_;
  const Tokenizer& tok_;
  std::vector<std::unique_ptr<PipelineGroup>>& groups_;
  std::unique_ptr<ChatFormatter> chat_;
  Metrics& metrics_;
  int32_t max_n_ = 1;  // the smallest group's slots: one task runs within one group
  int32_t n_ctx_slot_ = 0;
  std::atomic<uint64_t> next_id_{1};
  const int64_t created_;
};

}  // namespace strata::server
