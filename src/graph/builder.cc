#include "graph/builder.h"

#include <algorithm>
#include <iterator>
#include <map>

#include "core/check.h"

namespace strata {

int32_t GraphBuilder::external(const TensorRef& t) {
  graph_.tensors.push_back(t);
  info_.push_back({});
  return static_cast<int32_t>(graph_.tensors.size() - 1);
}

int32_t GraphBuilder::scratch(DType dtype, int64_t ne0, int64_t ne1, int64_t ne2) {
  graph_.tensors.push_back(make_tensor(0, 0, dtype, ne0, ne1, ne2));
  info_.push_back({-1, true, 0});
  return static_cast<int32_t>(graph_.tensors.size() - 1);
}

int32_t GraphBuilder::view(int32_t base, int64_t ne0, int64_t ne1, int64_t ne2, uint64_t nb1,
                           uint64_t nb2, uint64_t offset) {
  STRATA_CHECK(base >= 0 && base < static_cast<int32_t>(graph_.tensors.size()));
  TensorRef t = graph_.tensors[base];
  t.ne[0] = ne0;
  t.ne[1] = ne1;
  t.ne[2] = ne2;
  t.ne[3] = 1;
  t.nb[1] = nb1;
  t.nb[2] = nb2;
  t.nb[3] = nb2 * static_cast<uint64_t>(ne2);
  t.offset += offset;
  graph_.tensors.push_back(t);
  info_.push_back({base, false, offset});
  return static_cast<int32_t>(graph_.tensors.size() - 1);
}

int32_t GraphBuilder::node(Op op, int32_t out, std::initializer_list<int32_t> src,
                           std::initializer_list<int32_t> iparams,
                           std::initializer_list<float> fparams) {
  STRATA_CHECK(src.size() <= kMaxSrc && iparams.size() <= kMaxParams &&
               fparams.size() <= kMaxParams);
  Node n;
  n.op = op;
  n.out = out;
  std::copy(src.begin(), src.end(), n.src);
  std::copy(iparams.begin(), iparams.end(), n.iparams);
  std::copy(fparams.begin(), fparams.end(), n.fparams);
  graph_.nodes.push_back(n);
  return out;
}

int32_t GraphBuilder::moe_top_k(int32_t logits, int k) {
  const int32_t out = scratch(DType::kI32, k, tensor(logits).ne[1]);
  return node(Op::kMoeTopK, out, {logits}, {k});
}

int32_t GraphBuilder::moe_gate(int32_t logits, int32_t ids, MoeGating gating, bool normalise,
                               float scale) {
  const int32_t out = scratch(DType::kF32, tensor(ids).ne[0], tensor(ids).ne[1]);
  return node(Op::kMoeGate, out, {logits, ids}, {static_cast<int32_t>(gating), normalise ? 1 : 0},
              {scale});
}

int32_t GraphBuilder::mul_mat_id(int32_t w_exps, int32_t x, int32_t ids) {
  const int32_t out =
      scratch(DType::kF32, tensor(w_exps).ne[1], tensor(ids).ne[0], tensor(ids).ne[1]);
  return node(Op::kMulMatId, out, {w_exps, x, ids});
}

int32_t GraphBuilder::moe_sum(int32_t y, int32_t weights) {
  const int32_t out = scratch(DType::kF32, tensor(y).ne[0], tensor(y).ne[2]);
  return node(Op::kMoeSum, out, {y, weights});
}

int32_t GraphBuilder::root(int32_t i) const {
  while (info_[i].base >= 0) i = info_[i].base;
  return i;
}

uint64_t GraphBuilder::plan(uint64_t alignment) {
  const int32_t n = static_cast<int32_t>(graph_.tensors.size());
  std::vector<int32_t> first(n, -1), last(n, -1);
  for (int32_t k = 0; k < static_cast<int32_t>(graph_.nodes.size()); ++k) {
    const Node& node = graph_.nodes[k];
    auto touch = [&](int32_t t) {
      if (t < 0) return;
      const int32_t r = root(t);
      if (first[r] < 0) first[r] = k;
      last[r] = k;
    };
    for (int32_t s : node.src) touch(s);
    touch(node.out);
  }
  // Greedy first fit in node order: free ranges come back when their tensor's last reader ran.
  // Runs every decode step, over every node and tensor of the model's graph: linear in them
  // (tensors bucketed by the node that first writes them), not their product.
  struct Range {
    uint64_t begin, end;
  };
  std::vector<Range> free_list;  // sorted by begin, merged, none empty
  uint64_t top = 0;
  std::vector<uint64_t> offset(n, 0);
  std::multimap<int32_t, int32_t> dying;  // last node -> tensor
  auto release = [&](uint64_t begin, uint64_t end) {
    auto it = std::lower_bound(free_list.begin(), free_list.end(), begin,
                               [](const Range& r, uint64_t b) { return r.begin < b; });
    if (it != free_list.begin() && std::prev(it)->end == begin) {
      --it;
      it->end = end;
    } else {
      it = free_list.insert(it, {begin, end});
    }
    if (std::next(it) != free_list.end() && std::next(it)->begin == it->end) {
      it->end = std::next(it)->end;
      free_list.erase(std::next(it));
    }
  };
  auto size_of = [&](int32_t t) {
    const uint64_t bytes = graph_.tensors[t].extent_bytes();
    return (bytes + alignment - 1) / alignment * alignment;
  };
  const int32_t n_nodes = static_cast<int32_t>(graph_.nodes.size());
  std::vector<int32_t> starts_at(static_cast<size_t>(n_nodes) + 1, 0);  // bucket bounds by node
  for (int32_t t = 0; t < n; ++t) {
    if (info_[t].scratch && first[t] >= 0) ++starts_at[first[t] + 1];
  }
  for (int32_t k = 0; k < n_nodes; ++k) starts_at[k + 1] += starts_at[k];
  std::vector<int32_t> starting(static_cast<size_t>(starts_at[n_nodes]));  // in tensor order
  {
    std::vector<int32_t> next(starts_at.begin(), starts_at.end() - 1);
    for (int32_t t = 0; t < n; ++t) {
      if (info_[t].scratch && first[t] >= 0) starting[next[first[t]]++] = t;
    }
  }
  for (int32_t k = 0; k < n_nodes; ++k) {
    // Allocate what is first written here, then free what was last read here: a node's output
    // never shares memory with its own inputs unless it is the same tensor.
    for (int32_t i = starts_at[k]; i < starts_at[k + 1]; ++i) {
      const int32_t t = starting[i];
      const uint64_t need = size_of(t);
      auto fit = std::find_if(free_list.begin(), free_list.end(),
                              [need](const Range& r) { return r.end - r.begin >= need; });
      if (fit != free_list.end()) {
        offset[t] = fit->begin;
        fit->begin += need;
        if (fit->begin == fit->end) free_list.erase(fit);
      } else {
        offset[t] = top;
        top += need;
      }
      dying.emplace(last[t], t);
    }
    auto [lo, hi] = dying.equal_range(k);
    for (auto it = lo; it != hi; ++it)
      release(offset[it->second], offset[it->second] + size_of(it->second));
    dying.erase(lo, hi);
  }
  for (int32_t t = 0; t < n; ++t) {
    if (info_[t].scratch) graph_.tensors[t].offset = offset[t];
  }
  for (int32_t t = 0; t < n; ++t) {
    if (info_[t].base >= 0 && info_[root(t)].scratch) {
      // A view's offset is its base's placement plus its own offsets along the chain.
      uint64_t off = 0;
      int32_t i = t;
      while (info_[i].base >= 0) {
        off += info_[i].view_offset;
        i = info_[i].base;
      }
      graph_.tensors[t].offset = offset[i] + off;
    }
  }
  planned_ = true;
  return std::max<uint64_t>(top, alignment);
}

Graph GraphBuilder::finish(uint64_t scratch_buffer) {
  STRATA_CHECK(planned_, "plan() before finish()");
  for (size_t t = 0; t < graph_.tensors.size(); ++t) {
    if (info_[t].scratch || (info_[t].base >= 0 && info_[root(static_cast<int32_t>(t))].scratch)) {
      graph_.tensors[t].buffer = scratch_buffer;
    }
  }
  return std::move(graph_);
}

}  // namespace strata
