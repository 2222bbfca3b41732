// The server, assembled: the model on its devices, the pipeline groups and their slots, the
// chat template, the dispatcher and the HTTP layer. `strata serve` parses its flags into
// ServerOptions and calls Server::create; tests can build a server the same way.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/speculative.h"
#include "server/http.h"
#include "server/log.h"
#include "server/model_load.h"
#include "server/router_options.h"
#include "server/task.h"

namespace strata::server {

struct ServerOptions {
  static ThreadPoolOptions unset_threads() {
    ThreadPoolOptions o;
    o.n_threads = 0;
    return o;
  }

  LoadOptions load;
  int32_t n_slots = 1;   // -np: requests decoded together
  int32_t n_groups = 1;  // --pipeline-groups: contexts decoded concurrently
  // Every pipeline group's own CPU thread pools, never shared between groups: `threads` for
  // steps of one token, `threads_batch` for prompt steps (llama.cpp's -t/-C/-Cr/--cpu-strict/
  // --prio/--poll and their batch variants). n_threads 0: load.n_threads, else every core.
  // When the two are the same, a group has one pool for both.
  ThreadPoolOptions threads = unset_threads();
  ThreadPoolOptions threads_batch = unset_threads();
  HttpOptions http;
  // Names the API reports (the first) and accepts; empty: the model file's name.
  std::vector<std::string> aliases;
  std::vector<std::string> tags;  // informational, listed by /models

  // Chat: a named format or a template's text; "": the model's own template.
  std::string chat_template;
  bool jinja = true;               // templates by the Jinja engine; false: the named formats only
  bool prefill_assistant = true;   // a final assistant message is continued
  bool skip_chat_parsing = false;  // chat replies stay raw text
  std::string chat_template_kwargs = "{}";  // a JSON object, extra template variables
  std::string reasoning_format = "auto";    // none | deepseek | deepseek-legacy | auto
  std::string reasoning = "auto";           // on | off | auto
  int32_t reasoning_budget = -1;            // -1: unrestricted

  // What a request that does not say gets: sampling, n_predict, ignore_eos, cache_prompt.
  GenParams defaults;
  bool default_seeded = false;  // --seed gave a fixed seed (else a fresh one per request)
  bool spm_infill = false;      // /infill as suffix, prefix, middle
  bool special = false;         // generated special tokens appear in the text

  bool endpoint_slots = true;     // GET /slots
  bool endpoint_metrics = false;  // GET /metrics
  bool endpoint_props = false;    // POST /props

  // Idle slots are reused for a cached prefix covering at least this share of a new prompt.
  float slot_prompt_similarity = 0.5f;
  std::string slot_save_path;       // where /slots/{id}?action=save writes; "": disabled
  int64_t cache_ram_mib = 8192;     // host cache of evicted prompts; -1: no limit, 0: off
  int64_t sleep_idle_seconds = -1;  // free the model after this idle time; -1: never
  bool context_shift = false;       // discard the oldest tokens of a full sequence
  bool backend_sampling = false;    // sample on the last stage's device (StepDraws)
  SpecParams spec;                  // speculative decoding (--spec-type)
  bool spec_type_set = false;       // --spec-type was given (else -md means draft-simple)
  std::string draft_model;          // -md: the draft model's file
  // --embedding: serve embeddings only (server/embed_dispatcher.h), pooled by --pooling (unset:
  // the model's) and normalised by --embd-normalize unless a request says otherwise.
  bool embeddings = false;
  std::string pooling;
  int32_t embd_normalize = 2;
  int32_t n_keep = 0;              // tokens of the prompt a context shift keeps
  std::optional<bool> kv_unified;  // one KV pool for all slots (unset: per slot)

  // Vertex AI prediction routes (AIP_MODE=PREDICTION, AIP_HEALTH_ROUTE, AIP_PREDICT_ROUTE);
  // empty: off.
  std::string aip_health_route;
  std::string aip_predict_route;

  // Router mode (no model, --models-dir or --models-preset): children serve the models.
  RouterOptions router;

  std::shared_ptr<Log> log;  // null: no log
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
  // "4 slots, 2 pipeline groups, 1024 cells per slot"; a router: "router of 3 models"
  std::string summary() const;

 private:
  struct Parts;
  static Result<std::unique_ptr<Server>> create_router(const ServerOptions& options);
  static Result<std::unique_ptr<Server>> create_embeddings(const ServerOptions& options);
  explicit Server(std::unique_ptr<Parts> parts);
  std::unique_ptr<Parts> parts_;
};

}  // namespace strata::server
