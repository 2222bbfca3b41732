#include "server/server.h"

#include <unistd.h>

#include <algorithm>
#include <thread>

#include "server/chat_format.h"
#include "server/embed_dispatcher.h"
#include "server/group.h"
#include "server/group_services.h"
#include "server/metrics.h"
#include "server/model_dispatcher.h"
#include "server/router.h"
#include "server/worker_recovery.h"
#include "server/workers.h"

namespace strata::server {

// Declared in the order of construction: each part only borrows from those above it, and
// they are destroyed from the bottom up.
struct Server::Parts {
  Loaded loaded;
  std::vector<std::unique_ptr<ThreadPool>> pools;  // every group's own; outlive the contexts
  std::unique_ptr<RemoteWorkers> workers;
  Metrics metrics;
  std::vector<std::unique_ptr<PipelineGroup>> groups;
  std::unique_ptr<GroupSlotStore> slot_store;
  std::unique_ptr<IdleSleeper> sleeper;
  std::unique_ptr<WorkerRecovery> recovery;
  std::unique_ptr<ModelDispatcher> dispatcher;
  std::unique_ptr<RouterDispatcher> router;    // router mode, instead of all the above
  std::unique_ptr<EmbeddingDispatcher> embed;  // --embedding: with loaded, workers and metrics
  std::unique_ptr<HttpServer> http;
  int32_t n_slots = 0;
  int64_t n_ctx_slot = 0;
  std::string fit_note;

  ~Parts() {
    http.reset();
    recovery.reset();
    sleeper.reset();
    if (dispatcher) dispatcher->stop();
    if (router) router->stop();
    if (embed) embed->stop();
  }
};

namespace {

// Pipeline group g's own pools, kept in `owned`: one for steps of one token and, when its
// settings differ, one for prompt steps. Groups never wait for each other's CPU threads.
Result<StreamPools> group_pools(int32_t g, const ThreadPoolOptions& decode,
                                const ThreadPoolOptions& batch, Log* log,
                                std::vector<std::unique_ptr<ThreadPool>>& owned) {
  const bool one_pool = decode.n_threads == batch.n_threads && decode.cpus == batch.cpus &&
                        decode.strict == batch.strict && decode.priority == batch.priority &&
                        decode.poll == batch.poll;
  StreamPools pools;
  for (const ThreadPoolOptions* t : {&decode, &batch}) {
    if (t == &batch && one_pool) break;
    ThreadPoolOptions named = *t;
    named.name = std::to_string(g);
    named.name.insert(named.name.begin(), 'g');
    if (t == &batch) named.name.push_back('b');
    auto pool = ThreadPool::create(named);
    if (!pool.is_ok()) {
      return pool.status().with_context("thread pool of pipeline group " + std::to_string(g));
    }
    // Every group's pools meet the same refusal: say it once.
    if (!(*pool)->setup_note().empty() && log != nullptr && g == 0) {
      log->write(LogLevel::kWarning, "strata serve: " + (*pool)->setup_note());
    }
    (t == &decode ? pools.pool : pools.pool_batch) = pool->get();
    owned.push_back(std::move(pool).value());
  }
  return pools;
}

}  // namespace

Server::Server(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {}
Server::~Server() = default;

Result<std::unique_ptr<Server>> Server::create_router(const ServerOptions& o) {
  if (!o.load.model_path.empty()) {
    return invalid_argument(
        "--models-dir and --models-preset start a router of several models: give them without "
        "-m (or -m without them)");
  }
  STRATA_ASSIGN_OR_RETURN(std::vector<ModelSource> models,
                          models_catalog(o.router.models_dir, o.router.models_preset));
  STRATA_ASSIGN_OR_RETURN(std::vector<std::string> inherited, router_child_args(o.router.args));
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  RouterOptions ro = o.router;
  // The binary's own path, so that children show as `strata serve` in ps, not as `exe`.
  if (ro.exe == "/proc/self/exe") {
    char path[4096];
    const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
    if (n > 0) ro.exe.assign(path, static_cast<size_t>(n));
  }
  auto p = std::make_unique<Parts>();
  p->router = std::make_unique<RouterDispatcher>(
      std::move(ro), std::move(models), std::move(inherited), std::move(env), o.http.api_prefix,
      o.http.timeout_seconds, o.log.get());
  // A relayed request holds its connection's thread for as long as its child answers; the HTTP
  // layer gives each connection one.
  p->http = std::make_unique<HttpServer>(o.http, *p->router, o.log.get());
  STRATA_RETURN_IF_ERROR(p->router->load_startup_models());
  return std::unique_ptr<Server>(new Server(std::move(p)));
}

// --embedding: one context of embeddings for -np sequences of the -c cells; no pipeline groups.
Result<std::unique_ptr<Server>> Server::create_embeddings(const ServerOptions& o) {
  if (o.n_groups > 1) return invalid_argument("--embedding serves with one pipeline group");
  if (!o.draft_model.empty()) return invalid_argument("--embedding takes no draft model");
  if (o.embd_normalize < -1) return invalid_argument("--embd-normalize must be -1 or more");
  auto p = std::make_unique<Parts>();
  p->n_slots = o.n_slots;
  LoadOptions load = o.load;
  load.embeddings = true;
  STRATA_ASSIGN_OR_RETURN(p->loaded, load_model(load, o.n_slots));
  p->fit_note = p->loaded.fit_note;
  p->n_ctx_slot = p->loaded.n_ctx;
  const Model& model = p->loaded.engine->model();
  EmbeddingServing serving;
  if (o.pooling.empty()) {
    STRATA_ASSIGN_OR_RETURN(serving.pooling, model_pooling(model));
  } else if (const std::optional<Pooling> pooling = pooling_from_name(o.pooling)) {
    serving.pooling = *pooling;
  } else {
    return invalid_argument("--pooling '" + o.pooling + "': one of none, mean, cls, last" +
                            (o.pooling == "rank" ? " (rank needs a classifier head)" : ""));
  }
  serving.embd_normalize = o.embd_normalize;
  const size_t slash = o.load.model_path.find_last_of('/');
  serving.model_name = !o.aliases.empty()           ? o.aliases[0]
                       : slash == std::string::npos ? o.load.model_path
                                                    : o.load.model_path.substr(slash + 1);
  STRATA_ASSIGN_OR_RETURN(const ReconnectPolicy reconnect, ReconnectPolicy::from_env());
  p->workers = std::make_unique<RemoteWorkers>(*p->loaded.engine, reconnect);
  if (!p->workers->empty()) {
    serving.backend_status = [w = p->workers.get()] { return w->status(); };
  }
  p->embed = std::make_unique<EmbeddingDispatcher>(std::move(serving), std::move(p->loaded.context),
                                                   p->metrics);
  p->http = std::make_unique<HttpServer>(o.http, *p->embed, o.log.get());
  return std::unique_ptr<Server>(new Server(std::move(p)));
}

Result<std::unique_ptr<Server>> Server::create(const ServerOptions& o) {
  if (o.router.enabled()) return create_router(o);
  if (o.n_slots < 1) return invalid_argument("-np must be at least 1");
  if (o.embeddings) return create_embeddings(o);
  if (o.n_slots < 1) return invalid_argument("-np must be at least 1");
  if (o.n_groups < 1) return invalid_argument("--pipeline-groups must be at least 1");
  STRATA_RETURN_IF_ERROR(o.defaults.sampling.validate());
  STRATA_RETURN_IF_ERROR(o.spec.validate());
  SpecParams spec = o.spec;
  if (!o.draft_model.empty() && !o.spec_type_set) spec.type = SpecType::kDraft;
  if (spec.type == SpecType::kDraft && o.draft_model.empty()) {
    return invalid_argument("--spec-type draft-simple needs a draft model (-md FNAME)");
  }
  for (const TokenBias& b : o.defaults.logit_bias) {
    if (b.token < 0) return invalid_argument("--logit-bias: a token id is negative");
  }
  if (o.n_groups > o.n_slots) {
    return invalid_argument("--pipeline-groups " + std::to_string(o.n_groups) +
                            " needs at least as many slots (-np " + std::to_string(o.n_slots) +
                            ")");
  }
  auto p = std::make_unique<Parts>();
  p->n_slots = o.n_slots;
  LoadOptions load = o.load;
  load.context_shift = o.context_shift;
  load.backend_sampling = o.backend_sampling;
  load.n_contexts = o.n_groups;
  load.make_context = false;  // each group's context is made below, on the group's own pools
  STRATA_ASSIGN_OR_RETURN(p->loaded, load_model(load, o.n_slots));
  // --fit may have chosen fewer groups (and a smaller context) than asked.
  const int32_t n_groups = p->loaded.n_contexts;
  if (!p->loaded.fit_note.empty() && o.log) {
    o.log->write(LogLevel::kInfo, "strata serve: " + p->loaded.fit_note);
  }
  p->fit_note = p->loaded.fit_note;
  // Slots of group g: an even share, the first groups taking the remainder.
  std::vector<int32_t> slots_of;
  for (int32_t g = 0; g < n_groups; ++g) {
    slots_of.push_back(o.n_slots / n_groups + (g < o.n_slots % n_groups));
  }
  const int32_t n_vocab = p->loaded.engine->model().tokenizer().n_vocab();
  for (const TokenBias& b : o.defaults.logit_bias) {
    if (b.token >= n_vocab) {
      return invalid_argument("--logit-bias: token " + std::to_string(b.token) +
                              " is outside the vocabulary of " + std::to_string(n_vocab));
    }
  }
  ContextParams base;
  base.n_ctx = p->loaded.n_ctx;
  base.n_batch = o.load.n_batch;
  base.kv_dtype = o.load.kv_dtype;
  const int64_t n_ctx_slot = base.n_ctx / o.n_slots;
  if (n_ctx_slot < 2) {
    return invalid_argument("-c " + std::to_string(base.n_ctx) + " leaves " +
                            std::to_string(n_ctx_slot) + " cells to each of " +
                            std::to_string(o.n_slots) + " slots (need 2 or more)");
  }
  p->n_ctx_slot = n_ctx_slot;

  // Split over workers: their RPC counters join /metrics, a lost one fails requests fast, and
  // is reconnected in the background.
  STRATA_ASSIGN_OR_RETURN(const ReconnectPolicy reconnect, ReconnectPolicy::from_env());
  p->workers = std::make_unique<RemoteWorkers>(*p->loaded.engine, reconnect);
  if (!p->workers->empty()) {
    p->metrics.add_hook([w = p->workers.get()](std::string& out) { w->render_metrics(out); });
  }
  ThreadPoolOptions decode_threads = o.threads;
  ThreadPoolOptions batch_threads = o.threads_batch;
  for (ThreadPoolOptions* t : {&decode_threads, &batch_threads}) {
    if (t->n_threads <= 0) {
      t->n_threads = o.load.n_threads > 0
                         ? o.load.n_threads
                         : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    }
  }
  // The draft model (draft-simple): on the local CPU, one engine; each group's context of it
  // has the group's sequences and runs on the group's thread pools, between its steps.
  std::shared_ptr<const Engine> draft_engine;
  if (spec.type == SpecType::kDraft) {
    LoadOptions dl;
    dl.model_path = o.draft_model;
    dl.n_threads = o.load.n_threads;
    dl.n_ctx = base.n_ctx;
    dl.n_batch = base.n_batch;
    dl.kv_dtype = base.kv_dtype;
    dl.use_mmap = o.load.use_mmap;
    dl.n_contexts = n_groups;
    dl.make_context = false;
    Result<Loaded> d = load_model(dl, o.n_slots);
    if (!d) return d.status().with_context("draft model " + o.draft_model);
    draft_engine = std::move(d->engine);
  }
  for (int32_t g = 0; g < n_groups; ++g) {
    STRATA_ASSIGN_OR_RETURN(StreamPools pools,
                            group_pools(g, decode_threads, batch_threads, o.log.get(), p->pools));
    ContextParams cp = base;
    cp.pools = pools;
    if (n_groups == 1) {
      cp.n_seq = o.n_slots;
      cp.n_ctx_seq = base.n_ctx / o.n_slots;
    } else {
      // Each group gets its slots' share of the context; the KV memory in total is unchanged.
      cp.n_seq = slots_of[g];
      cp.n_ctx = n_ctx_slot * slots_of[g];
      cp.n_ctx_seq = n_ctx_slot;
    }
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Context> ctx, Context::create(*p->loaded.engine, cp));
    GroupParams gp;
    gp.n_slots = slots_of[g];
    gp.n_ctx_slot = static_cast<int32_t>(n_ctx_slot);
    gp.n_batch = base.n_batch;
    gp.publish_cache = n_groups > 1;
    gp.cache_similarity = o.slot_prompt_similarity;
    gp.context_shift = o.context_shift;
    gp.backend_sampling = o.backend_sampling;
    gp.spec = spec;
    if (draft_engine) {
      STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Context> dctx, Context::create(*draft_engine, cp));
      STRATA_ASSIGN_OR_RETURN(
          gp.draft, DraftModel::create(draft_engine, std::move(dctx), p->loaded.engine->model()));
    }
    gp.n_keep = o.n_keep;
    gp.render_special = o.special;
    // --cache-ram is for the whole server: each group gets its slots' share.
    if (o.cache_ram_mib < 0) {
      gp.cache_ram_bytes = UINT64_MAX;
    } else {
      gp.cache_ram_bytes = (static_cast<uint64_t>(o.cache_ram_mib) << 20) /
                           static_cast<uint64_t>(o.n_slots) * static_cast<uint64_t>(slots_of[g]);
    }
    p->groups.push_back(std::make_unique<PipelineGroup>(g, std::move(ctx), gp, p->metrics));
  }

  const Model& model = p->loaded.engine->model();
  ChatTemplateChoice choice;
  choice.name_or_text = o.chat_template;
  choice.jinja = o.jinja;
  choice.kwargs_json = o.chat_template_kwargs;
  // As llama-server: templates see enable_thinking false only when thinking is turned off.
  choice.enable_thinking = o.reasoning != "off" && o.reasoning_budget != 0;
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<ChatFormatter> chat, chat_formatter_for(model, choice));

  ModelServing serving;
  serving.model_path = o.load.model_path;
  const size_t slash = serving.model_path.find_last_of('/');
  serving.model_name = !o.aliases.empty()           ? o.aliases[0]
                       : slash == std::string::npos ? serving.model_path
                                                    : serving.model_path.substr(slash + 1);
  serving.aliases = o.aliases;
  serving.tags = o.tags;
  serving.defaults.params = o.defaults;
  // DRY's default breakers as tokens, once: a request that keeps them does not pay a pass
  // over the vocabulary per breaker.
  STRATA_ASSIGN_OR_RETURN(
      serving.defaults.params.sampling.dry_breakers,
      dry_breakers(o.defaults.sampling.dry_sequence_breakers, model.tokenizer()));
  serving.defaults.seeded = o.default_seeded;
  STRATA_ASSIGN_OR_RETURN(serving.defaults.reasoning,
                          reasoning_format_from_name(o.reasoning_format));
  serving.endpoint_slots = o.endpoint_slots;
  serving.endpoint_metrics = o.endpoint_metrics;
  serving.prefill_assistant = o.prefill_assistant;
  serving.skip_chat_parsing = o.skip_chat_parsing;
  serving.endpoint_props = o.endpoint_props;
  serving.spm_infill = o.spm_infill;
  serving.slot_save_path = o.slot_save_path;
  serving.log = o.log.get();
  serving.aip_health_route = o.aip_health_route;
  serving.aip_predict_route = o.aip_predict_route;
  serving.fit = o.load.fit.on;
  serving.fit_note = p->fit_note;
  if (!p->workers->empty()) {
    serving.backend_status = [w = p->workers.get()] { return w->status(); };
    serving.backend_retry_after = [w = p->workers.get()] { return w->retry_after_seconds(); };
    serving.backend_workers = [w = p->workers.get()] { return w->json(); };
  }
  for (auto& g : p->groups) g->start();
  p->slot_store = std::make_unique<GroupSlotStore>(p->groups);
  serving.slot_store = p->slot_store.get();
  if (o.sleep_idle_seconds > 0) {
    p->sleeper = std::make_unique<IdleSleeper>(std::chrono::seconds(o.sleep_idle_seconds),
                                               *p->loaded.engine, p->groups);
    serving.before_work = [s = p->sleeper.get()] { return s->begin(); };
    serving.is_sleeping = [s = p->sleeper.get()] { return s->asleep(); };
  }
  if (!p->workers->empty() && p->workers->reconnects()) {
    p->recovery = std::make_unique<WorkerRecovery>(*p->workers, *p->loaded.engine, p->groups,
                                                   p->sleeper.get(), o.log.get());
  }
  p->dispatcher = std::make_unique<ModelDispatcher>(std::move(serving), model, p->groups,
                                                    std::move(chat), p->metrics);
  p->http = std::make_unique<HttpServer>(o.http, *p->dispatcher, o.log.get());
  return std::unique_ptr<Server>(new Server(std::move(p)));
}

Status Server::bind() { return parts_->http->bind(); }
int Server::port() const { return parts_->http->port(); }

bool Server::listen() {
  const bool ok = parts_->http->listen();
  if (parts_->dispatcher) parts_->dispatcher->stop();
  if (parts_->router) parts_->router->stop();
  if (parts_->embed) parts_->embed->stop();
  return ok;
}

void Server::stop() { parts_->http->stop(); }

std::string Server::summary() const {
  if (parts_->router) return "router of " + std::to_string(parts_->router->n_models()) + " models";
  if (parts_->embed) {
    return "embeddings, " + std::to_string(parts_->n_slots) + " sequences of " +
           std::to_string(parts_->n_ctx_slot) + " cells";
  }
  return std::to_string(parts_->n_slots) + " slots, " + std::to_string(parts_->groups.size()) +
         " pipeline groups, " + std::to_string(parts_->n_ctx_slot) + " cells per slot" +
         (parts_->fit_note.empty() ? "" : "; " + parts_->fit_note);
}

}  // namespace strata::server
