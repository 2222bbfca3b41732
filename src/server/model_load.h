// Loading a model onto its devices: the local CPU and the `strata worker`s named by --rpc, in
// stage order, with the layers shared by a split. Used by the server and by the other commands.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/context.h"
#include "engine/engine.h"

namespace strata::server {

struct LoadOptions {
  std::string model_path;
  int n_threads = 0;      // CPU threads; 0: all cores
  int64_t n_ctx = 0;      // KV cells in total; 0: the training context, at most 4096
  int64_t min_ctx = 0;    // at least this many cells whatever n_ctx says
  int64_t n_batch = 512;  // most tokens per decode step
  DType kv_dtype = DType::kF16;
  RopeOverrides rope;                  // llama.cpp's --rope-* and --yarn-* flags
  std::vector<GgufKv> kv_overrides;    // llama.cpp's --override-kv, in order (the last wins)
  std::vector<std::string> rpc;        // worker endpoints, devices RPC0, RPC1... in this order
  std::string rpc_token_file;          // the workers' shared secret ("" : none, or the env's)
  std::optional<std::string> devices;  // comma list in stage order; default: RPCs, then CPU
  std::vector<double> tensor_split;    // share of the layers per device, in stage order
  // Layers on devices other than the CPU (llama.cpp's -ngl); the CPU keeps the rest. With a
  // tensor split, the non-CPU devices share these layers in its proportions. Unset: the split
  // (or free memory) decides alone.
  std::optional<int64_t> n_gpu_layers;
  // Read the weights where the file is mapped (true) or copy them into the device's memory
  // (false); unset (--load-mode auto): copy when they fit easily, see weights_mapped().
  std::optional<bool> use_mmap;
  // Copied weights in a device layout where the device offers one (EngineOptions::repack).
  bool repack = true;
  // Workers must run the key re-rotation of a context shift (checked when the split is made).
  bool context_shift = false;
  // The last stage's device must run the sample op (checked when the split is made).
  bool backend_sampling = false;
  ProgressFn progress;
  // Contexts that will share the n_ctx cells (the server's pipeline groups), each with its own
  // step buffers: the memory check counts them all.
  int32_t n_contexts = 1;
  // Make the context for n_seq sequences (with one context); false: the caller makes its own.
  bool make_context = true;
  // That context's outputs are embeddings (ContextParams::embeddings), not logits.
  bool embeddings = false;
  // The CPU's memory for the plan and its buffers, in bytes; 0: what the machine has free
  // (MemAvailable, under this process's cgroup limit).
  uint64_t cpu_memory_limit = 0;
  // --fit: when the plan does not fit (keeping `margins` free per device), lower the context
  // (not below min_ctx) and then the contexts, instead of refusing.
  struct Fit {
    bool on = false;
    std::vector<uint64_t> margins = {uint64_t{1024} << 20};  // bytes; one value: every device
    int64_t min_ctx = 4096;
  } fit;
};

// llama.cpp's rope flags: name, LLAMA_ARG_* variable, value and help, in llama-server's order.
struct RopeFlag {
  const char* name;
  const char* env;
  const char* value;
  const char* help;
};
const std::vector<RopeFlag>& rope_flags();
// Sets the override of `flag` (a name of rope_flags()) from its text, checked against its range
// (the caller names the flag in an error, as the flag parsers do). llama.cpp's "from the model"
// values leave it unset: 0 for
// --rope-freq-base, --rope-freq-scale and --yarn-orig-ctx, a negative value for the other
// --yarn-* flags.
Status set_rope_flag(RopeOverrides& o, std::string_view flag, const std::string& text);

// Appends the overrides of an --override-kv value, KEY=TYPE:VALUE[,KEY=TYPE:VALUE...]
// (model/gguf.h, parse_kv_override); an error names the one that is wrong.
Status add_kv_overrides(std::vector<GgufKv>& out, const std::string& text);

// Whether weights of `weight_bytes` are used in place in the file's mapping, for `use_mmap`
// (unset: auto) and `free_bytes` of the CPU's memory. Auto copies them (2 MiB pages, which a
// matmul streams faster than the page cache's 4 KiB ones: batch-1 decode measured 5-15% faster)
// when they take at most half the free memory; larger models stay mapped, so that one larger
// than memory still runs from the page cache.
bool weights_mapped(std::optional<bool> use_mmap, uint64_t weight_bytes, uint64_t free_bytes);

struct Loaded {
  std::unique_ptr<Engine> engine;
  // The context for n_seq sequences; null with several contexts (the caller makes them).
  std::unique_ptr<Context> context;
  int64_t n_ctx = 0;       // KV cells over all contexts, as planned
  int32_t n_contexts = 1;  // as planned: fewer than asked when --fit dropped some
  std::string fit_note;    // what --fit changed; empty when it changed nothing
};

// Opens the model, places it on the devices and makes a context for n_seq sequences. The memory
// every device needs is checked before any weight is read (see engine/placement.h).
Result<Loaded> load_model(const LoadOptions& options, int32_t n_seq);
// The same with a model already open (the weights of `model` are not read before the check).
Result<Loaded> load_model(std::unique_ptr<Model> model, const LoadOptions& options, int32_t n_seq);

// "a,b,c" -> {"a", "b", "c"}; "" -> {""}.
std::vector<std::string> split_commas(const std::string& text);

}  // namespace strata::server
