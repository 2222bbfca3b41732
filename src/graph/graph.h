// The op IR: the language the engine speaks to every device, local or remote.
//
// A graph names tensors by (buffer handle, offset, dtype, shape, strides) and owns no memory.
// Nodes run in order; a node may only read tensors that are graph inputs (living in buffers
// the caller filled) or outputs of earlier nodes. Shapes follow GGML: ne[0] is the contiguous
// dimension; nb[] are byte strides.
// Non-goal: automatic differentiation, broadcasting rules beyond what the ops below state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace strata {

constexpr int kMaxDims = 4;
constexpr int kMaxSrc = 6;
constexpr int kMaxParams = 4;

// Stored in serialised graphs: never renumber.
enum class Op : uint32_t {
  kGetRows = 1,     // src0 table dtype [n, rows], src1 I32 [m] ids -> F32 [n, m]
  kRmsNorm = 2,     // src0 F32 [n, r], src1 F32 [n] weight or none; f0 eps -> F32 [n, r]
  kAdd = 3,         // src0 F32 [n, r], src1 F32 [n, r] or [n, 1] -> F32 [n, r]
  kMul = 4,         // as kAdd
  kMulMat = 5,      // src0 W dtype [k, n], src1 F32 [k, m] -> F32 [n, m]
  kRope = 6,        // src0 F32 [hd, heads, t], src1 I32 [t] positions; i0 n_rot, i1 mode,
                    // f0 freq_base, f1 freq_scale -> F32 [hd, heads, t] (may alias src0)
  kSetRows = 7,     // src0 cache F16/F32 [n, cells], src1 F32 [n, t], src2 I32 [t] cells;
                    // out is src0 (written in place)
  kAttention = 8,   // src0 q F32 [hd, heads, t], src1 k cache, src2 v cache [hd*kv_heads, cells],
                    // src3 I32 [len, lists] cells, src4 I32 [2, t] (list, count); i0 kv_heads,
                    // f0 scale -> F32 [hd, heads, t]
  kSwiglu = 9,      // src0 gate F32 [n, r], src1 up F32 [n, r] -> F32 [n, r]
  kArgmax = 10,     // src0 F32 [n, r] -> I32 [r]
  kCopy = 11,       // src0 F32 [n, r] -> F32 [n, r] (strided rows to contiguous)
  kRopeRates = 12,  // as kRope, with src2 F32 [n_rot/2] per-pair rates (theta_i = pos * rate_i);
                    // i0 n_rot, i1 mode, f0 mscale (cos and sin scaled by it)
  kScale = 13,      // src0 F32 [n, r]; f0 s -> F32 [n, r] = x * s
  kGeglu = 14,      // as kSwiglu with a GELU (tanh approximation) gate
  kSoftcap = 15,    // src0 F32 [n, r]; f0 cap > 0 -> F32 [n, r] = cap * tanh(x / cap)
  kAttentionExt = 16,  // as kAttention; i1 sliding window in cells (0: none), f1 score
                       // soft-cap (0: none)
  kRopeShift = 17,     // src0 K cache F16/F32 [n_heads*hd, cells], src1 I32 [m] cells (distinct),
                       // src2 I32 [m] position deltas, src3 F32 [n_rot/2] rates or none; i0 n_rot,
                       // i1 mode, i2 hd; f0 freq_base, f1 freq_scale (without rates); rotates
                       // the listed rows by their delta; out is src0 (written in place)
  kSample = 18,        // src0 F32 [n_vocab, r] logits, src1 I32 [kSampleWords, r] each row's
                       // settings, src2 I32 [2, m, r] each row's penalty and bias entries,
                       // src3 F32 [r] uniforms in [0, 1) -> I32 [1, r] tokens, or I32
                       // [2 + 2k, r]: token, log-probability, k alternatives (core/sample.h)
  // Mixture of experts (core/ops_moe.h); n_expert <= kMaxExperts.
  kMoeTopK = 19,   // src0 F32 [n_expert, r] router logits; i0 k in [1, n_expert] -> I32 [k, r]:
                   // the k experts of largest logit in descending order, ties to the lower
                   // index, a NaN below every number
  kMoeGate = 20,   // src0 F32 [n_expert, r] logits, src1 I32 [k, r] selected ids; i0 gating
                   // (MoeGating: 0 softmax over all, 1 sigmoid, 2 softmax over the selected),
                   // i1 normalise (1: divide by the sum of the k), f0 scale (last; 1 = none)
                   // -> F32 [k, r]
  kMulMatId = 21,  // src0 W dtype [k_in, n, n_expert], src1 F32 [k_in, m, r] with m = 1 or
                   // n_used, src2 I32 [n_used, r] expert ids -> F32 [n, n_used, r]:
                   // out[:, s, t] = W[:, :, ids[s, t]] x[:, m == 1 ? 0 : s, t]
  kMoeSum = 22,    // src0 F32 [n, n_used, r], src1 F32 [n_used, r] weights -> F32 [n, r]:
                   // acc = fma(w[s, t], y[:, s, t], acc) for s in slot order, from 0
  // gpt-oss (core/ops.h AttentionExtra, core/ops_act.h).
  kAttentionSink = 23,  // as kAttentionExt, with src5 F32 [n_head] each query head's sink logit
  kSwigluOai = 24,      // src0 gate F32 [n, r], src1 up F32 [n, r]; f0 alpha, f1 limit > 0 ->
                        // F32 [n, r] = g sigmoid(alpha g) (u + 1), g = min(gate, limit),
                        // u = clamp(up, -limit, limit)
  kAddId = 25,          // src0 F32 [n, n_used, r], src1 F32 [n, n_expert] one row per expert,
                        // src2 I32 [n_used, r] ids -> F32 [n, n_used, r] (may alias src0):
                        // out[:, s, t] = x[:, s, t] + b[:, ids[s, t]]
};

// The op's name from the op table (graph/op_table.h); "unknown" for a value without a row.
const char* op_name(Op op);

struct TensorRef {
  uint64_t buffer = 0;  // device buffer handle (0 never names a buffer)
  uint64_t offset = 0;  // bytes from the start of the buffer
  DType dtype = DType::kF32;
  int64_t ne[kMaxDims] = {1, 1, 1, 1};
  uint64_t nb[kMaxDims] = {0, 0, 0, 0};

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  bool rows_contiguous() const;   // nb[0] is the element size (row data packed)
  bool contiguous() const;        // the whole tensor packed
  uint64_t extent_bytes() const;  // bytes spanned from offset to the end of the last row
  friend bool operator==(const TensorRef&, const TensorRef&) = default;
};

// A contiguous tensor of the given shape (unused dims are 1).
TensorRef make_tensor(uint64_t buffer, uint64_t offset, DType dtype, int64_t ne0, int64_t ne1 = 1,
                      int64_t ne2 = 1, int64_t ne3 = 1);

struct Node {
  Op op = Op::kAdd;
  int32_t src[kMaxSrc] = {-1, -1, -1, -1, -1, -1};  // indices into Graph::tensors, -1 = none
  int32_t out = -1;
  int32_t iparams[kMaxParams] = {0, 0, 0, 0};
  float fparams[kMaxParams] = {0, 0, 0, 0};
};

struct Graph {
  std::vector<TensorRef> tensors;
  std::vector<Node> nodes;
};

// Checks arity, dtypes and shapes of every node, and that indices name tensors. It does not
// check buffers (the device does, against what it owns). The message names the node and op.
Status graph_validate(const Graph& g);

}  // namespace strata
