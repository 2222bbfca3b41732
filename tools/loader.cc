#include "loader.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>

namespace strata::tools {

std::vector<std::string> model_switches() {
  return {"--mmap", "--no-mmap", "--repack", "-nr", "--no-repack"};
}

std::vector<std::string> model_flags() {
  std::vector<std::string> flags = {"-m|--model",         "-t|--threads", "-c|--ctx-size",
                                    "-b|--batch-size",    "--kv-type",    "--device|-dev",
                                    "--tensor-split|-ts", "--rpc",        "--rpc-token-file"};
  for (const server::RopeFlag& f : server::rope_flags()) flags.emplace_back(f.name);
  flags.emplace_back("--override-kv");
  return flags;
}

namespace {

Result<std::vector<double>> parse_split(const std::string& text) {
  std::vector<double> split;
  for (const std::string& item : server::split_commas(text)) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !(v >= 0) || v > 1e9) {
      return invalid_argument("--tensor-split: '" + item + "' is not a share >= 0");
    }
    split.push_back(v);
  }
  return split;
}

}  // namespace

Result<server::LoadOptions> load_options(const Flags& flags) {
  const std::optional<std::string> path = flags.get("-m");
  if (!path) return invalid_argument("-m FILE is required");
  server::LoadOptions o;
  o.model_path = *path;
  const int64_t hw = std::max<int64_t>(1, std::thread::hardware_concurrency());
  STRATA_ASSIGN_OR_RETURN(int64_t threads, flags.get_int("-t", hw, 1, 1024));
  o.n_threads = static_cast<int>(threads);
  STRATA_ASSIGN_OR_RETURN(o.n_batch, flags.get_int("-b", 512, 1, 1 << 16));
  const std::string kv_name = flags.get_or("--kv-type", "f16");
  std::optional<DType> kv = dtype_from_name(kv_name);
  if (!kv || !kv_dtype_supported(*kv)) {
    return invalid_argument("--kv-type must be f16, f32 or q8_0, not '" + kv_name + "'");
  }
  o.kv_dtype = *kv;
  if (std::optional<std::string> v = flags.get("--override-kv")) {
    STRATA_RETURN_IF_ERROR(
        server::add_kv_overrides(o.kv_overrides, *v).with_context("--override-kv"));
  }
  for (const server::RopeFlag& f : server::rope_flags()) {
    if (std::optional<std::string> v = flags.get(f.name)) {
      STRATA_RETURN_IF_ERROR(server::set_rope_flag(o.rope, f.name, *v).with_context(f.name));
    }
  }
  STRATA_ASSIGN_OR_RETURN(o.n_ctx, flags.get_int("-c", 0, 0, 1 << 24));
  if (std::optional<std::string> list = flags.get("--rpc")) o.rpc = server::split_commas(*list);
  o.rpc_token_file = flags.get_or("--rpc-token-file", "");
  o.devices = flags.get("--device");
  if (std::optional<std::string> ts = flags.get("--tensor-split")) {
    STRATA_ASSIGN_OR_RETURN(o.tensor_split, parse_split(*ts));
  }
  if (flags.has("--mmap")) o.use_mmap = true;
  if (flags.has("--no-mmap")) o.use_mmap = false;
  if (flags.has("-nr") || flags.has("--no-repack")) o.repack = false;
  o.backend_sampling = flags.has("--backend-sampling");  // for the commands that sample
  return o;
}

Result<Loaded> load_model(const Flags& flags, int32_t n_seq, int64_t min_ctx) {
  STRATA_ASSIGN_OR_RETURN(server::LoadOptions o, load_options(flags));
  o.min_ctx = min_ctx;
  ProgressBar bar("loading " + o.model_path);
  o.progress = [&bar](uint64_t done, uint64_t total) { bar.update(done, total); };
  return server::load_model(o, n_seq);
}

Result<std::vector<int32_t>> parse_token_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    char* end = nullptr;
    const long v = std::strtol(word.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v > INT32_MAX) {
      return invalid_argument("--ids: '" + word + "' is not a token id");
    }
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) return invalid_argument("--ids is empty");
  return ids;
}

ProgressBar::~ProgressBar() {
  if (drawn_) std::fprintf(stderr, "\n");
}

void ProgressBar::update(uint64_t done, uint64_t total) {
  if (total == 0 || !isatty(STDERR_FILENO)) return;
  const int percent = static_cast<int>(done * 100 / total);
  if (percent == last_percent_) return;
  last_percent_ = percent;
  drawn_ = true;
  const int width = 40;
  const int filled = percent * width / 100;
  std::fprintf(stderr, "\r%s [%.*s%*s] %3d%%", label_.c_str(), filled,
               "========================================", width - filled, "", percent);
  std::fflush(stderr);
}

}  // namespace strata::tools
