#include "model/layer_graph.h"

#include <cmath>

#include "core/check.h"
#include "core/rows16.h"
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

int32_t LayerGraph::mul_mat_rows(const GgufTensorInfo* w, int64_t r0, int64_t n, int32_t x) {
  TensorRef part = weight_(w);
  // A device layout keeps groups of kLaneRows rows together (weights.cc stores a fused projection
  // in one only when its parts start on a group).
  STRATA_CHECK(!dtype_is_layout(part.dtype) ||
                   (r0 % kLaneRows == 0 && (n % kLaneRows == 0 || r0 + n == part.ne[1])),
               "mul_mat_rows: a part cuts a group of rows of a device layout");
  part.offset += static_cast<uint64_t>(r0) * part.nb[1];
  part.ne[1] = n;
  part.nb[2] = part.nb[3] = part.nb[1] * static_cast<uint64_t>(n);
  return b_.node(Op::kMulMat, b_.scratch(DType::kF32, n, n_tokens_), {b_.external(part), x});
}

int32_t LayerGraph::rope(int32_t x) {
  const int kind = hp_.rope_kind(in_.layer);
  const int32_t n_rot = static_cast<int32_t>(hp_.n_rot);
  const int32_t mode = static_cast<int32_t>(hp_.rope_mode);
  if (in_.rope_rates[kind] >= 0) {
    return b_.node(Op::kRopeRates, x, {x, in_.pos, in_.rope_rates[kind]}, {n_rot, mode},
                   {in_.rope_mscale[kind]});
  }
  return b_.node(Op::kRope, x, {x, in_.pos}, {n_rot, mode},
                 {hp_.rope_base(kind), hp_.rope_scale(kind)});
}

int32_t LayerGraph::attend(int32_t q, int32_t k, int32_t v, int32_t sinks) {
  const int64_t T = n_tokens_;
  const int64_t hd = hp_.head_dim;
  const int32_t kc = in_.k_cache;
  const int32_t vc = in_.v_cache;
  b_.node(Op::kSetRows, kc, {kc, k, in_.kv_idx});
  b_.node(Op::kSetRows, vc, {vc, v, in_.kv_idx});

  const float scale =
      hp_.attn_scale > 0 ? hp_.attn_scale : 1.0f / std::sqrt(static_cast<float>(hd));
  const int32_t window = hp_.is_swa(in_.layer) ? static_cast<int32_t>(hp_.n_swa) : 0;
  const int32_t out = b_.scratch(DType::kF32, hd, hp_.n_head, T);
  const int32_t n_head_kv = static_cast<int32_t>(hp_.n_head_kv);
  int32_t attn;
  if (sinks >= 0) {
    attn = b_.node(Op::kAttentionSink, out, {q, kc, vc, in_.cells, in_.tok, sinks},
                   {n_head_kv, window}, {scale, hp_.attn_softcap});
  } else if (window == 0 && hp_.attn_softcap == 0) {
    attn = b_.node(Op::kAttention, out, {q, kc, vc, in_.cells, in_.tok}, {n_head_kv}, {scale});
  } else {
    attn = b_.node(Op::kAttentionExt, out, {q, kc, vc, in_.cells, in_.tok}, {n_head_kv, window},
                   {scale, hp_.attn_softcap});
  }
  return b_.view(attn, hp_.n_embd_q(), T, 1, hp_.n_embd_q() * 4, hp_.n_embd_q() * 4 * T);
}

int32_t LayerGraph::self_attention(const LayerWeights& l, int32_t h) {
  using LT = LayerTensor;
  const int64_t T = n_tokens_;
  const int64_t hd = hp_.head_dim;
  const int64_t nq = hp_.n_embd_q(), nkv = hp_.n_embd_kv();
  int32_t q, k, v;
  if (const GgufTensorInfo* qkv = l[LT::kWqkv]; qkv != nullptr) {
    q = mul_mat_rows(qkv, 0, nq, h);
    k = mul_mat_rows(qkv, nq, nkv, h);
    v = mul_mat_rows(qkv, nq + nkv, nkv, h);
  } else {
    q = mul_mat(l[LT::kWq], h);  // F32 [n_embd_q, T]
    k = mul_mat(l[LT::kWk], h);  // F32 [n_embd_kv, T]
    v = mul_mat(l[LT::kWv], h);
  }
  q = add_bias(q, l[LT::kBq]);
  k = add_bias(k, l[LT::kBk]);
  v = add_bias(v, l[LT::kBv]);
  // Heads as rows: [hd, heads, T].
  q = b_.view(q, hd, hp_.n_head, T, hd * 4, nq * 4);
  k = b_.view(k, hd, hp_.n_head_kv, T, hd * 4, nkv * 4);
  if (l[LT::kQNorm] != nullptr) {
    q = b_.node(Op::kRmsNorm, q, {q, weight(l[LT::kQNorm])}, {}, {hp_.rms_eps});
  }
  if (l[LT::kKNorm] != nullptr) {
    k = b_.node(Op::kRmsNorm, k, {k, weight(l[LT::kKNorm])}, {}, {hp_.rms_eps});
  }
  q = rope(q);
  k = rope(k);
  const int32_t k_rows = b_.view(k, nkv, T, 1, nkv * 4, nkv * 4 * T);
  const GgufTensorInfo* sinks = l[LT::kAttnSinks];
  const int32_t attn = attend(q, k_rows, v, sinks != nullptr ? weight(sinks) : -1);
  return add_bias(mul_mat(l[LT::kWo], attn), l[LT::kBo]);
}

int32_t LayerGraph::ffn_swiglu(const LayerWeights& l, int32_t h) {
  using LT = LayerTensor;
  int32_t gate, up;
  if (l[LT::kWGate] != nullptr) {
    gate = mul_mat(l[LT::kWGate], h);
    up = mul_mat(l[LT::kWUp], h);
  } else {
    gate = mul_mat_rows(l[LT::kWUp], 0, hp_.n_ff, h);
    up = mul_mat_rows(l[LT::kWUp], hp_.n_ff, hp_.n_ff, h);
  }
  const int32_t act = b_.node(Op::kSwiglu, gate, {gate, up});
  return mul_mat(l[LT::kWDown], act);
}

int32_t LayerGraph::mul_mat_id(const GgufTensorInfo* w_exps, int32_t x, int32_t ids) {
  return b_.mul_mat_id(weight(w_exps), x, ids);
}

int32_t LayerGraph::add_id(int32_t x, const GgufTensorInfo* bias, int32_t ids) {
  if (bias == nullptr) return x;
  return b_.node(Op::kAddId, x, {x, weight(bias), ids});
}

int32_t LayerGraph::ffn_moe(const LayerWeights& l, int32_t h) {
  using LT = LayerTensor;
  const int64_t T = n_tokens_;
  const int64_t n_embd = hp_.n_embd, n_ff = hp_.n_ff_exp, k = hp_.n_expert_used;
  // F32 [n_expert, T]; the biased logits both select the experts and weigh them (gpt-oss).
  const int32_t logits = add_bias(mul_mat(l[LT::kFfnGateInp], h), l[LT::kFfnGateInpB]);
  const int32_t ids = b_.moe_top_k(logits, static_cast<int>(k));  // I32 [k, T]
  const int32_t weights = b_.moe_gate(logits, ids, hp_.expert_gating, hp_.expert_weights_norm,
                                      hp_.expert_weights_scale);  // F32 [k, T]
  // One input per token, shared by its k experts.
  const int32_t x = b_.view(h, n_embd, 1, T, 4 * n_embd, 4 * n_embd);
  // Both products before their biases: the two mul_mat_id nodes side by side run as one pass
  // over the selected experts (cpu_exec.cc).
  const int32_t gate_mm = mul_mat_id(l[LT::kWGateExps], x, ids);
  const int32_t up_mm = mul_mat_id(l[LT::kWUpExps], x, ids);
  const int32_t gate = add_id(gate_mm, l[LT::kBGateExps], ids);
  const int32_t up = add_id(up_mm, l[LT::kBUpExps], ids);
  // The activation over the k * T rows of n_ff (F32 [n_ff, k, T] each), then one input per
  // slot for the down projection.
  const int32_t gate_rows = b_.view(gate, n_ff, k * T, 1, 4 * n_ff, 4 * n_ff * k * T);
  const int32_t up_rows = b_.view(up, n_ff, k * T, 1, 4 * n_ff, 4 * n_ff * k * T);
  const int32_t act = hp_.swiglu_oai_limit > 0
                          ? b_.node(Op::kSwigluOai, gate_rows, {gate_rows, up_rows}, {},
                                    {hp_.swiglu_oai_alpha, hp_.swiglu_oai_limit})
                          : b_.node(Op::kSwiglu, gate_rows, {gate_rows, up_rows});
  const int32_t act_slots = b_.view(act, n_ff, k, T, 4 * n_ff, 4 * n_ff * k);
  const int32_t y = add_id(mul_mat_id(l[LT::kWDownExps], act_slots, ids), l[LT::kBDownExps],
                           ids);  // F32 [n_embd, k, T]
  return b_.moe_sum(y, weights);
}

int32_t LayerGraph::ffn_geglu(const LayerWeights& l, int32_t h) {
  using LT = LayerTensor;
  const int32_t gate = mul_mat(l[LT::kWGate], h);
  const int32_t up = mul_mat(l[LT::kWUp], h);
  const int32_t act = b_.node(Op::kGeglu, gate, {gate, up});
  return mul_mat(l[LT::kWDown], act);
}

}  // namespace strata
