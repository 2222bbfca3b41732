// The rows of `strata serve`'s flag table, by section (serve_args_common.cc,
// serve_args_server.cc), and the setters they share. Internal to serve_args*.cc.
#pragma once

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "server/serve_args.h"

namespace strata::server::serve_rows {

using Row = ArgRow<ServeArgs>;
using Setter = std::function<Status(ServeArgs&, const std::string&)>;
using E = ArgEffect;
using K = ArgKind;
using S = ArgSection;

inline constexpr int64_t kMaxI32 = std::numeric_limits<int32_t>::max();

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
Setter only_disabled(const char* what, double disabled);
Status add_keys(ServeArgs& a, const std::string& list);
Status add_key_file(ServeArgs& a, const std::string& path);
Status set_split(ServeArgs& a, const std::string& v);
Status set_gpu_layers(ServeArgs& a, const std::string& v);
Status set_fit_target(ServeArgs& a, const std::string& v);
// Adds the CPUs of a hex mask (-C) or a range list (-Cr) to `cpus`; a CPU that does not exist
// on this machine is an error.
Status add_cpus(std::vector<int>& cpus, const std::string& v, bool mask);
Status set_cache_type(std::string& out, const std::string& v);
Status set_logit_bias_flag(ServeArgs& a, const std::string& v);
Status set_load_mode(ServeArgs& a, const std::string& v);
Status set_chat_template_file(ServeArgs& a, const std::string& path);
Status set_kwargs(ServeArgs& a, const std::string& v);
// --grammar / -j (schema: a JSON schema), and their -file forms: the grammar of every request
// that brings none of its own.
Status set_default_grammar(ServeArgs& a, const std::string& text, bool schema);
Status set_default_grammar_file(ServeArgs& a, const std::string& path, bool schema);

// Rows of flags accepted and reported as ignored, or refused, with the reason.
void ignored(std::vector<Row>& t, std::vector<std::string> names, K kind, const char* note,
             const char* env = nullptr, S section = S::kCommon, std::vector<std::string> neg = {},
             const char* quiet = nullptr);
void refused(std::vector<Row>& t, std::vector<std::string> names, K kind, const char* note,
             const char* env = nullptr, S section = S::kCommon, std::vector<std::string> neg = {},
             const char* quiet = nullptr);

void add_common_rows(std::vector<Row>& t);    // llama.cpp's common flags
void add_sampling_rows(std::vector<Row>& t);  // sampling defaults
void add_server_rows(std::vector<Row>& t);    // llama-server's own, then strata's

inline constexpr const char* kNoGpu = "a GPU setting; strata's devices are the CPU and RPC workers";
inline constexpr const char* kNoPin =
    "strata places no memory by NUMA node; pin the threads with --cpu-mask or --cpu-range";
inline constexpr const char* kNoSpec =
    "strata's server drafts with -md's model on the local CPU, or from n-grams";
inline constexpr const char* kDownload =
    "strata loads local GGUF files only: download the file, pass -m";
inline constexpr const char* kEngine = "the engine part is not in this build";

}  // namespace strata::server::serve_rows

// A setter's target: a field of ServeArgs.
#define STRATA_FIELD(path) \
  [](ServeArgs & a) -> auto& { return a.path; }
