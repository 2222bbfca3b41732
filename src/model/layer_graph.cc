#include "model/layer_graph.h"

#include <cmath>

#include "model/model.h"

namespace strata {

int32_t LayerGraph::mul_mat(const GgufTensorInfo* w, int32_t x) {
  return b_.node(Op::kMulMat, b_.scratch(DType::kF32, w->ne[1], n_tokens_), {weight(w), x});
}

int32_t LayerGraph::add_bias(int32_t x, const GgufTensorInfo* bias) {
  if (bias == nullptr) return x;
  return b_.node(Op::kAdd, x, {x, weight(bias)});
}

int32_t LayerGraph::rms_norm(int32_t x, const GgufTensorInfo* w) {
  const TensorRef& t = b_.tensor(x);
  return b_.node(Op::kRmsNorm, b_.scratch(DType::kF32, t.ne[0], t.ne[1]), {x, weight(w)}, {},
                 {hp_.rms_eps});
}

int32_t LayerGraph::add(int32_t a, int32_t b, int32_t dst) {
  if (dst < 0) dst = b_.scratch(DType::kF32, b_.tensor(a).ne[0], b_.tensor(a).ne[1]);
  return b_.node(Op::kAdd, dst, {a, b});
}

int32_t LayerGraph::self_attention(const LayerWeights& l, int32_t h) {
  using LT = LayerTensor;
  const int64_t T = n_tokens_;
  const int64_t hd = hp_.head_dim;
  int32_t q = add_bias(mul_mat(l[LT::kWq], h), l[LT::kBq]);  // F32 [n_embd_q, T]
  int32_t k = add_bias(mul_mat(l[LT::kWk], h), l[LT::kBk]);  // F32 [n_embd_kv, T]
  const int32_t v = add_bias(mul_mat(l[LT::kWv], h), l[LT::kBv]);
  // Heads as rows: [hd, heads, T].
  q = b_.view(q, hd, hp_.n_head, T, hd * 4, hp_.n_embd_q() * 4);
  k = b_.view(k, hd, hp_.n_head_kv, T, hd * 4, hp_.n_embd_kv() * 4);
  if (l[LT::kQNorm] != nullptr) {
    q = b_.node(Op::kRmsNorm, q, {q, weight(l[LT::kQNorm])}, {}, {hp_.rms_eps});
  }
  if (l[LT::kKNorm] != nullptr) {
    k = b_.node(Op::kRmsNorm, k, {k, weight(l[LT::kKNorm])}, {}, {hp_.rms_eps});
  }
  const int32_t n_rot = static_cast<int32_t>(hp_.n_rot);
  const int32_t mode = static_cast<int32_t>(hp_.rope_mode);
  q = b_.node(Op::kRope, q, {q, in_.pos}, {n_rot, mode}, {hp_.rope_freq_base, hp_.rope_freq_scale});
  k = b_.node(Op::kRope, k, {k, in_.pos}, {n_rot, mode}, {hp_.rope_freq_base, hp_.rope_freq_scale});

  const int32_t kc = in_.k_cache;
  const int32_t vc = in_.v_cache;
  const int32_t k_rows =
      b_.view(k, hp_.n_embd_kv(), T, 1, hp_.n_embd_kv() * 4, hp_.n_embd_kv() * 4 * T);
  b_.node(Op::kSetRows, kc, {kc, k_rows, in_.kv_idx});
  b_.node(Op::kSetRows, vc, {vc, v, in_.kv_idx});

  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int32_t attn =
      b_.node(Op::kAttention, b_.scratch(DType::kF32, hd, hp_.n_head, T),
              {q, kc, vc, in_.cells, in_.tok}, {static_cast<int32_t>(hp_.n_head_kv)}, {scale});
  const int32_t attn_rows =
      b_.view(attn, hp_.n_embd_q(), T, 1, hp_.n_embd_q() * 4, hp_.n_embd_q() * 4 * T);
  return mul_mat(l[LT::kWo], attn_rows);
}

int32_t LayerGraph::ffn_swiglu(const LayerWeights& l, int32_t h) {
  using LT = LayerTensor;
  const int32_t gate = mul_mat(l[LT::kWGate], h);
  const int32_t up = mul_mat(l[LT::kWUp], h);
  const int32_t act = b_.node(Op::kSwiglu, gate, {gate, up});
  return mul_mat(l[LT::kWDown], act);
}

}  // namespace strata
