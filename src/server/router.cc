#include "server/router.h"

#include <httplib.h>

#include <algorithm>
#include <ctime>
#include <random>

#include "server/api.h"
#include "server/reply.h"
#include "server/router_proxy.h"

namespace strata::server {
namespace {

using httplib::Request;
using httplib::Response;

// 32 random bytes as hex: a child's private key, never shown or logged.
std::string private_key() {
  std::random_device rd;
  static const char* hex = "0123456789abcdef";
  std::string key;
  for (int i = 0; i < 32; ++i) {
    const unsigned v = rd() & 0xffu;
    key += hex[v >> 4];
    key += hex[v & 15u];
  }
  return key;
}

const char* phase_name(int phase) {
  static const char* names[] = {"unloaded", "loading", "loaded", "unloading"};
  return names[phase];
}

// A name from a request, as an error message shows it: bounded, whatever the client sent.
std::string shown_name(const std::string& name) {
  constexpr size_t kMaxShown = 128;
  return name.size() <= kMaxShown ? name : name.substr(0, kMaxShown) + "...";
}

// The "model" of a JSON body. A body that is no JSON object (POST /lora-adapters takes a list)
// may name its model in ?model= instead.
std::string body_model(const Request& req, ApiError* error) {
  const Json body = Json::parse(req.body, nullptr, false);
  if (!body.is_discarded() && !body.is_object() && req.has_param("model")) {
    return req.get_param_value("model");
  }
  if (body.is_discarded() || !body.is_object()) {
    *error = ApiError{400, "the request body must be a JSON object"};
    return "";
  }
  auto it = body.find("model");
  if (it == body.end() || it->is_null()) return "";
  if (!it->is_string()) {
    *error = ApiError{400, "'model' must be a string, not " + shown_name(it->dump())};
    return "";
  }
  return it->get<std::string>();
}

}  // namespace

RouterDispatcher::RouterDispatcher(RouterOptions options, std::vector<ModelSource> models,
                                   std::vector<std::string> inherited, std::vector<std::string> env,
                                   std::string api_prefix, int timeout_s, Log* log)
    : options_(std::move(options)),
      sources_(std::move(models)),
      inherited_(std::move(inherited)),
      api_prefix_(std::move(api_prefix)),
      timeout_s_(timeout_s),
      log_(log),
      created_(static_cast<int64_t>(std::time(nullptr))) {
  const std::vector<std::string> reserved = router_reserved_env();
  for (std::string& e : env) {
    const std::string key = e.substr(0, e.find('='));
    if (std::find(reserved.begin(), reserved.end(), key) == reserved.end()) {
      env_.push_back(std::move(e));
    }
  }
  auto s = state_.lock();
  for (const ModelSource& m : sources_) s->models[m.name];
}

RouterDispatcher::~RouterDispatcher() { stop(); }

const ModelSource* RouterDispatcher::source(const std::string& name) const {
  for (const ModelSource& m : sources_) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

void RouterDispatcher::stop() {
  std::vector<std::pair<std::shared_ptr<ChildServer>, int>> children;
  {
    auto s = state_.lock();
    s->stopping = true;
    for (auto& [name, m] : s->models) {
      if (m.child) children.emplace_back(m.child, source(name)->stop_timeout_s);
    }
  }
  state_.notify_all();
  // All at once, then each waited for: shutting down takes the longest grace, not their sum.
  for (auto& [child, grace] : children) child->terminate();
  for (auto& [child, grace] : children) child->stop(std::chrono::seconds(grace));
  std::vector<std::shared_ptr<ChildServer>> gone;
  {
    auto s = state_.lock();
    for (auto& [name, m] : s->models) {
      if (m.child) gone.push_back(std::move(m.child));
      m.child.reset();
      if (m.phase == Phase::kLoaded) m.phase = Phase::kUnloaded;
    }
  }
  state_.notify_all();
  children.clear();
  gone.clear();  // joins the children's readers, outside the lock their exit reports take
}

Status RouterDispatcher::start_child(const std::string& name, uint64_t generation) {
  const ModelSource& src = *source(name);
  ChildSpec spec;
  spec.name = name;
  spec.exe = options_.exe;
  spec.argv = child_command(src, inherited_);
  spec.env = env_;
  spec.start_timeout = std::chrono::seconds(options_.load_timeout_s);
  std::shared_ptr<ChildServer> old;
  {
    auto s = state_.lock();
    Model& m = s->models.at(name);
    spec.env.push_back("LLAMA_API_KEY=" + m.key);
    m.args = spec.argv;
    m.args.insert(m.args.begin(), "strata");
    old = std::move(m.child);  // a child that died: destroyed here, outside the lock
  }
  old.reset();
  if (log_) log_->write(LogLevel::kInfo, "router: starting model '" + name + "'");
  Result<std::unique_ptr<ChildServer>> child = ChildServer::start(
      spawner_, spec, log_, [this, name, generation](int code, const std::string& how) {
        on_child_exit(name, generation, code, how);
      });
  if (!child) return child.status();
  std::shared_ptr<ChildServer> started = std::move(*child);
  // What the child says of its model (vocabulary, training context...), as llama-server's
  // router forwards it into its listing.
  std::string info;
  {
    httplib::Client c("127.0.0.1", started->port());
    c.set_connection_timeout(5, 0);
    c.set_read_timeout(10, 0);
    const std::string key = state_.lock()->models.at(name).key;
    auto res = c.Get("/v1/models", {{"Authorization", "Bearer " + key}});
    if (res && res->status == 200) {
      const Json j = Json::parse(res->body, nullptr, false);
      if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
          j["data"][0].is_object()) {
        info = j["data"][0].dump();
      }
    }
  }
  {
    auto s = state_.lock();
    s->models.at(name).child = started;
    s->models.at(name).info = std::move(info);
  }
  if (log_) {
    log_->write(LogLevel::kInfo, "router: model '" + name + "' is loaded (pid " +
                                     std::to_string(started->pid()) + ", port " +
                                     std::to_string(started->port()) + ")");
  }
  return Status::ok();
}

void RouterDispatcher::stop_child(const std::string& name) {
  std::shared_ptr<ChildServer> child;
  {
    auto s = state_.lock();
    child = s->models.at(name).child;
  }
  if (log_) log_->write(LogLevel::kInfo, "router: unloading model '" + name + "'");
  if (child) child->stop(std::chrono::seconds(source(name)->stop_timeout_s));
  {
    auto s = state_.lock();
    Model& m = s->models.at(name);
    m.phase = Phase::kUnloaded;
    m.failed = false;
    m.error.clear();
    m.exit_code = 0;
    m.child.reset();
  }
  state_.notify_all();
  child.reset();  // the last reference: joins the reader outside the lock
}

void RouterDispatcher::on_child_exit(const std::string& name, uint64_t generation, int code,
                                     const std::string& how) {
  pid_t pid = -1;
  {
    auto s = state_.lock();
    Model& m = s->models.at(name);
    // An exit the router asked for, or of a child that never got going, is no news.
    if (m.generation != generation || m.phase != Phase::kLoaded || s->stopping) return;
    m.phase = Phase::kUnloaded;
    m.failed = true;
    m.exit_code = code;
    m.error = "stopped unexpectedly (" + how + ")";
    if (m.child) pid = m.child->pid();
  }
  state_.notify_all();
  if (log_) {
    log_->write(LogLevel::kError, "router: model '" + name + "' (pid " + std::to_string(pid) +
                                      ") stopped unexpectedly (" + how +
                                      "); it is started again on its next request");
  }
}

void RouterDispatcher::release(const std::string& name) {
  {
    auto s = state_.lock();
    --s->models.at(name).in_flight;
  }
  state_.notify_all();
}

std::shared_ptr<void> RouterDispatcher::acquire(const std::string& name, bool autoload, bool touch,
                                                ApiFailure* failure, int* port, std::string* key) {
  struct InFlight {
    RouterDispatcher* router;
    std::string name;
    ~InFlight() { router->release(name); }
  };
  for (;;) {
    std::string victim;
    uint64_t generation = 0;
    {
      auto s = state_.lock();
      s.wait([&](const State& st) {
        const Phase p = st.models.at(name).phase;
        return st.stopping || (p != Phase::kLoading && p != Phase::kUnloading);
      });
      if (s->stopping) {
        *failure = {503, "the server is stopping"};
        return nullptr;
      }
      Model& m = s->models.at(name);
      if (m.phase == Phase::kLoaded) {
        ++m.in_flight;
        if (touch) m.last_used = ++s->use_clock;
        *port = m.child->port();
        *key = m.key;
        return std::shared_ptr<InFlight>(new InFlight{this, name});  // no temporary to destroy
      }
      if (!autoload) {
        *failure = {400, "model is not loaded"};
        return nullptr;
      }
      int running = 0;
      const Model* lru = nullptr;
      for (auto& [n, other] : s->models) {
        if (other.phase == Phase::kUnloaded) continue;
        ++running;
        // Only an idle loaded model may go: never one with requests in flight.
        if (other.phase == Phase::kLoaded && other.in_flight == 0 &&
            (lru == nullptr || other.last_used < lru->last_used)) {
          lru = &other;
          victim = n;
        }
      }
      if (options_.models_max > 0 && running >= options_.models_max) {
        if (lru == nullptr) {
          *failure = {503, "model limit reached (--models-max " +
                               std::to_string(options_.models_max) +
                               ") and every loaded model has requests in flight; try again later"};
          return nullptr;
        }
        s->models.at(victim).phase = Phase::kUnloading;
      } else {
        victim.clear();
        m.phase = Phase::kLoading;
        m.key = private_key();
        generation = ++m.generation;
      }
    }
    if (!victim.empty()) {
      if (log_) {
        log_->write(LogLevel::kInfo, "router: --models-max " + std::to_string(options_.models_max) +
                                         " reached; unloading the least recently used model '" +
                                         victim + "'");
      }
      stop_child(victim);
      continue;
    }
    Status started = start_child(name, generation);
    {
      auto s = state_.lock();
      Model& m = s->models.at(name);
      // A child that died between listening and here was not reported (it was loading).
      if (started.is_ok() && m.child->exited()) {
        started = unavailable("model '" + name + "' stopped right after it started; its output:\n" +
                              m.child->output_tail());
      }
      if (started.is_ok()) {
        m.phase = Phase::kLoaded;
        m.failed = false;
        m.error.clear();
        m.last_used = ++s->use_clock;
      } else {
        m.phase = Phase::kUnloaded;
        m.failed = true;
        m.error = started.message();
      }
    }
    state_.notify_all();
    if (!started.is_ok()) {
      if (log_) log_->write(LogLevel::kError, "router: " + started.message());
      *failure = {500, started.message()};
      return nullptr;
    }
  }
}

Status RouterDispatcher::load_model(const std::string& name) {
  if (source(name) == nullptr) return invalid_argument("model '" + name + "' not found");
  ApiFailure failure{0, ""};
  int port = 0;
  std::string key;
  if (!acquire(name, true, true, &failure, &port, &key)) return unavailable(failure.message);
  return Status::ok();
}

Status RouterDispatcher::load_startup_models() {
  int n = 0;
  for (const ModelSource& m : sources_) n += m.load_on_startup ? 1 : 0;
  if (options_.models_max > 0 && n > options_.models_max) {
    return invalid_argument(std::to_string(n) + " models have load-on-startup, more than " +
                            "--models-max " + std::to_string(options_.models_max));
  }
  for (const ModelSource& m : sources_) {
    if (m.load_on_startup) STRATA_RETURN_IF_ERROR(load_model(m.name));
  }
  return Status::ok();
}

std::vector<Route> RouterDispatcher::routes() {
  using M = Route::Method;
  using A = Route::Access;
  auto on = [this](void (RouterDispatcher::*f)(const Request&, Response&)) {
    return [this, f](const Request& req, Response& res) { (this->*f)(req, res); };
  };
  std::vector<Route> r = {
      {M::kGet, "/health", A::kPublic,
       [](const Request&, Response& res) {
         send_json(res, {{"status", "ok"}});
       }},
      {M::kGet, "/v1/health", A::kPublic,
       [](const Request&, Response& res) {
         send_json(res, {{"status", "ok"}});
       }},
      {M::kGet, "/models", A::kKeyed, [this](const Request&, Response& res) { list_models(res); }},
      {M::kGet, "/v1/models", A::kKeyed,
       [this](const Request&, Response& res) { list_models(res); }},
      {M::kPost, "/models/load", A::kKeyed, on(&RouterDispatcher::load)},
      {M::kPost, "/models/unload", A::kKeyed, on(&RouterDispatcher::unload)},
      {M::kGet, "/props", A::kKeyed, on(&RouterDispatcher::props)},
  };
  // Everything a model serves: by "model" in the body (POST) or ?model= (GET).
  for (const char* path : {"/completion",
                           "/completions",
                           "/v1/completions",
                           "/chat/completions",
                           "/v1/chat/completions",
                           "/infill",
                           "/tokenize",
                           "/detokenize",
                           "/apply-template",
                           "/props",
                           R"(/slots/(-?\d+))",
                           "/lora-adapters",
                           "/v1/messages",
                           "/v1/responses",
                           "/v1/messages/count_tokens",
                           "/v1/responses/input_tokens",
                           "/v1/chat/completions/input_tokens",
                           "/v1/embeddings",
                           "/embeddings",
                           "/embedding"}) {
    r.push_back({M::kPost, path, A::kKeyed, on(&RouterDispatcher::proxy_post)});
  }
  for (const char* path : {"/slots", "/metrics", "/lora-adapters"}) {
    r.push_back({M::kGet, path, A::kKeyed, on(&RouterDispatcher::proxy_get)});
  }
  return r;
}

void RouterDispatcher::forward(const Request& req, Response& res, const std::string& name,
                               bool touch) {
  if (name.empty()) return send_error(res, ApiError{400, "model name is missing from the request"});
  if (source(name) == nullptr) {
    return send_error(res, ApiError{400, "model '" + shown_name(name) + "' not found"});
  }
  bool autoload = options_.autoload;
  if (req.has_param("autoload")) {
    const std::string v = req.get_param_value("autoload");
    autoload = v == "true" || v == "1";
  }
  ApiFailure failure{0, ""};
  Upstream up;
  up.model = name;
  up.timeout_s = timeout_s_;
  std::shared_ptr<void> hold = acquire(name, autoload, touch, &failure, &up.port, &up.key);
  if (!hold) return send_error(res, ApiError{failure.status, failure.message});
  up.target = req.target.empty() ? req.path : req.target;
  if (!api_prefix_.empty() && up.target.rfind(api_prefix_, 0) == 0) {
    up.target = up.target.substr(api_prefix_.size());
  }
  proxy_request(req, res, up, std::move(hold));
}

// As llama-server: only generation (POST) counts as use for least-recently-used, so that
// monitoring (GET /metrics, /slots) does not keep a model loaded.
void RouterDispatcher::proxy_post(const Request& req, Response& res) {
  ApiError error{0, ""};
  const std::string name = body_model(req, &error);
  if (error.status != 0) return send_error(res, error);
  forward(req, res, name, true);
}

void RouterDispatcher::proxy_get(const Request& req, Response& res) {
  forward(req, res, req.get_param_value("model"), false);
}

void RouterDispatcher::props(const Request& req, Response& res) {
  if (req.has_param("model")) return proxy_get(req, res);
  send_json(res, {{"role", "router"},
                  {"max_instances", options_.models_max},
                  {"models_autoload", options_.autoload},
                  {"model_alias", "strata"},
                  {"model_path", "none"},
                  {"default_generation_settings", {{"params", Json::object()}, {"n_ctx", 0}}},
                  {"build_info", kSystemFingerprint}});
}

void RouterDispatcher::list_models(Response& res) {
  Json data = Json::array();
  auto s = state_.lock();
  for (const ModelSource& src : sources_) {
    const Model& m = s->models.at(src.name);
    Json status = {{"value", phase_name(static_cast<int>(m.phase))}};
    if (!m.args.empty()) status["args"] = m.args;
    if (m.failed) {
      status["failed"] = true;
      status["exit_code"] = m.exit_code;
      status["error"] = m.error;
    }
    if (m.phase == Phase::kLoaded && m.child) {
      status["pid"] = m.child->pid();
      status["port"] = m.child->port();
      status["requests_in_flight"] = m.in_flight;
    }
    Json entry = {{"id", src.name},      {"object", "model"}, {"owned_by", "strata"},
                  {"created", created_}, {"path", src.path},  {"status", status}};
    if (m.phase == Phase::kLoaded && !m.info.empty()) {
      const Json info = Json::parse(m.info, nullptr, false);
      for (auto it = info.begin(); info.is_object() && it != info.end(); ++it) {
        if (!entry.contains(it.key())) entry[it.key()] = it.value();
      }
    }
    data.push_back(std::move(entry));
  }
  send_json(res, {{"object", "list"}, {"data", data}});
}

void RouterDispatcher::load(const Request& req, Response& res) {
  ApiError error{0, ""};
  const std::string name = body_model(req, &error);
  if (error.status != 0) return send_error(res, error);
  if (source(name) == nullptr) return send_error(res, ApiError{404, "model is not found"});
  {
    auto s = state_.lock();
    const Phase p = s->models.at(name).phase;
    if (p == Phase::kLoaded || p == Phase::kLoading) {
      return send_error(res, ApiError{400, "model is already running"});
    }
  }
  ApiFailure failure{0, ""};
  int port = 0;
  std::string key;
  if (!acquire(name, true, false, &failure, &port, &key)) {
    return send_error(res, ApiError{failure.status, failure.message});
  }
  send_json(res, {{"success", true}});
}

void RouterDispatcher::unload(const Request& req, Response& res) {
  ApiError error{0, ""};
  const std::string name = body_model(req, &error);
  if (error.status != 0) return send_error(res, error);
  if (source(name) == nullptr) return send_error(res, ApiError{400, "model is not found"});
  {
    auto s = state_.lock();
    s.wait([&](const State& st) {
      const Phase p = st.models.at(name).phase;
      return st.stopping || (p != Phase::kLoading && p != Phase::kUnloading);
    });
    Model& m = s->models.at(name);
    if (m.phase != Phase::kLoaded) {
      return send_error(res, ApiError{400, "model is not running"});
    }
    m.phase = Phase::kUnloading;
  }
  stop_child(name);
  send_json(res, {{"success", true}});
}

}  // namespace strata::server
