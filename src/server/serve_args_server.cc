#include "engine/speculative.h"
#include "server/serve_args_rows.h"

namespace strata::server::serve_rows {

void add_server_rows(std::vector<Row>& t) {
  // --- Server
  ignored(t, {"-lcs", "--lookup-cache-static"}, K::kValue, kNoSpec, nullptr, S::kServer);
  ignored(t, {"-lcd", "--lookup-cache-dynamic"}, K::kValue, kNoSpec, nullptr, S::kServer);
  ignored(t, {"-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"}, K::kValue,
          "the KV cache keeps every position", "LLAMA_ARG_CTX_CHECKPOINTS", S::kServer);
  ignored(t, {"-cms", "--checkpoint-min-step"}, K::kValue, "the KV cache keeps every position",
          "LLAMA_ARG_CHECKPOINT_MIN_SPACING_NT", S::kServer);
  t.push_back({{"-cram", "--cache-ram"},
               {},
               "LLAMA_ARG_CACHE_RAM",
               K::kValue,
               "MiB",
               "8192",
               "host cache of evicted prompts (-1: no limit, 0: off)",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               int_to(STRATA_FIELD(options.cache_ram_mib), -1, int64_t{1} << 40)});
  t.push_back({{"-kvu", "--kv-unified"},
               {"-no-kvu", "--no-kv-unified"},
               "LLAMA_ARG_KV_UNIFIED",
               K::kSwitch,
               "",
               "off: -c is split evenly between the slots",
               "one KV pool shared by all slots",
               S::kServer,
               E::kPending,
               "each slot has an even share of -c",
               "false",
               [](ServeArgs& a, const std::string& v) -> Status {
                 a.options.kv_unified = v == "true";
                 return Status::ok();
               }});
  t.push_back({{"--cache-idle-slots"},
               {"--no-cache-idle-slots"},
               "LLAMA_ARG_CACHE_IDLE_SLOTS",
               K::kSwitch,
               "",
               "on",
               "move idle slots' prompts to the RAM cache (needs --cache-ram)",
               S::kServer,
               E::kPending,
               kEngine,
               "false",
               nullptr});
  t.push_back({{"--context-shift"},
               {"--no-context-shift"},
               "LLAMA_ARG_CONTEXT_SHIFT",
               K::kSwitch,
               "",
               "off",
               "when a sequence fills its context, drop its oldest half and go on",
               S::kServer,
               E::kApplied,
               "",
               "false",
               bool_to(STRATA_FIELD(options.context_shift))});
  ignored(t, {"-r", "--reverse-prompt"}, K::kValue, "an interactive-mode setting; use 'stop'",
          nullptr, S::kServer);
  t.push_back({{"-sp", "--special"},
               {},
               nullptr,
               K::kSwitch,
               "",
               "off",
               "special tokens appear in generated text",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               bool_to(STRATA_FIELD(options.special))});
  ignored(t, {"--warmup"}, K::kSwitch, "no warm-up run", nullptr, S::kServer, {"--no-warmup"},
          "false");
  t.push_back({{"--spm-infill"},
               {},
               nullptr,
               K::kSwitch,
               "",
               "off",
               "/infill in suffix, prefix, middle order",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               bool_to(STRATA_FIELD(options.spm_infill))});
  ignored(t, {"--pooling"}, K::kValue, "strata serves no embeddings", "LLAMA_ARG_POOLING",
          S::kServer);
  t.push_back({{"-np", "--parallel"},
               {},
               "LLAMA_ARG_N_PARALLEL",
               K::kValue,
               "N",
               "1",
               "slots: requests decoded together (-1: 1)",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               [](ServeArgs& a, const std::string& v) -> Status {
                 STRATA_ASSIGN_OR_RETURN(int64_t n, parse_arg_int(v, -1, 4096));
                 if (n == 0) return invalid_argument("0 slots cannot serve; -1 means 1");
                 a.options.n_slots = n < 0 ? 1 : static_cast<int32_t>(n);
                 return Status::ok();
               }});
  ignored(t, {"-cb", "--cont-batching"}, K::kSwitch, "strata always batches continuously",
          "LLAMA_ARG_CONT_BATCHING", S::kServer, {"-nocb", "--no-cont-batching"}, "true");
  refused(t, {"-mm", "--mmproj"}, K::kValue, "strata has no multimodal input", "LLAMA_ARG_MMPROJ",
          S::kServer);
  refused(t, {"-mmu", "--mmproj-url"}, K::kValue, "strata has no multimodal input",
          "LLAMA_ARG_MMPROJ_URL", S::kServer);
  ignored(t, {"--mmproj-auto"}, K::kSwitch, "strata has no multimodal input",
          "LLAMA_ARG_MMPROJ_AUTO", S::kServer, {"--no-mmproj", "--no-mmproj-auto"}, "false");
  ignored(t, {"--mmproj-offload"}, K::kSwitch, "strata has no multimodal input",
          "LLAMA_ARG_MMPROJ_OFFLOAD", S::kServer, {"--no-mmproj-offload"});
  for (auto [f, env] : std::vector<std::pair<const char*, const char*>>{
           {"--image-min-tokens", "LLAMA_ARG_IMAGE_MIN_TOKENS"},
           {"--image-max-tokens", "LLAMA_ARG_IMAGE_MAX_TOKENS"},
           {"--mtmd-batch-max-tokens", "LLAMA_ARG_MTMD_BATCH_MAX_TOKENS"}}) {
    ignored(t, {f}, K::kValue, "strata has no multimodal input", env, S::kServer);
  }
  t.push_back({{"-a", "--alias"},
               {},
               "LLAMA_ARG_ALIAS",
               K::kValue,
               "NAMES",
               "the model file's name",
               "model names the API reports (the first) and accepts, comma-separated",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               [](ServeArgs& a, const std::string& v) {
                 a.options.aliases.clear();
                 for (const std::string& n : split_commas(v)) {
                   if (!n.empty()) a.options.aliases.push_back(n);
                 }
                 return Status::ok();
               }});
  t.push_back({{"--tags"},
               {},
               "LLAMA_ARG_TAGS",
               K::kValue,
               "TAGS",
               "",
               "model tags listed by /models",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               [](ServeArgs& a, const std::string& v) {
                 a.options.tags = split_commas(v);
                 return Status::ok();
               }});
  ignored(t, {"--embd-normalize"}, K::kValue, "strata serves no embeddings", nullptr, S::kServer);
  t.push_back({{"--host"},
               {},
               "LLAMA_ARG_HOST",
               K::kValue,
               "HOST",
               "127.0.0.1",
               "address to listen on",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               [](ServeArgs& a, const std::string& v) -> Status {
                 if (v.size() > 5 && v.compare(v.size() - 5, 5, ".sock") == 0) {
                   return invalid_argument("listening on a UNIX socket is not supported");
                 }
                 a.options.http.host = v;
                 return Status::ok();
               }});
  t.push_back({{"--port"},
               {},
               "LLAMA_ARG_PORT",
               K::kValue,
               "PORT",
               "8080",
               "port (0 picks a free one, printed at start)",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               int_to(STRATA_FIELD(options.http.port), 0, 65535)});
  t.push_back({{"--reuse-port"},
               {},
               "LLAMA_ARG_REUSE_PORT",
               K::kSwitch,
               "",
               "off",
               "let several servers bind the same port",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               bool_to(STRATA_FIELD(options.http.reuse_port))});
  t.push_back({{"--path"},
               {},
               "LLAMA_ARG_STATIC_PATH",
               K::kValue,
               "PATH",
               "",
               "serve the files of this folder at /",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               string_to(STRATA_FIELD(options.http.static_path))});
  for (auto [f, env] : std::vector<std::pair<const char*, const char*>>{
           {"--cors-origins", "LLAMA_ARG_CORS_ORIGINS"},
           {"--cors-methods", "LLAMA_ARG_CORS_METHODS"},
           {"--cors-headers", "LLAMA_ARG_CORS_HEADERS"}}) {
    ignored(t, {f}, K::kValue, "no CORS headers are sent", env, S::kServer);
  }
  ignored(t, {"--cors-credentials"}, K::kSwitch, "no CORS headers are sent",
          "LLAMA_ARG_CORS_CREDENTIALS", S::kServer, {"--no-cors-credentials"});
  t.push_back({{"--api-prefix"},
               {},
               "LLAMA_ARG_API_PREFIX",
               K::kValue,
               "PREFIX",
               "",
               "serve every endpoint under this path (no trailing slash)",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               [](ServeArgs& a, const std::string& v) -> Status {
                 if (!v.empty() && (v[0] != '/' || v.back() == '/')) {
                   return invalid_argument("'" + v + "' must start with '/' and not end with one");
                 }
                 a.options.http.api_prefix = v;
                 return Status::ok();
               }});
  ignored(t, {"--ui-config", "--webui-config"}, K::kValue, "strata has no web UI",
          "LLAMA_ARG_UI_CONFIG", S::kServer);
  ignored(t, {"--ui-config-file", "--webui-config-file"}, K::kValue, "strata has no web UI",
          "LLAMA_ARG_UI_CONFIG_FILE", S::kServer);
  ignored(t, {"--ui-mcp-proxy", "--webui-mcp-proxy"}, K::kSwitch, "strata has no web UI",
          "LLAMA_ARG_UI_MCP_PROXY", S::kServer, {"--no-ui-mcp-proxy", "--no-webui-mcp-proxy"},
          "false");
  refused(t, {"--tools"}, K::kValue, "the server runs no tools itself", "LLAMA_ARG_TOOLS",
          S::kServer);
  refused(t, {"--tools-runtime"}, K::kValue, "the server runs no tools itself",
          "LLAMA_ARG_TOOLS_RUNTIME", S::kServer);
  refused(t, {"--mcp-servers-config"}, K::kValue, "the server runs no tools itself",
          "LLAMA_ARG_MCP_SERVERS_CONFIG", S::kServer);
  refused(t, {"--mcp-servers-json"}, K::kValue, "the server runs no tools itself",
          "LLAMA_ARG_MCP_SERVERS_JSON", S::kServer);
  refused(t, {"-ag", "--agent"}, K::kSwitch, "the server runs no tools itself", "LLAMA_ARG_AGENT",
          S::kServer, {"-no-ag", "--no-agent"}, "false");
  ignored(t, {"--ui", "--webui"}, K::kSwitch, "strata has no web UI", "LLAMA_ARG_UI", S::kServer,
          {"--no-ui", "--no-webui"}, "false");
  refused(t, {"--embedding", "--embeddings"}, K::kSwitch, "strata serves no embeddings",
          "LLAMA_ARG_EMBEDDINGS", S::kServer, {}, "false");
  refused(t, {"--rerank", "--reranking"}, K::kSwitch, "strata serves no reranking",
          "LLAMA_ARG_RERANKING", S::kServer, {}, "false");
  t.push_back({{"--api-key"},
               {},
               "LLAMA_API_KEY",
               K::kValue,
               "KEY,...",
               "none",
               "require one of these keys (Authorization: Bearer KEY or X-Api-Key: KEY) on every "
               "endpoint but /health",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               add_keys});
  t.push_back({{"--api-key-file"},
               {},
               "LLAMA_ARG_API_KEY_FILE",
               K::kValue,
               "FILE",
               "",
               "API keys, one per line ('#' starts a comment line)",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               add_key_file});
  t.push_back({{"--ssl-key-file"},
               {},
               "LLAMA_ARG_SSL_KEY_FILE",
               K::kValue,
               "FILE",
               "",
               "PEM private key: serve HTTPS (with --ssl-cert-file)",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               string_to(STRATA_FIELD(options.http.ssl_key_file))});
  t.push_back({{"--ssl-cert-file"},
               {},
               "LLAMA_ARG_SSL_CERT_FILE",
               K::kValue,
               "FILE",
               "",
               "PEM certificate: serve HTTPS (with --ssl-key-file)",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               string_to(STRATA_FIELD(options.http.ssl_cert_file))});
  t.push_back({{"--chat-template-kwargs"},
               {},
               "LLAMA_ARG_CHAT_TEMPLATE_KWARGS",
               K::kValue,
               "JSON",
               "{}",
               "extra variables of the chat template, a JSON object",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               set_kwargs});
  t.push_back({{"-to", "--timeout"},
               {},
               "LLAMA_ARG_TIMEOUT",
               K::kValue,
               "N",
               "3600",
               "seconds of each wait to read or write a connection's bytes",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               int_to(STRATA_FIELD(options.http.timeout_seconds), 1, 1 << 30)});
  ignored(t, {"--sse-ping-interval"}, K::kValue, "streams send no pings",
          "LLAMA_ARG_SSE_PING_INTERVAL", S::kServer);
  ignored(t, {"--threads-http"}, K::kValue,
          "each connection has a thread of its own, up to --max-connections",
          "LLAMA_ARG_THREADS_HTTP", S::kServer);
  t.push_back({{"--max-connections"},
               {},
               nullptr,
               K::kValue,
               "N",
               "1024",
               "HTTP connections open at once (a thread each); past it: 503 with Retry-After",
               S::kStrata,
               E::kApplied,
               "",
               nullptr,
               int_to(STRATA_FIELD(options.http.max_connections), 1, 1 << 20)});
  t.push_back({{"--request-timeout"},
               {},
               nullptr,
               K::kValue,
               "N",
               "60",
               "seconds for a whole request (line, headers, body) to arrive, else 408",
               S::kStrata,
               E::kApplied,
               "",
               nullptr,
               int_to(STRATA_FIELD(options.http.request_timeout_seconds), 1, 1 << 30)});
  t.push_back({{"--keep-alive-timeout"},
               {},
               nullptr,
               K::kValue,
               "N",
               "5",
               "seconds an open HTTP connection may wait for its next request",
               S::kStrata,
               E::kApplied,
               "",
               nullptr,
               int_to(STRATA_FIELD(options.http.keep_alive_timeout_seconds), 1, 1 << 30)});
  t.push_back({{"--cache-prompt"},
               {"--no-cache-prompt"},
               "LLAMA_ARG_CACHE_PROMPT",
               K::kSwitch,
               "",
               "on",
               "reuse the KV of a slot's cached prefix (a request's cache_prompt wins)",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               bool_to(STRATA_FIELD(options.defaults.cache_prompt))});
  ignored(t, {"--cache-reuse"}, K::kValue,
          "cached prefixes are reused whole, not shifted in chunks", "LLAMA_ARG_CACHE_REUSE",
          S::kServer, {}, "0");
  t.push_back({{"--metrics"},
               {},
               "LLAMA_ARG_ENDPOINT_METRICS",
               K::kSwitch,
               "",
               "off",
               "serve GET /metrics (Prometheus)",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               bool_to(STRATA_FIELD(options.endpoint_metrics))});
  t.push_back({{"--props"},
               {},
               "LLAMA_ARG_ENDPOINT_PROPS",
               K::kSwitch,
               "",
               "off",
               "allow POST /props to change the defaults",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               bool_to(STRATA_FIELD(options.endpoint_props))});
  t.push_back({{"--slots"},
               {"--no-slots"},
               "LLAMA_ARG_ENDPOINT_SLOTS",
               K::kSwitch,
               "",
               "on",
               "serve GET /slots",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               bool_to(STRATA_FIELD(options.endpoint_slots))});
  t.push_back({{"--slot-save-path"},
               {},
               nullptr,
               K::kValue,
               "PATH",
               "",
               "folder of /slots/{id}?action=save|restore files",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               string_to(STRATA_FIELD(options.slot_save_path))});
  ignored(t, {"--media-path"}, K::kValue, "strata has no multimodal input", nullptr, S::kServer);
  // Router mode: without -m, these start a router of child servers (server/router.h).
  t.push_back({{"--models-dir"},
               {},
               "LLAMA_ARG_MODELS_DIR",
               K::kValue,
               "PATH",
               "",
               "router mode: serve the GGUF files of this folder, one child server per model",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               string_to(STRATA_FIELD(options.router.models_dir))});
  t.push_back({{"--models-preset"},
               {},
               "LLAMA_ARG_MODELS_PRESET",
               K::kValue,
               "PATH",
               "",
               "router mode: an .ini of models and their flags ([*] for all of them)",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               string_to(STRATA_FIELD(options.router.models_preset))});
  t.push_back({{"--models-max"},
               {},
               "LLAMA_ARG_MODELS_MAX",
               K::kValue,
               "N",
               "4",
               "router mode: models loaded at once; the least recently used idle one is unloaded "
               "(0: no limit)",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               int_to(STRATA_FIELD(options.router.models_max), 0, 4096)});
  t.push_back({{"--models-autoload"},
               {"--no-models-autoload"},
               "LLAMA_ARG_MODELS_AUTOLOAD",
               K::kSwitch,
               "",
               "on",
               "router mode: a request for a model that is not loaded loads it",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               bool_to(STRATA_FIELD(options.router.autoload))});
  t.push_back({{"--jinja"},
               {"--no-jinja"},
               "LLAMA_ARG_JINJA",
               K::kSwitch,
               "",
               "on",
               "chat templates by the Jinja engine; --no-jinja: the named formats only",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               bool_to(STRATA_FIELD(options.jinja))});
  t.push_back({{"--reasoning-format"},
               {},
               "LLAMA_ARG_THINK",
               K::kValue,
               "FORMAT",
               "auto",
               "none, deepseek, deepseek-legacy or auto: where <think> text goes",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               one_of(STRATA_FIELD(options.reasoning_format),
                      {"none", "deepseek", "deepseek-legacy", "auto"})});
  t.push_back({{"-rea", "--reasoning"},
               {},
               "LLAMA_ARG_REASONING",
               K::kValue,
               "on|off|auto",
               "auto",
               "thinking in the chat (off: templates see enable_thinking false)",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               one_of(STRATA_FIELD(options.reasoning), {"on", "off", "auto"})});
  ignored(t, {"--reasoning-effort"}, K::kValue,
          "pass it to the template as chat_template_kwargs reasoning_effort",
          "LLAMA_ARG_REASONING_EFFORT", S::kServer, {}, "default");
  t.push_back({{"--reasoning-budget"},
               {},
               "LLAMA_ARG_THINK_BUDGET",
               K::kValue,
               "N",
               "-1",
               "thinking tokens allowed (-1: unrestricted; 0: thinking off)",
               S::kServer,
               E::kPending,
               "only 0 (thinking off) is applied; a budget above 0 is not enforced",
               "-1",
               int_to(STRATA_FIELD(options.reasoning_budget), -1, kMaxI32)});
  ignored(t, {"--reasoning-budget-message"}, K::kValue, "reasoning budgets are not enforced",
          "LLAMA_ARG_THINK_BUDGET_MESSAGE", S::kServer);
  ignored(t, {"--reasoning-preserve"}, K::kSwitch,
          "past reasoning_content goes to the template as the client sends it",
          "LLAMA_ARG_REASONING_PRESERVE", S::kServer, {"--no-reasoning-preserve"});
  t.push_back(
      {{"--chat-template"},
       {},
       "LLAMA_ARG_CHAT_TEMPLATE",
       K::kValue,
       "NAME|TEMPLATE",
       "the model's own",
       "chat format by name (chatml, qwen3, llama2, llama3, llama3.1, mistral-v1, mistral-v3, "
       "mistral-v3-tekken, mistral-v7, mistral-v7-tekken, gemma, phi3, deepseek3, deepseek-r1) "
       "or a Jinja template's text",
       S::kServer,
       E::kApplied,
       "",
       nullptr,
       string_to(STRATA_FIELD(options.chat_template))});
  t.push_back({{"--chat-template-file"},
               {},
               "LLAMA_ARG_CHAT_TEMPLATE_FILE",
               K::kValue,
               "FILE",
               "",
               "a Jinja chat template from a file",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               set_chat_template_file});
  t.push_back({{"--skip-chat-parsing"},
               {"--no-skip-chat-parsing"},
               "LLAMA_ARG_SKIP_CHAT_PARSING",
               K::kSwitch,
               "",
               "off",
               "chat replies stay raw text: no tool calls or reasoning split out",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               bool_to(STRATA_FIELD(options.skip_chat_parsing))});
  t.push_back({{"--prefill-assistant"},
               {"--no-prefill-assistant"},
               "LLAMA_ARG_PREFILL_ASSISTANT",
               K::kSwitch,
               "",
               "on",
               "a final assistant message is continued, not closed",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               bool_to(STRATA_FIELD(options.prefill_assistant))});
  t.push_back({{"-sps", "--slot-prompt-similarity"},
               {},
               nullptr,
               K::kValue,
               "SIMILARITY",
               "0.5",
               "share of a new prompt a slot's cached prefix must cover for the slot to be reused",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               float_to(STRATA_FIELD(options.slot_prompt_similarity), 0, 1)});
  ignored(t, {"--lora-init-without-apply"}, K::kSwitch, "strata has no LoRA", nullptr, S::kServer);
  t.push_back(
      {{"--sleep-idle-seconds"},
       {},
       nullptr,
       K::kValue,
       "SECONDS",
       "-1",
       "free the model's memory after this idle time, reload on the next request (-1: never)",
       S::kServer,
       E::kApplied,
       "",
       "-1",
       int_to(STRATA_FIELD(options.sleep_idle_seconds), -1, int64_t{1} << 40)});
  ignored(t, {"--log-prompts-dir"}, K::kValue, "prompts are not logged", nullptr, S::kServer);
  for (std::vector<std::string> names : std::vector<std::vector<std::string>>{
           {"--spec-draft-hf", "-hfd", "-hfrd", "--hf-repo-draft"},
           {"--spec-draft-threads", "-td", "--threads-draft"},
           {"--spec-draft-threads-batch", "-tbd", "--threads-batch-draft"},
           {"--spec-draft-cpu-mask", "-Cd", "--cpu-mask-draft"},
           {"--spec-draft-cpu-range", "-Crd", "--cpu-range-draft"},
           {"--spec-draft-cpu-strict", "--cpu-strict-draft"},
           {"--spec-draft-prio", "--prio-draft"},
           {"--spec-draft-poll", "--poll-draft"},
           {"--spec-draft-cpu-mask-batch", "-Cbd", "--cpu-mask-batch-draft"},
           {"--spec-draft-cpu-strict-batch", "--cpu-strict-batch-draft"},
           {"--spec-draft-prio-batch", "--prio-batch-draft"},
           {"--spec-draft-poll-batch", "--poll-batch-draft"},
           {"--spec-draft-override-tensor", "-otd", "--override-tensor-draft"},
           {"--spec-draft-n-cpu-moe", "--spec-draft-ncmoe", "-ncmoed", "--n-cpu-moe-draft"},
           {"--spec-draft-p-split", "--draft-p-split"},
           {"--spec-draft-device", "-devd", "--device-draft"},
           {"--spec-draft-ngl", "-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft"},
           {"--spec-ngram-mod-n-min"},
           {"--spec-ngram-mod-n-max"},
           {"--spec-ngram-mod-n-match"},
           {"--spec-ngram-simple-min-hits"},
           {"--spec-ngram-map-k-size-n"},
           {"--spec-ngram-map-k-size-m"},
           {"--spec-ngram-map-k-min-hits"},
           {"--spec-ngram-map-k4v-size-n"},
           {"--spec-ngram-map-k4v-size-m"},
           {"--spec-ngram-map-k4v-min-hits"},
           {"--spec-ngram-size-n"},
           {"--spec-ngram-size-m"},
           {"--spec-ngram-min-hits"}}) {
    ignored(t, std::move(names), K::kValue, kNoSpec, nullptr, S::kServer);
  }
  // Speculative decoding: n-gram drafts (engine/speculative.h).
  t.push_back({{"--spec-type"},
               {},
               "LLAMA_ARG_SPEC_TYPE",
               K::kValue,
               "none|draft-simple|ngram-simple",
               "none",
               "speculative decoding: draft-simple drafts with -md's model (the default with "
               "-md), ngram-simple what followed the text's last n tokens where they appeared "
               "before; the text is the same as without",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               [](ServeArgs& a, const std::string& v) -> Status {
                 STRATA_ASSIGN_OR_RETURN(a.options.spec.type, spec_type_from_name(v));
                 a.options.spec_type_set = true;
                 return Status::ok();
               }});
  t.push_back({{"-md", "--spec-draft-model", "--model-draft"},
               {},
               "LLAMA_ARG_SPEC_DRAFT_MODEL",
               K::kValue,
               "FNAME",
               "",
               "draft model for speculative decoding (its vocabulary must be the model's; it "
               "runs on the local CPU)",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               string_to(STRATA_FIELD(options.draft_model))});
  t.push_back({{"--spec-draft-p-min", "--draft-p-min"},
               {},
               "LLAMA_ARG_SPEC_DRAFT_P_MIN",
               K::kValue,
               "P",
               "0",
               "the draft model stops drafting at a token it gives less than this probability",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               float_to(STRATA_FIELD(options.spec.p_min), 0, 1)});
  t.push_back({{"--spec-draft-n-max", "--draft", "--draft-n", "--draft-max"},
               {},
               "LLAMA_ARG_SPEC_DRAFT_N_MAX",
               K::kValue,
               "N",
               "3",
               "most tokens drafted for a step",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               int_to(STRATA_FIELD(options.spec.n_max), 1, kSpecMaxDraft)});
  t.push_back({{"--spec-draft-n-min", "--draft-min", "--draft-n-min"},
               {},
               "LLAMA_ARG_SPEC_DRAFT_N_MIN",
               K::kValue,
               "N",
               "0",
               "a shorter draft is not checked",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               int_to(STRATA_FIELD(options.spec.n_min), 0, kSpecMaxDraft)});
  t.push_back({{"--spec-ngram-simple-size-n"},
               {},
               nullptr,
               K::kValue,
               "N",
               "12",
               "ngram-simple: the n-gram looked up",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               int_to(STRATA_FIELD(options.spec.ngram_n), 1, 1024)});
  t.push_back({{"--spec-ngram-simple-size-m"},
               {},
               nullptr,
               K::kValue,
               "M",
               "48",
               "ngram-simple: most tokens drafted after it (and at most --spec-draft-n-max)",
               S::kServer,
               E::kApplied,
               "",
               nullptr,
               int_to(STRATA_FIELD(options.spec.ngram_m), 1, kSpecMaxDraft)});
  ignored(t, {"--spec-draft-cpu-moe", "-cmoed", "--cpu-moe-draft"}, K::kSwitch, kNoSpec, nullptr,
          S::kServer);
  ignored(t, {"--spec-draft-backend-sampling"}, K::kSwitch, kNoSpec, nullptr, S::kServer,
          {"--no-spec-draft-backend-sampling"});
  ignored(t, {"--spec-default"}, K::kSwitch, kNoSpec, nullptr, S::kServer);
  for (const char* f : {"--embd-gemma-default", "--fim-qwen-1.5b-default", "--fim-qwen-3b-default",
                        "--fim-qwen-7b-default", "--fim-qwen-7b-spec", "--fim-qwen-14b-spec",
                        "--fim-qwen-30b-default", "--gpt-oss-20b-default", "--gpt-oss-120b-default",
                        "--vision-gemma-4b-default", "--vision-gemma-12b-default"}) {
    refused(t, {f}, K::kSwitch, kDownload, nullptr, S::kServer);
  }

  // --- strata's own
  t.push_back({{"--kv-type"},
               {},
               nullptr,
               K::kValue,
               "f16|f32|q8_0",
               "f16",
               "KV cache type of K and V",
               S::kStrata,
               E::kApplied,
               "",
               nullptr,
               [](ServeArgs& a, const std::string& v) -> Status {
                 STRATA_RETURN_IF_ERROR(set_cache_type(a.cache_type_k, v));
                 return set_cache_type(a.cache_type_v, v);
               }});
  t.push_back({{"--pipeline-groups"},
               {},
               nullptr,
               K::kValue,
               "N",
               "1",
               "contexts decoded concurrently, each with its share of the slots and of -c",
               S::kStrata,
               E::kApplied,
               "",
               nullptr,
               int_to(STRATA_FIELD(options.n_groups), 1, 64)});
  t.push_back({{"--rpc-token-file"},
               {},
               nullptr,
               K::kValue,
               "FILE",
               "",
               "the workers' shared secret",
               S::kStrata,
               E::kApplied,
               "",
               nullptr,
               string_to(STRATA_FIELD(options.load.rpc_token_file))});
}

}  // namespace strata::server::serve_rows
