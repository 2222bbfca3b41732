// The HTTP front of the server: routes, API-key check, request validation, dispatch of tasks
// to pipeline groups, and the collection (or SSE streaming) of their results.
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
#include "server/group.h"
#include "server/metrics.h"

namespace httplib {
class Request;
class Response;
}  // namespace httplib

namespace strata::server {

// A request body is a prompt: 8 MiB is far more text than any context we serve holds, and
// bounds what one connection can make us buffer.
inline constexpr size_t kMaxBodyBytes = 8u << 20;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (see HttpServer::port)
  std::string api_key;
  std::string model_name;  // --alias, or the model file's name
  std::string model_path;
  int n_threads_http = 8;
  size_t max_body_bytes = kMaxBodyBytes;
  // Whether the devices the model runs on can still serve (e.g. RemoteWorkers::status); when it
  // fails, generation requests get 503 with its message at once and /health answers 503.
  std::function<Status()> backend_status;
};

class HttpServer {
 public:
  // The groups must be started; they and the model outlive the server.
  HttpServer(ServerOptions options, const Model& model,
             std::vector<std::unique_ptr<PipelineGroup>>& groups,
             std::unique_ptr<ChatFormatter> chat, Metrics& metrics);
  ~HttpServer();

  Status bind();
  int port() const { return port_; }
  // Serves until stop(); returns false when listening failed.
  bool listen();
  void stop();

 private:
  void routes();
  void generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  std::optional<ApiError> make_task(const CompletionRequest& creq, Task& task);
  PipelineGroup& dispatch(const std::vector<int32_t>& prompt);
  void tokenize(const httplib::Request& req, httplib::Response& res);
  void detokenize(const httplib::Request& req, httplib::Response& res);
  void props(httplib::Response& res);
  void slots(httplib::Response& res);
  void metrics(httplib::Response& res);
  void models(httplib::Response& res);
  bool model_known(const std::string& name) const;

  ServerOptions options_;
  const Model& model_;
  const Tokenizer& tok_;
  std::vector<std::unique_ptr<PipelineGroup>>& groups_;
  std::unique_ptr<ChatFormatter> chat_;
  Metrics& metrics_;
  int32_t max_n_ = 1;  // the smallest group's slots: one task runs within one group
  int32_t n_ctx_slot_ = 0;
  class Listener;
  std::unique_ptr<Listener> http_;
  int port_ = 0;
  std::atomic<uint64_t> next_id_{1};
  const int64_t created_;
};

}  // namespace strata::server
