// One table of op cases, run on every backend: the CPU device, and a strata worker over
// loopback TCP (the real one, in process). Each case is one small graph with random inputs from
// a fixed seed; the whole buffer the graph works in is compared bitwise between backends, so the
// wire (graph serialisation, every op's parameters, the weight dtypes) is checked along with
// the kernels. A new op is a row of kCases (the coverage test below fails without one).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "core/fp16.h"
#include "core/quant.h"
#include "core/rng.h"
#include "core/rows16.h"
#include "core/sample.h"
#include "graph/op_table.h"
#include "rpc/remote_backend.h"
#include "rpc/worker.h"
#include "unit/engine_testing.h"

namespace strata {
namespace {

constexpr uint64_t kAlign = 64;
// The fill of output tensors before a run: a case whose op did not write its output fails.
constexpr uint8_t kSentinel = 0x7f;

// A graph over one buffer, with the bytes its inputs start from.
class CaseGraph {
 public:
  explicit CaseGraph(uint64_t seed) : rng_(seed) {}

  // F32 [ne0, ne1, ne2], uniform in [-1, 1).
  int32_t f32(int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1) {
    const int32_t t = place(make_tensor(0, 0, DType::kF32, ne0, ne1, ne2));
    float* p = reinterpret_cast<float*>(bytes(t));
    for (int64_t i = 0; i < ne0 * ne1 * ne2; ++i) p[i] = 2 * rng_.uniform() - 1;
    return t;
  }
  // A weight or table of `dtype` [ne0, ne1, ne2]: random rows converted to the dtype.
  int32_t weight(DType dtype, int64_t ne0, int64_t ne1, int64_t ne2 = 1) {
    const int32_t t = place(make_tensor(0, 0, dtype, ne0, ne1, ne2));
    std::vector<float> row(static_cast<size_t>(ne0));
    const size_t row_bytes = dtype_row_bytes(dtype, ne0);
    // A device layout: quantised in its base type, then packed matrix by matrix.
    const DType base = dtype_info(dtype).base;
    std::vector<uint8_t> rows(row_bytes * static_cast<size_t>(ne1 * ne2));
    for (int64_t r = 0; r < ne1 * ne2; ++r) {
      for (float& v : row) v = 2 * rng_.uniform() - 1;
      quantize_row(base, row.data(), rows.data() + r * row_bytes, ne0);
    }
    for (int64_t e = 0; e < ne2; ++e) {
      const size_t at = static_cast<size_t>(e * ne1) * row_bytes;
      if (base == dtype) {
        std::memcpy(bytes(t) + at, rows.data() + at, row_bytes * static_cast<size_t>(ne1));
      } else {
        rows16_pack(dtype, rows.data() + at, bytes(t) + at, ne1, ne0);
      }
    }
    return t;
  }
  // F32 [ne0, ne1] with the given values.
  int32_t f32_of(const std::vector<float>& v, int64_t ne0, int64_t ne1 = 1) {
    const int32_t t = place(make_tensor(0, 0, DType::kF32, ne0, ne1));
    std::memcpy(bytes(t), v.data(), 4 * v.size());
    return t;
  }
  // I32 [ne0, ne1, ne2] with the given values.
  int32_t i32(const std::vector<int32_t>& v, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1) {
    const int32_t t = place(make_tensor(0, 0, DType::kI32, ne0, ne1, ne2));
    std::memcpy(bytes(t), v.data(), 4 * v.size());
    return t;
  }
  // I32 [n], each in [0, limit).
  int32_t ids(int64_t n, int64_t limit) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (int32_t& x : v) x = static_cast<int32_t>(rng_.next() % static_cast<uint64_t>(limit));
    return i32(v, n);
  }
  // I32 [n] distinct, each in [0, limit).
  int32_t distinct_ids(int64_t n, int64_t limit) {
    std::vector<int32_t> all(static_cast<size_t>(limit));
    for (int32_t i = 0; i < limit; ++i) all[static_cast<size_t>(i)] = i;
    for (size_t i = all.size() - 1; i > 0; --i) std::swap(all[i], all[rng_.next() % (i + 1)]);
    all.resize(static_cast<size_t>(n));
    return i32(all, n);
  }
  // An output of `dtype` [ne0, ne1, ne2], filled with the sentinel.
  int32_t out(DType dtype, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1) {
    const int32_t t = place(make_tensor(0, 0, dtype, ne0, ne1, ne2));
    std::memset(bytes(t), kSentinel, graph_.tensors[t].extent_bytes());
    outputs_.push_back(t);
    return t;
  }
  // A view of `base` with its own shape and row stride (bytes), at a byte offset.
  int32_t view(int32_t base, int64_t ne0, int64_t ne1, uint64_t nb1, uint64_t offset = 0) {
    TensorRef t =
        make_tensor(0, graph_.tensors[base].offset + offset, graph_.tensors[base].dtype, ne0, ne1);
    t.nb[1] = nb1;
    t.nb[2] = t.nb[3] = nb1 * static_cast<uint64_t>(ne1);
    graph_.tensors.push_back(t);
    return static_cast<int32_t>(graph_.tensors.size() - 1);
  }
  void node(Op op, int32_t out, std::initializer_list<int32_t> src,
            std::initializer_list<int32_t> iparams = {},
            std::initializer_list<float> fparams = {}) {
    Node n;
    n.op = op;
    n.out = out;
    std::copy(src.begin(), src.end(), n.src);
    std::copy(iparams.begin(), iparams.end(), n.iparams);
    std::copy(fparams.begin(), fparams.end(), n.fparams);
    graph_.nodes.push_back(n);
  }
  // Marks an input that the op writes in place as an output.
  void written(int32_t t) { outputs_.push_back(t); }

  Rng& rng() { return rng_; }
  const std::vector<uint8_t>& init() const { return init_; }
  const std::vector<int32_t>& outputs() const { return outputs_; }
  // The graph with every tensor in `buffer`.
  Graph graph(uint64_t buffer) const {
    Graph g = graph_;
    for (TensorRef& t : g.tensors) t.buffer = buffer;
    return g;
  }
  const TensorRef& tensor(int32_t t) const { return graph_.tensors[t]; }

 private:
  int32_t place(TensorRef t) {
    t.offset = (init_.size() + kAlign - 1) / kAlign * kAlign;
    init_.resize(t.offset + t.extent_bytes());
    graph_.tensors.push_back(t);
    return static_cast<int32_t>(graph_.tensors.size() - 1);
  }
  uint8_t* bytes(int32_t t) { return init_.data() + graph_.tensors[t].offset; }

  Rng rng_;
  Graph graph_;
  std::vector<uint8_t> init_;
  std::vector<int32_t> outputs_;
};

struct OpCase {
  const char* name;  // test name: letters, digits and '_'
  Op op;
  std::function<void(CaseGraph&)> build;
};

// gtest prints a failing case by its name.
void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

// Attention of t queries of `heads` heads over a cache of `cells` cells in `kv` dtype, with two
// lists (sequences) of up to `len` cells.
// With `sinks`, attention_sink (gpt-oss: the window and cap of attention_ext, and one sink logit
// per head, some far above the scores). With `head_major`, the caches are [hd, cells, kv_heads]
// (a plane of cells per kv head, as the engine allocates them), else [hd * kv_heads, cells].
void attention_case(CaseGraph& c, DType kv, int64_t hd, int64_t heads, int64_t kv_heads, int64_t t,
                    int64_t cells, int64_t len, int32_t window = -1, float softcap = 0.0f,
                    bool sinks = false, bool head_major = false) {
  const int32_t q = c.f32(hd, heads, t);
  const int32_t k =
      head_major ? c.weight(kv, hd, cells, kv_heads) : c.weight(kv, hd * kv_heads, cells);
  const int32_t v =
      head_major ? c.weight(kv, hd, cells, kv_heads) : c.weight(kv, hd * kv_heads, cells);
  std::vector<int32_t> lists(static_cast<size_t>(2 * len));
  for (int32_t& x : lists) x = static_cast<int32_t>(c.rng().next() % cells);
  std::vector<int32_t> tok;
  for (int64_t i = 0; i < t; ++i) {
    tok.push_back(static_cast<int32_t>(i % 2));
    tok.push_back(static_cast<int32_t>(1 + c.rng().next() % len));
  }
  const int32_t lc = c.i32(lists, len, 2);
  const int32_t tk = c.i32(tok, 2, t);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  if (sinks) {
    std::vector<float> s(static_cast<size_t>(heads));
    for (float& x : s) x = 8 * c.rng().uniform() - 2;
    const int32_t sk = c.f32_of(s, heads);
    c.node(Op::kAttentionSink, c.out(DType::kF32, hd, heads, t), {q, k, v, lc, tk, sk},
           {static_cast<int32_t>(kv_heads), window}, {scale, softcap});
  } else if (window < 0) {
    c.node(Op::kAttention, c.out(DType::kF32, hd, heads, t), {q, k, v, lc, tk},
           {static_cast<int32_t>(kv_heads)}, {scale});
  } else {
    c.node(Op::kAttentionExt, c.out(DType::kF32, hd, heads, t), {q, k, v, lc, tk},
           {static_cast<int32_t>(kv_heads), window}, {scale, softcap});
  }
}

void rope_case(CaseGraph& c, int64_t hd, int64_t heads, int64_t t, int32_t n_rot, int32_t mode,
               float base, float scale, bool in_place) {
  const int32_t x = c.f32(hd, heads, t);
  const int32_t pos = c.ids(t, 4096);
  const int32_t y = in_place ? x : c.out(DType::kF32, hd, heads, t);
  if (in_place) c.written(x);
  c.node(Op::kRope, y, {x, pos}, {n_rot, mode}, {base, scale});
}

// The sample op over `rows` rows of n_vocab logits, each row with other settings (greedy, the
// defaults with penalties, top_p with a logit bias, top_k with min_p, temperature alone), a
// list of `width` entries, and an output of k alternatives (-1: tokens only).
void sample_case(CaseGraph& c, int64_t n_vocab, int64_t rows, int64_t width, int64_t k) {
  std::vector<float> logits(static_cast<size_t>(n_vocab * rows));
  for (float& l : logits) l = 8 * c.rng().uniform() - 4;
  std::vector<int32_t> words(static_cast<size_t>(kSampleWords * rows));
  std::vector<int32_t> entries(static_cast<size_t>(2 * width * rows), 0);
  std::vector<float> uniforms(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    SampleSettings s;
    std::vector<SamplePenalty> pen;
    std::vector<SampleBias> bias;
    switch (r % 5) {
      case 0:
        s.temperature = 0.0f;
        break;
      case 1:
        s.repeat_penalty = 1.3f;
        s.frequency_penalty = 0.25f;
        for (int32_t i = 0; i < 6; ++i) pen.push_back({static_cast<int32_t>(i * 7 + r), i + 1});
        break;
      case 2:
        s.top_k = 0;
        s.top_p = 0.9f;
        s.temperature = 1.3f;
        bias = {{3, 2.5f}, {5, -std::numeric_limits<float>::infinity()}, {3, -0.75f}};
        break;
      case 3:
        s.top_k = 5;
        s.min_p = 0.1f;
        s.temperature = 0.7f;
        break;
      default:
        s.top_k = 0;
        s.top_p = 1.0f;
        s.min_p = 0.0f;
        s.temperature = 1.0f;
        break;
    }
    sample_row_pack(s, pen, bias, static_cast<int32_t>(r % 4) * 2 - 1,
                    words.data() + r * kSampleWords, entries.data() + r * 2 * width);
    uniforms[static_cast<size_t>(r)] = c.rng().uniform();
  }
  const int32_t l = c.f32_of(logits, n_vocab, rows);
  const int32_t w = c.i32(words, kSampleWords, rows);
  const int32_t e = c.i32(entries, 2, width, rows);
  const int32_t u = c.f32_of(uniforms, rows);
  c.node(Op::kSample, c.out(DType::kI32, k < 0 ? 1 : sample_out_words(k), rows), {l, w, e, u});
}

// Router logits F32 [n_expert, rows] with ties, a -0 next to a +0, infinities and a NaN, so that
// the wire carries what selection must order.
int32_t router_logits(CaseGraph& c, int64_t n_expert, int64_t rows) {
  std::vector<float> v(static_cast<size_t>(n_expert * rows));
  for (float& x : v) x = static_cast<float>(c.rng().next() % 7) * 0.5f - 1.5f;  // many ties
  v[0] = std::numeric_limits<float>::quiet_NaN();
  v[1] = -0.0f;
  v[2] = 0.0f;
  v[static_cast<size_t>(n_expert)] = std::numeric_limits<float>::infinity();
  v[static_cast<size_t>(n_expert) + 1] = -std::numeric_limits<float>::infinity();
  return c.f32_of(v, n_expert, rows);
}

// I32 [k, rows]: k distinct experts of n_expert per row, random, so that rows overlap.
int32_t expert_ids(CaseGraph& c, int64_t k, int64_t n_expert, int64_t rows) {
  std::vector<int32_t> v;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int32_t> all(static_cast<size_t>(n_expert));
    for (int32_t i = 0; i < n_expert; ++i) all[static_cast<size_t>(i)] = i;
    for (int64_t i = 0; i < k; ++i) {
      std::swap(all[static_cast<size_t>(i)],
                all[static_cast<size_t>(i) + c.rng().next() % static_cast<uint64_t>(n_expert - i)]);
      v.push_back(all[static_cast<size_t>(i)]);
    }
  }
  return c.i32(v, k, rows);
}

// mul_mat_id of `dtype` experts [k_in, n, n_expert] over `tokens` tokens of n_used slots; x has
// one column per token (m = 1) or one per slot (m = n_used).
void mul_mat_id_case(CaseGraph& c, DType dtype, int64_t k_in, int64_t n, int64_t n_expert,
                     int64_t n_used, int64_t tokens, bool per_slot) {
  const int32_t w = c.weight(dtype, k_in, n, n_expert);
  const int32_t x = c.f32(k_in, per_slot ? n_used : 1, tokens);
  const int32_t ids = expert_ids(c, n_used, n_expert, tokens);
  c.node(Op::kMulMatId, c.out(DType::kF32, n, n_used, tokens), {w, x, ids});
}

const std::vector<OpCase>& cases() {
  static const std::vector<OpCase> kCases = {
      {"get_rows_q8_0", Op::kGetRows,
       [](CaseGraph& c) {
         const int32_t table = c.weight(DType::kQ8_0, 64, 10);
         c.node(Op::kGetRows, c.out(DType::kF32, 64, 5), {table, c.ids(5, 10)});
       }},
      {"get_rows_f16_planes", Op::kGetRows,
       [](CaseGraph& c) {
         const int32_t table = c.weight(DType::kF16, 16, 9, 4);
         c.node(Op::kGetRows, c.out(DType::kF32, 64, 5), {table, c.ids(5, 9)});
       }},
      {"get_rows_f32", Op::kGetRows,
       [](CaseGraph& c) {
         const int32_t table = c.f32(24, 7);
         c.node(Op::kGetRows, c.out(DType::kF32, 24, 3), {table, c.ids(3, 7)});
       }},
      {"get_rows_q4_K", Op::kGetRows,
       [](CaseGraph& c) {
         const int32_t table = c.weight(DType::kQ4_K, 256, 4);
         c.node(Op::kGetRows, c.out(DType::kF32, 256, 6), {table, c.ids(6, 4)});
       }},
      // A tied embedding in rows in lanes: rows of two groups and a tail.
      {"get_rows_q6_K_r16", Op::kGetRows,
       [](CaseGraph& c) {
         const int32_t table = c.weight(DType::kQ6_K_R16, 256, 37);
         c.node(Op::kGetRows, c.out(DType::kF32, 256, 8), {table, c.ids(8, 37)});
       }},
      {"get_rows_mxfp4", Op::kGetRows,
       [](CaseGraph& c) {
         const int32_t table = c.weight(DType::kMXFP4, 96, 6);
         c.node(Op::kGetRows, c.out(DType::kF32, 96, 4), {table, c.ids(4, 6)});
       }},
      {"rms_norm_weighted", Op::kRmsNorm,
       [](CaseGraph& c) {
         const int32_t x = c.f32(64, 3);
         c.node(Op::kRmsNorm, c.out(DType::kF32, 64, 3), {x, c.f32(64)}, {}, {1e-5f});
       }},
      {"rms_norm_plain", Op::kRmsNorm,
       [](CaseGraph& c) {
         const int32_t x = c.f32(40, 5);
         c.node(Op::kRmsNorm, c.out(DType::kF32, 40, 5), {x, -1}, {}, {1e-6f});
       }},
      {"add_rows", Op::kAdd,
       [](CaseGraph& c) {
         const int32_t a = c.f32(48, 4);
         c.node(Op::kAdd, c.out(DType::kF32, 48, 4), {a, c.f32(48, 4)});
       }},
      {"add_broadcast", Op::kAdd,
       [](CaseGraph& c) {
         const int32_t a = c.f32(33, 5);
         c.node(Op::kAdd, c.out(DType::kF32, 33, 5), {a, c.f32(33, 1)});
       }},
      {"mul_rows", Op::kMul,
       [](CaseGraph& c) {
         const int32_t a = c.f32(48, 4);
         c.node(Op::kMul, c.out(DType::kF32, 48, 4), {a, c.f32(48, 4)});
       }},
      {"mul_broadcast", Op::kMul,
       [](CaseGraph& c) {
         const int32_t a = c.f32(17, 3);
         c.node(Op::kMul, c.out(DType::kF32, 17, 3), {a, c.f32(17, 1)});
       }},
      {"mul_mat_q8_0", Op::kMulMat,
       [](CaseGraph& c) {
         const int32_t w = c.weight(DType::kQ8_0, 64, 16);
         c.node(Op::kMulMat, c.out(DType::kF32, 16, 3), {w, c.f32(64, 3)});
       }},
      // Three blocks a row (a pair and a lone one), an odd row count, columns past one tile.
      {"mul_mat_mxfp4", Op::kMulMat,
       [](CaseGraph& c) {
         const int32_t w = c.weight(DType::kMXFP4, 96, 13);
         c.node(Op::kMulMat, c.out(DType::kF32, 13, 9), {w, c.f32(96, 9)});
       }},
      {"mul_mat_f32_one_row", Op::kMulMat,
       [](CaseGraph& c) {
         const int32_t w = c.f32(32, 8);
         c.node(Op::kMulMat, c.out(DType::kF32, 8, 1), {w, c.f32(32, 1)});
       }},
      // One node per dtype that has kernels: the tables of both backends, whatever they hold.
      {"mul_mat_every_kernel_dtype", Op::kMulMat,
       [](CaseGraph& c) {
         for (uint32_t id = 0; id < kDTypeIdLimit; ++id) {
           const DTypeInfo* info = dtype_info(id);
           if (info == nullptr || !info->has_kernels) continue;
           const int32_t w = c.weight(info->dtype, 256, 8);
           c.node(Op::kMulMat, c.out(DType::kF32, 8, 2), {w, c.f32(256, 2)});
         }
       }},
      {"rope_normal_in_place", Op::kRope,
       [](CaseGraph& c) { rope_case(c, 16, 4, 3, 16, 0, 10000.0f, 1.0f, true); }},
      {"rope_neox_partial", Op::kRope,
       [](CaseGraph& c) { rope_case(c, 32, 2, 5, 16, 2, 1000000.0f, 0.25f, false); }},
      {"set_rows_f16", Op::kSetRows,
       [](CaseGraph& c) {
         const int32_t cache = c.weight(DType::kF16, 32, 8);
         c.written(cache);
         c.node(Op::kSetRows, cache, {cache, c.f32(32, 3), c.distinct_ids(3, 8)});
       }},
      {"set_rows_f16_planes", Op::kSetRows,
       [](CaseGraph& c) {
         const int32_t cache = c.weight(DType::kF16, 16, 8, 3);  // a plane per kv head
         c.written(cache);
         c.node(Op::kSetRows, cache, {cache, c.f32(48, 3), c.distinct_ids(3, 8)});
       }},
      {"set_rows_q8_0_planes", Op::kSetRows,
       [](CaseGraph& c) {
         const int32_t cache = c.weight(DType::kQ8_0, 32, 8, 3);  // -ctk q8_0, head-major
         c.written(cache);
         c.node(Op::kSetRows, cache, {cache, c.f32(96, 3), c.distinct_ids(3, 8)});
       }},
      {"set_rows_f32", Op::kSetRows,
       [](CaseGraph& c) {
         const int32_t cache = c.f32(24, 6);
         c.written(cache);
         c.node(Op::kSetRows, cache, {cache, c.f32(24, 6), c.distinct_ids(6, 6)});
       }},
      {"attention_f16_gqa", Op::kAttention,
       [](CaseGraph& c) { attention_case(c, DType::kF16, 16, 4, 2, 3, 9, 5); }},
      {"attention_f16_gqa_head_major", Op::kAttention,
       [](CaseGraph& c) {
         attention_case(c, DType::kF16, 16, 4, 2, 3, 9, 5, -1, 0.0f, false, true);
       }},
      {"attention_sink_f32_head_major", Op::kAttentionSink,
       [](CaseGraph& c) { attention_case(c, DType::kF32, 8, 6, 3, 3, 6, 6, 0, 0.5f, true, true); }},
      {"attention_q8_0_gqa_head_major", Op::kAttention,
       [](CaseGraph& c) {
         attention_case(c, DType::kQ8_0, 32, 4, 2, 3, 9, 5, -1, 0.0f, false, true);
       }},
      {"attention_f32_mha", Op::kAttention,
       [](CaseGraph& c) { attention_case(c, DType::kF32, 8, 3, 3, 4, 6, 6); }},
      {"attention_ext_window_softcap", Op::kAttentionExt,
       [](CaseGraph& c) { attention_case(c, DType::kF16, 16, 4, 2, 5, 12, 9, 3, 1.5f); }},
      {"attention_ext_softcap_only", Op::kAttentionExt,
       [](CaseGraph& c) { attention_case(c, DType::kF32, 8, 2, 1, 3, 6, 6, 0, 0.5f); }},
      {"attention_sink_window", Op::kAttentionSink,
       [](CaseGraph& c) { attention_case(c, DType::kF16, 16, 4, 2, 5, 12, 9, 3, 0.0f, true); }},
      {"attention_sink_f32_softcap", Op::kAttentionSink,
       [](CaseGraph& c) { attention_case(c, DType::kF32, 8, 2, 1, 3, 6, 6, 0, 0.5f, true); }},
      {"rope_rates_neox_partial", Op::kRopeRates,
       [](CaseGraph& c) {
         const int32_t x = c.f32(32, 3, 4);
         c.written(x);
         c.node(Op::kRopeRates, x, {x, c.ids(4, 70000), c.f32(8)}, {16, 2}, {1.2f});
       }},
      {"rope_rates_normal", Op::kRopeRates,
       [](CaseGraph& c) {
         const int32_t x = c.f32(16, 2, 3);
         c.node(Op::kRopeRates, c.out(DType::kF32, 16, 2, 3), {x, c.ids(3, 100), c.f32(8)}, {16, 0},
                {1.0f});
       }},
      {"rope_shift_f16_neox", Op::kRopeShift,
       [](CaseGraph& c) {
         const int32_t cache = c.weight(DType::kF16, 64, 10);  // 4 heads of 16
         c.written(cache);
         c.node(Op::kRopeShift, cache,
                {cache, c.distinct_ids(4, 10), c.i32({-3, -100, -4000, 7}, 4)}, {16, 2, 16},
                {10000.0f, 1.0f});
       }},
      {"rope_shift_q8_0_planes", Op::kRopeShift,
       [](CaseGraph& c) {
         const int32_t cache = c.weight(DType::kQ8_0, 32, 10, 2);  // a plane per kv head of 32
         c.written(cache);
         c.node(Op::kRopeShift, cache, {cache, c.distinct_ids(3, 10), c.i32({-3, 9, -4000}, 3)},
                {32, 0, 32}, {10000.0f, 1.0f});
       }},
      {"rope_shift_f16_planes", Op::kRopeShift,
       [](CaseGraph& c) {
         const int32_t cache = c.weight(DType::kF16, 16, 10, 4);  // a plane per kv head of 16
         c.written(cache);
         c.node(Op::kRopeShift, cache, {cache, c.distinct_ids(3, 10), c.i32({-3, 9, -4000}, 3)},
                {16, 0, 16}, {10000.0f, 1.0f});
       }},
      {"rope_shift_f32_rates_partial", Op::kRopeShift,
       [](CaseGraph& c) {
         const int32_t cache = c.f32(64, 6);  // 2 heads of 32, 16 dims of each rotated
         c.written(cache);
         c.node(Op::kRopeShift, cache,
                {cache, c.distinct_ids(3, 6), c.i32({-1, -50, -2}, 3), c.f32(8)}, {16, 0, 32});
       }},
      {"scale", Op::kScale,
       [](CaseGraph& c) {
         const int32_t x = c.f32(48, 3);
         c.node(Op::kScale, c.out(DType::kF32, 48, 3), {x}, {}, {45.25f});
       }},
      {"scale_in_place", Op::kScale,
       [](CaseGraph& c) {
         const int32_t x = c.f32(7, 2);
         c.written(x);
         c.node(Op::kScale, x, {x}, {}, {-0.5f});
       }},
      {"geglu", Op::kGeglu,
       [](CaseGraph& c) {
         const int32_t gate = c.f32(40, 3);
         c.node(Op::kGeglu, c.out(DType::kF32, 40, 3), {gate, c.f32(40, 3)});
       }},
      {"geglu_in_place", Op::kGeglu,
       [](CaseGraph& c) {
         const int32_t gate = c.f32(33, 2);
         c.written(gate);
         c.node(Op::kGeglu, gate, {gate, c.f32(33, 2)});
       }},
      {"softcap", Op::kSoftcap,
       [](CaseGraph& c) {
         const int32_t x = c.f32(50, 2);
         c.node(Op::kSoftcap, c.out(DType::kF32, 50, 2), {x}, {}, {0.3f});
       }},
      {"softcap_in_place", Op::kSoftcap,
       [](CaseGraph& c) {
         const int32_t x = c.f32(19, 3);
         c.written(x);
         c.node(Op::kSoftcap, x, {x}, {}, {30.0f});
       }},
      {"swiglu", Op::kSwiglu,
       [](CaseGraph& c) {
         const int32_t gate = c.f32(40, 3);
         c.node(Op::kSwiglu, c.out(DType::kF32, 40, 3), {gate, c.f32(40, 3)});
       }},
      {"swiglu_in_place", Op::kSwiglu,
       [](CaseGraph& c) {
         const int32_t gate = c.f32(64, 2);
         c.written(gate);
         c.node(Op::kSwiglu, gate, {gate, c.f32(64, 2)});
       }},
      // Inputs past the limit on both sides, so that both clamps act.
      {"swiglu_oai", Op::kSwigluOai,
       [](CaseGraph& c) {
         std::vector<float> g(120), u(120);
         for (size_t i = 0; i < g.size(); ++i) {
           g[i] = 20 * c.rng().uniform() - 10;
           u[i] = 20 * c.rng().uniform() - 10;
         }
         const int32_t gate = c.f32_of(g, 40, 3);
         c.node(Op::kSwigluOai, c.out(DType::kF32, 40, 3), {gate, c.f32_of(u, 40, 3)}, {},
                {1.702f, 7.0f});
       }},
      {"swiglu_oai_in_place", Op::kSwigluOai,
       [](CaseGraph& c) {
         const int32_t gate = c.f32(64, 2);
         c.written(gate);
         c.node(Op::kSwigluOai, gate, {gate, c.f32(64, 2)}, {}, {1.5f, 0.5f});
       }},
      {"argmax", Op::kArgmax,
       [](CaseGraph& c) {
         const int32_t x = c.f32(100, 4);
         c.node(Op::kArgmax, c.out(DType::kI32, 4), {x});
       }},
      {"sample_tokens", Op::kSample, [](CaseGraph& c) { sample_case(c, 300, 10, 8, -1); }},
      {"sample_logprobs", Op::kSample, [](CaseGraph& c) { sample_case(c, 500, 7, 6, 5); }},
      {"moe_top_k", Op::kMoeTopK,
       [](CaseGraph& c) {
         const int32_t x = router_logits(c, 16, 5);
         c.node(Op::kMoeTopK, c.out(DType::kI32, 4, 5), {x}, {4});
       }},
      {"moe_top_k_all", Op::kMoeTopK,
       [](CaseGraph& c) {
         const int32_t x = router_logits(c, 8, 3);
         c.node(Op::kMoeTopK, c.out(DType::kI32, 8, 3), {x}, {8});
       }},
      {"moe_gate_softmax_normalised", Op::kMoeGate,
       [](CaseGraph& c) {
         const int32_t x = c.f32(16, 5);
         c.node(Op::kMoeGate, c.out(DType::kF32, 4, 5), {x, expert_ids(c, 4, 16, 5)}, {0, 1},
                {1.0f});
       }},
      {"moe_gate_softmax_scaled", Op::kMoeGate,
       [](CaseGraph& c) {
         const int32_t x = c.f32(64, 3);
         c.node(Op::kMoeGate, c.out(DType::kF32, 8, 3), {x, expert_ids(c, 8, 64, 3)}, {0, 0},
                {2.5f});
       }},
      {"moe_gate_sigmoid_normalised", Op::kMoeGate,
       [](CaseGraph& c) {
         const int32_t x = c.f32(12, 4);
         c.node(Op::kMoeGate, c.out(DType::kF32, 3, 4), {x, expert_ids(c, 3, 12, 4)}, {1, 1},
                {0.75f});
       }},
      {"moe_gate_softmax_selected", Op::kMoeGate,
       [](CaseGraph& c) {
         const int32_t x = c.f32(32, 6);
         c.node(Op::kMoeGate, c.out(DType::kF32, 4, 6), {x, expert_ids(c, 4, 32, 6)}, {2, 0},
                {1.0f});
       }},
      // Several tokens that choose overlapping experts, one input per token (gate/up) or per
      // slot (down), one token alone.
      {"mul_mat_id_q8_0_per_token", Op::kMulMatId,
       [](CaseGraph& c) { mul_mat_id_case(c, DType::kQ8_0, 64, 16, 8, 3, 5, false); }},
      {"mul_mat_id_q8_0_per_slot", Op::kMulMatId,
       [](CaseGraph& c) { mul_mat_id_case(c, DType::kQ8_0, 64, 16, 8, 3, 5, true); }},
      // Rows in lanes: two full groups of 16 rows and a tail of 8; experts of two groups.
      {"mul_mat_q4_K_r16", Op::kMulMat,
       [](CaseGraph& c) {
         const int32_t w = c.weight(DType::kQ4_K_R16, 512, 40);
         c.node(Op::kMulMat, c.out(DType::kF32, 40, 3), {w, c.f32(512, 3)});
       }},
      {"mul_mat_q6_K_r16", Op::kMulMat,
       [](CaseGraph& c) {
         const int32_t w = c.weight(DType::kQ6_K_R16, 256, 36);
         c.node(Op::kMulMat, c.out(DType::kF32, 36, 5), {w, c.f32(256, 5)});
       }},
      {"mul_mat_id_q4_K_r16_per_token", Op::kMulMatId,
       [](CaseGraph& c) { mul_mat_id_case(c, DType::kQ4_K_R16, 256, 32, 4, 2, 3, false); }},
      {"mul_mat_id_q4_K_per_token", Op::kMulMatId,
       [](CaseGraph& c) { mul_mat_id_case(c, DType::kQ4_K, 256, 8, 6, 2, 7, false); }},
      {"mul_mat_id_q6_K_per_slot", Op::kMulMatId,
       [](CaseGraph& c) { mul_mat_id_case(c, DType::kQ6_K, 256, 8, 6, 4, 3, true); }},
      {"mul_mat_id_f16_per_slot", Op::kMulMatId,
       [](CaseGraph& c) { mul_mat_id_case(c, DType::kF16, 48, 12, 5, 2, 4, true); }},
      {"mul_mat_id_f16_one_token", Op::kMulMatId,
       [](CaseGraph& c) { mul_mat_id_case(c, DType::kF16, 32, 8, 4, 2, 1, false); }},
      {"moe_sum", Op::kMoeSum,
       [](CaseGraph& c) {
         const int32_t y = c.f32(20, 3, 4);  // a tail past the 8-float steps
         c.node(Op::kMoeSum, c.out(DType::kF32, 20, 4), {y, c.f32(3, 4)});
       }},
      {"moe_sum_one_slot", Op::kMoeSum,
       [](CaseGraph& c) {
         const int32_t y = c.f32(32, 1, 2);
         c.node(Op::kMoeSum, c.out(DType::kF32, 32, 2), {y, c.f32(1, 2)});
       }},
      {"add_id", Op::kAddId,
       [](CaseGraph& c) {
         const int32_t x = c.f32(20, 3, 4);
         c.node(Op::kAddId, c.out(DType::kF32, 20, 3, 4),
                {x, c.f32(20, 8), expert_ids(c, 3, 8, 4)});
       }},
      {"add_id_in_place", Op::kAddId,
       [](CaseGraph& c) {
         const int32_t x = c.f32(32, 2, 3);
         c.written(x);
         c.node(Op::kAddId, x, {x, c.f32(32, 4), expert_ids(c, 2, 4, 3)});
       }},
      {"copy_strided_rows", Op::kCopy,
       [](CaseGraph& c) {
         const int32_t base = c.f32(40, 6);
         const int32_t rows = c.view(base, 24, 6, 40 * 4, 8 * 4);  // 24 of every 40 floats
         c.node(Op::kCopy, c.out(DType::kF32, 24, 6), {rows});
       }},
  };
  return kCases;
}

// The bytes of the case's buffer after one run on `device`.
std::vector<uint8_t> run_case(Device& device, const CaseGraph& c) {
  auto buffer = device.alloc_buffer(c.init().size());
  EXPECT_TRUE(buffer.is_ok()) << buffer.status().message();
  if (!buffer.is_ok()) return {};
  const TensorRef all =
      make_tensor((*buffer)->handle(), 0, DType::kI8, static_cast<int64_t>(c.init().size()));
  std::vector<uint8_t> bytes(c.init().size());
  std::unique_ptr<Stream> stream = device.create_stream();
  stream->set_tensor(all, c.init().data(), c.init().size());
  stream->compute(std::make_shared<const Graph>(c.graph((*buffer)->handle())));
  stream->get_tensor(all, bytes.data(), bytes.size());
  const Status s = stream->synchronize();
  EXPECT_TRUE(s.is_ok()) << device.info().name << ": " << s.message();
  return bytes;
}

// FNV-1a of the case name: each case its own inputs, the same on every run and platform.
uint64_t seed_of(const char* name) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const char* p = name; *p != '\0'; ++p) h = (h ^ static_cast<uint8_t>(*p)) * 0x100000001b3ULL;
  return h;
}

class OpCases : public ::testing::TestWithParam<OpCase> {
 protected:
  static void SetUpTestSuite() {
    CpuDeviceOptions co;
    co.n_threads = 2;
    cpu_ = cpu_device_new(co);
    worker_ = testing::start_local_worker({}, 2);
    ASSERT_TRUE(worker_);
    auto d = testing::remote_device_on(*worker_);
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    remote_ = std::move(d).value();
  }
  // The connection closes before the worker stops.
  static void TearDownTestSuite() {
    remote_.reset();
    worker_.reset();
    cpu_.reset();
  }
  // Shared by the cases of the suite: one worker, one connection.
  static std::unique_ptr<Device> cpu_;
  static std::unique_ptr<rpc::Worker> worker_;
  static std::unique_ptr<Device> remote_;
};
std::unique_ptr<Device> OpCases::cpu_;
std::unique_ptr<rpc::Worker> OpCases::worker_;
std::unique_ptr<Device> OpCases::remote_;

TEST_P(OpCases, SameBytesOnEveryBackend) {
  ASSERT_TRUE(remote_ != nullptr);
  CaseGraph c(seed_of(GetParam().name));
  GetParam().build(c);
  for (const Node& n : c.graph(1).nodes) {
    ASSERT_EQ(n.op, GetParam().op) << "a case tests the op of its row";
  }
  ASSERT_TRUE(graph_validate(c.graph(1)).is_ok()) << graph_validate(c.graph(1)).message();
  const std::vector<uint8_t> local = run_case(*cpu_, c);
  const std::vector<uint8_t> remote = run_case(*remote_, c);
  ASSERT_EQ(local.size(), c.init().size());
  // The op wrote every output (a case that runs nothing would compare equal, too).
  for (int32_t t : c.outputs()) {
    const TensorRef& ref = c.tensor(t);
    const auto begin = static_cast<std::ptrdiff_t>(ref.offset);
    const auto end = begin + static_cast<std::ptrdiff_t>(ref.extent_bytes());
    EXPECT_FALSE(std::equal(local.begin() + begin, local.begin() + end, c.init().begin() + begin))
        << "tensor " << t << " was not written";
  }
  EXPECT_TRUE(local == remote) << "the worker's bytes differ from the CPU's";
}

INSTANTIATE_TEST_SUITE_P(Table, OpCases, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<OpCase>& info) {
                           return std::string(info.param.name);
                         });

// Adding an op is adding a row: every op of the op table has a case.
TEST(OpCaseTable, CoversEveryOp) {
  std::set<Op> covered;
  for (const OpCase& c : cases()) covered.insert(c.op);
  for (const OpInfo& info : op_table()) {
    EXPECT_TRUE(covered.count(info.op)) << "no op case for " << info.name;
  }
}

}  // namespace
}  // namespace strata
