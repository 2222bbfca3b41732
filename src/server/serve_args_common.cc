#include "server/serve_args_rows.h"

namespace strata::server::serve_rows {

void add_common_rows(std::vector<Row>& t) {
  // --- Common
  t.push_back({{"-h", "--help", "--usage"},
               {},
               nullptr,
               K::kSwitch,
               "",
               "",
               "print this help and exit",
               S::kCommon,
               E::kApplied,
               "",
               nullptr,
               bool_to(STRATA_FIELD(help))});
  t.push_back({{"--version"},
               {},
               nullptr,
               K::kSwitch,
               "",
               "",
               "print the version and exit",
               S::kCommon,
               E::kApplied,
               "",
               nullptr,
               bool_to(STRATA_FIELD(version))});
  t.push_back({{"--list-devices"},
               {},
               nullptr,
               K::kSwitch,
               "",
               "",
               "print the devices (the CPU and the --rpc workers) and exit",
               S::kCommon,
               E::kApplied,
               "",
               nullptr,
               bool_to(STRATA_FIELD(list_devices))});
  refused(t, {"-cl", "--cache-list"}, K::kSwitch, "strata keeps no model cache");
  ignored(t, {"--completion-bash"}, K::kSwitch, "no completion script");
  t.push_back({{"-t", "--threads"},
               {},
               "LLAMA_ARG_THREADS",
               K::kValue,
               "N",
               "all cores",
               "CPU threads (-1: all cores)",
               S::kCommon,
               E::kApplied,
               "",
               nullptr,
               [](ServeArgs& a, const std::string& v) -> Status {
                 STRATA_ASSIGN_OR_RETURN(int64_t n, parse_arg_int(v, -1, 1024));
                 a.options.load.n_threads = n <= 0 ? 0 : static_cast<int>(n);
                 return Status::ok();
               }});
  // Every pipeline group has its own pools (one for decoding steps, one for prompt steps when
  // the -b settings differ); these flags apply to each group's pools alike.
  auto pool_row = [&t](std::vector<std::string> names, const char* env, const char* value,
                       const char* def, const char* help, Setter set) {
    t.push_back({std::move(names),
                 {},
                 env,
                 K::kValue,
                 value,
                 def,
                 help,
                 S::kCommon,
                 E::kApplied,
                 "",
                 nullptr,
                 std::move(set)});
  };
  pool_row({"-tb", "--threads-batch"}, "LLAMA_ARG_THREADS_BATCH", "N", "same as --threads",
           "CPU threads of each pipeline group for prompt steps (-1: all cores)",
           [](ServeArgs& a, const std::string& v) -> Status {
             STRATA_ASSIGN_OR_RETURN(int64_t n, parse_arg_int(v, -1, 1024));
             a.threads_batch = n <= 0 ? 0 : static_cast<int>(n);
             return Status::ok();
           });
  pool_row(
      {"-C", "--cpu-mask"}, nullptr, "M", "\"\"",
      "CPU affinity mask in hex (bit i: CPU i); adds to --cpu-range",
      [](ServeArgs& a, const std::string& v) { return add_cpus(a.options.threads.cpus, v, true); });
  pool_row({"-Cr", "--cpu-range"}, nullptr, "lo-hi", "", "CPUs for affinity; adds to --cpu-mask",
           [](ServeArgs& a, const std::string& v) {
             return add_cpus(a.options.threads.cpus, v, false);
           });
  pool_row({"--cpu-strict"}, nullptr, "<0|1>", "0",
           "strict placement: thread i alone on the i-th CPU of the mask",
           bool_to(STRATA_FIELD(options.threads.strict)));
  pool_row({"--prio"}, nullptr, "N", "0",
           "thread priority: low(-1), normal(0), medium(1), high(2), realtime(3)",
           int_to(STRATA_FIELD(options.threads.priority), -1, 3));
  pool_row({"--poll"}, nullptr, "<0...100>", "50",
           "how long a waiting thread polls for work before it sleeps (0: no polling)",
           int_to(STRATA_FIELD(options.threads.poll), 0, 100));
  pool_row({"-Cb", "--cpu-mask-batch"}, nullptr, "M", "same as --cpu-mask",
           "CPU affinity mask of the prompt threads; adds to --cpu-range-batch",
           [](ServeArgs& a, const std::string& v) {
             if (!a.cpus_batch) a.cpus_batch.emplace();
             return add_cpus(*a.cpus_batch, v, true);
           });
  pool_row({"-Crb", "--cpu-range-batch"}, nullptr, "lo-hi", "",
           "CPUs of the prompt threads; adds to --cpu-mask-batch",
           [](ServeArgs& a, const std::string& v) {
             if (!a.cpus_batch) a.cpus_batch.emplace();
             return add_cpus(*a.cpus_batch, v, false);
           });
  pool_row({"--cpu-strict-batch"}, nullptr, "<0|1>", "same as --cpu-strict",
           "strict placement of the prompt threads", [](ServeArgs& a, const std::string& v) {
             STRATA_ASSIGN_OR_RETURN(bool b, parse_arg_bool(v));
             a.strict_batch = b;
             return Status::ok();
           });
  pool_row({"--prio-batch"}, nullptr, "N", "0", "priority of the prompt threads (as --prio)",
           int_to(STRATA_FIELD(prio_batch), -1, 3));
  pool_row({"--poll-batch"}, nullptr, "<0...100>", "same as --poll",
           "polling of the prompt threads (as --poll)",
           [](ServeArgs& a, const std::string& v) -> Status {
             STRATA_ASSIGN_OR_RETURN(int64_t n, parse_arg_int(v, 0, 100));
             a.poll_batch = static_cast<int>(n);
             return Status::ok();
           });
  t.push_back({{"-c", "--ctx-size"},
               {},
               "LLAMA_ARG_CTX_SIZE",
               K::kValue,
               "N",
               "0: the training context, at most 4096",
               "KV cells in total, split evenly between the slots",
               S::kCommon,
               E::kApplied,
               "",
               nullptr,
               int_to(STRATA_FIELD(options.load.n_ctx), 0, 1 << 24)});
  t.push_back({{"-n", "--predict", "--n-predict"},
               {},
               "LLAMA_ARG_N_PREDICT",
               K::kValue,
               "N",
               "-1: until the slot's context is full",
               "tokens to generate when a request does not say",
               S::kCommon,
               E::kApplied,
               "",
               nullptr,
               int_to(STRATA_FIELD(options.defaults.n_predict), -1, kMaxI32)});
  t.push_back({{"-b", "--batch-size"},
               {},
               "LLAMA_ARG_BATCH",
               K::kValue,
               "N",
               "512",
               "most tokens per decode step",
               S::kCommon,
               E::kApplied,
               "",
               nullptr,
               int_to(STRATA_FIELD(options.load.n_batch), 1, 1 << 16)});
  ignored(t, {"-ub", "--ubatch-size"}, K::kValue, "one batch size: -b", "LLAMA_ARG_UBATCH");
  t.push_back({{"--keep"},
               {},
               nullptr,
               K::kValue,
               "N",
               "0",
               "prompt tokens a context shift keeps",
               S::kCommon,
               E::kApplied,
               "",
               "0",
               int_to(STRATA_FIELD(options.n_keep), -1, kMaxI32)});
  ignored(t, {"--swa-full"}, K::kSwitch, "the KV cache keeps every position of every layer",
          "LLAMA_ARG_SWA_FULL");
  ignored(t, {"-fa", "--flash-attn"}, K::kValue, "strata's attention is its own kernel",
          "LLAMA_ARG_FLASH_ATTN");
  ignored(t, {"--perf"}, K::kSwitch, "timings are always in responses", "LLAMA_ARG_PERF",
          S::kCommon, {"--no-perf"});
  ignored(t, {"-e", "--escape"}, K::kSwitch, "prompts come over HTTP, unescaped", nullptr,
          S::kCommon, {"--no-escape"});
  for (const RopeFlag& f : rope_flags()) {
    t.push_back({{f.name},
                 {},
                 f.env,
                 K::kValue,
                 f.value,
                 "",
                 f.help,
                 S::kCommon,
                 E::kApplied,
                 "",
                 nullptr,
                 [name = std::string(f.name)](ServeArgs& a, const std::string& v) {
                   return set_rope_flag(a.options.load.rope, name, v);
                 }});
  }
  ignored(t, {"-kvo", "--kv-offload"}, K::kSwitch,
          "each layer's KV cache lives on its layer's device", "LLAMA_ARG_KV_OFFLOAD", S::kCommon,
          {"-nkvo", "--no-kv-offload"}, "true");
  ignored(t, {"--no-host"}, K::kSwitch, kNoGpu, "LLAMA_ARG_NO_HOST");
  t.push_back(
      {{"-ctk", "--cache-type-k"},
       {},
       "LLAMA_ARG_CACHE_TYPE_K",
       K::kValue,
       "TYPE",
       "f16",
       "KV cache type of K: f16, f32 or q8_0 (the same as V's)",
       S::kCommon,
       E::kApplied,
       "",
       nullptr,
       [](ServeArgs& a, const std::string& v) { return set_cache_type(a.cache_type_k, v); }});
  t.push_back(
      {{"-ctv", "--cache-type-v"},
       {},
       "LLAMA_ARG_CACHE_TYPE_V",
       K::kValue,
       "TYPE",
       "f16",
       "KV cache type of V: f16, f32 or q8_0 (the same as K's)",
       S::kCommon,
       E::kApplied,
       "",
       nullptr,
       [](ServeArgs& a, const std::string& v) { return set_cache_type(a.cache_type_v, v); }});
  ignored(t, {"-dt", "--defrag-thold"}, K::kValue, "deprecated; strata's KV cells are per slot",
          "LLAMA_ARG_DEFRAG_THOLD");
  t.push_back({{"--rpc"},
               {},
               "LLAMA_ARG_RPC",
               K::kValue,
               "H:P,...",
               "",
               "split the model over `strata worker`s (devices RPC0, RPC1... in this order)",
               S::kCommon,
               E::kApplied,
               "",
               nullptr,
               [](ServeArgs& a, const std::string& v) {
                 a.options.load.rpc = split_commas(v);
                 return Status::ok();
               }});
  ignored(t, {"--mlock"}, K::kSwitch, "memory is not locked", "LLAMA_ARG_MLOCK", S::kCommon, {},
          "false");
  t.push_back(
      {{"--mmap"},
       {"--no-mmap"},
       "LLAMA_ARG_MMAP",
       K::kSwitch,
       "",
       "mmap",
       "use the weights in place in the file's mapping; --no-mmap copies them into memory with "
       "2 MiB pages (faster decode, slower load); neither: -lm auto",
       S::kCommon,
       E::kApplied,
       "",
       nullptr,
       bool_to(STRATA_FIELD(options.load.use_mmap))});
  t.push_back({{"--repack"},
               {"-nr", "--no-repack"},
               "LLAMA_ARG_REPACK",
               K::kSwitch,
               "",
               "enabled",
               "copied weights of a type that the CPU multiplies faster in another layout (q4_K, "
               "q5_K, q6_K, iq4_xs and q8_0 on AVX2; q2_K, q3_K, q4_0 and mxfp4 too on AVX-512) "
               "are stored in it, on the CPU and on workers that offer it: the same results; "
               "--no-repack keeps the file's layout",
               S::kCommon,
               E::kApplied,
               "",
               nullptr,
               bool_to(STRATA_FIELD(options.load.repack))});
  ignored(t, {"-dio", "--direct-io"}, K::kSwitch, "files are read through the page cache",
          "LLAMA_ARG_DIO", S::kCommon, {"-ndio", "--no-direct-io"}, "false");
  t.push_back({{"-lm", "--load-mode"},
               {},
               "LLAMA_ARG_LOAD_MODE",
               K::kValue,
               "MODE",
               "auto",
               "auto: copy the weights into memory when they take at most half of it, else map "
               "the file; mmap: map the file; none/dio: copy (mlock is not applied)",
               S::kCommon,
               E::kApplied,
               "",
               nullptr,
               set_load_mode});
  ignored(t, {"--numa"}, K::kValue, kNoPin, "LLAMA_ARG_NUMA");
  t.push_back({{"-dev", "--device"},
               {},
               "LLAMA_ARG_DEVICE",
               K::kValue,
               "LIST",
               "RPC workers, then CPU",
               "devices in stage order, e.g. RPC0,RPC1,CPU; none: the CPU alone",
               S::kCommon,
               E::kApplied,
               "",
               nullptr,
               [](ServeArgs& a, const std::string& v) {
                 a.options.load.devices = v == "none" ? std::string("CPU") : v;
                 return Status::ok();
               }});
  refused(t, {"-ot", "--override-tensor"}, K::kValue,
          "a tensor's device is its layer's; buffer-type overrides are not supported",
          "LLAMA_ARG_OVERRIDE_TENSOR");
  ignored(t, {"-cmoe", "--cpu-moe"}, K::kSwitch, kNoGpu, "LLAMA_ARG_CPU_MOE");
  ignored(t, {"-ncmoe", "--n-cpu-moe"}, K::kValue, kNoGpu, "LLAMA_ARG_N_CPU_MOE");
  t.push_back(
      {{"-ngl", "--gpu-layers", "--n-gpu-layers"},
       {},
       "LLAMA_ARG_N_GPU_LAYERS",
       K::kValue,
       "N",
       "auto",
       "layers on the devices other than the CPU (the --rpc workers, shared by --tensor-split); "
       "the CPU keeps the rest; auto: by the split or free memory; all",
       S::kCommon,
       E::kApplied,
       "",
       nullptr,
       set_gpu_layers});
  t.push_back({{"-sm", "--split-mode"},
               {},
               "LLAMA_ARG_SPLIT_MODE",
               K::kValue,
               "MODE",
               "layer",
               "layer (or none): whole layers per device; row and tensor splits are not supported",
               S::kCommon,
               E::kApplied,
               "",
               nullptr,
               [](ServeArgs&, const std::string& v) -> Status {
                 if (v == "layer" || v == "none") return Status::ok();
                 return invalid_argument("strata splits by layer; '" + v + "' is not supported");
               }});
  t.push_back({{"-ts", "--tensor-split"},
               {},
               "LLAMA_ARG_TENSOR_SPLIT",
               K::kValue,
               "S,...",
               "free memory",
               "share of the layers per device, in --device order",
               S::kCommon,
               E::kApplied,
               "",
               nullptr,
               set_split});
  ignored(t, {"-mg", "--main-gpu"}, K::kValue, kNoGpu, "LLAMA_ARG_MAIN_GPU");
  t.push_back({{"-fit", "--fit"},
               {},
               "LLAMA_ARG_FIT",
               K::kValue,
               "on|off",
               "off",
               "when the model, the context and the pipeline groups do not fit the devices' free "
               "memory, lower the context (down to --fit-ctx), then the groups, instead of "
               "refusing",
               S::kCommon,
               E::kApplied,
               "",
               nullptr,
               bool_to(STRATA_FIELD(options.load.fit.on))});
  t.push_back({{"-fitt", "--fit-target"},
               {},
               "LLAMA_ARG_FIT_TARGET",
               K::kValue,
               "MiB0,MiB1,...",
               "1024",
               "memory --fit leaves free per device, in --device order (one value: every device)",
               S::kCommon,
               E::kApplied,
               "",
               nullptr,
               set_fit_target});
  t.push_back({{"-fitc", "--fit-ctx"},
               {},
               "LLAMA_ARG_FIT_CTX",
               K::kValue,
               "N",
               "4096",
               "smallest context --fit may choose (KV cells in total)",
               S::kCommon,
               E::kApplied,
               "",
               nullptr,
               int_to(STRATA_FIELD(options.load.fit.min_ctx), 1, 1 << 24)});
  t.push_back({{"--cpu-mem"},
               {},
               nullptr,
               K::kValue,
               "MiB",
               "0: free memory",
               "memory the local CPU device may use for weights copies, KV caches and buffers "
               "(the plan checks against it)",
               S::kCommon,
               E::kApplied,
               "",
               nullptr,
               [](ServeArgs& a, const std::string& v) -> Status {
                 STRATA_ASSIGN_OR_RETURN(int64_t mib, parse_arg_int(v, 0, int64_t{1} << 40));
                 a.options.load.cpu_memory_limit = static_cast<uint64_t>(mib) << 20;
                 return Status::ok();
               }});
  ignored(t, {"--check-tensors"}, K::kSwitch,
          "tensors are checked for shape and bounds, not values");
  t.push_back({{"--override-kv"},
               {},
               nullptr,
               K::kValue,
               "KEY=TYPE:VALUE,...",
               "",
               "override model metadata (types int, float, bool, str); may be repeated, the last "
               "of a key wins",
               S::kCommon,
               E::kApplied,
               "",
               nullptr,
               [](ServeArgs& a, const std::string& v) {
                 return add_kv_overrides(a.options.load.kv_overrides, v);
               }});
  ignored(t, {"--op-offload"}, K::kSwitch, kNoGpu, nullptr, S::kCommon, {"--no-op-offload"});
  for (const char* f : {"--lora", "--lora-scaled", "--control-vector", "--control-vector-scaled",
                        "--control-vector-layer-range"}) {
    refused(t, {f}, K::kValue, "strata has no LoRA or control vectors");
  }
  t.push_back({{"-m", "--model"},
               {},
               "LLAMA_ARG_MODEL",
               K::kValue,
               "FILE",
               "",
               "the GGUF model",
               S::kCommon,
               E::kApplied,
               "",
               nullptr,
               string_to(STRATA_FIELD(options.load.model_path))});
  refused(t, {"-mu", "--model-url"}, K::kValue, kDownload, "LLAMA_ARG_MODEL_URL");
  refused(t, {"-dr", "--docker-repo"}, K::kValue, kDownload, "LLAMA_ARG_DOCKER_REPO");
  refused(t, {"-hf", "-hfr", "--hf-repo"}, K::kValue, kDownload, "LLAMA_ARG_HF_REPO");
  refused(t, {"-hff", "--hf-file"}, K::kValue, kDownload, "LLAMA_ARG_HF_FILE");
  // No environment variable: HF_TOKEN is often set for other tools.
  ignored(t, {"-hft", "--hf-token"}, K::kValue, kDownload);
  t.push_back({{"--log-disable"},
               {},
               nullptr,
               K::kSwitch,
               "",
               "",
               "no log",
               S::kCommon,
               E::kApplied,
               "",
               nullptr,
               bool_to(STRATA_FIELD(log.disabled))});
  t.push_back({{"--log-file"},
               {},
               "LLAMA_ARG_LOG_FILE",
               K::kValue,
               "FILE",
               "stderr",
               "append the log to this file",
               S::kCommon,
               E::kApplied,
               "",
               nullptr,
               string_to(STRATA_FIELD(log.file))});
  ignored(t, {"--log-colors"}, K::kValue, "the log has no colours", "LLAMA_ARG_LOG_COLORS");
  t.push_back({{"-v", "--verbose", "--log-verbose"},
               {},
               nullptr,
               K::kSwitch,
               "",
               "",
               "log everything (each request at trace level)",
               S::kCommon,
               E::kApplied,
               "",
               nullptr,
               [](ServeArgs& a, const std::string& v) {
                 if (v == "true") a.log.verbosity = 1000;
                 return Status::ok();
               }});
  t.push_back({{"-lv", "--verbosity", "--log-verbosity"},
               {},
               "LLAMA_ARG_LOG_VERBOSITY",
               K::kValue,
               "N",
               "3",
               "log levels up to N: 1 error, 2 warning, 3 info, 4 trace (requests), 5 debug",
               S::kCommon,
               E::kApplied,
               "",
               nullptr,
               int_to(STRATA_FIELD(log.verbosity), 0, 1000)});
  t.push_back({{"--log-prefix"},
               {"--no-log-prefix"},
               "LLAMA_ARG_LOG_PREFIX",
               K::kSwitch,
               "",
               "off",
               "a level letter before each log line",
               S::kCommon,
               E::kApplied,
               "",
               nullptr,
               bool_to(STRATA_FIELD(log.prefix))});
  t.push_back({{"--log-timestamps"},
               {"--no-log-timestamps"},
               "LLAMA_ARG_LOG_TIMESTAMPS",
               K::kSwitch,
               "",
               "off",
               "seconds since start before each log line",
               S::kCommon,
               E::kApplied,
               "",
               nullptr,
               bool_to(STRATA_FIELD(log.timestamps))});
  // strata never reaches the network for models: offline is what it always is.
  t.push_back({{"--offline"},
               {},
               "LLAMA_ARG_OFFLINE",
               K::kSwitch,
               "",
               "always",
               "never use the network for models (strata never does)",
               S::kCommon,
               E::kApplied,
               "",
               nullptr,
               nullptr});
  ignored(t, {"--spec-draft-type-k", "-ctkd", "--cache-type-k-draft"}, K::kValue, kNoSpec,
          "LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K");
  ignored(t, {"--spec-draft-type-v", "-ctvd", "--cache-type-v-draft"}, K::kValue, kNoSpec,
          "LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_V");
}

void add_sampling_rows(std::vector<Row>& t) {
  // A sampling flag with a value, applied by `set`.
  const auto value_row = [&t](std::vector<std::string> names, const char* value,
                              const char* default_value, const char* help, Setter set) {
    t.push_back({std::move(names),
                 {},
                 nullptr,
                 K::kValue,
                 value,
                 default_value,
                 help,
                 S::kSampling,
                 E::kApplied,
                 "",
                 nullptr,
                 std::move(set)});
  };
  // --- Sampling defaults
  t.push_back({{"--samplers"},
               {},
               nullptr,
               K::kValue,
               "SAMPLERS",
               "penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature",
               "the samplers in order, separated by ';' (penalties and DRY run first wherever "
               "listed, and are off where not)",
               S::kSampling,
               E::kApplied,
               "",
               nullptr,
               [](ServeArgs& a, const std::string& v) -> Status {
                 return set_sampler_order_list(a.options.defaults.sampling, v);
               }});
  t.push_back({{"--sampler-seq", "--sampling-seq"},
               {},
               nullptr,
               K::kValue,
               "SEQUENCE",
               "edskypmxt",
               "the samplers in order as letters (e penalties, d dry, s top_n_sigma, k top_k, "
               "y typ_p, p top_p, m min_p, x xtc, t temperature)",
               S::kSampling,
               E::kApplied,
               "",
               nullptr,
               [](ServeArgs& a, const std::string& v) -> Status {
                 return set_sampler_order_letters(a.options.defaults.sampling, v);
               }});
  t.push_back({{"-s", "--seed"},
               {},
               nullptr,
               K::kValue,
               "SEED",
               "-1: a fresh seed per request",
               "sampling seed of requests without one",
               S::kSampling,
               E::kApplied,
               "",
               nullptr,
               [](ServeArgs& a, const std::string& v) -> Status {
                 STRATA_ASSIGN_OR_RETURN(int64_t s, parse_arg_int(v, -1, INT64_MAX));
                 a.options.default_seeded = s >= 0;
                 a.options.defaults.sampling.seed = s >= 0 ? static_cast<uint64_t>(s) : 0;
                 return Status::ok();
               }});
  t.push_back({{"--ignore-eos"},
               {},
               nullptr,
               K::kSwitch,
               "",
               "off",
               "generate past the end-of-generation token",
               S::kSampling,
               E::kApplied,
               "",
               nullptr,
               bool_to(STRATA_FIELD(options.defaults.ignore_eos))});
  t.push_back({{"--temp", "--temperature"},
               {},
               nullptr,
               K::kValue,
               "N",
               "0.8",
               "temperature (0: greedy)",
               S::kSampling,
               E::kApplied,
               "",
               nullptr,
               float_to(STRATA_FIELD(options.defaults.sampling.temperature), 0, 1e6)});
  t.push_back({{"--top-k"},
               {},
               "LLAMA_ARG_TOP_K",
               K::kValue,
               "N",
               "40",
               "top-k (0: off)",
               S::kSampling,
               E::kApplied,
               "",
               nullptr,
               int_to(STRATA_FIELD(options.defaults.sampling.top_k), -1, kMaxI32)});
  t.push_back({{"--top-p"},
               {},
               nullptr,
               K::kValue,
               "N",
               "0.95",
               "top-p (1.0: off)",
               S::kSampling,
               E::kApplied,
               "",
               nullptr,
               float_to(STRATA_FIELD(options.defaults.sampling.top_p), 0, 1)});
  t.push_back({{"--min-p"},
               {},
               nullptr,
               K::kValue,
               "N",
               "0.05",
               "min-p (0.0: off)",
               S::kSampling,
               E::kApplied,
               "",
               nullptr,
               float_to(STRATA_FIELD(options.defaults.sampling.min_p), 0, 1)});
  value_row({"--top-nsigma", "--top-n-sigma"}, "N", "-1", "top-n-sigma (<= 0: off)",
            float_to(STRATA_FIELD(options.defaults.sampling.chain.top_n_sigma), -1e6, 1e6));
  value_row({"--xtc-probability"}, "N", "0", "XTC probability (0: off)",
            float_to(STRATA_FIELD(options.defaults.sampling.chain.xtc_probability), 0, 1));
  value_row({"--xtc-threshold"}, "N", "0.1", "XTC threshold (above 0.5: off)",
            float_to(STRATA_FIELD(options.defaults.sampling.chain.xtc_threshold), 0, 1));
  value_row({"--typical", "--typical-p"}, "N", "1", "locally typical sampling, p (1: off)",
            float_to(STRATA_FIELD(options.defaults.sampling.chain.typical_p), 0, 1));
  value_row({"--min-keep"}, "N", "0", "the fewest tokens a truncation sampler leaves (0: 1)",
            int_to(STRATA_FIELD(options.defaults.sampling.chain.min_keep), 0, 1 << 20));
  t.push_back(
      {{"--repeat-last-n"},
       {},
       nullptr,
       K::kValue,
       "N",
       "64",
       "tokens the penalties look back over (0: off, -1: all)",
       S::kSampling,
       E::kApplied,
       "",
       nullptr,
       int_to(STRATA_FIELD(options.defaults.sampling.repeat_last_n), -1, kSamplerMaxRepeatLastN)});
  t.push_back({{"--repeat-penalty"},
               {},
               nullptr,
               K::kValue,
               "N",
               "1.0",
               "repetition penalty (1.0: off)",
               S::kSampling,
               E::kApplied,
               "",
               nullptr,
               float_to(STRATA_FIELD(options.defaults.sampling.repeat_penalty), 0, 1e6)});
  t.push_back({{"--presence-penalty"},
               {},
               nullptr,
               K::kValue,
               "N",
               "0.0",
               "presence penalty (0.0: off)",
               S::kSampling,
               E::kApplied,
               "",
               nullptr,
               float_to(STRATA_FIELD(options.defaults.sampling.presence_penalty), -1e6, 1e6)});
  t.push_back({{"--frequency-penalty"},
               {},
               nullptr,
               K::kValue,
               "N",
               "0.0",
               "frequency penalty (0.0: off)",
               S::kSampling,
               E::kApplied,
               "",
               nullptr,
               float_to(STRATA_FIELD(options.defaults.sampling.frequency_penalty), -1e6, 1e6)});
  value_row({"--dry-multiplier"}, "N", "0", "DRY multiplier (0: off)",
            float_to(STRATA_FIELD(options.defaults.sampling.dry_multiplier), 0, 1e6));
  value_row({"--dry-base"}, "N", "1.75", "DRY base",
            float_to(STRATA_FIELD(options.defaults.sampling.dry_base), 0, 1e6));
  t.push_back({{"--dry-allowed-length"},
               {},
               nullptr,
               K::kValue,
               "N",
               "2",
               "DRY: repeats up to this long are free",
               S::kSampling,
               E::kApplied,
               "",
               nullptr,
               int_to(STRATA_FIELD(options.defaults.sampling.dry_allowed_length), 0,
                      kSamplerMaxRepeatLastN)});
  t.push_back({{"--dry-penalty-last-n"},
               {},
               nullptr,
               K::kValue,
               "N",
               "-1",
               "DRY: tokens to look back over (0: off, -1: the context)",
               S::kSampling,
               E::kApplied,
               "",
               nullptr,
               int_to(STRATA_FIELD(options.defaults.sampling.dry_penalty_last_n), -1,
                      kSamplerMaxRepeatLastN)});
  t.push_back({{"--dry-sequence-breaker"},
               {},
               nullptr,
               K::kValue,
               "STRING",
               "",
               "a DRY sequence breaker (repeatable); the first replaces the defaults "
               "(newline, colon, double quote, asterisk); 'none' for none",
               S::kSampling,
               E::kApplied,
               "",
               nullptr,
               [](ServeArgs& a, const std::string& v) -> Status {
                 std::vector<std::string>& b = a.options.defaults.sampling.dry_sequence_breakers;
                 if (!a.dry_breakers_given) b.clear();
                 a.dry_breakers_given = true;
                 if (v == "none") {
                   b.clear();
                 } else {
                   b.push_back(v);
                 }
                 if (b.size() > kDryMaxBreakers) {
                   return invalid_argument("more than " + std::to_string(kDryMaxBreakers) +
                                           " DRY sequence breakers");
                 }
                 return Status::ok();
               }});
  value_row({"--adaptive-target"}, "N", "-1",
            "adaptive-p: draw tokens near this probability, where --samplers lists adaptive_p "
            "(negative: off)",
            float_to(STRATA_FIELD(options.defaults.sampling.chain.adaptive_target), -1e9, 1));
  value_row({"--adaptive-decay"}, "N", "0.9",
            "adaptive-p: decay of the running mean the target moves against",
            float_to(STRATA_FIELD(options.defaults.sampling.chain.adaptive_decay), 0, 0.99));
  value_row({"--dynatemp-range"}, "N", "0", "dynamic temperature range (0: off)",
            float_to(STRATA_FIELD(options.defaults.sampling.chain.dynatemp_range), -1e6, 1e6));
  value_row({"--dynatemp-exp"}, "N", "1", "dynamic temperature exponent",
            float_to(STRATA_FIELD(options.defaults.sampling.chain.dynatemp_exponent), 0, 1e6));
  value_row({"--mirostat"}, "N", "0", "Mirostat (0: off, 1: Mirostat, 2: Mirostat 2.0)",
            int_to(STRATA_FIELD(options.defaults.sampling.chain.mirostat), 0, 2));
  value_row({"--mirostat-lr"}, "N", "0.1", "Mirostat learning rate, eta",
            float_to(STRATA_FIELD(options.defaults.sampling.chain.mirostat_eta), 0, 10));
  value_row({"--mirostat-ent"}, "N", "5", "Mirostat target entropy, tau",
            float_to(STRATA_FIELD(options.defaults.sampling.chain.mirostat_tau), 0, 100));
  t.push_back(
      {{"-l", "--logit-bias"},
       {},
       nullptr,
       K::kValue,
       "ID(+/-)BIAS",
       "",
       "add BIAS to token ID's logit in every request (repeatable), e.g. 15043+1 or 15043-inf",
       S::kSampling,
       E::kApplied,
       "",
       nullptr,
       set_logit_bias_flag});
  // The grammar of every request that brings none (docs/server.md, "Constrained output").
  struct GrammarFlag {
    std::vector<std::string> names;
    const char* value;
    const char* help;
    bool file, schema;
  };
  for (const GrammarFlag& f : std::vector<GrammarFlag>{
           {{"--grammar"}, "GRAMMAR", "GBNF grammar of requests that give none", false, false},
           {{"--grammar-file"}, "FNAME", "file of a GBNF grammar (as --grammar)", true, false},
           {{"-j", "--json-schema"},
            "SCHEMA",
            "JSON schema of requests that give none",
            false,
            true},
           {{"-jf", "--json-schema-file"}, "FILE", "file of a JSON schema (as -j)", true, true}}) {
    t.push_back({f.names,
                 {},
                 nullptr,
                 K::kValue,
                 f.value,
                 "",
                 f.help,
                 S::kSampling,
                 E::kApplied,
                 "",
                 nullptr,
                 [file = f.file, schema = f.schema](ServeArgs& a, const std::string& v) {
                   return file ? set_default_grammar_file(a, v, schema)
                               : set_default_grammar(a, v, schema);
                 }});
  }
  t.push_back({{"-bs", "--backend-sampling"},
               {},
               "LLAMA_ARG_BACKEND_SAMPLING",
               K::kSwitch,
               "",
               "off",
               "sample on the device of the last stage (a worker sends back token ids, not "
               "logits); requests it cannot serve are sampled on the CPU",
               S::kSampling,
               E::kApplied,
               "",
               nullptr,
               bool_to(STRATA_FIELD(options.backend_sampling))});
}

}  // namespace strata::server::serve_rows
