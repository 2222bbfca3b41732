// Synthetic llama-family models: a valid GGUF of any shape with seeded random weights and a
// complete tokenizer, so that tests and benchmarks need no download. gpt-oss files default to
// the released models' rope (base 150000, YaRN factor 32 over 4096 positions) and window (128).
//
// Goals: the same parameters give a byte-identical file on every platform (own RNG, no
// std:: distributions, no libm); tensor names, shapes and metadata as llama.cpp expects;
// weights scaled so activations stay O(1) through the layers; memory use of one tensor at a
// time while writing. Non-goal: weights that produce sensible text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "model/gguf_writer.h"

namespace strata {

struct SynthParams {
  std::string arch = "llama";  // an architecture of arch_names()
  int64_t n_embd = 256;
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_head_kv = 2;
  int64_t n_ff = 768;
  int64_t n_vocab = 512;
  int64_t n_ctx = 2048;
  int64_t head_dim = 0;       // 0: n_embd / n_head
  DType dtype = DType::kF32;  // of the 2-D weights; norms and biases are always F32
  // A llama-quantize mix instead of one dtype: "q4_K_M", "q5_K_M" or "q3_K_M" (its base type
  // for most matrices, q6_K for the output and, on some layers, attn_v and ffn_down, by
  // llama.cpp's rules). Empty: every matrix is `dtype`.
  std::string mix;
  uint64_t seed = 1;
  double rope_freq_base = 0;  // 0: 10000 for llama, 1e6 for qwen, 150000 for gpt-oss
  double rms_eps = 0;         // 0: 1e-5 for llama, 1e-6 for qwen
  bool tied_output = false;   // no output.weight: the output reuses token_embd.weight

  // Rope variants, written as llama.cpp's converters write them.
  int64_t n_rot = 0;            // rope.dimension_count; 0: head_dim (less: partial rotary)
  std::string rope_scaling;     // rope.scaling.type: "" (none written), linear, yarn, longrope
  double rope_factor = 0;       // rope.scaling.factor (0: not written)
  int64_t rope_orig_ctx = 0;    // rope.scaling.original_context_length (0: not written)
  double rope_attn_factor = 0;  // rope.scaling.attn_factor (0: not written)
  bool rope_freqs = false;      // Llama 3.1's rope_freqs.weight, computed as its converter does
  // Gemma, gpt-oss: attention.sliding_window (0: the architecture's default) and the soft-caps.
  int64_t n_swa = 0;
  double attn_softcap = 0;   // attn_logit_softcapping (0: 50 for gemma2)
  double final_softcap = 0;  // final_logit_softcapping (0: 30 for gemma2)
  // Mixture of experts: n_expert experts of width n_ff_exp, n_expert_used of them per token.
  // qwen3moe needs them; llama with them is Mixtral-style (its experts are n_ff wide, so
  // n_ff_exp is 0 or n_ff); 0 experts elsewhere.
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;  // 0: n_ff
  // The experts' matrices (ffn_*_exps), when not `dtype`: gpt-oss as released has mxfp4
  // experts beside q8_0 matrices (llama.cpp's file type "MXFP4 MoE").
  std::optional<DType> expert_dtype;

  // A scripted model (llama only): greedy decoding says these pieces, one token each, then
  // EOS, whatever the prompt, so that tests of what consumes a model's output (tool-call and
  // reasoning parsers, stop strings, clients) have a real model with a known reply. The pieces
  // are the vocabulary's last tokens; weights are exact: one-hot embeddings, layers that add
  // nothing (zero matrices, unit norms), and an output matrix whose row for token s is one at
  // each token whose successor s is (after piece i comes piece i + 1; after any other token,
  // piece 0; after the last piece, EOS). Needs n_embd >= n_vocab. A prompt that ends in one
  // of the pieces continues the script from there.
  std::vector<std::string> script;
};

// Smallest n_vocab: the special tokens, 256 byte tokens and the first pieces.
inline constexpr int64_t kSynthMinVocab = 260;

// Checks shapes, block sizes and limits; errors name the parameter or tensor at fault.
Status synth_validate(const SynthParams& p);

// Metadata, tokenizer and tensors, ready to write; tensor data is produced at write time.
Result<GgufWriter> synth_model(const SynthParams& p);

// synth_model(p) written to `path`.
Status synth_write(const SynthParams& p, const std::string& path);

}  // namespace strata
