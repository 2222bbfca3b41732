#include "server/serve_args.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "model/chat_template.h"

namespace strata::server {
namespace {

using Row = ArgRow<ServeArgs>;
using Setter = std::function<Status(ServeArgs&, const std::string&)>;
using E = ArgEffect;
using K = ArgKind;
using S = ArgSection;

constexpr int64_t kMaxI32 = std::numeric_limits<int32_t>::max();
// Files a flag names (API keys, chat templates) are read whole: a template is a few KiB.
constexpr std::streamsize kMaxFlagFileBytes = 1 << 20;

// Setters. `field` returns a reference into the target.
template <typename F>
Setter int_to(F field, int64_t lo, int64_t hi) {
  return [field, lo, hi](ServeArgs& a, const std::string& v) -> Status {
    STRATA_ASSIGN_OR_RETURN(int64_t x, parse_arg_int(v, lo, hi));
    field(a) = static_cast<std::remove_reference_t<decltype(field(a))>>(x);
    return Status::ok();
  };
}

template <typename F>
Setter float_to(F field, double lo, double hi) {
  return [field, lo, hi](ServeArgs& a, const std::string& v) -> Status {
    STRATA_ASSIGN_OR_RETURN(double x, parse_arg_double(v, lo, hi));
    field(a) = static_cast<std::remove_reference_t<decltype(field(a))>>(x);
    return Status::ok();
  };
}

template <typename F>
Setter bool_to(F field) {
  return [field](ServeArgs& a, const std::string& v) -> Status {
    STRATA_ASSIGN_OR_RETURN(bool b, parse_arg_bool(v));
    field(a) = b;
    return Status::ok();
  };
}

template <typename F>
Setter string_to(F field) {
  return [field](ServeArgs& a, const std::string& v) -> Status {
    field(a) = v;
    return Status::ok();
  };
}

template <typename F>
Setter one_of(F field, std::vector<std::string> allowed) {
  return [field, allowed](ServeArgs& a, const std::string& v) -> Status {
    for (const std::string& x : allowed) {
      if (v == x) {
        field(a) = v;
        return Status::ok();
      }
    }
    std::string list;
    for (const std::string& x : allowed) list += (list.empty() ? "" : ", ") + x;
    return invalid_argument("'" + v + "' is not one of " + list);
  };
}

// A sampler strata lacks: its disabled value is accepted (it is what strata does), any other
// is an error rather than a silently different distribution.
Setter only_disabled(const char* what, double disabled) {
  return [what, disabled](ServeArgs&, const std::string& v) -> Status {
    STRATA_ASSIGN_OR_RETURN(double x, parse_arg_double(v, -1e9, 1e9));
    if (x == disabled) return Status::ok();
    std::ostringstream d;
    d << disabled;
    return invalid_argument(std::string("strata has no ") + what + " sampler; only " + d.str() +
                            " (disabled) is accepted, not " + v);
  };
}

Result<std::string> read_small_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return invalid_argument("cannot read '" + path + "'");
  std::string text(static_cast<size_t>(kMaxFlagFileBytes) + 1, '\0');
  f.read(text.data(), kMaxFlagFileBytes + 1);
  if (f.gcount() > kMaxFlagFileBytes) {
    return invalid_argument("'" + path + "' is larger than " + std::to_string(kMaxFlagFileBytes) +
                            " bytes");
  }
  text.resize(static_cast<size_t>(f.gcount()));
  return text;
}

Status add_keys(ServeArgs& a, const std::string& list) {
  for (const std::string& k : split_commas(list)) {
    if (!k.empty()) a.options.http.api_keys.push_back(k);
  }
  return Status::ok();
}

// One key per line; blank lines and lines starting with '#' are skipped.
Status add_key_file(ServeArgs& a, const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, read_small_file(path));
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    size_t start = line.find_first_not_of(' ');
    if (start == std::string::npos || line[start] == '#') continue;
    a.options.http.api_keys.push_back(line.substr(start));
  }
  return Status::ok();
}

Status set_split(ServeArgs& a, const std::string& v) {
  std::vector<double> split;
  for (const std::string& item : split_commas(v)) {
    STRATA_ASSIGN_OR_RETURN(double x, parse_arg_double(item, 0, 1e9));
    split.push_back(x);
  }
  a.options.load.tensor_split = std::move(split);
  return Status::ok();
}

// -ngl: a count, "auto" (the split decides), "all" or -1 (every layer).
Status set_gpu_layers(ServeArgs& a, const std::string& v) {
  if (v == "auto") {
    a.options.load.n_gpu_layers.reset();
  } else if (v == "all" || v == "-1") {
    a.options.load.n_gpu_layers = kMaxI32;
  } else {
    STRATA_ASSIGN_OR_RETURN(int64_t n, parse_arg_int(v, 0, kMaxI32));
    a.options.load.n_gpu_layers = n;
  }
  return Status::ok();
}

Status set_cache_type(std::string& out, const std::string& v) {
  if (v != "f16" && v != "f32") {
    return invalid_argument("the KV cache types strata has are f16 and f32, not '" + v + "'");
  }
  out = v;
  return Status::ok();
}

Status set_logit_bias_flag(ServeArgs& a, const std::string& v) {
  // TOKEN_ID+BIAS or TOKEN_ID-BIAS, as llama.cpp's -l.
  const size_t sign = v.find_first_of("+-", 1);
  if (sign == std::string::npos) return invalid_argument("'" + v + "' is not TOKEN_ID(+/-)BIAS");
  STRATA_ASSIGN_OR_RETURN(int64_t id, parse_arg_int(v.substr(0, sign), 0, kMaxI32));
  const std::string b = v.substr(sign);
  double bias = 0;
  if (b == "-inf") {  // bans the token; +inf would make every other token impossible
    bias = -INFINITY;
  } else {
    STRATA_ASSIGN_OR_RETURN(bias, parse_arg_double(b, -1e30, 1e30));
  }
  a.options.defaults.logit_bias.push_back({static_cast<int32_t>(id), static_cast<float>(bias)});
  return Status::ok();
}

Status set_load_mode(ServeArgs& a, const std::string& v) {
  if (v == "auto" || v == "mmap" || v == "mlock" || v == "mmap+mlock") {
    a.options.load.use_mmap = true;
  } else if (v == "none" || v == "dio") {
    a.options.load.use_mmap = false;
  } else {
    return invalid_argument("'" + v + "' is not one of auto, none, mmap, mlock, mmap+mlock, dio");
  }
  return Status::ok();
}

Status set_chat_template_file(ServeArgs& a, const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(a.options.chat_template, read_small_file(path));
  return Status::ok();
}

Status set_kwargs(ServeArgs& a, const std::string& v) {
  const nlohmann::json j = nlohmann::json::parse(v, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument("'" + v + "' is not a JSON object");
  a.options.chat_template_kwargs = v;
  return Status::ok();
}

#define STRATA_FIELD(path) \
  [](ServeArgs & a) -> auto& { return a.path; }

const char* const kNoGpu = "a GPU setting; strata's devices are the CPU and RPC workers";
const char* const kNoPin = "strata does not pin or prioritise its threads";
const char* const kNoSpec = "strata has no speculative decoding";
const char* const kDownload = "strata loads local GGUF files only: download the file, pass -m";
const char* const kNoDry = "strata has no DRY sampler (--dry-multiplier must stay 0)";
const char* const kEngine = "the engine part is not in this build";

std::vector<Row> make_table() {
  std::vector<Row> t;
  auto add = [&t](Row r) { t.push_back(std::move(r)); };
  auto ignored = [&t](std::vector<std::string> names, K kind, const char* note,
                      const char* env = nullptr, S section = S::kCommon,
                      std::vector<std::string> neg = {}, const char* quiet = nullptr) {
    Row r;
    r.names = std::move(names);
    r.negations = std::move(neg);
    r.env = env;
    r.kind = kind;
    r.section = section;
    r.effect = E::kIgnored;
    r.note = note;
    r.quiet_when = quiet;
    t.push_back(std::move(r));
  };
  auto refused = [&t](std::vector<std::string> names, K kind, const char* note,
                      const char* env = nullptr, S section = S::kCommon,
                      std::vector<std::string> neg = {}, const char* quiet = nullptr) {
    Row r;
    r.names = std::move(names);
    r.negations = std::move(neg);
    r.env = env;
    r.kind = kind;
    r.section = section;
    r.effect = E::kRefused;
    r.note = note;
    r.quiet_when = quiet;
    t.push_back(std::move(r));
  };

  // --- Common
  add({{"-h", "--help", "--usage"},
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
  add({{"--version"},
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
  add({{"--list-devices"},
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
  refused({"-cl", "--cache-list"}, K::kSwitch, "strata keeps no model cache");
  ignored({"--completion-bash"}, K::kSwitch, "no completion script");
  add({{"-t", "--threads"},
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
  ignored({"-tb", "--threads-batch"}, K::kValue,
          "one thread pool serves prompts and decoding (-t)");
  for (const char* f : {"-C", "--cpu-mask", "-Cr", "--cpu-range", "--cpu-strict", "--prio",
                        "--poll", "-Cb", "--cpu-mask-batch", "-Crb", "--cpu-range-batch",
                        "--cpu-strict-batch", "--prio-batch", "--poll-batch"}) {
    ignored({f}, K::kValue, kNoPin);
  }
  add({{"-c", "--ctx-size"},
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
  add({{"-n", "--predict", "--n-predict"},
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
  add({{"-b", "--batch-size"},
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
  ignored({"-ub", "--ubatch-size"}, K::kValue, "one batch size: -b", "LLAMA_ARG_UBATCH");
  add({{"--keep"},
       {},
       nullptr,
       K::kValue,
       "N",
       "0",
       "prompt tokens a context shift keeps",
       S::kCommon,
       E::kPending,
       kEngine,
       "0",
       int_to(STRATA_FIELD(options.n_keep), -1, kMaxI32)});
  ignored({"--swa-full"}, K::kSwitch, "the KV cache keeps every position of every layer",
          "LLAMA_ARG_SWA_FULL");
  ignored({"-fa", "--flash-attn"}, K::kValue, "strata's attention is its own kernel",
          "LLAMA_ARG_FLASH_ATTN");
  ignored({"--perf"}, K::kSwitch, "timings are always in responses", "LLAMA_ARG_PERF", S::kCommon,
          {"--no-perf"});
  ignored({"-e", "--escape"}, K::kSwitch, "prompts come over HTTP, unescaped", nullptr, S::kCommon,
          {"--no-escape"});
  for (auto [f, env] : std::vector<std::pair<const char*, const char*>>{
           {"--rope-scaling", "LLAMA_ARG_ROPE_SCALING_TYPE"},
           {"--rope-scale", "LLAMA_ARG_ROPE_SCALE"},
           {"--rope-freq-base", "LLAMA_ARG_ROPE_FREQ_BASE"},
           {"--rope-freq-scale", "LLAMA_ARG_ROPE_FREQ_SCALE"},
           {"--yarn-orig-ctx", "LLAMA_ARG_YARN_ORIG_CTX"},
           {"--yarn-ext-factor", "LLAMA_ARG_YARN_EXT_FACTOR"},
           {"--yarn-attn-factor", "LLAMA_ARG_YARN_ATTN_FACTOR"},
           {"--yarn-beta-slow", "LLAMA_ARG_YARN_BETA_SLOW"},
           {"--yarn-beta-fast", "LLAMA_ARG_YARN_BETA_FAST"}}) {
    refused({f}, K::kValue,
            "the model's own rope settings are used; overriding them is not supported", env);
  }
  ignored({"-kvo", "--kv-offload"}, K::kSwitch, "each layer's KV cache lives on its layer's device",
          "LLAMA_ARG_KV_OFFLOAD", S::kCommon, {"-nkvo", "--no-kv-offload"}, "true");
  ignored({"--repack"}, K::kSwitch, "weights are used in their GGUF layout", "LLAMA_ARG_REPACK",
          S::kCommon, {"-nr", "--no-repack"});
  ignored({"--no-host"}, K::kSwitch, kNoGpu, "LLAMA_ARG_NO_HOST");
  add({{"-ctk", "--cache-type-k"},
       {},
       "LLAMA_ARG_CACHE_TYPE_K",
       K::kValue,
       "TYPE",
       "f16",
       "KV cache type of K: f16 or f32 (the same as V's)",
       S::kCommon,
       E::kApplied,
       "",
       nullptr,
       [](ServeArgs& a, const std::string& v) { return set_cache_type(a.cache_type_k, v); }});
  add({{"-ctv", "--cache-type-v"},
       {},
       "LLAMA_ARG_CACHE_TYPE_V",
       K::kValue,
       "TYPE",
       "f16",
       "KV cache type of V: f16 or f32 (the same as K's)",
       S::kCommon,
       E::kApplied,
       "",
       nullptr,
       [](ServeArgs& a, const std::string& v) { return set_cache_type(a.cache_type_v, v); }});
  ignored({"-dt", "--defrag-thold"}, K::kValue, "deprecated; strata's KV cells are per slot",
          "LLAMA_ARG_DEFRAG_THOLD");
  add({{"--rpc"},
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
  ignored({"--mlock"}, K::kSwitch, "memory is not locked", "LLAMA_ARG_MLOCK", S::kCommon, {},
          "false");
  add({{"--mmap"},
       {"--no-mmap"},
       "LLAMA_ARG_MMAP",
       K::kSwitch,
       "",
       "mmap",
       "use the weights in place in the file's mapping; --no-mmap copies them into memory with "
       "2 MiB pages (faster decode, slower load)",
       S::kCommon,
       E::kApplied,
       "",
       nullptr,
       bool_to(STRATA_FIELD(options.load.use_mmap))});
  ignored({"-dio", "--direct-io"}, K::kSwitch, "files are read through the page cache",
          "LLAMA_ARG_DIO", S::kCommon, {"-ndio", "--no-direct-io"}, "false");
  add({{"-lm", "--load-mode"},
       {},
       "LLAMA_ARG_LOAD_MODE",
       K::kValue,
       "MODE",
       "auto",
       "auto/mmap: map the file; none/dio: copy the weights (mlock is not applied)",
       S::kCommon,
       E::kApplied,
       "",
       nullptr,
       set_load_mode});
  ignored({"--numa"}, K::kValue, kNoPin, "LLAMA_ARG_NUMA");
  add({{"-dev", "--device"},
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
  refused({"-ot", "--override-tensor"}, K::kValue,
          "a tensor's device is its layer's; buffer-type overrides are not supported",
          "LLAMA_ARG_OVERRIDE_TENSOR");
  ignored({"-cmoe", "--cpu-moe"}, K::kSwitch, kNoGpu, "LLAMA_ARG_CPU_MOE");
  ignored({"-ncmoe", "--n-cpu-moe"}, K::kValue, kNoGpu, "LLAMA_ARG_N_CPU_MOE");
  add({{"-ngl", "--gpu-layers", "--n-gpu-layers"},
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
  add({{"-sm", "--split-mode"},
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
  add({{"-ts", "--tensor-split"},
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
  ignored({"-mg", "--main-gpu"}, K::kValue, kNoGpu, "LLAMA_ARG_MAIN_GPU");
  ignored({"-fit", "--fit"}, K::kValue, "placement is checked, not adjusted", "LLAMA_ARG_FIT");
  ignored({"-fitt", "--fit-target"}, K::kValue, kNoGpu, "LLAMA_ARG_FIT_TARGET");
  ignored({"-fitc", "--fit-ctx"}, K::kValue, kNoGpu, "LLAMA_ARG_FIT_CTX");
  ignored({"--check-tensors"}, K::kSwitch, "tensors are checked for shape and bounds, not values");
  refused({"--override-kv"}, K::kValue, "the model's metadata is used as written");
  ignored({"--op-offload"}, K::kSwitch, kNoGpu, nullptr, S::kCommon, {"--no-op-offload"});
  for (const char* f : {"--lora", "--lora-scaled", "--control-vector", "--control-vector-scaled",
                        "--control-vector-layer-range"}) {
    refused({f}, K::kValue, "strata has no LoRA or control vectors");
  }
  add({{"-m", "--model"},
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
  refused({"-mu", "--model-url"}, K::kValue, kDownload, "LLAMA_ARG_MODEL_URL");
  refused({"-dr", "--docker-repo"}, K::kValue, kDownload, "LLAMA_ARG_DOCKER_REPO");
  refused({"-hf", "-hfr", "--hf-repo"}, K::kValue, kDownload, "LLAMA_ARG_HF_REPO");
  refused({"-hff", "--hf-file"}, K::kValue, kDownload, "LLAMA_ARG_HF_FILE");
  // No environment variable: HF_TOKEN is often set for other tools.
  ignored({"-hft", "--hf-token"}, K::kValue, kDownload);
  add({{"--log-disable"},
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
  add({{"--log-file"},
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
  ignored({"--log-colors"}, K::kValue, "the log has no colours", "LLAMA_ARG_LOG_COLORS");
  add({{"-v", "--verbose", "--log-verbose"},
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
  add({{"-lv", "--verbosity", "--log-verbosity"},
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
  add({{"--log-prefix"},
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
  add({{"--log-timestamps"},
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
  add({{"--offline"},
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
  ignored({"--spec-draft-type-k", "-ctkd", "--cache-type-k-draft"}, K::kValue, kNoSpec,
          "LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K");
  ignored({"--spec-draft-type-v", "-ctvd", "--cache-type-v-draft"}, K::kValue, kNoSpec,
          "LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_V");

  // --- Sampling defaults
  refused({"--samplers"}, K::kValue,
          "strata's chain is fixed: penalties, top_k, top_p, min_p, temperature", nullptr,
          S::kSampling);
  refused({"--sampler-seq", "--sampling-seq"}, K::kValue,
          "strata's chain is fixed: penalties, top_k, top_p, min_p, temperature", nullptr,
          S::kSampling);
  add({{"-s", "--seed"},
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
  add({{"--ignore-eos"},
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
  add({{"--temp", "--temperature"},
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
  add({{"--top-k"},
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
  add({{"--top-p"},
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
  add({{"--min-p"},
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
  add({{"--top-nsigma", "--top-n-sigma"},
       {},
       nullptr,
       K::kValue,
       "N",
       "-1",
       "",
       S::kSampling,
       E::kApplied,
       "",
       nullptr,
       only_disabled("top-n-sigma", -1)});
  add({{"--xtc-probability"},
       {},
       nullptr,
       K::kValue,
       "N",
       "0",
       "",
       S::kSampling,
       E::kApplied,
       "",
       nullptr,
       only_disabled("XTC", 0)});
  ignored({"--xtc-threshold"}, K::kValue, "strata has no XTC sampler (--xtc-probability stays 0)",
          nullptr, S::kSampling);
  add({{"--typical", "--typical-p"},
       {},
       nullptr,
       K::kValue,
       "N",
       "1",
       "",
       S::kSampling,
       E::kApplied,
       "",
       nullptr,
       only_disabled("locally typical", 1)});
  add({{"--repeat-last-n"},
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
  add({{"--repeat-penalty"},
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
  add({{"--presence-penalty"},
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
  add({{"--frequency-penalty"},
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
  add({{"--dry-multiplier"},
       {},
       nullptr,
       K::kValue,
       "N",
       "0",
       "",
       S::kSampling,
       E::kApplied,
       "",
       nullptr,
       only_disabled("DRY", 0)});
  for (const char* f :
       {"--dry-base", "--dry-allowed-length", "--dry-penalty-last-n", "--dry-sequence-breaker"}) {
    ignored({f}, K::kValue, kNoDry, nullptr, S::kSampling);
  }
  add({{"--adaptive-target"},
       {},
       nullptr,
       K::kValue,
       "N",
       "-1",
       "",
       S::kSampling,
       E::kApplied,
       "",
       nullptr,
       [](ServeArgs&, const std::string& v) -> Status {
         STRATA_ASSIGN_OR_RETURN(double x, parse_arg_double(v, -1e9, 1e9));
         if (x < 0) return Status::ok();
         return invalid_argument(
             "strata has no adaptive-p sampler; only a negative value is accepted");
       }});
  ignored({"--adaptive-decay"}, K::kValue, "strata has no adaptive-p sampler", nullptr,
          S::kSampling);
  add({{"--dynatemp-range"},
       {},
       nullptr,
       K::kValue,
       "N",
       "0",
       "",
       S::kSampling,
       E::kApplied,
       "",
       nullptr,
       only_disabled("dynamic temperature", 0)});
  ignored({"--dynatemp-exp"}, K::kValue, "strata has no dynamic temperature", nullptr,
          S::kSampling);
  add({{"--mirostat"},
       {},
       nullptr,
       K::kValue,
       "N",
       "0",
       "",
       S::kSampling,
       E::kApplied,
       "",
       nullptr,
       only_disabled("Mirostat", 0)});
  ignored({"--mirostat-lr"}, K::kValue, "strata has no Mirostat sampler", nullptr, S::kSampling);
  ignored({"--mirostat-ent"}, K::kValue, "strata has no Mirostat sampler", nullptr, S::kSampling);
  add({{"-l", "--logit-bias"},
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
  for (const char* f :
       {"--grammar", "--grammar-file", "-j", "--json-schema", "-jf", "--json-schema-file"}) {
    refused({f}, K::kValue, "strata has no grammar or JSON-schema constraints", nullptr,
            S::kSampling);
  }
  ignored({"-bs", "--backend-sampling"}, K::kSwitch, "the server samples on the CPU",
          "LLAMA_ARG_BACKEND_SAMPLING", S::kSampling, {}, "false");

  // --- Server
  ignored({"-lcs", "--lookup-cache-static"}, K::kValue, kNoSpec, nullptr, S::kServer);
  ignored({"-lcd", "--lookup-cache-dynamic"}, K::kValue, kNoSpec, nullptr, S::kServer);
  ignored({"-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"}, K::kValue,
          "the KV cache keeps every position", "LLAMA_ARG_CTX_CHECKPOINTS", S::kServer);
  ignored({"-cms", "--checkpoint-min-step"}, K::kValue, "the KV cache keeps every position",
          "LLAMA_ARG_CHECKPOINT_MIN_SPACING_NT", S::kServer);
  add({{"-cram", "--cache-ram"},
       {},
       "LLAMA_ARG_CACHE_RAM",
       K::kValue,
       "MiB",
       "8192",
       "host cache of evicted prompts (-1: no limit, 0: off)",
       S::kServer,
       E::kPending,
       kEngine,
       nullptr,
       int_to(STRATA_FIELD(options.cache_ram_mib), -1, int64_t{1} << 40)});
  add({{"-kvu", "--kv-unified"},
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
  add({{"--cache-idle-slots"},
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
  add({{"--context-shift"},
       {"--no-context-shift"},
       "LLAMA_ARG_CONTEXT_SHIFT",
       K::kSwitch,
       "",
       "off",
       "when a sequence fills its context, drop its oldest half and go on",
       S::kServer,
       E::kPending,
       kEngine,
       "false",
       bool_to(STRATA_FIELD(options.context_shift))});
  ignored({"-r", "--reverse-prompt"}, K::kValue, "an interactive-mode setting; use 'stop'", nullptr,
          S::kServer);
  add({{"-sp", "--special"},
       {},
       nullptr,
       K::kSwitch,
       "",
       "off",
       "special tokens appear in generated text",
       S::kServer,
       E::kPending,
       "generated special tokens are not rendered yet",
       "false",
       bool_to(STRATA_FIELD(options.special))});
  ignored({"--warmup"}, K::kSwitch, "no warm-up run", nullptr, S::kServer, {"--no-warmup"},
          "false");
  add({{"--spm-infill"},
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
  ignored({"--pooling"}, K::kValue, "strata serves no embeddings", "LLAMA_ARG_POOLING", S::kServer);
  add({{"-np", "--parallel"},
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
  ignored({"-cb", "--cont-batching"}, K::kSwitch, "strata always batches continuously",
          "LLAMA_ARG_CONT_BATCHING", S::kServer, {"-nocb", "--no-cont-batching"}, "true");
  refused({"-mm", "--mmproj"}, K::kValue, "strata has no multimodal input", "LLAMA_ARG_MMPROJ",
          S::kServer);
  refused({"-mmu", "--mmproj-url"}, K::kValue, "strata has no multimodal input",
          "LLAMA_ARG_MMPROJ_URL", S::kServer);
  ignored({"--mmproj-auto"}, K::kSwitch, "strata has no multimodal input", "LLAMA_ARG_MMPROJ_AUTO",
          S::kServer, {"--no-mmproj", "--no-mmproj-auto"}, "false");
  ignored({"--mmproj-offload"}, K::kSwitch, "strata has no multimodal input",
          "LLAMA_ARG_MMPROJ_OFFLOAD", S::kServer, {"--no-mmproj-offload"});
  for (auto [f, env] : std::vector<std::pair<const char*, const char*>>{
           {"--image-min-tokens", "LLAMA_ARG_IMAGE_MIN_TOKENS"},
           {"--image-max-tokens", "LLAMA_ARG_IMAGE_MAX_TOKENS"},
           {"--mtmd-batch-max-tokens", "LLAMA_ARG_MTMD_BATCH_MAX_TOKENS"}}) {
    ignored({f}, K::kValue, "strata has no multimodal input", env, S::kServer);
  }
  add({{"-a", "--alias"},
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
  add({{"--tags"},
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
  ignored({"--embd-normalize"}, K::kValue, "strata serves no embeddings", nullptr, S::kServer);
  add({{"--host"},
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
  add({{"--port"},
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
  add({{"--reuse-port"},
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
  add({{"--path"},
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
    ignored({f}, K::kValue, "no CORS headers are sent", env, S::kServer);
  }
  ignored({"--cors-credentials"}, K::kSwitch, "no CORS headers are sent",
          "LLAMA_ARG_CORS_CREDENTIALS", S::kServer, {"--no-cors-credentials"});
  add({{"--api-prefix"},
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
  ignored({"--ui-config", "--webui-config"}, K::kValue, "strata has no web UI",
          "LLAMA_ARG_UI_CONFIG", S::kServer);
  ignored({"--ui-config-file", "--webui-config-file"}, K::kValue, "strata has no web UI",
          "LLAMA_ARG_UI_CONFIG_FILE", S::kServer);
  ignored({"--ui-mcp-proxy", "--webui-mcp-proxy"}, K::kSwitch, "strata has no web UI",
          "LLAMA_ARG_UI_MCP_PROXY", S::kServer, {"--no-ui-mcp-proxy", "--no-webui-mcp-proxy"},
          "false");
  refused({"--tools"}, K::kValue, "the server runs no tools itself", "LLAMA_ARG_TOOLS", S::kServer);
  refused({"--tools-runtime"}, K::kValue, "the server runs no tools itself",
          "LLAMA_ARG_TOOLS_RUNTIME", S::kServer);
  refused({"--mcp-servers-config"}, K::kValue, "the server runs no tools itself",
          "LLAMA_ARG_MCP_SERVERS_CONFIG", S::kServer);
  refused({"--mcp-servers-json"}, K::kValue, "the server runs no tools itself",
          "LLAMA_ARG_MCP_SERVERS_JSON", S::kServer);
  refused({"-ag", "--agent"}, K::kSwitch, "the server runs no tools itself", "LLAMA_ARG_AGENT",
          S::kServer, {"-no-ag", "--no-agent"}, "false");
  ignored({"--ui", "--webui"}, K::kSwitch, "strata has no web UI", "LLAMA_ARG_UI", S::kServer,
          {"--no-ui", "--no-webui"}, "false");
  refused({"--embedding", "--embeddings"}, K::kSwitch, "strata serves no embeddings",
          "LLAMA_ARG_EMBEDDINGS", S::kServer, {}, "false");
  refused({"--rerank", "--reranking"}, K::kSwitch, "strata serves no reranking",
          "LLAMA_ARG_RERANKING", S::kServer, {}, "false");
  add({{"--api-key"},
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
  add({{"--api-key-file"},
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
  add({{"--ssl-key-file"},
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
  add({{"--ssl-cert-file"},
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
  add({{"--chat-template-kwargs"},
       {},
       "LLAMA_ARG_CHAT_TEMPLATE_KWARGS",
       K::kValue,
       "JSON",
       "{}",
       "extra variables of the chat template, a JSON object",
       S::kServer,
       E::kPending,
       "only Jinja templates read them, and the Jinja engine is not in this build",
       nullptr,
       set_kwargs});
  add({{"-to", "--timeout"},
       {},
       "LLAMA_ARG_TIMEOUT",
       K::kValue,
       "N",
       "3600",
       "read and write timeout of a connection, in seconds",
       S::kServer,
       E::kApplied,
       "",
       nullptr,
       int_to(STRATA_FIELD(options.http.timeout_seconds), 1, 1 << 30)});
  ignored({"--sse-ping-interval"}, K::kValue, "streams send no pings",
          "LLAMA_ARG_SSE_PING_INTERVAL", S::kServer);
  add({{"--threads-http"},
       {},
       "LLAMA_ARG_THREADS_HTTP",
       K::kValue,
       "N",
       "-1: max(8, 2 x slots + 2)",
       "HTTP worker threads",
       S::kServer,
       E::kApplied,
       "",
       nullptr,
       [](ServeArgs& a, const std::string& v) -> Status {
         STRATA_ASSIGN_OR_RETURN(int64_t n, parse_arg_int(v, -1, 1024));
         a.options.http.n_threads = n <= 0 ? 0 : static_cast<int>(n);
         return Status::ok();
       }});
  add({{"--cache-prompt"},
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
  ignored({"--cache-reuse"}, K::kValue, "cached prefixes are reused whole, not shifted in chunks",
          "LLAMA_ARG_CACHE_REUSE", S::kServer, {}, "0");
  add({{"--metrics"},
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
  add({{"--props"},
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
  add({{"--slots"},
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
  add({{"--slot-save-path"},
       {},
       nullptr,
       K::kValue,
       "PATH",
       "",
       "folder of /slots/{id}?action=save|restore files",
       S::kServer,
       E::kPending,
       "saving a slot needs the engine's slot store, not in this build",
       nullptr,
       string_to(STRATA_FIELD(options.slot_save_path))});
  ignored({"--media-path"}, K::kValue, "strata has no multimodal input", nullptr, S::kServer);
  refused({"--models-dir"}, K::kValue, "one model per server: router mode is not in this build",
          "LLAMA_ARG_MODELS_DIR", S::kServer);
  refused({"--models-preset"}, K::kValue, "one model per server: router mode is not in this build",
          "LLAMA_ARG_MODELS_PRESET", S::kServer);
  ignored({"--models-max"}, K::kValue, "one model per server", "LLAMA_ARG_MODELS_MAX", S::kServer);
  ignored({"--models-autoload"}, K::kSwitch, "one model per server", "LLAMA_ARG_MODELS_AUTOLOAD",
          S::kServer, {"--no-models-autoload"});
  add({{"--jinja"},
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
  add({{"--reasoning-format"},
       {},
       "LLAMA_ARG_THINK",
       K::kValue,
       "FORMAT",
       "auto",
       "none, deepseek, deepseek-legacy or auto: where <think> text goes",
       S::kServer,
       E::kPending,
       "reasoning is not split from content in this build",
       "none",
       one_of(STRATA_FIELD(options.reasoning_format),
              {"none", "deepseek", "deepseek-legacy", "auto"})});
  add({{"-rea", "--reasoning"},
       {},
       "LLAMA_ARG_REASONING",
       K::kValue,
       "on|off|auto",
       "auto",
       "thinking in the chat",
       S::kServer,
       E::kPending,
       "reasoning is not split from content in this build",
       "auto",
       one_of(STRATA_FIELD(options.reasoning), {"on", "off", "auto"})});
  ignored({"--reasoning-effort"}, K::kValue, "reasoning is not split from content in this build",
          "LLAMA_ARG_REASONING_EFFORT", S::kServer, {}, "default");
  add({{"--reasoning-budget"},
       {},
       "LLAMA_ARG_THINK_BUDGET",
       K::kValue,
       "N",
       "-1",
       "thinking tokens allowed (-1: unrestricted)",
       S::kServer,
       E::kPending,
       "reasoning is not split from content in this build",
       "-1",
       int_to(STRATA_FIELD(options.reasoning_budget), -1, kMaxI32)});
  ignored({"--reasoning-budget-message"}, K::kValue,
          "reasoning is not split from content in this build", "LLAMA_ARG_THINK_BUDGET_MESSAGE",
          S::kServer);
  ignored({"--reasoning-preserve"}, K::kSwitch, "reasoning is not split from content in this build",
          "LLAMA_ARG_REASONING_PRESERVE", S::kServer, {"--no-reasoning-preserve"});
  add({{"--chat-template"},
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
  add({{"--chat-template-file"},
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
  ignored({"--skip-chat-parsing"}, K::kSwitch, "output is not parsed in this build",
          "LLAMA_ARG_SKIP_CHAT_PARSING", S::kServer, {"--no-skip-chat-parsing"});
  ignored({"--prefill-assistant"}, K::kSwitch, "a final assistant message is not prefilled yet",
          "LLAMA_ARG_PREFILL_ASSISTANT", S::kServer, {"--no-prefill-assistant"});
  add({{"-sps", "--slot-prompt-similarity"},
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
  ignored({"--lora-init-without-apply"}, K::kSwitch, "strata has no LoRA", nullptr, S::kServer);
  add({{"--sleep-idle-seconds"},
       {},
       nullptr,
       K::kValue,
       "SECONDS",
       "-1",
       "free the model's memory after this idle time, reload on the next request (-1: never)",
       S::kServer,
       E::kPending,
       kEngine,
       "-1",
       int_to(STRATA_FIELD(options.sleep_idle_seconds), -1, int64_t{1} << 40)});
  ignored({"--log-prompts-dir"}, K::kValue, "prompts are not logged", nullptr, S::kServer);
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
           {"--spec-draft-n-max"},
           {"--spec-draft-n-min"},
           {"--spec-draft-p-split", "--draft-p-split"},
           {"--spec-draft-p-min", "--draft-p-min"},
           {"--spec-draft-device", "-devd", "--device-draft"},
           {"--spec-draft-ngl", "-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft"},
           {"--spec-draft-model", "-md", "--model-draft"},
           {"--spec-type"},
           {"--spec-ngram-mod-n-min"},
           {"--spec-ngram-mod-n-max"},
           {"--spec-ngram-mod-n-match"},
           {"--spec-ngram-simple-size-n"},
           {"--spec-ngram-simple-size-m"},
           {"--spec-ngram-simple-min-hits"},
           {"--spec-ngram-map-k-size-n"},
           {"--spec-ngram-map-k-size-m"},
           {"--spec-ngram-map-k-min-hits"},
           {"--spec-ngram-map-k4v-size-n"},
           {"--spec-ngram-map-k4v-size-m"},
           {"--spec-ngram-map-k4v-min-hits"},
           {"--draft", "--draft-n", "--draft-max"},
           {"--draft-min", "--draft-n-min"},
           {"--spec-ngram-size-n"},
           {"--spec-ngram-size-m"},
           {"--spec-ngram-min-hits"}}) {
    ignored(std::move(names), K::kValue, kNoSpec, nullptr, S::kServer);
  }
  ignored({"--spec-draft-cpu-moe", "-cmoed", "--cpu-moe-draft"}, K::kSwitch, kNoSpec, nullptr,
          S::kServer);
  ignored({"--spec-draft-backend-sampling"}, K::kSwitch, kNoSpec, nullptr, S::kServer,
          {"--no-spec-draft-backend-sampling"});
  ignored({"--spec-default"}, K::kSwitch, kNoSpec, nullptr, S::kServer);
  for (const char* f : {"--embd-gemma-default", "--fim-qwen-1.5b-default", "--fim-qwen-3b-default",
                        "--fim-qwen-7b-default", "--fim-qwen-7b-spec", "--fim-qwen-14b-spec",
                        "--fim-qwen-30b-default", "--gpt-oss-20b-default", "--gpt-oss-120b-default",
                        "--vision-gemma-4b-default", "--vision-gemma-12b-default"}) {
    refused({f}, K::kSwitch, kDownload, nullptr, S::kServer);
  }

  // --- strata's own
  add({{"--kv-type"},
       {},
       nullptr,
       K::kValue,
       "f16|f32",
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
  add({{"--pipeline-groups"},
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
  add({{"--rpc-token-file"},
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
  return t;
}

#undef STRATA_FIELD

}  // namespace

const std::vector<ArgRow<ServeArgs>>& serve_arg_table() {
  static const std::vector<ArgRow<ServeArgs>> table = make_table();
  return table;
}

Result<ArgReport> parse_serve_args(const std::vector<std::string>& args, const EnvLookup& env,
                                   ServeArgs& out) {
  STRATA_ASSIGN_OR_RETURN(ArgReport report, parse_arg_table(serve_arg_table(), args, env, out));
  if (out.cache_type_k != out.cache_type_v) {
    return invalid_argument("strata keeps K and V in one type: -ctk " + out.cache_type_k +
                            " and -ctv " + out.cache_type_v + " differ");
  }
  out.options.load.kv_dtype = out.cache_type_k == "f32" ? DType::kF32 : DType::kF16;
  // Vertex AI runs the container with AIP_MODE=PREDICTION and names the port and routes.
  const char* aip = env ? env("AIP_MODE") : nullptr;
  if (aip != nullptr && std::string(aip) == "PREDICTION") {
    auto route = [&env](const char* name, const char* fallback) {
      const char* v = env(name);
      return std::string(v != nullptr && *v == '/' ? v : fallback);
    };
    out.options.aip_health_route = route("AIP_HEALTH_ROUTE", "/health");
    out.options.aip_predict_route = route("AIP_PREDICT_ROUTE", "/predict");
    const bool port_given = env("LLAMA_ARG_PORT") != nullptr ||
                            std::find(args.begin(), args.end(), "--port") != args.end();
    if (const char* port = env("AIP_HTTP_PORT"); port != nullptr && !port_given) {
      Result<int64_t> p = parse_arg_int(port, 0, 65535);
      if (!p) return invalid_argument("AIP_HTTP_PORT: " + p.status().message());
      out.options.http.port = static_cast<int>(*p);
    }
  }
  if (out.options.n_groups > out.options.n_slots) {
    return invalid_argument("--pipeline-groups " + std::to_string(out.options.n_groups) +
                            " needs at least as many slots (-np " +
                            std::to_string(out.options.n_slots) + ")");
  }
  return report;
}

std::string serve_help() {
  return "usage: strata serve -m FILE [options]\n"
         "An OpenAI-compatible HTTP server taking llama-server's flags and environment\n"
         "variables (a flag on the command line wins over its variable).\n" +
         arg_table_help(serve_arg_table());
}

}  // namespace strata::server
