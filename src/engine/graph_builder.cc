#include "engine/graph_builder.h"

#include "model/layer_graph.h"

namespace strata {

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
  const int32_t normed = g.rms_norm(x, model.output_norm());
  b.node(Op::kMulMat, out, {g.weight(model.output()), normed});
  if (hp.final_softcap > 0) b.node(Op::kSoftcap, out, {out}, {}, {hp.final_softcap});
}

}  // namespace strata
