// The models a router serves and the command line of each one's child server.
//
// Sources, as llama-server's router has them: GGUF files in --models-dir (a file is a model
// named after the file without ".gguf"; a folder holding one model file is a model named after
// the folder), and sections of a --models-preset .ini file. Every model's child gets, in this
// order (a flag given twice keeps its last value, so later wins): the preset's global section
// [*], the model's own section, the router's command line, then what the router controls
// (the model file, 127.0.0.1, a free port, the model's name as alias).
//
// Non-goals: Hugging Face cache models (strata never downloads), multimodal projectors,
// multi-shard files.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace strata::server {

struct ModelSource {
  std::string name;               // what requests name in "model"
  std::string path;               // the GGUF file
  std::vector<std::string> args;  // flags from the preset: global section first, then the model's
  bool load_on_startup = false;   // preset-only key load-on-startup
  int stop_timeout_s = 10;        // preset-only key stop-timeout: SIGTERM, then SIGKILL after it
};

// The GGUF files of `dir`, sorted by name. A missing folder is an error.
Result<std::vector<ModelSource>> models_dir_scan(const std::string& dir);

// A parsed preset file: the global section's flags and one source per other section. Keys are
// llama-server's flags without dashes ("ctx-size"), their short forms ("c") or their
// environment variables ("LLAMA_ARG_CTX_SIZE"); each is checked against `strata serve`'s flag
// table, and an error names the file, the line and the key.
struct Preset {
  std::vector<std::string> global_args;
  std::vector<ModelSource> models;  // path empty when the section names a --models-dir model
};
Result<Preset> preset_parse(const std::string& text, const std::string& file_name);
Result<Preset> preset_load(const std::string& file);

// The models of both sources: a preset section named like a --models-dir model adds its flags
// to that model; one naming an unknown model must give `model = PATH`. Global flags go first.
Result<std::vector<ModelSource>> models_catalog(const std::string& dir,
                                                const std::string& preset_file);

// Flags of the router's own command line that a child must not inherit: the router's address,
// keys, TLS, sources and limits, and per-model names. Their environment variables too.
bool router_reserved_flag(const std::string& spelled);
std::vector<std::string> router_reserved_env();

// The router's command line without its reserved flags (values included).
Result<std::vector<std::string>> router_child_args(const std::vector<std::string>& router_args);

// argv of a child (without the executable): `source.args`, `inherited`, then the controlled
// flags. Secrets never go here (the command line is readable by every user of the machine).
std::vector<std::string> child_command(const ModelSource& source,
                                       const std::vector<std::string>& inherited);

}  // namespace strata::server
