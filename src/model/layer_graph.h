// The building blocks an architecture's layer is made of, over a GraphBuilder: projections,
// norms, self-attention over the KV cache and gated feed-forward networks. The engine makes one
// LayerGraph per stage graph; an ArchDef's build_layer composes its blocks.
#pragma once

#include <cstdint>
#include <functional>

#include "graph/builder.h"
#include "model/hparams.h"

namespace strata {

struct GgufTensorInfo;
struct LayerWeights;

// Graph tensors a layer reads besides the residual stream: step inputs and its KV cache.
struct LayerInputs {
  int64_t layer = 0;     // the layer's index in the model
  int32_t pos = -1;      // I32 [T] positions
  int32_t kv_idx = -1;   // I32 [T] the cell each token's K/V is written to
  int32_t cells = -1;    // I32 [max_len, n_lists]
  int32_t tok = -1;      // I32 [2, T] (list, count) per token
  int32_t k_cache = -1;  // [n_embd_kv, n_cells] of this layer
  int32_t v_cache = -1;
  // Per rope kind (HParams::rope_kind): F32 [n_rot / 2] rate tables and their magnitude, when
  // the model's rope runs from tables (Model::rope_uses_tables); -1 otherwise.
  int32_t rope_rates[2] = {-1, -1};
  float rope_mscale[2] = {1.0f, 1.0f};
};

// Where a weight of the model is on the stage's device.
using WeightFn = std::function<TensorRef(const GgufTensorInfo*)>;

class LayerGraph {
 public:
  LayerGraph(GraphBuilder& b, const HParams& hp, int64_t n_tokens, WeightFn weight)
      : b_(b), hp_(hp), n_tokens_(n_tokens), weight_(std::move(weight)) {}

  GraphBuilder& builder() { return b_; }
  const HParams& hparams() const { return hp_; }
  int64_t n_tokens() const { return n_tokens_; }
  // The inputs of the layer being built (the engine sets them before each build_layer).
  const LayerInputs& inputs() const { return in_; }
  void set_inputs(const LayerInputs& in) { in_ = in; }

  int32_t weight(const GgufTensorInfo* t) { return b_.external(weight_(t)); }

  // F32 [w.ne1, T] = w x.
  int32_t mul_mat(const GgufTensorInfo* w, int32_t x);
  // x += bias, in place; x unchanged when bias is null.
  int32_t add_bias(int32_t x, const GgufTensorInfo* bias);
  // rms_norm(x) * weight into a new tensor.
  int32_t rms_norm(int32_t x, const GgufTensorInfo* weight);
  // a + b into dst (a new scratch tensor when dst < 0).
  int32_t add(int32_t a, int32_t b, int32_t dst = -1);

  // F32 [w.ne1 rows r0..r0+n, T] = rows [r0, r0 + n) of w times x: one part of a fused
  // projection (Phi-3's q/k/v and gate/up), a view of the weight, no copy.
  int32_t mul_mat_rows(const GgufTensorInfo* w, int64_t r0, int64_t n, int32_t x);
  // Rope on x F32 [hd, heads, T] in place, as the layer's kind of rope says.
  int32_t rope(int32_t x);
  // K and V (F32 [n_embd_kv, T]) written to the layer's cache, then attention of q
  // (F32 [hd, n_head, T], roped) over it, with the layer's window and soft-cap, and the
  // per-head sink logits `sinks` (F32 [n_head]) unless it is -1. F32 [n_embd_q, T].
  int32_t attend(int32_t q, int32_t k, int32_t v, int32_t sinks = -1);

  // Attention of the normed input h: q/k/v projections (fused or not, with biases and
  // per-head q/k norms when the layer has them), rope, attend() (with the layer's sinks) and
  // the output projection (with its bias). F32 [n_embd, T].
  int32_t self_attention(const LayerWeights& l, int32_t h);
  // down(silu(gate h) * up h), gate and up separate or fused in ffn_up (gate rows first).
  // F32 [n_embd, T].
  int32_t ffn_swiglu(const LayerWeights& l, int32_t h);
  // down(gelu(gate h) * up h) (Gemma). F32 [n_embd, T].
  int32_t ffn_geglu(const LayerWeights& l, int32_t h);

  // F32 [w.ne1, n_used, T]: for each token and slot, the expert its ids name times the
  // token's input (x F32 [w.ne0, 1 or n_used, T]); only the experts some token picked are read.
  int32_t mul_mat_id(const GgufTensorInfo* w_exps, int32_t x, int32_t ids);
  // x F32 [n, n_used, T] += the row of `bias` (F32 [n, n_expert]) of each slot's expert, in
  // place; x unchanged when bias is null.
  int32_t add_id(int32_t x, const GgufTensorInfo* bias, int32_t ids);
  // A mixture of SwiGLU experts: router logits = ffn_gate_inp h (+ its bias), the top
  // n_expert_used experts, their weights by the model's gating, gate and up of each selected
  // expert (+ their biases), the activation (SwiGLU or gpt-oss's clamped one), then its down
  // projection (+ bias), summed with the weights. F32 [n_embd, T].
  int32_t ffn_moe(const LayerWeights& l, int32_t h);

 private:
  GraphBuilder& b_;
  const HParams& hp_;
  int64_t n_tokens_;
  WeightFn weight_;
  LayerInputs in_;
};

}  // namespace strata
