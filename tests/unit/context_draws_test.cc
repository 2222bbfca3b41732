// Backend sampling end to end: Context::decode with StepDraws samples on the last stage's device
// and gives, step after step, the tokens (and log-probabilities) that CPU sampling of the logits
// gives; on one CPU, over stages, and with the last stage on a worker. Rows the device cannot
// take come back as logits; a device without the op is refused.
#include <gtest/gtest.h>

#include <bit>
#include <limits>

#include "backend/cpu_backend.h"
#include "engine/context.h"
#include "engine/step_draws.h"
#include "rpc/remote_backend.h"
#include "rpc/worker.h"
#include "unit/engine_testing.h"
#include "unit/synth_file.h"

namespace strata {
namespace {

using testing::cpu_device;
using testing::Loaded;

std::string draws_model_path(const std::string& arch) {
  SynthParams p;
  p.arch = arch;
  if (arch == "gemma2") {
    p.n_swa = 5;
    p.final_softcap = 5.0;
  }
  p.n_embd = 128;
  p.n_layer = 4;
  p.n_head = 4;
  p.n_head_kv = 2;
  p.n_ff = 256;
  p.n_vocab = 700;
  p.dtype = DType::kQ8_0;
  p.seed = 23;
  return testing::synth_file("draws_" + arch, p);
}

std::vector<std::unique_ptr<Device>> cpus(int n) {
  std::vector<std::unique_ptr<Device>> d;
  for (int i = 0; i < n; ++i) d.push_back(cpu_device("CPU" + std::to_string(i)));
  return d;
}

std::unique_ptr<rpc::Worker> worker_hiding_ops(OpSet hide = {}) {
  rpc::WorkerOptions o;
  o.hide_ops = hide;
  return testing::start_local_worker(o, 2);
}

Loaded load_split(const std::string& path, std::vector<std::unique_ptr<Device>> devices,
                  std::vector<double> split, bool backend_sampling) {
  Loaded s;
  auto model = Model::open(path);
  EXPECT_TRUE(model) << model.status().message();
  EngineOptions eo;
  eo.split = std::move(split);
  eo.backend_sampling = backend_sampling;
  auto e = Engine::create(std::move(model).value(), std::move(devices), eo);
  EXPECT_TRUE(e) << e.status().message();
  if (!e) return s;
  s.engine = std::move(e).value();
  ContextParams cp;
  cp.n_ctx = 512;
  cp.n_seq = 4;
  auto c = Context::create(*s.engine, cp);
  EXPECT_TRUE(c) << c.status().message();
  if (c) s.ctx = std::move(c).value();
  return s;
}

// Four sequences, five samplers: sequence 0 has two (as a request with n = 2 has for its
// first token, both from one row); one sampler is greedy, one reports log-probabilities, one
// has penalties, one a logit bias too long for the device (sampled on the CPU every step).
struct Lane {
  std::vector<Sampler> samplers;
  std::vector<int32_t> seq_of;  // per sampler
  bool wants_logprobs(size_t i) const { return i == 2; }
};

Lane make_lane(int32_t n_vocab) {
  Lane lane;
  auto add = [&](SamplerParams p, int32_t seq, std::vector<SampleBias> bias = {}) {
    lane.samplers.emplace_back(p, n_vocab);
    lane.samplers.back().set_logit_bias(std::move(bias));
    lane.seq_of.push_back(seq);
  };
  SamplerParams greedy;
  greedy.temperature = 0.0f;
  SamplerParams seeded;
  seeded.seed = 77;
  seeded.top_k = 0;
  seeded.top_p = 0.9f;
  seeded.temperature = 1.2f;
  SamplerParams second = seeded;
  second.seed = 78;
  SamplerParams probs;
  probs.seed = 5;
  probs.n_probs = 4;
  SamplerParams penalised;
  penalised.seed = 9;
  penalised.repeat_penalty = 1.3f;
  penalised.presence_penalty = 0.4f;
  penalised.frequency_penalty = 0.2f;
  penalised.min_p = 0.1f;
  std::vector<SampleBias> long_bias;
  for (int32_t t = 0; t < StepDraws::kMaxEntries + 1; ++t) long_bias.push_back({t, -0.01f});
  add(seeded, 0);
  add(second, 0, {{3, 2.0f}, {9, -std::numeric_limits<float>::infinity()}});
  add(probs, 1);
  add(penalised, 2);
  add(greedy, 3, long_bias);
  return lane;
}

// Runs a prompt per sequence and `steps` generated tokens; every sampler's tokens (and the
// log-probabilities of the one that asks) in order. With `device`, through StepDraws.
struct LaneRun {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<uint32_t> logprob_bits;
  int64_t drawn = 0;
  int64_t on_cpu = 0;
};

LaneRun run_lane(Context& ctx, bool device, int steps) {
  const int32_t n_vocab = static_cast<int32_t>(ctx.n_vocab());
  Lane lane = make_lane(n_vocab);
  LaneRun run;
  run.tokens.resize(lane.samplers.size());
  // The sampler whose token each sequence continues with (the first of the sequence).
  std::vector<int32_t> next(4, -1);
  Batch batch;
  for (int32_t seq = 0; seq < 4; ++seq) {
    const int32_t len = 5 + 3 * seq;
    for (int32_t p = 0; p < len; ++p) {
      const int32_t t = (p * 37 + seq * 101 + 1) % n_vocab;
      batch.add(t, p, seq, p + 1 == len);
      for (size_t i = 0; i < lane.samplers.size(); ++i) {
        if (lane.seq_of[i] == seq) lane.samplers[i].accept(t);
      }
    }
  }
  StepDraws draws;
  for (int step = 0; step <= steps; ++step) {
    // Output row of sequence s is s: every batch has one output per sequence, in order.
    draws.clear();
    std::vector<int32_t> draw_of(lane.samplers.size(), -1);
    if (device) {
      for (size_t i = 0; i < lane.samplers.size(); ++i) {
        draw_of[i] = draws.add(lane.seq_of[i], lane.samplers[i], lane.wants_logprobs(i));
        if (draw_of[i] < 0) draws.read_logits(lane.seq_of[i]);
      }
    }
    Status s = ctx.decode(batch, device ? &draws : nullptr);
    EXPECT_TRUE(s.is_ok()) << s.message();
    if (!s.is_ok()) return run;
    batch.clear();
    for (size_t i = 0; i < lane.samplers.size(); ++i) {
      Sampler& sm = lane.samplers[i];
      int32_t t;
      if (draw_of[i] >= 0) {
        t = draws.token(draw_of[i]);
        if (lane.wants_logprobs(i)) {
          run.logprob_bits.push_back(std::bit_cast<uint32_t>(draws.logprob(draw_of[i])));
          std::vector<TokenLogprob> top;
          draws.top(draw_of[i], top);
          for (const TokenLogprob& tl : top) {
            run.logprob_bits.push_back(static_cast<uint32_t>(tl.token));
            run.logprob_bits.push_back(std::bit_cast<uint32_t>(tl.logprob));
          }
        }
        ++run.drawn;
      } else {
        t = sm.sample(ctx.logits(lane.seq_of[i]));
        if (lane.wants_logprobs(i)) {
          run.logprob_bits.push_back(std::bit_cast<uint32_t>(sm.last_logprob()));
          for (const TokenLogprob& tl : sm.last_top()) {
            run.logprob_bits.push_back(static_cast<uint32_t>(tl.token));
            run.logprob_bits.push_back(std::bit_cast<uint32_t>(tl.logprob));
          }
        }
        if (device) ++run.on_cpu;
      }
      sm.accept(t);
      run.tokens[i].push_back(t);
      const int32_t seq = lane.seq_of[i];
      if (i == 0 || lane.seq_of[i - 1] != seq) next[seq] = t;
    }
    for (int32_t seq = 0; seq < 4; ++seq) batch.add(next[seq], ctx.seq_len(seq), seq, true);
  }
  return run;
}

void expect_same(const LaneRun& want, const LaneRun& got, const std::string& what) {
  ASSERT_EQ(got.tokens.size(), want.tokens.size());
  for (size_t i = 0; i < want.tokens.size(); ++i) {
    EXPECT_EQ(got.tokens[i], want.tokens[i]) << what << ": sampler " << i;
  }
  EXPECT_EQ(got.logprob_bits, want.logprob_bits) << what;
}

class ContextDraws : public ::testing::TestWithParam<std::string> {};

TEST_P(ContextDraws, SameTokensAsCpuSamplingLocalAndSplit) {
  const std::string path = draws_model_path(GetParam());
  constexpr int kSteps = 12;
  Loaded local = load_split(path, cpus(1), {1}, false);
  ASSERT_TRUE(local.ctx);
  const LaneRun want = run_lane(*local.ctx, false, kSteps);
  // The sequences do not all pick one token: the comparison below means something.
  EXPECT_NE(want.tokens[0], want.tokens[1]);

  {
    Loaded on_cpu = load_split(path, cpus(1), {1}, true);
    ASSERT_TRUE(on_cpu.ctx);
    const LaneRun got = run_lane(*on_cpu.ctx, true, kSteps);
    expect_same(want, got, "one CPU");
    EXPECT_EQ(got.drawn, 4 * (kSteps + 1));
    EXPECT_EQ(got.on_cpu, kSteps + 1);
  }
  {
    Loaded stages = load_split(path, cpus(2), {1, 1}, true);
    ASSERT_TRUE(stages.ctx);
    expect_same(want, run_lane(*stages.ctx, true, kSteps), "two CPU stages");
  }
  {
    auto worker = worker_hiding_ops();
    ASSERT_TRUE(worker);
    auto r = testing::remote_device_on(*worker);
    ASSERT_TRUE(r) << r.status().message();
    std::vector<std::unique_ptr<Device>> d;
    d.push_back(cpu_device("CPU"));
    d.push_back(std::move(r).value());
    Loaded split = load_split(path, std::move(d), {1, 1}, true);
    ASSERT_TRUE(split.ctx);
    expect_same(want, run_lane(*split.ctx, true, kSteps), "last stage on a worker");
  }
}

INSTANTIATE_TEST_SUITE_P(Arch, ContextDraws, ::testing::Values("llama", "gemma2"));

// A micro-batch smaller than the batch: the draws of each micro-batch's outputs run with it.
TEST(ContextDrawsBatches, DrawsFollowTheirMicroBatch) {
  const std::string path = draws_model_path("llama");
  auto model = Model::open(path);
  ASSERT_TRUE(model);
  std::vector<std::unique_ptr<Device>> d;
  d.push_back(cpu_device("CPU"));
  EngineOptions eo;
  eo.backend_sampling = true;
  auto engine = Engine::create(std::move(model).value(), std::move(d), eo);
  ASSERT_TRUE(engine) << engine.status().message();
  ContextParams cp;
  cp.n_ctx = 256;
  cp.n_seq = 4;
  cp.n_batch = 3;
  auto small = Context::create(**engine, cp);
  cp.n_batch = 512;
  auto whole = Context::create(**engine, cp);
  ASSERT_TRUE(small && whole);
  Batch batch;
  for (int32_t seq = 0; seq < 4; ++seq) {
    for (int32_t p = 0; p < 2; ++p) batch.add(seq * 10 + p + 1, p, seq, p == 1);
  }
  SamplerParams sp;
  sp.seed = 3;
  std::vector<int32_t> tokens[2];
  int k = 0;
  for (Context* ctx : {small->get(), whole->get()}) {
    StepDraws draws;
    std::vector<Sampler> samplers;
    for (int32_t seq = 0; seq < 4; ++seq) samplers.emplace_back(sp, 700);
    // Out of order: the draws name their rows.
    for (int32_t seq : {3, 1, 0, 2}) ASSERT_GE(draws.add(seq, samplers[seq], false), 0);
    ASSERT_TRUE(ctx->decode(batch, &draws).is_ok());
    for (int32_t i = 0; i < draws.size(); ++i) tokens[k].push_back(draws.token(i));
    ++k;
  }
  EXPECT_EQ(tokens[0], tokens[1]);
}

// A worker without the op is refused at split time when the engine will sample there, and a
// context refuses draws on a device without it.
TEST(ContextDrawsCaps, AWorkerWithoutTheOpIsRefused) {
  OpSet hide;
  hide.set(static_cast<uint32_t>(Op::kSample));
  auto worker = worker_hiding_ops(hide);
  ASSERT_TRUE(worker);
  const std::string path = draws_model_path("llama");
  auto devices = [&] {
    std::vector<std::unique_ptr<Device>> d;
    d.push_back(cpu_device("CPU"));
    auto r = testing::remote_device_on(*worker);
    EXPECT_TRUE(r) << r.status().message();
    d.push_back(std::move(r).value());
    return d;
  };
  {
    auto model = Model::open(path);
    ASSERT_TRUE(model);
    EngineOptions eo;
    eo.split = {1, 1};
    eo.backend_sampling = true;
    auto e = Engine::create(std::move(model).value(), devices(), eo);
    ASSERT_FALSE(e);
    EXPECT_EQ(e.status().kind(), ErrorKind::kUnsupported);
    EXPECT_NE(e.status().message().find("cannot run op 'sample'"), std::string::npos)
        << e.status().message();
  }
  Loaded plain = load_split(path, devices(), {1, 1}, false);
  ASSERT_TRUE(plain.ctx);
  Batch batch;
  batch.add(1, 0, 0, true);
  Sampler sm(SamplerParams{}, 700);
  StepDraws draws;
  ASSERT_EQ(draws.add(0, sm, false), 0);
  const Status s = plain.ctx->decode(batch, &draws);
  EXPECT_EQ(s.kind(), ErrorKind::kUnsupported) << s.message();
  EXPECT_NE(s.message().find("op 'sample'"), std::string::npos) << s.message();
  // Without draws the same context decodes.
  EXPECT_TRUE(plain.ctx->decode(batch).is_ok());
}

}  // namespace
}  // namespace strata
