// Rope scaling, as GGUF metadata describes it, turned into one table per layer kind.
//
// Every rope variant llama.cpp reads (linear scaling, Llama 3.1's per-frequency divisors in
// rope_freqs.weight, YaRN, Phi-3's LongRoPE short/long factors) rotates pair i of a head by
// theta_i = pos * rate_i and scales cos and sin by one factor, mscale. So the host computes
// rate_i (in double, once per model and layer kind) and the device's rope op only multiplies:
// a new variant is a new way to fill the table, never a new kernel or a new worker.
//
// Models without any of these keep the plain rope op (freq_base, freq_scale as parameters),
// whose results are unchanged.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace strata {

enum class RopeScaling : uint8_t { kNone, kLinear, kYarn, kLongrope };

struct RopeScalingParams {
  RopeScaling type = RopeScaling::kNone;
  float attn_factor = 1.0f;      // rope.scaling.attn_factor: multiplies cos and sin
  int64_t n_ctx_orig = 0;        // rope.scaling.original_context_length (else n_ctx_train)
  float yarn_ext_factor = 1.0f;  // YaRN: how much of the ramp extrapolates (0: none)
  float yarn_beta_fast = 32.0f;  // YaRN: the ramp's ends, in rotations over n_ctx_orig
  float yarn_beta_slow = 1.0f;
};

struct RopeTable {
  std::vector<float> rate;  // [n_rot / 2]: theta_i = pos * rate[i]
  float mscale = 1.0f;      // cos and sin are multiplied by it
};

// The table for pairs of n_rot dims with the given base and linear scale (1 / factor).
// freq_factors, when not empty, holds n_rot / 2 divisors of the frequencies (rope_freqs.weight
// or a LongRoPE factor tensor); they must be finite and positive (checked by the caller).
RopeTable rope_table(int64_t n_rot, float freq_base, float freq_scale,
                     std::span<const float> freq_factors, const RopeScalingParams& s);

}  // namespace strata
