// What the architecture files (model/arch_*.cc) share: the includes they need and the layer
// shapes more than one architecture uses.
#pragma once

#include "model/arch.h"
#include "model/gguf.h"
#include "model/hparams.h"
#include "model/layer_graph.h"
#include "model/model.h"

namespace strata {

// x + attn(norm(x)), then + ffn_swiglu(norm(.)): the llama block (llama, qwen2, qwen3).
int32_t build_layer_pre_norm_swiglu(LayerGraph& g, const LayerWeights& l, int32_t x, int32_t dst);

}  // namespace strata
