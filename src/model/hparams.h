// Hyperparameters of a model, read from GGUF metadata and checked: the keys every
// architecture shares here, its own ones in its ArchDef (model/arch.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/ops.h"
#include "core/ops_moe.h"
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

  // Sliding-window attention: layer il attends to its last n_swa positions when
  // il % swa_pattern < swa_pattern - 1 (Gemma 2: every other layer; Gemma 3: five of six).
  int64_t n_swa = 0;
  int64_t swa_pattern = 0;  // 0: no sliding layers
  // The rope of sliding layers, where it differs (Gemma 3: base 10000, no scaling); 0: as the
  // others.
  float rope_freq_base_swa = 0.0f;
  float rope_freq_scale_swa = 0.0f;
  float attn_scale = 0.0f;     // scores = q.k * attn_scale; 0: 1 / sqrt(head_dim)
  float attn_softcap = 0.0f;   // scores = cap * tanh(scores / cap); 0: none (Gemma 2)
  float final_softcap = 0.0f;  // the same on the logits (Gemma 2)
  float embd_scale = 0.0f;     // token embeddings times this; 0: none (Gemma: sqrt(n_embd))

  // Mixture of experts; n_expert = 0: a dense feed-forward network. Each token's FFN output is
  // the weighted sum of the n_expert_used experts of largest router logit; the weights are
  // expert_gating of the logits, divided by their sum when expert_weights_norm, times
  // expert_weights_scale.
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;  // one expert's feed-forward width
  MoeGating expert_gating = MoeGating::kSoftmax;
  bool expert_weights_norm = false;
  float expert_weights_scale = 1.0f;
  // The experts' activation: SwiGLU, or with a limit > 0 gpt-oss's clamped variant
  // (swiglu_oai, core/ops_act.h) with these constants.
  float swiglu_oai_alpha = 0.0f;
  float swiglu_oai_limit = 0.0f;

  int64_t n_embd_q() const { return n_head * head_dim; }
  int64_t n_embd_kv() const { return n_head_kv * head_dim; }
  bool is_swa(int64_t il) const {
    return n_swa > 0 && swa_pattern > 0 && il % swa_pattern < swa_pattern - 1;
  }
  // Layers of kind 1 (sliding, with their own rope) and kind 0 (the others).
  int rope_kind(int64_t il) const { return is_swa(il) && rope_freq_base_swa > 0 ? 1 : 0; }
  float rope_base(int kind) const { return kind == 1 ? rope_freq_base_swa : rope_freq_base; }
  float rope_scale(int kind) const { return kind == 1 ? rope_freq_scale_swa : rope_freq_scale; }
};

// Metadata readers for architectures' own keys: an integer in [1, limit], or a finite positive
// float; the fallback when the key is absent (without one, an absent key is an error).
Result<int64_t> get_dim(const GgufFile& f, const std::string& key, uint64_t limit,
                        std::optional<uint64_t> fallback = std::nullopt);
Result<float> get_positive(const GgufFile& f, const std::string& key, float fallback);

// Reads and checks the hyperparameters; an unsupported architecture or value is an error that
// names the key and the value.
Result<HParams> hparams_from_gguf(const GgufFile& file);

}  // namespace strata
