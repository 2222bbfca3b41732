// Builds a Graph and places its intermediate tensors in one scratch buffer.
//
// Intermediates are created unplaced; `plan()` gives each a range of the scratch buffer that no
// tensor alive at the same time uses (live from the node that first writes it to the last node
// that reads it or a view of it), so a forward pass needs memory for a few layers' temporaries,
// not for all of them. `finish()` then names the scratch buffer.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/ops_moe.h"
#include "graph/graph.h"

namespace strata {

class GraphBuilder {
 public:
  // A tensor in memory the caller owns (weights, caches, step inputs and outputs).
  int32_t external(const TensorRef& t);
  // A new contiguous intermediate, placed by plan().
  int32_t scratch(DType dtype, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1);
  // A view of `base` (external or scratch) with its own shape and strides, at a byte offset.
  int32_t view(int32_t base, int64_t ne0, int64_t ne1, int64_t ne2, uint64_t nb1, uint64_t nb2,
               uint64_t offset = 0);

  // Appends a node; returns `out`.
  int32_t node(Op op, int32_t out, std::initializer_list<int32_t> src,
               std::initializer_list<int32_t> iparams = {},
               std::initializer_list<float> fparams = {});

  const TensorRef& tensor(int32_t i) const { return graph_.tensors[i]; }

  // Mixture-of-experts nodes (graph.h, kMoeTopK..kMoeSum), each with a new scratch output.
  // logits F32 [n_expert, r] -> I32 [k, r]: the k experts of largest logit.
  int32_t moe_top_k(int32_t logits, int k);
  // logits F32 [n_expert, r], ids I32 [k, r] -> F32 [k, r]: the selected experts' weights.
  int32_t moe_gate(int32_t logits, int32_t ids, MoeGating gating, bool normalise, float scale);
  // w_exps [k_in, n, n_expert], x F32 [k_in, 1 or n_used, r], ids I32 [n_used, r]
  // -> F32 [n, n_used, r].
  int32_t mul_mat_id(int32_t w_exps, int32_t x, int32_t ids);
  // y F32 [n, n_used, r], weights F32 [n_used, r] -> F32 [n, r].
  int32_t moe_sum(int32_t y, int32_t weights);

  // Places the intermediates; returns the scratch bytes needed (aligned).
  uint64_t plan(uint64_t alignment = 64);
  // Names the scratch buffer and returns the graph. plan() must have run.
  Graph finish(uint64_t scratch_buffer);

 private:
  struct Info {
    int32_t base = -1;     // for views: the tensor viewed; else -1
    bool scratch = false;  // placed by plan()
    uint64_t view_offset = 0;
  };
  int32_t root(int32_t i) const;

  Graph graph_;
  std::vector<Info> info_;
  bool planned_ = false;
};

}  // namespace strata
