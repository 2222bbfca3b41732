// Hyperparameters of a model, read from GGUF metadata and checked: the keys every
// architecture shares here, its own ones in its ArchDef (model/arch.h).
#pragma once

#include <cstdint>
#include <string>

#include "core/ops.h"
#include "core/status.h"
#include "model/rope.h"

namespace strata {

class GgufFile;
struct ArchDef;

struct HParams {
  const ArchDef* arch = nullptr;  // never null once read
  std::string arch_name;
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;  // key/value length per head
  int64_t n_ff = 0;
  int64_t n_rot = 0;
  float rms_eps = 1e-5f;
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;
  RopeMode rope_mode = RopeMode::kNormal;
  RopeScalingParams rope_scaling;

  int64_t n_embd_q() const { return n_head * head_dim; }
  int64_t n_embd_kv() const { return n_head_kv * head_dim; }
};

// Reads and checks the hyperparameters; an unsupported architecture or value is an error that
// names the key and the value.
Result<HParams> hparams_from_gguf(const GgufFile& file);

}  // namespace strata
