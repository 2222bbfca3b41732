#include "graph/op_table.h"

#include <array>
#include <cmath>
#include <string>

#include "core/check.h"
#include "core/ops_moe.h"
#include "core/sample.h"

namespace strata {
namespace {

bool same_shape(const TensorRef& a, const TensorRef& b) {
  for (int d = 0; d < kMaxDims; ++d) {
    if (a.ne[d] != b.ne[d]) return false;
  }
  return true;
}

std::string shape_str(const TensorRef& t) {
  std::string s = "[";
  for (int d = 0; d < kMaxDims; ++d) s += std::to_string(t.ne[d]) + (d + 1 < kMaxDims ? ", " : "]");
  return s;
}

Status need(bool ok, const char* what) { return ok ? Status::ok() : invalid_argument(what); }
// For messages that print shapes: built only on failure (graphs are checked every step).
template <typename Fn>
Status need_lazy(bool ok, const Fn& what) {
  return ok ? Status::ok() : invalid_argument(what());
}
bool is_f32(const TensorRef& t) { return t.dtype == DType::kF32; }
bool is_i32(const TensorRef& t) { return t.dtype == DType::kI32; }

// A device layout's rows are groups of 16 packed rows (core/rows16.h): the kernels address a
// group as 16 rows of packed bytes, so a weight in one must have packed rows.
Status check_layout_rows(const TensorRef& w) {
  return need_lazy(!dtype_is_layout(w.dtype) || w.nb[1] == dtype_row_bytes(w.dtype, w.ne[0]), [&] {
    return "a device layout's rows must be packed: nb[1] = " + std::to_string(w.nb[1]) +
           ", a row is " + std::to_string(dtype_row_bytes(w.dtype, w.ne[0])) + " bytes";
  });
}

// Whether t is `pieces` pieces of `piece` values in a row: t.ne[0] == piece * pieces, without
// the product (a peer's sizes may overflow it).
bool is_pieces(const TensorRef& t, int64_t piece, int64_t pieces) {
  return piece >= 1 && t.ne[0] % piece == 0 && t.ne[0] / piece == pieces;
}

// --- Validators, one per op (or per family of ops of one shape rule) ---------------------------

Status validate_get_rows(const NodeView& n) {
  const TensorRef& out = n.out();
  STRATA_RETURN_IF_ERROR(
      need(dtype_info(n.src(0).dtype).has_kernels, "table dtype has no kernels"));
  STRATA_RETURN_IF_ERROR(check_layout_rows(n.src(0)));
  STRATA_RETURN_IF_ERROR(
      need(is_i32(n.src(1)) && n.src(1).contiguous(), "ids must be contiguous i32"));
  // A table of planes (a head-major KV cache, copied cell by cell) is never a layout's.
  const TensorRef& table = n.src(0);
  STRATA_RETURN_IF_ERROR(
      need(table.ne[3] == 1 && (table.ne[2] == 1 || !dtype_is_layout(table.dtype)),
           "table must be [n, rows] or, not in a device layout, [n, rows, planes]"));
  return need_lazy(is_f32(out) && is_pieces(out, table.ne[0], table.ne[2]) &&
                       out.ne[1] == n.src(1).ne[0] && out.ne[2] == 1 && out.ne[3] == 1,
                   [&] {
                     return "out must be f32 [n * planes, ids] of table [n, rows, planes]: out " +
                            shape_str(out) + ", table " + shape_str(table);
                   });
}

Status validate_rms_norm(const NodeView& n) {
  if (n.has_src(1)) {
    STRATA_RETURN_IF_ERROR(need(is_f32(n.src(1)) && n.src(1).ne[0] == n.src(0).ne[0] &&
                                    n.src(1).n_rows() == 1 && n.src(1).contiguous(),
                                "weight must be f32 [n]"));
  }
  return need(is_f32(n.src(0)) && is_f32(n.out()) && same_shape(n.src(0), n.out()),
              "x and out must be f32 of one shape");
}

// a and out f32 [n, r]; b f32 [n, r], or [n, 1] (one row for all) when `broadcast`.
Status check_elementwise(const NodeView& n, bool broadcast) {
  const TensorRef& a = n.src(0);
  const TensorRef& b = n.src(1);
  const TensorRef& out = n.out();
  return need_lazy(is_f32(a) && is_f32(b) && is_f32(out) && same_shape(a, out) &&
                       b.ne[0] == a.ne[0] &&
                       (b.n_rows() == a.n_rows() || (broadcast && b.n_rows() == 1)),
                   [&] {
                     return "operands must be f32 [n, r] (b may be [n, 1]): " + shape_str(a) + " " +
                            shape_str(b) + " -> " + shape_str(out);
                   });
}
Status validate_add_mul(const NodeView& n) { return check_elementwise(n, /*broadcast=*/true); }
Status validate_swiglu(const NodeView& n) { return check_elementwise(n, /*broadcast=*/false); }

Status validate_mul_mat(const NodeView& n) {
  const TensorRef& w = n.src(0);
  const TensorRef& x = n.src(1);
  const TensorRef& out = n.out();
  STRATA_RETURN_IF_ERROR(need(dtype_info(w.dtype).has_kernels, "weight dtype has no kernels"));
  STRATA_RETURN_IF_ERROR(check_layout_rows(w));
  return need_lazy(is_f32(x) && is_f32(out) && w.ne[0] == x.ne[0] && w.ne[2] == 1 && w.ne[3] == 1 &&
                       out.ne[0] == w.ne[1] && out.n_rows() == x.n_rows() &&
                       out.rows_contiguous() && out.ne[2] == x.ne[2] && out.ne[3] == x.ne[3],
                   [&] {
                     return "mul_mat shapes: w " + shape_str(w) + " x " + shape_str(x) + " -> " +
                            shape_str(out);
                   });
}

Status validate_rope(const NodeView& n) {
  const TensorRef& x = n.src(0);
  const TensorRef& out = n.out();
  const int32_t n_rot = n.node.iparams[0];
  const int32_t mode = n.node.iparams[1];
  STRATA_RETURN_IF_ERROR(need(n_rot > 0 && n_rot <= x.ne[0] && n_rot % 2 == 0,
                              "n_rot must be even and in (0, head_dim]"));
  STRATA_RETURN_IF_ERROR(need(mode == 0 || mode == 2, "rope mode 0 or 2"));
  return need(is_f32(x) && is_i32(n.src(1)) && is_f32(out) && same_shape(x, out) &&
                  n.src(1).ne[0] == x.ne[2] && x.ne[3] == 1 && x.nb[1] == x.nb[0] * x.ne[0] &&
                  out.nb[1] == x.nb[1] && out.nb[2] == x.nb[2],
              "rope: x f32 [hd, heads, t] with packed heads, pos i32 [t]");
}

Status validate_rope_rates(const NodeView& n) {
  STRATA_RETURN_IF_ERROR(validate_rope(n));
  const TensorRef& rates = n.src(2);
  STRATA_RETURN_IF_ERROR(need(is_f32(rates) && rates.contiguous() && rates.n_rows() == 1 &&
                                  rates.ne[0] == n.node.iparams[0] / 2,
                              "rates must be f32 [n_rot / 2]"));
  return need(std::isfinite(n.node.fparams[0]), "mscale must be finite");
}

Status validate_unary(const NodeView& n) {
  return need(is_f32(n.src(0)) && is_f32(n.out()) && same_shape(n.src(0), n.out()),
              "x and out must be f32 of one shape");
}

Status validate_scale(const NodeView& n) {
  STRATA_RETURN_IF_ERROR(need(std::isfinite(n.node.fparams[0]), "the scale must be finite"));
  return validate_unary(n);
}

Status validate_softcap(const NodeView& n) {
  const float cap = n.node.fparams[0];
  STRATA_RETURN_IF_ERROR(need(cap > 0 && std::isfinite(cap), "the cap must be finite and > 0"));
  return validate_unary(n);
}

// The dtypes of a KV cache: f16, f32, and q8_0 with rows of whole 32-value blocks (the heads of
// a head-major cache: attention reads a head's segment on its own). Its rows and planes start
// where its elements may be read (f32 at 4 bytes, f16 and q8_0's f16 scales at 2): a peer's
// strides are not trusted to be.
bool is_kv_cache(const TensorRef& cache) {
  const bool dtype = (cache.dtype == DType::kF16 || is_f32(cache) || cache.dtype == DType::kQ8_0) &&
                     cache.ne[0] % dtype_block_size(cache.dtype) == 0;
  const uint64_t align = is_f32(cache) ? 4 : 2;
  return dtype && cache.offset % align == 0 && cache.nb[1] % align == 0 && cache.nb[2] % align == 0;
}

Status validate_set_rows(const NodeView& n) {
  const TensorRef& cache = n.src(0);
  return need(is_kv_cache(cache) && cache.rows_contiguous() && cache.ne[3] == 1 &&
                  is_f32(n.src(1)) && is_i32(n.src(2)) &&
                  is_pieces(n.src(1), cache.ne[0], cache.ne[2]) &&
                  n.src(2).ne[0] == n.src(1).n_rows() && n.node.out == n.node.src[0],
              "set_rows: cache f16/f32/q8_0 [n, cells, planes], rows f32 [n * planes, t], idx i32 "
              "[t], in place");
}

Status validate_attention(const NodeView& n) {
  const TensorRef& q = n.src(0);
  const TensorRef& k = n.src(1);
  const TensorRef& v = n.src(2);
  const TensorRef& out = n.out();
  const int64_t kv_heads = n.node.iparams[0];
  STRATA_RETURN_IF_ERROR(
      need(kv_heads >= 1 && q.ne[1] % kv_heads == 0, "kv_heads must divide the query heads"));
  // Cell-major, a cell's heads side by side: [hd * kv_heads, cells]; head-major, a plane of
  // cells per kv head: [hd, cells, kv_heads] (core/ops.h's KvStrides).
  const bool cell_major = is_pieces(k, q.ne[0], kv_heads) && k.ne[2] == 1;
  const bool head_major = k.ne[0] == q.ne[0] && k.ne[2] == kv_heads;
  STRATA_RETURN_IF_ERROR(
      need(k.dtype == v.dtype && is_kv_cache(k) && q.ne[0] % dtype_block_size(k.dtype) == 0 &&
               k.rows_contiguous() && v.rows_contiguous() && (cell_major || head_major) &&
               k.ne[3] == 1 && same_shape(k, v) && k.nb[1] == v.nb[1] && k.nb[2] == v.nb[2],
           "k and v caches must be f16/f32 (or q8_0 with hd a multiple of 32) [hd * kv_heads, "
           "cells] or [hd, cells, kv_heads] alike"));
  STRATA_RETURN_IF_ERROR(need(is_i32(n.src(3)) && n.src(3).contiguous() && is_i32(n.src(4)) &&
                                  n.src(4).contiguous() && n.src(4).ne[0] == 2 &&
                                  n.src(4).ne[1] == q.ne[2],
                              "cells i32 [len, lists] and tok i32 [2, t]"));
  return need(is_f32(q) && is_f32(out) && same_shape(q, out) && q.nb[1] == q.nb[0] * q.ne[0] &&
                  out.nb[1] == out.nb[0] * out.ne[0],
              "q and out must be f32 [hd, heads, t] with packed heads");
}

Status validate_attention_ext(const NodeView& n) {
  STRATA_RETURN_IF_ERROR(validate_attention(n));
  STRATA_RETURN_IF_ERROR(need(n.node.iparams[1] >= 0, "the window must be >= 0"));
  const float cap = n.node.fparams[1];
  return need(cap >= 0 && std::isfinite(cap), "the soft-cap must be finite and >= 0");
}

Status validate_attention_sink(const NodeView& n) {
  STRATA_RETURN_IF_ERROR(validate_attention_ext(n));
  const TensorRef& sinks = n.src(5);
  return need_lazy(
      is_f32(sinks) && sinks.contiguous() && sinks.n_elements() == n.src(0).ne[1], [&] {
        return "sinks must be contiguous f32 [n_head = " + std::to_string(n.src(0).ne[1]) +
               "]: " + shape_str(sinks);
      });
}

Status validate_rope_shift(const NodeView& n) {
  const TensorRef& cache = n.src(0);
  const int32_t n_rot = n.node.iparams[0];
  const int32_t mode = n.node.iparams[1];
  const int32_t hd = n.node.iparams[2];
  STRATA_RETURN_IF_ERROR(need(is_kv_cache(cache) && cache.rows_contiguous() && cache.ne[3] == 1 &&
                                  n.node.out == n.node.src[0],
                              "rope_shift: cache f16/f32/q8_0 [n, cells, planes] with packed rows, "
                              "in place"));
  STRATA_RETURN_IF_ERROR(need(hd > 0 && cache.ne[0] % hd == 0, "hd must divide the row length"));
  STRATA_RETURN_IF_ERROR(
      need(n_rot > 0 && n_rot <= hd && n_rot % 2 == 0, "n_rot must be even and in (0, hd]"));
  STRATA_RETURN_IF_ERROR(need(mode == 0 || mode == 2, "rope mode 0 or 2"));
  STRATA_RETURN_IF_ERROR(need(is_i32(n.src(1)) && n.src(1).contiguous() && is_i32(n.src(2)) &&
                                  n.src(2).contiguous() && n.src(1).n_rows() == 1 &&
                                  n.src(2).n_elements() == n.src(1).ne[0],
                              "cells and deltas must be i32 [m] alike"));
  if (n.has_src(3)) {
    const TensorRef& rates = n.src(3);
    return need(
        is_f32(rates) && rates.contiguous() && rates.n_rows() == 1 && rates.ne[0] == n_rot / 2,
        "rates must be f32 [n_rot / 2]");
  }
  return need(
      std::isfinite(n.node.fparams[0]) && n.node.fparams[0] > 0 && std::isfinite(n.node.fparams[1]),
      "freq_base must be finite and > 0, freq_scale finite");
}

Status validate_argmax(const NodeView& n) {
  const TensorRef& out = n.out();
  return need(is_f32(n.src(0)) && is_i32(out) && out.ne[0] == n.src(0).n_rows() && out.contiguous(),
              "argmax: f32 [n, r] -> i32 [r]");
}

Status validate_copy(const NodeView& n) {
  return need(is_f32(n.src(0)) && is_f32(n.out()) && same_shape(n.src(0), n.out()),
              "copy: f32 of one shape");
}

Status validate_sample(const NodeView& n) {
  const TensorRef& logits = n.src(0);
  const TensorRef& out = n.out();
  const int64_t rows = logits.ne[1];
  STRATA_RETURN_IF_ERROR(need(is_f32(logits) && logits.rows_contiguous() && logits.ne[2] == 1 &&
                                  logits.ne[3] == 1 && logits.ne[0] <= INT32_MAX,
                              "logits must be f32 [n_vocab, r] with n_vocab < 2^31"));
  STRATA_RETURN_IF_ERROR(
      need_lazy(is_i32(n.src(1)) && n.src(1).contiguous() && n.src(1).ne[0] == kSampleWords &&
                    n.src(1).n_rows() == rows,
                [&] { return "settings must be i32 [" + std::to_string(kSampleWords) + ", r]"; }));
  STRATA_RETURN_IF_ERROR(need(is_i32(n.src(2)) && n.src(2).contiguous() && n.src(2).ne[0] == 2 &&
                                  n.src(2).ne[2] == rows && n.src(2).ne[3] == 1,
                              "entries must be i32 [2, m, r]"));
  STRATA_RETURN_IF_ERROR(
      need(is_f32(n.src(3)) && n.src(3).contiguous() && n.src(3).n_elements() == rows,
           "uniforms must be f32 [r]"));
  const int64_t w = out.ne[0];
  return need_lazy(
      is_i32(out) && out.contiguous() && out.n_rows() == rows &&
          (w == 1 || (w >= 2 && w % 2 == 0 && w <= sample_out_words(kSampleMaxNProbs))),
      [&] {
        return "out must be i32 [1, r] or [2 + 2k, r] with k <= " +
               std::to_string(kSampleMaxNProbs) + ": " + shape_str(out);
      });
}

// --- Mixture of experts ---------------------------------------------------------------------

// An F32 [n_expert, r] tensor of router logits (rows evenly spaced), n_expert within the limit.
Status check_logits(const TensorRef& x) {
  STRATA_RETURN_IF_ERROR(need_lazy(is_f32(x) && x.ne[2] == 1 && x.ne[3] == 1, [&] {
    return "logits must be f32 [n_expert, r]: " + shape_str(x);
  }));
  return need_lazy(x.ne[0] <= kMaxExperts, [&] {
    return "n_expert = " + std::to_string(x.ne[0]) + " past the limit " +
           std::to_string(kMaxExperts);
  });
}

// An I32 [k, r] contiguous tensor of ids for r rows of n_expert logits, 1 <= k <= n_expert.
Status check_ids(const TensorRef& ids, const char* name, int64_t n_expert, int64_t rows) {
  return need_lazy(
      is_i32(ids) && ids.contiguous() && ids.ne[0] <= n_expert && ids.ne[1] == rows &&
          ids.ne[2] == 1 && ids.ne[3] == 1,
      [&] {
        return std::string(name) + " must be contiguous i32 [k, " + std::to_string(rows) +
               "] with k <= n_expert = " + std::to_string(n_expert) + ": " + shape_str(ids);
      });
}

Status validate_moe_top_k(const NodeView& n) {
  const TensorRef& x = n.src(0);
  const TensorRef& out = n.out();
  STRATA_RETURN_IF_ERROR(check_logits(x));
  const int64_t k = n.node.iparams[0];
  STRATA_RETURN_IF_ERROR(need_lazy(k >= 1 && k <= x.ne[0], [&] {
    return "k = " + std::to_string(k) + " outside [1, n_expert = " + std::to_string(x.ne[0]) + "]";
  }));
  return need_lazy(is_i32(out) && out.contiguous() && out.ne[0] == k && out.ne[1] == x.ne[1] &&
                       out.ne[2] == 1 && out.ne[3] == 1,
                   [&] {
                     return "out must be contiguous i32 [k = " + std::to_string(k) + ", " +
                            std::to_string(x.ne[1]) + "]: " + shape_str(out);
                   });
}

Status validate_moe_gate(const NodeView& n) {
  const TensorRef& x = n.src(0);
  const TensorRef& ids = n.src(1);
  const TensorRef& out = n.out();
  STRATA_RETURN_IF_ERROR(check_logits(x));
  STRATA_RETURN_IF_ERROR(check_ids(ids, "ids", x.ne[0], x.ne[1]));
  const int32_t gating = n.node.iparams[0];
  const int32_t normalise = n.node.iparams[1];
  STRATA_RETURN_IF_ERROR(need_lazy(gating >= 0 && gating <= 2, [&] {
    return "gating = " + std::to_string(gating) +
           " is not 0 (softmax), 1 (sigmoid) or 2 (softmax of the selected)";
  }));
  STRATA_RETURN_IF_ERROR(need_lazy(normalise == 0 || normalise == 1, [&] {
    return "normalise = " + std::to_string(normalise) + " is not 0 or 1";
  }));
  STRATA_RETURN_IF_ERROR(need(std::isfinite(n.node.fparams[0]), "the scale must be finite"));
  return need_lazy(is_f32(out) && out.ne[0] == ids.ne[0] && out.ne[1] == ids.ne[1] &&
                       out.ne[2] == 1 && out.ne[3] == 1,
                   [&] { return "out must be f32 [k, r] as the ids: " + shape_str(out); });
}

Status validate_mul_mat_id(const NodeView& n) {
  const TensorRef& w = n.src(0);
  const TensorRef& x = n.src(1);
  const TensorRef& ids = n.src(2);
  const TensorRef& out = n.out();
  STRATA_RETURN_IF_ERROR(need(dtype_info(w.dtype).has_kernels, "weight dtype has no kernels"));
  STRATA_RETURN_IF_ERROR(check_layout_rows(w));
  STRATA_RETURN_IF_ERROR(need_lazy(w.ne[3] == 1 && w.ne[2] <= kMaxExperts, [&] {
    return "weights must be [k, n, n_expert] with n_expert <= " + std::to_string(kMaxExperts) +
           ": " + shape_str(w);
  }));
  // Experts side by side: expert e's matrix ends before expert e + 1's starts.
  STRATA_RETURN_IF_ERROR(need(w.ne[2] == 1 || w.nb[2] >= w.nb[1] * static_cast<uint64_t>(w.ne[1]),
                              "expert matrices overlap (nb[2] < n * nb[1])"));
  const int64_t n_used = ids.ne[0];
  const int64_t rows = ids.ne[1];
  STRATA_RETURN_IF_ERROR(check_ids(ids, "ids", w.ne[2], ids.ne[1]));
  STRATA_RETURN_IF_ERROR(need_lazy(is_f32(x) && x.ne[0] == w.ne[0] &&
                                       (x.ne[1] == 1 || x.ne[1] == n_used) && x.ne[2] == rows &&
                                       x.ne[3] == 1,
                                   [&] {
                                     return "x must be f32 [k, 1 or n_used, r]: w " + shape_str(w) +
                                            " x " + shape_str(x) + " ids " + shape_str(ids);
                                   }));
  return need_lazy(is_f32(out) && out.ne[0] == w.ne[1] && out.ne[1] == n_used &&
                       out.ne[2] == rows && out.ne[3] == 1,
                   [&] {
                     return "out must be f32 [n, n_used, r]: w " + shape_str(w) + " ids " +
                            shape_str(ids) + " -> " + shape_str(out);
                   });
}

Status validate_moe_sum(const NodeView& n) {
  const TensorRef& y = n.src(0);
  const TensorRef& w = n.src(1);
  const TensorRef& out = n.out();
  STRATA_RETURN_IF_ERROR(need_lazy(is_f32(y) && y.ne[3] == 1 && y.ne[1] <= kMaxExperts, [&] {
    return "y must be f32 [n, n_used, r] with n_used <= " + std::to_string(kMaxExperts) + ": " +
           shape_str(y);
  }));
  STRATA_RETURN_IF_ERROR(need_lazy(
      is_f32(w) && w.ne[0] == y.ne[1] && w.ne[1] == y.ne[2] && w.ne[2] == 1 && w.ne[3] == 1, [&] {
        return "weights must be f32 [n_used, r] of y " + shape_str(y) + ": " + shape_str(w);
      }));
  return need_lazy(
      is_f32(out) && out.ne[0] == y.ne[0] && out.ne[1] == y.ne[2] && out.ne[2] == 1 &&
          out.ne[3] == 1,
      [&] { return "out must be f32 [n, r] of y " + shape_str(y) + ": " + shape_str(out); });
}

Status validate_swiglu_oai(const NodeView& n) {
  const float alpha = n.node.fparams[0], limit = n.node.fparams[1];
  STRATA_RETURN_IF_ERROR(need(std::isfinite(alpha) && limit > 0 && std::isfinite(limit),
                              "alpha must be finite and the limit finite and > 0"));
  return check_elementwise(n, /*broadcast=*/false);
}

Status validate_add_id(const NodeView& n) {
  const TensorRef& x = n.src(0);
  const TensorRef& b = n.src(1);
  const TensorRef& ids = n.src(2);
  const TensorRef& out = n.out();
  STRATA_RETURN_IF_ERROR(
      need_lazy(is_f32(x) && x.ne[3] == 1 && is_f32(out) && same_shape(x, out), [&] {
        return "x and out must be f32 [n, n_used, r] alike: " + shape_str(x) + " -> " +
               shape_str(out);
      }));
  STRATA_RETURN_IF_ERROR(need_lazy(
      is_f32(b) && b.ne[0] == x.ne[0] && b.ne[1] <= kMaxExperts && b.ne[2] == 1 && b.ne[3] == 1,
      [&] {
        return "biases must be f32 [n, n_expert] with n_expert <= " + std::to_string(kMaxExperts) +
               " of x " + shape_str(x) + ": " + shape_str(b);
      }));
  STRATA_RETURN_IF_ERROR(check_ids(ids, "ids", b.ne[1], x.ne[2]));
  return need_lazy(ids.ne[0] == x.ne[1], [&] {
    return "ids must be i32 [n_used = " + std::to_string(x.ne[1]) + ", r]: " + shape_str(ids);
  });
}

// --- The table --------------------------------------------------------------------------------

constexpr uint32_t kOptional1 = 1u << 1;
constexpr uint32_t kOptional3 = 1u << 3;
constexpr uint32_t kCache0 = 1u << 0;
constexpr uint32_t kCaches12 = 1u << 1 | 1u << 2;  // attention's k and v

constexpr OpInfo kOps[] = {
    // op, name, inputs, optional inputs, weight input, validator, KV cache inputs
    {Op::kGetRows, "get_rows", 2, 0, 0, validate_get_rows, kCache0},   // a sequence copy's cells
    {Op::kRmsNorm, "rms_norm", 2, kOptional1, -1, validate_rms_norm},  // src1: the weight
    {Op::kAdd, "add", 2, 0, -1, validate_add_mul},
    {Op::kMul, "mul", 2, 0, -1, validate_add_mul},
    {Op::kMulMat, "mul_mat", 2, 0, 0, validate_mul_mat},
    {Op::kRope, "rope", 2, 0, -1, validate_rope},
    {Op::kSetRows, "set_rows", 3, 0, -1, validate_set_rows, kCache0},
    {Op::kAttention, "attention", 5, 0, -1, validate_attention, kCaches12},
    {Op::kSwiglu, "swiglu", 2, 0, -1, validate_swiglu},
    {Op::kArgmax, "argmax", 1, 0, -1, validate_argmax},
    {Op::kCopy, "copy", 1, 0, -1, validate_copy},
    {Op::kRopeRates, "rope_rates", 3, 0, -1, validate_rope_rates},
    {Op::kScale, "scale", 1, 0, -1, validate_scale},
    {Op::kGeglu, "geglu", 2, 0, -1, validate_swiglu},
    {Op::kSoftcap, "softcap", 1, 0, -1, validate_softcap},
    {Op::kAttentionExt, "attention_ext", 5, 0, -1, validate_attention_ext, kCaches12},
    // src3: the rates
    {Op::kRopeShift, "rope_shift", 4, kOptional3, -1, validate_rope_shift, kCache0},
    {Op::kSample, "sample", 4, 0, -1, validate_sample},
    {Op::kMoeTopK, "moe_top_k", 1, 0, -1, validate_moe_top_k},
    {Op::kMoeGate, "moe_gate", 2, 0, -1, validate_moe_gate},
    {Op::kMulMatId, "mul_mat_id", 3, 0, 0, validate_mul_mat_id},
    {Op::kMoeSum, "moe_sum", 2, 0, -1, validate_moe_sum},
    {Op::kAttentionSink, "attention_sink", 6, 0, -1, validate_attention_sink, kCaches12},
    {Op::kSwigluOai, "swiglu_oai", 2, 0, -1, validate_swiglu_oai},
    {Op::kAddId, "add_id", 3, 0, -1, validate_add_id},
};

constexpr std::array<int16_t, kOpIdLimit> make_index() {
  std::array<int16_t, kOpIdLimit> index{};
  for (auto& i : index) i = -1;
  for (size_t i = 0; i < std::size(kOps); ++i) {
    index[static_cast<uint32_t>(kOps[i].op)] = static_cast<int16_t>(i);
  }
  return index;
}
constexpr auto kIndex = make_index();

constexpr bool rows_well_formed() {
  for (size_t i = 0; i < std::size(kOps); ++i) {
    if (i > 0 && kOps[i - 1].op >= kOps[i].op) return false;  // sorted, each value once
    if (kOps[i].n_src < 1 || kOps[i].n_src > kMaxSrc) return false;
    if ((kOps[i].optional_src >> kOps[i].n_src) != 0) return false;
    if (kOps[i].weight_src >= kOps[i].n_src) return false;
  }
  return true;
}
static_assert(rows_well_formed(),
              "op rows: sorted by value, 1..kMaxSrc inputs, optional and weight inputs < n_src");

}  // namespace

const OpInfo* op_info(uint32_t id) {
  if (id >= kOpIdLimit || kIndex[id] < 0) return nullptr;
  return &kOps[kIndex[id]];
}

const OpInfo& op_info(Op op) {
  const OpInfo* info = op_info(static_cast<uint32_t>(op));
  STRATA_CHECK(info != nullptr, "Op value outside the table");
  return *info;
}

std::span<const OpInfo> op_table() { return kOps; }

OpSet op_set_all() {
  OpSet s;
  for (const OpInfo& info : kOps) s.set(static_cast<uint32_t>(info.op));
  return s;
}

const OpInfo* op_info_by_name(std::string_view name) {
  for (const OpInfo& info : kOps) {
    if (name == info.name) return &info;
  }
  return nullptr;
}

const char* op_name(Op op) {
  const OpInfo* info = op_info(static_cast<uint32_t>(op));
  return info != nullptr ? info->name : "unknown";
}

}  // namespace strata
