#include "server/serve_args.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "engine/engine.h"
#include "engine/grammar.h"
#include "server/json_schema_grammar.h"
#include "server/serve_args_rows.h"

namespace strata::server {
namespace serve_rows {
namespace {

// Files a flag names (API keys, chat templates) are read whole: a template is a few KiB.
constexpr std::streamsize kMaxFlagFileBytes = 1 << 20;

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

Row inert_row(std::vector<std::string> names, K kind, const char* note, const char* env, S section,
              std::vector<std::string> neg, const char* quiet, E effect) {
  Row r;
  r.names = std::move(names);
  r.negations = std::move(neg);
  r.env = env;
  r.kind = kind;
  r.section = section;
  r.effect = effect;
  r.note = note;
  r.quiet_when = quiet;
  return r;
}

}  // namespace

void ignored(std::vector<Row>& t, std::vector<std::string> names, K kind, const char* note,
             const char* env, S section, std::vector<std::string> neg, const char* quiet) {
  t.push_back(
      inert_row(std::move(names), kind, note, env, section, std::move(neg), quiet, E::kIgnored));
}

void refused(std::vector<Row>& t, std::vector<std::string> names, K kind, const char* note,
             const char* env, S section, std::vector<std::string> neg, const char* quiet) {
  t.push_back(
      inert_row(std::move(names), kind, note, env, section, std::move(neg), quiet, E::kRefused));
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

Status set_fit_target(ServeArgs& a, const std::string& v) {
  std::vector<uint64_t> margins;
  for (const std::string& part : split_commas(v)) {
    STRATA_ASSIGN_OR_RETURN(int64_t mib, parse_arg_int(part, 0, int64_t{1} << 30));
    margins.push_back(static_cast<uint64_t>(mib) << 20);
  }
  a.options.load.fit.margins = std::move(margins);
  return Status::ok();
}

Status add_cpus(std::vector<int>& cpus, const std::string& v, bool mask) {
  Result<std::vector<int>> more = mask ? cpu_list_from_mask(v) : cpu_list_from_range(v);
  if (!more.is_ok()) return more.status();
  const int n = cpu_count();
  for (int c : *more) {
    if (c >= n) {
      return invalid_argument("CPU " + std::to_string(c) + " does not exist: this machine has " +
                              std::to_string(n) + " CPUs (0-" + std::to_string(n - 1) + ")");
    }
    cpus.push_back(c);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return Status::ok();
}

Status set_cache_type(std::string& out, const std::string& v) {
  if (const std::optional<DType> t = dtype_from_name(v); !t || !kv_dtype_supported(*t)) {
    return invalid_argument("the KV cache types strata has are f16, f32 and q8_0, not '" + v + "'");
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
  if (v == "auto") {
    a.options.load.use_mmap.reset();
  } else if (v == "mmap" || v == "mlock" || v == "mmap+mlock") {
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

Status set_default_grammar(ServeArgs& a, const std::string& text, bool schema) {
  std::string gbnf = text;
  if (schema) {
    const auto j = nlohmann::ordered_json::parse(text, nullptr, false);
    if (j.is_discarded()) return invalid_argument("the JSON schema is not JSON");
    STRATA_ASSIGN_OR_RETURN(gbnf, json_schema_to_gbnf(j));
  }
  STRATA_ASSIGN_OR_RETURN(a.options.defaults.grammar, Grammar::parse(gbnf));
  return Status::ok();
}

Status set_default_grammar_file(ServeArgs& a, const std::string& path, bool schema) {
  STRATA_ASSIGN_OR_RETURN(std::string text, read_small_file(path));
  return set_default_grammar(a, text, schema).with_context(path);
}

Status set_kwargs(ServeArgs& a, const std::string& v) {
  const nlohmann::json j = nlohmann::json::parse(v, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument("'" + v + "' is not a JSON object");
  a.options.chat_template_kwargs = v;
  return Status::ok();
}

}  // namespace serve_rows

namespace {

std::vector<ArgRow<ServeArgs>> make_table() {
  std::vector<ArgRow<ServeArgs>> t;
  serve_rows::add_common_rows(t);
  serve_rows::add_sampling_rows(t);
  serve_rows::add_server_rows(t);
  return t;
}

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
  out.options.load.kv_dtype = *dtype_from_name(out.cache_type_k);  // set_cache_type checked it
  out.options.threads.n_threads = out.options.load.n_threads;
  ThreadPoolOptions& batch = out.options.threads_batch;
  batch = out.options.threads;
  if (out.threads_batch) batch.n_threads = *out.threads_batch;
  if (out.cpus_batch) batch.cpus = *out.cpus_batch;
  if (out.strict_batch) batch.strict = *out.strict_batch;
  if (out.poll_batch) batch.poll = *out.poll_batch;
  batch.priority = out.prio_batch;
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
         "       strata serve --models-dir DIR | --models-preset FILE.ini [options]  (router)\n"
         "An OpenAI-compatible HTTP server taking llama-server's flags and environment\n"
         "variables (a flag on the command line wins over its variable).\n" +
         arg_table_help(serve_arg_table());
}

}  // namespace strata::server
