// The router: a Dispatcher over several models, each served by its own child `strata serve`
// on 127.0.0.1 (llama-server's router mode).
//
// Requests name their model in the JSON body's "model" (POST) or in ?model= (GET); the name is
// looked up among the known models only, never used as a path. A model is started on its first
// request (unless autoload is off), and when --models-max children are alive the least recently
// used one with no request in flight is stopped first. A child that dies is reported (its state
// in /models, a log line) and started again on the next request for its model.
//
// Keys: the router checks the clients' API keys (the HTTP layer does, as for one model). Each
// child gets a private random key instead, through its environment (a command line is readable
// by every user of the machine), and the router presents it: a child listens on loopback, where
// any local user could connect, and only the router can drive it. The clients' keys stay in one
// process, and changing them needs no child restarted.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mutex_guarded.h"
#include "server/dispatcher.h"
#include "server/log.h"
#include "server/router_catalog.h"
#include "server/router_child.h"
#include "server/router_options.h"

namespace strata::server {

class RouterDispatcher : public Dispatcher {
 public:
  // `models` come from models_catalog; `inherited` from router_child_args; `env` is the
  // environment children start from (reserved variables are removed here).
  RouterDispatcher(RouterOptions options, std::vector<ModelSource> models,
                   std::vector<std::string> inherited, std::vector<std::string> env,
                   std::string api_prefix, int timeout_s, Log* log);
  ~RouterDispatcher() override;

  std::vector<Route> routes() override;
  // Stops every child (SIGTERM, then SIGKILL after the model's stop-timeout).
  void stop() override;

  // Starts the models whose preset says load-on-startup.
  Status load_startup_models();
  // Loads `name` as a request would (autoload on); an error says why it could not.
  Status load_model(const std::string& name);
  size_t n_models() const { return sources_.size(); }

 private:
  enum class Phase { kUnloaded, kLoading, kLoaded, kUnloading };
  struct Model {
    Phase phase = Phase::kUnloaded;
    std::shared_ptr<ChildServer> child;
    std::string key;          // the child's private API key
    uint64_t generation = 0;  // which child an exit report is about
    int in_flight = 0;
    uint64_t last_used = 0;  // a tick of use_clock, for least-recently-used
    bool failed = false;     // the last child failed to start or died
    int exit_code = 0;
    std::string error;
    std::vector<std::string> args;  // the last child's command line, as /models shows it
    std::string info;  // the child's own /v1/models entry (JSON), merged into the listing
  };
  struct State {
    std::map<std::string, Model> models;
    uint64_t use_clock = 0;
    bool stopping = false;
  };
  struct ApiFailure {
    int status;
    std::string message;
  };

  const ModelSource* source(const std::string& name) const;
  // The model ready to take a request, loading it (and unloading another past --models-max)
  // if it must: a token that counts the request in flight until released.
  std::shared_ptr<void> acquire(const std::string& name, bool autoload, bool touch,
                                ApiFailure* failure, int* port, std::string* key);
  void release(const std::string& name);
  // Starts the child of `name`, whose state the caller set to kLoading.
  Status start_child(const std::string& name, uint64_t generation);
  // Stops the child of `name` (state kUnloading, set by the caller) and marks it unloaded.
  void stop_child(const std::string& name);
  void on_child_exit(const std::string& name, uint64_t generation, int code,
                     const std::string& how);

  void forward(const httplib::Request& req, httplib::Response& res, const std::string& name,
               bool touch);
  void proxy_post(const httplib::Request& req, httplib::Response& res);
  void proxy_get(const httplib::Request& req, httplib::Response& res);
  void list_models(httplib::Response& res);
  void props(const httplib::Request& req, httplib::Response& res);
  void load(const httplib::Request& req, httplib::Response& res);
  void unload(const httplib::Request& req, httplib::Response& res);

  RouterOptions options_;
  std::vector<ModelSource> sources_;
  std::vector<std::string> inherited_;
  std::vector<std::string> env_;
  std::string api_prefix_;
  int timeout_s_;
  Log* log_;
  int64_t created_;
  Spawner spawner_;
  MutexGuarded<State> state_;
};

}  // namespace strata::server
