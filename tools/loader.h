// Loading a model for the commands: flags shared by run, logits, perplexity and bench.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/context.h"
#include "engine/engine.h"
#include "flags.h"
#include "server/model_load.h"

namespace strata::tools {

// The flags every model-running command takes.
std::vector<std::string> model_flags();
// The switches (flags without a value) every model-running command takes.
std::vector<std::string> model_switches();

using server::Loaded;

// The model flags as options of the library's loader.
Result<server::LoadOptions> load_options(const Flags& flags);

// Opens -m, places it on the devices (-t threads on the CPU) and makes a context of -c cells
// (default: the training context, at most 4096) for n_seq sequences.
Result<Loaded> load_model(const Flags& flags, int32_t n_seq, int64_t min_ctx = 0);

// "1 403 407" -> the ids; a word that is not a non-negative 32-bit integer, or none at all, is
// an error naming --ids.
Result<std::vector<int32_t>> parse_token_ids(const std::string& text);

// A progress bar on stderr (only when stderr is a terminal).
class ProgressBar {
 public:
  explicit ProgressBar(std::string label) : label_(std::move(label)) {}
  ~ProgressBar();
  void update(uint64_t done, uint64_t total);

 private:
  std::string label_;
  int last_percent_ = -1;
  bool drawn_ = false;
};

}  // namespace strata::tools
