// What the architecture files (model/arch_*.cc) share: the includes they need and the layer
// shapes more than one architecture uses.
#pragma once

#include "model/arch.h"
#include "model/gguf.h"
#include "model/hparams.h"
#include "model/layer_graph.h"
#include "model/model.h"

namespace strata {

// x + attn(norm(x)), then + ffn(norm(.)): the llama block (llama, qwen2, qwen3, qwen3moe), its
// FFN a SwiGLU or, in a layer with a router, a mixture of SwiGLU experts.
int32_t build_layer_pre_norm_swiglu(LayerGraph& g, const LayerWeights& l, int32_t x, int32_t dst);

// x + post_norm(attn(norm(x))), then + post_norm(ffn_geglu(norm(.))): the Gemma 2/3 block.
int32_t build_layer_gemma(LayerGraph& g, const LayerWeights& l, int32_t x, int32_t dst);

// Gemma's query scale: 1/sqrt(head_dim), except on the 27B models (told apart by their layer
// count, as llama.cpp does), which were trained with 1/sqrt(n_embd / n_head).
float gemma_query_scale(const HParams& hp, int64_t n_layer_27b);

}  // namespace strata
