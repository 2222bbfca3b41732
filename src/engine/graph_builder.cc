#include "engine/graph_builder.h"

#include <cmath>

namespace strata {

void build_stage_graph(GraphBuilder& b, const Model& model, const DeviceWeights& w,
                       int64_t layer_begin, int64_t layer_end, bool first, bool last,
                       const StageTensors& io) {
  const HParams& hp = model.hparams();
  const int64_t T = io.n_tokens;
  const int64_t hd = hp.head_dim;
  auto W = [&](const GgufTensorInfo* t) { return b.external(w.ref(t)); };
  auto mul_mat = [&](const GgufTensorInfo* wt, int32_t x) {
    return b.node(Op::kMulMat, b.scratch(DType::kF32, wt->ne[1], T), {W(wt), x});
  };
  auto add_bias = [&](int32_t x, const GgufTensorInfo* bias) {
    if (bias == nullptr) return x;
    return b.node(Op::kAdd, x, {x, W(bias)});  // in place
  };
  auto rms_norm = [&](int32_t x, const GgufTensorInfo* weight) {
    const TensorRef& t = b.tensor(x);
    return b.node(Op::kRmsNorm, b.scratch(DType::kF32, t.ne[0], t.ne[1]), {x, W(weight)}, {},
                  {hp.rms_eps});
  };

  const int32_t pos = b.external(io.pos);
  const int32_t kv_idx = b.external(io.kv_idx);
  const int32_t cells = b.external(io.cells);
  const int32_t tok = b.external(io.tok);

  // F32 [n_embd, T]: the residual stream.
  int32_t x;
  if (first) {
    x = b.node(Op::kGetRows, b.scratch(DType::kF32, hp.n_embd, T),
               {W(model.token_embd()), b.external(io.ids)});
  } else {
    x = b.external(io.hidden_in);
  }
  const int32_t out = b.external(io.out);

  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int64_t il = layer_begin; il < layer_end; ++il) {
    const LayerWeights& l = model.layers()[static_cast<size_t>(il)];
    const size_t li = static_cast<size_t>(il - layer_begin);

    const int32_t h = rms_norm(x, l.attn_norm);
    int32_t q = add_bias(mul_mat(l.wq, h), l.bq);  // F32 [n_embd_q, T]
    int32_t k = add_bias(mul_mat(l.wk, h), l.bk);  // F32 [n_embd_kv, T]
    const int32_t v = add_bias(mul_mat(l.wv, h), l.bv);
    // Heads as rows: [hd, heads, T].
    q = b.view(q, hd, hp.n_head, T, hd * 4, hp.n_embd_q() * 4);
    k = b.view(k, hd, hp.n_head_kv, T, hd * 4, hp.n_embd_kv() * 4);
    if (hp.qk_norm) {
      q = b.node(Op::kRmsNorm, q, {q, W(l.q_norm)}, {}, {hp.rms_eps});
      k = b.node(Op::kRmsNorm, k, {k, W(l.k_norm)}, {}, {hp.rms_eps});
    }
    const int32_t rope_i[] = {static_cast<int32_t>(hp.n_rot), static_cast<int32_t>(hp.rope_mode)};
    q = b.node(Op::kRope, q, {q, pos}, {rope_i[0], rope_i[1]},
               {hp.rope_freq_base, hp.rope_freq_scale});
    k = b.node(Op::kRope, k, {k, pos}, {rope_i[0], rope_i[1]},
               {hp.rope_freq_base, hp.rope_freq_scale});

    const int32_t kc = b.external(io.k_cache[li]);
    const int32_t vc = b.external(io.v_cache[li]);
    const int32_t k_rows =
        b.view(k, hp.n_embd_kv(), T, 1, hp.n_embd_kv() * 4, hp.n_embd_kv() * 4 * T);
    b.node(Op::kSetRows, kc, {kc, k_rows, kv_idx});
    b.node(Op::kSetRows, vc, {vc, v, kv_idx});

    const int32_t attn =
        b.node(Op::kAttention, b.scratch(DType::kF32, hd, hp.n_head, T), {q, kc, vc, cells, tok},
               {static_cast<int32_t>(hp.n_head_kv)}, {scale});
    const int32_t attn_rows =
        b.view(attn, hp.n_embd_q(), T, 1, hp.n_embd_q() * 4, hp.n_embd_q() * 4 * T);
    const int32_t o = mul_mat(l.wo, attn_rows);
    const bool stage_end = il + 1 == layer_end;
    const int32_t x_attn = b.node(Op::kAdd, b.scratch(DType::kF32, hp.n_embd, T), {x, o});

    const int32_t h2 = rms_norm(x_attn, l.ffn_norm);
    const int32_t gate = mul_mat(l.w_gate, h2);
    const int32_t up = mul_mat(l.w_up, h2);
    const int32_t act = b.node(Op::kSwiglu, gate, {gate, up});
    const int32_t down = mul_mat(l.w_down, act);
    // The last layer of a middle stage writes the hidden state straight into the stage output.
    const int32_t dst = (stage_end && !last) ? out : b.scratch(DType::kF32, hp.n_embd, T);
    x = b.node(Op::kAdd, dst, {x_attn, down});
  }
  if (!last) {
    if (layer_begin == layer_end) b.node(Op::kCopy, out, {x});
    return;
  }
  if (io.n_outputs < T) {
    x = b.node(Op::kGetRows, b.scratch(DType::kF32, hp.n_embd, io.n_outputs),
               {x, b.external(io.out_rows)});
  }
  const int32_t normed = rms_norm(x, model.output_norm());
  b.node(Op::kMulMat, out, {W(model.output()), normed});
}

}  // namespace strata
