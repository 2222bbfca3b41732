// What `strata serve` needs to run as a router of several models (llama-server's router mode):
// started without -m and with --models-dir and/or --models-preset.
#pragma once

#include <string>
#include <vector>

namespace strata::server {

struct RouterOptions {
  std::string models_dir;     // --models-dir: GGUF files, one model each
  std::string models_preset;  // --models-preset: an .ini of models and their flags
  int32_t models_max = 4;     // --models-max: children alive at once; 0: no limit
  bool autoload = true;       // --models-autoload: a request for an unloaded model loads it

  // The router's own command line (after `serve`), inherited by children minus what the
  // router controls (router_child_args).
  std::vector<std::string> args;
  // The binary children run as `EXE serve ...`; tests point it at the built `strata`.
  std::string exe = "/proc/self/exe";
  // How long a child may take from start to listening before it counts as failed.
  int32_t load_timeout_s = 600;

  bool enabled() const { return !models_dir.empty() || !models_preset.empty(); }
};

}  // namespace strata::server
