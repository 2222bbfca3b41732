// The server, assembled: the model on its devices, the pipeline groups and their slots, the
// chat template, the dispatcher and the HTTP layer. `strata serve` parses its flags into
// ServerOptions and calls Server::create; tests can build a server the same way.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "server/http.h"
#include "server/model_load.h"

namespace strata::server {

struct ServerOptions {
  LoadOptions load;
  int32_t n_slots = 1;        // -np: requests decoded together
  int32_t n_groups = 1;       // --pipeline-groups: contexts decoded concurrently
  HttpOptions http;           // n_threads 0: max(8, 2 x slots + 2)
  std::string alias;          // the model name the API reports; "": the model file's name
  std::string chat_template;  // a named chat format; "": the model's own template
};

class Server {
 public:
  // Loads the model and starts the decode threads; the server listens after bind() + listen().
  static Result<std::unique_ptr<Server>> create(const ServerOptions& options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  Status bind();
  int port() const;
  // Serves until stop(), then stops the decode threads; false when listening failed.
  bool listen();
  // Thread-safe: may be called from any thread (a signal waiter) while listen() runs.
  void stop();
  // "4 slots, 2 pipeline groups, 1024 cells per slot"
  std::string summary() const;

 private:
  struct Parts;
  explicit Server(std::unique_ptr<Parts> parts);
  std::unique_ptr<Parts> parts_;
};

}  // namespace strata::server
