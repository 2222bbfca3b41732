// Builds the forward graph of one stage (a range of layers) for one micro-batch.
#pragma once

#include <vector>

#include "engine/weights.h"
#include "graph/builder.h"
#include "model/model.h"

namespace strata {

// One layer's K or V cache of n_cells cells at `offset` of `buffer`: head-major,
// [head_dim, n_cells, n_head_kv], each kv head's cells side by side, so that a thread attending
// with one kv head reads one stretch of memory (docs/engine.md). Every cache a context
// allocates, and every cache of the graphs the split planner checks, is this shape.
TensorRef kv_cache_tensor(uint64_t buffer, uint64_t offset, DType kv_dtype, const HParams& hp,
                          int64_t n_cells);

// Everything a stage graph reads or writes outside its scratch memory, on the stage's device.
struct StageTensors {
  int64_t n_tokens = 0;
  int64_t n_outputs = 0;  // rows of logits (last stage)
  TensorRef ids;          // I32 [n_tokens]              (first stage)
  TensorRef pos;          // I32 [n_tokens]
  TensorRef kv_idx;       // I32 [n_tokens]: the cell each token's K/V is written to
  TensorRef cells;        // I32 [max_len, n_lists]
  TensorRef tok;          // I32 [2, n_tokens]: (list, count) per token
  TensorRef out_rows;     // I32 [n_outputs]             (last stage, when n_outputs < n_tokens)
  TensorRef hidden_in;    // F32 [n_embd, n_tokens]      (stages after the first)
  TensorRef out;          // F32 [n_embd, n_tokens] hidden, or [n_vocab, n_outputs] logits
  // The last stage writes the output rows' final hidden state (after the output norm), F32
  // [n_embd, n_outputs], in place of their logits: embeddings. No draws then.
  bool embeddings = false;
  std::vector<TensorRef> k_cache, v_cache;  // per layer of the stage: kv_cache_tensor
  // F32 [n_rot / 2] rope rate tables per rope kind, and their magnitudes, when
  // Model::rope_uses_tables().
  TensorRef rope_rates[2];
  float rope_mscale[2] = {1.0f, 1.0f};
  // Backend sampling (last stage): the sample op after the logits, when n_draws > 0. Each draw
  // samples one row of `out`: row i when draw_rows is unset (buffer 0: the draws are the
  // output rows in order), else row draw_rows[i].
  int64_t n_draws = 0;
  TensorRef draw_rows;      // I32 [n_draws]
  TensorRef draw_settings;  // I32 [kSampleWords, n_draws]
  TensorRef draw_entries;   // I32 [2, width, n_draws]
  TensorRef draw_uniforms;  // F32 [n_draws]
  TensorRef drawn;          // I32 [1 or 2 + 2k, n_draws]
  // Equal tensors give the same graph (Context reuses the last step's graph when they are).
  friend bool operator==(const StageTensors&, const StageTensors&) = default;
};

// What the shift graph of a stage touches (Context::seq_shift), on the stage's device.
struct ShiftTensors {
  int64_t n_copies = 0;  // shared cells copied to cells of their own first (copy on write)
  TensorRef copy_src;    // I32 [n_copies]
  TensorRef copy_dst;    // I32 [n_copies]
  TensorRef cells;       // I32 [n]: the cells whose keys turn
  TensorRef delta;       // I32 [n]: by how many positions
  std::vector<TensorRef> k_cache, v_cache;  // per layer of the stage: kv_cache_tensor
  TensorRef rope_rates[2];                  // as in StageTensors, when Model::rope_uses_tables()
};

// Appends the shift of layers [layer_begin, layer_end) to `b`: the copies (K and V rows, through
// f32, which is exact for f16 and f32 caches), then every layer's keys re-rotated with that
// layer's rope (the kind LayerGraph::rope uses).
void build_stage_shift_graph(GraphBuilder& b, const Model& model, int64_t layer_begin,
                             int64_t layer_end, const ShiftTensors& io);

// Appends the stage's nodes to `b`. Layers [layer_begin, layer_end); the first stage starts
// with the embedding lookup, the last ends with the output norm and projection (and, with
// draws, the sample op), or with the output norm alone (io.embeddings).
void build_stage_graph(GraphBuilder& b, const Model& model, const DeviceWeights& w,
                       int64_t layer_begin, int64_t layer_end, bool first, bool last,
                       const StageTensors& io);

}  // namespace strata
