// Device capabilities: what the CPU reports, what a graph needs, and what a device lacks.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "backend/cpu_backend.h"
#include "core/dtype_traits.h"
#include "core/isa.h"
#include "graph/op_table.h"

namespace strata {
namespace {

// The CPU runs every op of the op table (an op without an executor fails this) and takes every
// dtype that has kernels as a weight, a device layout only at the level where it pays.
TEST(DeviceCaps, CpuRunsEveryOpOfTheTableAndEveryKernelDType) {
  const DeviceCaps caps = cpu_device_caps();
  EXPECT_EQ(caps.ops, op_set_all());
  EXPECT_EQ(cpu_device_new({})->caps().ops, caps.ops);
  for (uint32_t id = 0; id < kDTypeIdLimit; ++id) {
    const DTypeInfo* info = dtype_info(id);
    const bool takes =
        info != nullptr && info->has_kernels &&
        (!dtype_is_layout(info->dtype) || dtype_layout_pays(info->dtype, isa_active()));
    EXPECT_EQ(caps.weight_dtypes.test(id), takes) << id;
  }
}

// A worker of this build does at least what the oldest worker did.
TEST(DeviceCaps, TheBaselineIsASubsetOfTheCpu) {
  const DeviceCaps base = device_caps_baseline();
  EXPECT_EQ(caps_missing(base, cpu_device_caps()), "");
  EXPECT_EQ(base.ops.count(), 11u);
  EXPECT_EQ(base.weight_dtypes.count(), 8u);
  EXPECT_TRUE(base.weight_dtypes.test(static_cast<uint32_t>(DType::kQ6_K)));
  EXPECT_FALSE(base.weight_dtypes.test(static_cast<uint32_t>(DType::kQ4_1)));
}

TEST(DeviceCaps, AGraphNeedsItsOpsAndTheDTypesOfItsWeights) {
  Graph g;
  g.tensors = {make_tensor(1, 0, DType::kQ6_K, 256, 4), make_tensor(1, 0, DType::kF32, 256, 2),
               make_tensor(1, 0, DType::kF32, 4, 2), make_tensor(1, 0, DType::kF16, 4, 2)};
  Node mm;
  mm.op = Op::kMulMat;
  mm.src[0] = 0;
  mm.src[1] = 1;
  mm.out = 2;
  Node add;
  add.op = Op::kAdd;
  add.src[0] = 2;
  add.src[1] = 3;  // an f16 operand of an op without a weight input: not a weight dtype
  add.out = 2;
  g.nodes = {mm, add};
  const DeviceCaps need = graph_needs(g);
  EXPECT_EQ(need.ops.count(), 2u);
  EXPECT_TRUE(need.ops.test(static_cast<uint32_t>(Op::kMulMat)));
  EXPECT_TRUE(need.ops.test(static_cast<uint32_t>(Op::kAdd)));
  EXPECT_EQ(need.weight_dtypes.count(), 1u);
  EXPECT_TRUE(need.weight_dtypes.test(static_cast<uint32_t>(DType::kQ6_K)));

  DeviceCaps have = cpu_device_caps();
  EXPECT_EQ(caps_missing(need, have), "");
  have.ops.reset(static_cast<uint32_t>(Op::kAdd));
  have.weight_dtypes.reset(static_cast<uint32_t>(DType::kQ6_K));
  EXPECT_EQ(caps_missing(need, have), "op 'add', weight dtype q6_K");
}

// Whatever op a device lacks, the refusal names it by its table name: a new op (the MoE ops)
// is refused on an older worker as any other.
TEST(DeviceCaps, EveryMissingOpIsNamed) {
  for (const OpInfo& info : op_table()) {
    DeviceCaps need;
    need.ops.set(static_cast<uint32_t>(info.op));
    DeviceCaps have = cpu_device_caps();
    EXPECT_EQ(caps_missing(need, have), "") << info.name;
    have.ops.reset(static_cast<uint32_t>(info.op));
    EXPECT_EQ(caps_missing(need, have), "op '" + std::string(info.name) + "'");
  }
  // A worker of the baseline runs none of the MoE ops.
  DeviceCaps moe;
  for (Op op : {Op::kMoeTopK, Op::kMoeGate, Op::kMulMatId, Op::kMoeSum}) {
    moe.ops.set(static_cast<uint32_t>(op));
  }
  moe.weight_dtypes.set(static_cast<uint32_t>(DType::kQ8_0));
  EXPECT_EQ(caps_missing(moe, device_caps_baseline()),
            "op 'moe_top_k', op 'moe_gate', op 'mul_mat_id', op 'moe_sum'");
}

// A cache in planes (the head-major KV cache) is what a device of an earlier release cannot
// take: a graph needs kv_planes when an op's cache input (the op table's cache_src) has more than
// one plane, and not for another 3-D input (mul_mat_id's experts, above, are in planes too).
TEST(DeviceCaps, ACacheInPlanesNeedsKvPlanes) {
  OpSet cache_ops;
  for (const OpInfo& info : op_table()) {
    if (info.cache_src == 0) continue;
    cache_ops.set(static_cast<uint32_t>(info.op));
    for (int64_t planes : {1, 4}) {
      Graph g;
      Node n;
      n.op = info.op;
      for (int s = 0; s < info.n_src; ++s) {
        const bool cache = (info.cache_src >> s & 1u) != 0;
        g.tensors.push_back(make_tensor(1, 0, DType::kF16, 16, 8, cache ? planes : 1));
        n.src[s] = s;
      }
      n.out = 0;
      g.nodes = {n};
      EXPECT_EQ(graph_needs(g).kv_planes, planes > 1) << info.name << " planes " << planes;
    }
  }
  OpSet want;
  for (Op op : {Op::kGetRows, Op::kSetRows, Op::kRopeShift, Op::kAttention, Op::kAttentionExt,
                Op::kAttentionSink}) {
    want.set(static_cast<uint32_t>(op));
  }
  EXPECT_EQ(cache_ops, want);

  Graph experts;
  experts.tensors = {make_tensor(1, 0, DType::kQ4_K, 256, 8, 4)};
  Node mm;
  mm.op = Op::kMulMatId;
  mm.src[0] = mm.src[1] = mm.src[2] = mm.out = 0;
  experts.nodes = {mm};
  EXPECT_FALSE(graph_needs(experts).kv_planes);

  DeviceCaps need;
  need.kv_planes = true;
  EXPECT_EQ(caps_missing(need, cpu_device_caps()), "");
  EXPECT_EQ(caps_missing(need, device_caps_baseline()),
            "KV caches in planes (a release before them)");
}

// A q8_0 cache input of any cache op needs a device that takes q8_0 caches; f16 ones do not.
TEST(DeviceCaps, AQ8_0CacheNeedsKvQ8_0) {
  for (const OpInfo& info : op_table()) {
    if (info.cache_src == 0) continue;
    for (DType dt : {DType::kF16, DType::kQ8_0}) {
      Graph g;
      Node n;
      n.op = info.op;
      for (int s = 0; s < info.n_src; ++s) {
        const bool cache = (info.cache_src >> s & 1u) != 0;
        g.tensors.push_back(make_tensor(1, 0, cache ? dt : DType::kF32, 32, 8, cache ? 2 : 1));
        n.src[s] = s;
      }
      n.out = 0;
      g.nodes = {n};
      EXPECT_EQ(graph_needs(g).kv_q8_0, dt == DType::kQ8_0) << info.name;
    }
  }
  DeviceCaps need;
  need.kv_q8_0 = true;
  EXPECT_EQ(caps_missing(need, cpu_device_caps()), "");
  EXPECT_EQ(caps_missing(need, device_caps_baseline()), "q8_0 KV caches (a release before them)");
}

// mul_mat_id's expert weights are a weight input: a graph needs their dtype.
TEST(DeviceCaps, MulMatIdNeedsTheDTypeOfItsExperts) {
  Graph g;
  g.tensors = {make_tensor(1, 0, DType::kQ4_K, 256, 8, 4),
               make_tensor(1, 0, DType::kF32, 256, 1, 2), make_tensor(1, 0, DType::kI32, 2, 2),
               make_tensor(1, 0, DType::kF32, 8, 2, 2)};
  Node n;
  n.op = Op::kMulMatId;
  n.src[0] = 0;
  n.src[1] = 1;
  n.src[2] = 2;
  n.out = 3;
  g.nodes = {n};
  const DeviceCaps need = graph_needs(g);
  EXPECT_EQ(need.ops, OpSet().set(static_cast<uint32_t>(Op::kMulMatId)));
  EXPECT_EQ(need.weight_dtypes, DTypeSet().set(static_cast<uint32_t>(DType::kQ4_K)));
}

TEST(DeviceCaps, SetsFromNames) {
  Result<OpSet> ops = op_set_from_names("swiglu,rope");
  ASSERT_TRUE(ops) << ops.status().message();
  EXPECT_EQ(ops->count(), 2u);
  EXPECT_TRUE(ops->test(static_cast<uint32_t>(Op::kSwiglu)));
  EXPECT_TRUE(op_set_from_names("")->none());
  Result<OpSet> bad = op_set_from_names("rope,gelu");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("'gelu'"), std::string::npos);
  Result<DTypeSet> dtypes = dtype_set_from_names("q8_0,q4_K");
  ASSERT_TRUE(dtypes) << dtypes.status().message();
  EXPECT_TRUE(dtypes->test(static_cast<uint32_t>(DType::kQ4_K)));
  EXPECT_FALSE(dtype_set_from_names("q9_9"));
}

}  // namespace
}  // namespace strata
