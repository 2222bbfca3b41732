// Context shift: a full sequence drops a middle part and its later keys turn by the gap. The
// shift is right (on one layer, where a key depends only on its token and position, it matches
// a fresh evaluation of the kept tokens up to rounding), and a shifted sequence gives the same
// bytes alone or beside others, with any threads, micro-batches and splits, a worker included.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu_backend.h"
#include "engine/context.h"
#include "engine/stage_caps.h"
#include "rpc/remote_backend.h"
#include "rpc/worker.h"
#include "unit/engine_testing.h"
#include "unit/synth_file.h"

namespace strata {
namespace {

using testing::argmax;
using testing::cpu_device;

// As context_test's models: "llama31" is llama with rope_freqs (a rate table), phi3 has
// LongRoPE (rate tables with an mscale), gemma3 two rope kinds over sliding and global layers.
SynthParams params(const std::string& arch, int64_t n_layer, DType dtype) {
  SynthParams p;
  p.arch = arch == "llama31" ? "llama" : arch;
  p.rope_freqs = arch == "llama31";
  if (arch == "llama31") p.rope_orig_ctx = 64;
  if (arch == "phi3") {
    p.rope_scaling = "longrope";
    p.rope_orig_ctx = 16;
    p.rope_attn_factor = 1.1;
  }
  if (arch == "gemma3") p.n_swa = 5;
  p.n_embd = 128;
  p.n_layer = n_layer;
  p.n_head = 4;
  p.n_head_kv = 2;
  p.n_ff = 256;
  p.n_vocab = 300;
  p.dtype = dtype;
  p.seed = 31;
  return p;
}

std::string model_file(const std::string& arch, int64_t n_layer, DType dtype) {
  return testing::synth_file(
      "shift_" + arch + "_" + std::to_string(n_layer) + "_" + std::string(dtype_name(dtype)),
      params(arch, n_layer, dtype));
}

std::unique_ptr<Engine> engine(const std::string& path, std::vector<std::unique_ptr<Device>> d,
                               std::vector<double> split, bool shift = true) {
  auto model = Model::open(path);
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  if (!model.is_ok()) return nullptr;
  EngineOptions eo;
  eo.split = std::move(split);
  eo.context_shift = shift;
  auto e = Engine::create(std::move(model).value(), std::move(d), eo);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  return e.is_ok() ? std::move(e).value() : nullptr;
}

std::unique_ptr<Engine> local(const std::string& path, int threads = 2) {
  std::vector<std::unique_ptr<Device>> d;
  d.push_back(cpu_device("CPU", threads));
  return engine(path, std::move(d), {1});
}

std::unique_ptr<Context> shift_context(const Engine& e, int64_t n_batch = 512,
                                       DType kv = DType::kF16, int64_t n_ctx = 192) {
  ContextParams cp;
  cp.n_ctx = n_ctx;
  cp.n_seq = 4;
  cp.n_batch = n_batch;
  cp.kv_dtype = kv;
  auto c = Context::create(e, cp);
  EXPECT_TRUE(c.is_ok()) << c.status().message();
  return c.is_ok() ? std::move(c).value() : nullptr;
}

std::vector<int32_t> shift_prompt(int seed, int len) {
  std::vector<int32_t> p;
  for (int i = 0; i < len; ++i) p.push_back(2 + (seed * 101 + i * 29) % 290);
  return p;
}

// One sequence of a run: its prompt, and the length at which it is shifted (0: never).
struct Plan {
  int32_t seq = 0;
  std::vector<int32_t> prompt;
  int32_t shift_at = 0;
  int32_t n_keep = 0;
  int32_t n_discard = 0;
  int32_t copy_of = -1;  // starts as a copy of that sequence's prompt (sharing its cells)
};

// The prompts are evaluated together (a copy takes its source's cells and first token), then
// every sequence generates greedily, one token per step, all in one batch; a sequence is
// shifted before the step at which its length reaches shift_at. Returns every logit row of
// each plan, bytewise.
std::vector<std::vector<uint8_t>> run(Context& ctx, const std::vector<Plan>& plans, int n_steps) {
  std::vector<std::vector<uint8_t>> out(plans.size());
  std::vector<int32_t> next(plans.size(), -1);
  Batch b;
  std::vector<int64_t> row(plans.size(), -1);
  int64_t rows = 0;
  size_t longest = 0;
  for (const Plan& p : plans) longest = std::max(longest, p.prompt.size());
  for (size_t i = 0; i < longest; ++i) {
    for (size_t k = 0; k < plans.size(); ++k) {
      const Plan& p = plans[k];
      if (p.copy_of >= 0 || i >= p.prompt.size()) continue;
      const bool last = i + 1 == p.prompt.size();
      b.add(p.prompt[i], static_cast<int32_t>(i), p.seq, last);
      if (last) row[k] = rows++;
    }
  }
  Status s = ctx.decode(b);
  EXPECT_TRUE(s.is_ok()) << s.message();
  if (!s.is_ok()) return out;
  for (size_t k = 0; k < plans.size(); ++k) {
    if (plans[k].copy_of >= 0) continue;
    next[k] = argmax(ctx.logits(row[k]), ctx.n_vocab());
  }
  for (size_t k = 0; k < plans.size(); ++k) {
    const Plan& p = plans[k];
    if (p.copy_of < 0) continue;
    for (size_t j = 0; j < plans.size(); ++j) {
      if (plans[j].seq != p.copy_of) continue;
      ctx.seq_copy(p.copy_of, p.seq, ctx.seq_len(p.copy_of));
      next[k] = next[j];
    }
  }
  for (int step = 0; step < n_steps; ++step) {
    b.clear();
    for (size_t k = 0; k < plans.size(); ++k) {
      const Plan& p = plans[k];
      if (p.shift_at > 0 && ctx.seq_len(p.seq) == p.shift_at) {
        s = ctx.seq_shift(p.seq, p.n_keep, p.n_discard);
        EXPECT_TRUE(s.is_ok()) << s.message();
        if (!s.is_ok()) return out;
      }
      b.add(next[k], ctx.seq_len(p.seq), p.seq, true);
    }
    s = ctx.decode(b);
    EXPECT_TRUE(s.is_ok()) << s.message();
    if (!s.is_ok()) return out;
    for (size_t k = 0; k < plans.size(); ++k) {
      const float* l = ctx.logits(static_cast<int64_t>(k));
      const auto* bytes = reinterpret_cast<const uint8_t*>(l);
      out[k].insert(out[k].end(), bytes, bytes + 4 * ctx.n_vocab());
      next[k] = argmax(l, ctx.n_vocab());
    }
  }
  return out;
}

// On one layer a key depends only on its token and position, and a value only on its token:
// after a shift the cache holds (up to rounding) what a fresh evaluation of the kept tokens
// writes, so the next token's logits match. The tolerance covers the angles' rounding, which
// grows with the position (rope(p) then rope(-d) is not bitwise rope(p - d)): about 3e-7 of
// the largest logit here; an f32 cache keeps f16 rounding out of it. A wrong rotation (sign,
// pairing, rates, an mscale applied twice; even rates off by 0.1%) is off by 1e-3 or more.
TEST(ContextShift, OnOneLayerTheShiftedKeysAreTheFreshOnes) {
  for (const std::string arch : {"llama", "qwen2", "llama31", "phi3", "gemma3"}) {
    SCOPED_TRACE(arch);
    auto e = local(model_file(arch, 1, DType::kF32));
    ASSERT_TRUE(e);
    const std::vector<int32_t> tokens = shift_prompt(3, 70);
    const int32_t n_keep = 6, n_discard = 33, next = 17;

    auto shifted = shift_context(*e, 512, DType::kF32);
    Batch b;
    for (size_t i = 0; i < tokens.size(); ++i) b.add(tokens[i], static_cast<int32_t>(i), 0, false);
    ASSERT_TRUE(shifted->decode(b).is_ok());
    ASSERT_TRUE(shifted->seq_shift(0, n_keep, n_discard).is_ok());
    ASSERT_EQ(shifted->seq_len(0), 70 - n_discard);
    std::vector<int32_t> kept(tokens.begin(), tokens.begin() + n_keep);
    kept.insert(kept.end(), tokens.begin() + n_keep + n_discard, tokens.end());
    EXPECT_EQ(shifted->seq_tokens(0), kept);
    b.clear();
    b.add(next, shifted->seq_len(0), 0, true);
    ASSERT_TRUE(shifted->decode(b).is_ok());

    auto fresh = shift_context(*e, 512, DType::kF32);
    b.clear();
    for (size_t i = 0; i < kept.size(); ++i) b.add(kept[i], static_cast<int32_t>(i), 0, false);
    b.add(next, static_cast<int32_t>(kept.size()), 0, true);
    ASSERT_TRUE(fresh->decode(b).is_ok());

    const float* a = shifted->logits(0);
    const float* f = fresh->logits(0);
    float max_diff = 0, max_abs = 0;
    for (int64_t i = 0; i < e->model().hparams().n_vocab; ++i) {
      max_diff = std::max(max_diff, std::fabs(a[i] - f[i]));
      max_abs = std::max(max_abs, std::fabs(f[i]));
    }
    EXPECT_GT(max_abs, 0.1f);
    EXPECT_LT(max_diff, 1e-5f * max_abs) << "max |logit| " << max_abs;
  }
}

std::unique_ptr<Engine> with_worker(const std::string& path, rpc::Worker& worker,
                                    bool shift = true) {
  auto remote = testing::remote_device_on(worker);
  EXPECT_TRUE(remote.is_ok()) << remote.status().message();
  if (!remote.is_ok()) return nullptr;
  std::vector<std::unique_ptr<Device>> d;
  d.push_back(cpu_device("CPU", 1));
  d.push_back(std::move(remote).value());
  return engine(path, std::move(d), {1, 1}, shift);
}

// (architecture, weight dtype, KV cache dtype).
class ShiftDeterminism : public ::testing::TestWithParam<std::tuple<std::string, DType, DType>> {};

TEST_P(ShiftDeterminism, AShiftedSequenceGivesTheSameBytesInAnyCompany) {
  const auto [arch, dtype, kv] = GetParam();
  const std::string path = model_file(arch, arch == "gemma3" ? 7 : 3, dtype);
  // Sequence 0: a 30-token prompt, shifted when it reaches 50 positions (keep 4, drop 20),
  // then again at 50. 45 steps take it through both shifts.
  const Plan watched{0, shift_prompt(1, 30), 50, 4, 20};
  constexpr int kSteps = 45;

  auto alone_engine = local(path, 1);
  ASSERT_TRUE(alone_engine);
  auto alone_ctx = shift_context(*alone_engine, 512, kv, 320);
  const std::vector<uint8_t> ref = run(*alone_ctx, {watched}, kSteps)[0];
  ASSERT_EQ(ref.size(), 4u * 300 * kSteps);

  // Beside a sequence that shifts at other times, one that never does, and a copy of the
  // watched prompt that shares its cells: the copy keeps its own keys when the watched one
  // turns them, so it gives the bytes of the watched sequence without a shift until then.
  const std::vector<Plan> crowd = {
      {1, shift_prompt(2, 11), 40, 2, 9}, watched, {2, shift_prompt(3, 23)}, {3, {}, 0, 0, 0, 0}};
  auto crowd_engine = local(path, 2);
  ASSERT_TRUE(crowd_engine);
  auto crowd_ctx = shift_context(*crowd_engine, 512, kv, 320);
  const auto mixed = run(*crowd_ctx, crowd, kSteps);
  EXPECT_EQ(mixed[1], ref) << "alone vs beside three sequences";
  const Plan unshifted{0, shift_prompt(1, 30)};
  auto plain_ctx = shift_context(*alone_engine, 512, kv, 320);
  EXPECT_EQ(mixed[3], run(*plain_ctx, {unshifted}, kSteps)[0])
      << "the copy sharing the watched prompt's cells is not turned by its shift";

  auto tiny = shift_context(*crowd_engine, 2, kv, 320);
  EXPECT_EQ(run(*tiny, crowd, kSteps)[1], ref) << "micro-batches of 2 tokens";

  std::vector<std::unique_ptr<Device>> two;
  two.push_back(cpu_device("CPU0", 1));
  two.push_back(cpu_device("CPU1", 2));
  auto split = engine(path, std::move(two), {1, 2});
  ASSERT_TRUE(split);
  auto split_ctx = shift_context(*split, 512, kv, 320);
  EXPECT_EQ(run(*split_ctx, crowd, kSteps)[1], ref) << "split over two devices";

  auto worker = testing::start_local_worker();
  ASSERT_TRUE(worker);
  auto remote = with_worker(path, *worker);
  ASSERT_TRUE(remote);
  auto remote_ctx = shift_context(*remote, 512, kv, 320);
  EXPECT_EQ(run(*remote_ctx, crowd, kSteps)[1], ref) << "a stage on a worker";
}

INSTANTIATE_TEST_SUITE_P(
    Archs, ShiftDeterminism,
    ::testing::Values(std::make_tuple("llama", DType::kQ8_0, DType::kF16),
                      std::make_tuple("qwen2", DType::kQ4_0, DType::kF16),
                      std::make_tuple("llama31", DType::kQ5_0, DType::kF16),
                      std::make_tuple("phi3", DType::kQ8_0, DType::kF16),
                      std::make_tuple("gemma3", DType::kF16, DType::kF16),
                      // q8_0 caches: keys requantised by the shift, shared cells copied.
                      std::make_tuple("llama", DType::kQ8_0, DType::kQ8_0),
                      std::make_tuple("gemma3", DType::kF16, DType::kQ8_0)),
    [](const auto& info) {
      const DType kv = std::get<2>(info.param);
      return std::get<0>(info.param) + "_" + std::string(dtype_name(std::get<1>(info.param))) +
             (kv == DType::kF16 ? "" : "_kv_" + std::string(dtype_name(kv)));
    });

TEST(ContextShift, BadArgumentsAndMissingCellsChangeNothing) {
  auto e = local(model_file("llama", 3, DType::kQ8_0));
  ASSERT_TRUE(e);
  // 24 cells: sequence 0 holds 10, sequence 1 shares them and adds 10, 4 are free.
  auto ctx = shift_context(*e, 512, DType::kF16, 24);
  Batch b;
  for (int i = 0; i < 10; ++i) b.add(3 + i, i, 0, false);
  ASSERT_TRUE(ctx->decode(b).is_ok());
  ctx->seq_copy(0, 1, 10);
  b.clear();
  for (int i = 10; i < 20; ++i) b.add(3 + i, i, 1, false);
  ASSERT_TRUE(ctx->decode(b).is_ok());
  ASSERT_EQ(ctx->kv_used(), 20);

  for (auto [keep, discard] : {std::pair{-1, 2}, {2, 0}, {5, 6}, {0, 11}}) {
    const Status s = ctx->seq_shift(0, keep, discard);
    EXPECT_FALSE(s.is_ok()) << keep << " " << discard;
    EXPECT_EQ(s.kind(), ErrorKind::kInvalidArgument) << s.message();
  }
  EXPECT_FALSE(ctx->seq_shift(7, 0, 1).is_ok());
  // Sequence 0 drops 2 and moves 8 shared cells: they need copies, and 4 cells are free.
  const Status s = ctx->seq_shift(0, 0, 2);
  EXPECT_EQ(s.kind(), ErrorKind::kOutOfRange) << s.message();
  EXPECT_NE(s.message().find("8 cells shared"), std::string::npos) << s.message();
  EXPECT_EQ(ctx->seq_len(0), 10);
  EXPECT_EQ(ctx->kv_used(), 20);
  // Sequence 1 keeps 2 of the shared ones, drops the 8 others and moves its own: no copy.
  ASSERT_TRUE(ctx->seq_shift(1, 2, 8).is_ok());
  EXPECT_EQ(ctx->seq_len(1), 12);
  EXPECT_EQ(ctx->kv_used(), 20);
  EXPECT_EQ(ctx->seq_len(0), 10);
}

// A worker without the op: refused when the split is planned for contexts that shift, and,
// when the engine was not told, refused by the shift itself, with nothing changed.
TEST(ContextShift, AWorkerWithoutTheOpIsRefused) {
  const std::string path = model_file("llama", 3, DType::kQ8_0);
  rpc::WorkerOptions o;
  o.hide_ops.set(static_cast<uint32_t>(Op::kRopeShift));
  auto worker = testing::start_local_worker(o);
  ASSERT_TRUE(worker);
  {
    rpc::ClientOptions co;
    co.endpoint = worker->address();
    co.name = "RPC0";
    auto remote = rpc::remote_device_new(co);
    ASSERT_TRUE(remote.is_ok());
    std::vector<std::unique_ptr<Device>> d;
    d.push_back(cpu_device("CPU", 1));
    d.push_back(std::move(remote).value());
    auto model = Model::open(path);
    ASSERT_TRUE(model.is_ok());
    EngineOptions eo;
    eo.split = {1, 1};
    eo.context_shift = true;
    auto refused = Engine::create(std::move(model).value(), std::move(d), eo);
    ASSERT_FALSE(refused.is_ok());
    EXPECT_NE(refused.status().message().find("cannot run op 'rope_shift'"), std::string::npos)
        << refused.status().message();
  }
  auto e = with_worker(path, *worker, /*shift=*/false);
  ASSERT_TRUE(e);
  auto ctx = shift_context(*e);
  Batch b;
  for (int i = 0; i < 10; ++i) b.add(3 + i, i, 0, i == 9);
  ASSERT_TRUE(ctx->decode(b).is_ok());
  const Status s = ctx->seq_shift(0, 2, 4);
  EXPECT_EQ(s.kind(), ErrorKind::kUnsupported) << s.message();
  EXPECT_NE(s.message().find("rope_shift"), std::string::npos) << s.message();
  EXPECT_EQ(ctx->seq_len(0), 10);
}

TEST(StageCaps, TheShiftAddsItsOpOnlyWhenAsked) {
  auto model = Model::open(model_file("llama", 3, DType::kQ8_0));
  ASSERT_TRUE(model.is_ok());
  const uint32_t bit = static_cast<uint32_t>(Op::kRopeShift);
  auto plain = stage_graph_needs(**model, 0, 3, true, true, DType::kF16);
  auto shift = stage_graph_needs(**model, 0, 3, true, true, DType::kF16, true);
  ASSERT_TRUE(plain.is_ok() && shift.is_ok());
  EXPECT_FALSE(plain->ops.test(bit));
  EXPECT_TRUE(shift->ops.test(bit));
  auto empty = stage_graph_needs(**model, 2, 2, false, false, DType::kF16, true);
  ASSERT_TRUE(empty.is_ok());
  EXPECT_FALSE(empty->ops.test(bit)) << "a stage without layers has no keys to turn";
}

}  // namespace
}  // namespace strata
