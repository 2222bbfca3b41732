#include "engine/graph_builder.h"

#include "model/layer_graph.h"

namespace strata {

TensorRef kv_cache_tensor(uint64_t buffer, uint64_t offset, DType kv_dtype, const HParams& hp,
                          int64_t n_cells) {
  return make_tensor(buffer, offset, kv_dtype, hp.head_dim, n_cells, hp.n_head_kv);
}

void build_stage_graph(GraphBuilder& b, const Model& model, const DeviceWeights& w,
                       int64_t layer_begin, int64_t layer_end, bool first, bool last,
                       const StageTensors& io) {
  const HParams& hp = model.hparams();
  const int64_t T = io.n_tokens;
  LayerGraph g(b, hp, T, [&](const GgufTensorInfo* t) { return w.ref(t); });
  LayerInputs in;
  if (model.rope_uses_tables()) {
    for (int kind = 0; kind < 2; ++kind) {
      in.rope_rates[kind] = b.external(io.rope_rates[kind]);
      in.rope_mscale[kind] = io.rope_mscale[kind];
    }
  }
  in.pos = b.external(io.pos);
  in.kv_idx = b.external(io.kv_idx);
  in.cells = b.external(io.cells);
  in.tok = b.external(io.tok);

  // F32 [n_embd, T]: the residual stream.
  int32_t x;
  if (first) {
    x = b.node(Op::kGetRows, b.scratch(DType::kF32, hp.n_embd, T),
               {g.weight(model.token_embd()), b.external(io.ids)});
    if (hp.embd_scale > 0) x = b.node(Op::kScale, x, {x}, {}, {hp.embd_scale});
  } else {
    x = b.external(io.hidden_in);
  }
  const int32_t out = b.external(io.out);

  for (int64_t il = layer_begin; il < layer_end; ++il) {
    const size_t li = static_cast<size_t>(il - layer_begin);
    in.k_cache = b.external(io.k_cache[li]);
    in.v_cache = b.external(io.v_cache[li]);
    in.layer = il;
    g.set_inputs(in);
    // The last layer of a middle stage writes the hidden state straight into the stage output.
    const bool stage_end = il + 1 == layer_end;
    x = hp.arch->build_layer(g, model.layers()[static_cast<size_t>(il)], x,
                             stage_end && !last ? out : -1);
  }
  if (!last) {
    if (layer_begin == layer_end) b.node(Op::kCopy, out, {x});
    return;
  }
  if (io.n_outputs < T) {
    x = b.node(Op::kGetRows, b.scratch(DType::kF32, hp.n_embd, io.n_outputs),
               {x, b.external(io.out_rows)});
  }
  if (io.embeddings) {
    b.node(Op::kRmsNorm, out, {x, g.weight(model.output_norm())}, {}, {hp.rms_eps});
    return;
  }
  const int32_t normed = g.rms_norm(x, model.output_norm());
  b.node(Op::kMulMat, out, {g.weight(model.output()), normed});
  if (hp.final_softcap > 0) b.node(Op::kSoftcap, out, {out}, {}, {hp.final_softcap});
  if (io.n_draws == 0) return;
  int32_t rows = out;
  if (io.draw_rows.buffer != 0) {
    rows = b.node(Op::kGetRows, b.scratch(DType::kF32, hp.n_vocab, io.n_draws),
                  {out, b.external(io.draw_rows)});
  }
  b.node(Op::kSample, b.external(io.drawn),
         {rows, b.external(io.draw_settings), b.external(io.draw_entries),
          b.external(io.draw_uniforms)});
}

void build_stage_shift_graph(GraphBuilder& b, const Model& model, int64_t layer_begin,
                             int64_t layer_end, const ShiftTensors& io) {
  const HParams& hp = model.hparams();
  const int32_t n_rot = static_cast<int32_t>(hp.n_rot);
  const int32_t mode = static_cast<int32_t>(hp.rope_mode);
  const int32_t hd = static_cast<int32_t>(hp.head_dim);
  const int32_t cells = b.external(io.cells);
  const int32_t delta = b.external(io.delta);
  int32_t copy_src = -1, copy_dst = -1;
  if (io.n_copies > 0) {
    copy_src = b.external(io.copy_src);
    copy_dst = b.external(io.copy_dst);
  }
  int32_t rates[2] = {-1, -1};
  if (model.rope_uses_tables()) {
    for (int kind = 0; kind < 2; ++kind) rates[kind] = b.external(io.rope_rates[kind]);
  }
  for (int64_t il = layer_begin; il < layer_end; ++il) {
    const size_t li = static_cast<size_t>(il - layer_begin);
    const int32_t k = b.external(io.k_cache[li]);
    if (io.n_copies > 0) {
      for (const int32_t cache : {k, b.external(io.v_cache[li])}) {
        const int32_t rows = b.node(
            Op::kGetRows, b.scratch(DType::kF32, hp.n_embd_kv(), io.n_copies), {cache, copy_src});
        b.node(Op::kSetRows, cache, {cache, rows, copy_dst});
      }
    }
    const int kind = hp.rope_kind(il);
    if (rates[kind] >= 0) {
      b.node(Op::kRopeShift, k, {k, cells, delta, rates[kind]}, {n_rot, mode, hd});
    } else {
      b.node(Op::kRopeShift, k, {k, cells, delta}, {n_rot, mode, hd},
             {hp.rope_base(kind), hp.rope_scale(kind)});
    }
  }
}

}  // namespace strata
