// Hyperparameters of a model, read from GGUF metadata and checked: the keys every
// architecture shares here, its own ones in its ArchDef (model/arch.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

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

// llama.cpp's rope flags, over what the file says (unset: the file's value). Qwen's model cards,
// for one, extend the context with `--rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 32768`.
struct RopeOverrides {
  std::optional<RopeScaling> type;        // --rope-scaling none|linear|yarn
  std::optional<float> freq_base;         // --rope-freq-base
  std::optional<float> scale;             // --rope-scale N: freq_scale = 1 / N
  std::optional<float> freq_scale;        // --rope-freq-scale
  std::optional<int64_t> yarn_orig_ctx;   // --yarn-orig-ctx; 0: the file's
  std::optional<float> yarn_ext_factor;   // --yarn-ext-factor
  std::optional<float> yarn_attn_factor;  // --yarn-attn-factor
  std::optional<float> yarn_beta_slow;    // --yarn-beta-slow
  std::optional<float> yarn_beta_fast;    // --yarn-beta-fast

  bool empty() const {
    return !type && !freq_base && !scale && !freq_scale && !yarn_orig_ctx && !yarn_ext_factor &&
           !yarn_attn_factor && !yarn_beta_slow && !yarn_beta_fast;
  }
};

// The name of a rope scaling type as the flags and GGUF spell it, and back (none, linear, yarn,
// longrope).
const char* rope_scaling_name(RopeScaling t);
std::optional<RopeScaling> rope_scaling_from_name(std::string_view name);

// Applies `o` to hp as llama.cpp's context applies its flags:
// - `none` never scales (freq_scale 1, whatever else says);
// - base and scale change the layers of kind 0 only: sliding layers keep the rope they were
//   trained with (llama.cpp's rope_freq_base_train_swa), their own where the file gives one;
// - the YaRN ramp's flags take effect with YaRN only, so they are refused with another type
//   rather than ignored; --yarn-attn-factor replaces rope.scaling.attn_factor, to which YaRN's
//   magnitude correction 1 + 0.1 ln(factor) still applies.
// Refused with the flag's name: a value outside its range, --rope-scale with --rope-freq-scale,
// and a LongRoPE model's type or scale (its factors come from the file).
Status apply_rope_overrides(const RopeOverrides& o, HParams& hp);

}  // namespace strata
