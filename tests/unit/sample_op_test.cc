// The sample op (Op::kSample) against the CPU sampler: for many seeds and settings, a row that
// the op samples with the uniform the sequence's Sampler draws and the entries it would apply
// gives the token, log-probability and alternatives that Sampler::sample gives, bit for bit;
// and records that break the op's rules are refused by name.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu_backend.h"
#include "core/rng.h"
#include "core/sample.h"
#include "engine/sampler.h"
#include "graph/op_table.h"
#include "unit/engine_testing.h"

namespace strata {
namespace {

using testing::cpu_device;

// A random but valid parameter set: every stage of the chain on or off, penalties, logprobs.
SamplerParams random_params(Rng& rng) {
  auto pick = [&](auto... v) {
    const std::array all = {v...};
    return all[rng.next() % all.size()];
  };
  SamplerParams p;
  p.temperature = pick(0.0f, 0.5f, 1.0f, 1.7f);
  p.top_k = pick(0, -1, 1, 5, 40, 3000);
  p.top_p = pick(1.0f, 0.9f, 0.5f, 0.05f);
  p.min_p = pick(0.0f, 0.05f, 0.2f);
  p.repeat_penalty = pick(1.0f, 1.2f, 0.9f);
  p.repeat_last_n = pick(64, 4, -1, 0);
  p.presence_penalty = pick(0.0f, 0.5f, -0.5f);
  p.frequency_penalty = pick(0.0f, 0.3f);
  p.n_probs = pick(0, 1, 3, kSamplerMaxNProbs);
  p.seed = rng.next();
  return p;
}

// Logits with a heavy head, as a language model's are, and the odd non-finite value.
std::vector<float> random_logits(Rng& rng, int32_t n_vocab, int64_t rows) {
  std::vector<float> l(static_cast<size_t>(n_vocab * rows));
  for (float& v : l) v = (rng.uniform() - 0.5f) * 6.0f;
  for (int i = 0; i < 40 * rows; ++i) l[rng.next() % l.size()] += 8.0f;
  l[rng.next() % l.size()] = std::nanf("");
  l[rng.next() % l.size()] = std::numeric_limits<float>::infinity();
  return l;
}

// One op over `rows` rows on the CPU device: every tensor in one buffer.
struct OpRun {
  std::vector<int32_t> out;  // I32 [out_words, rows]
  Status status;
};
OpRun run_op(Device& device, const std::vector<float>& logits, int32_t n_vocab, int64_t rows,
             const std::vector<int32_t>& words, const std::vector<int32_t>& entries, int64_t width,
             const std::vector<float>& uniforms, int64_t out_words) {
  std::vector<uint8_t> init;
  auto place = [&](const void* data, size_t bytes) {
    const uint64_t at = (init.size() + 63) / 64 * 64;
    init.resize(at + bytes);
    if (data != nullptr) std::memcpy(init.data() + at, data, bytes);
    return at;
  };
  const uint64_t at_l = place(logits.data(), 4 * logits.size());
  const uint64_t at_w = place(words.data(), 4 * words.size());
  const uint64_t at_e = place(entries.data(), 4 * entries.size());
  const uint64_t at_u = place(uniforms.data(), 4 * uniforms.size());
  const uint64_t at_o = place(nullptr, 4 * static_cast<size_t>(out_words * rows));
  auto buffer = device.alloc_buffer(init.size());
  EXPECT_TRUE(buffer.is_ok());
  const uint64_t h = (*buffer)->handle();
  Graph g;
  g.tensors = {make_tensor(h, at_l, DType::kF32, n_vocab, rows),
               make_tensor(h, at_w, DType::kI32, kSampleWords, rows),
               make_tensor(h, at_e, DType::kI32, 2, width, rows),
               make_tensor(h, at_u, DType::kF32, rows),
               make_tensor(h, at_o, DType::kI32, out_words, rows)};
  Node n;
  n.op = Op::kSample;
  n.src[0] = 0;
  n.src[1] = 1;
  n.src[2] = 2;
  n.src[3] = 3;
  n.out = 4;
  g.nodes.push_back(n);
  std::unique_ptr<Stream> stream = device.create_stream();
  stream->set_tensor(make_tensor(h, 0, DType::kI8, static_cast<int64_t>(init.size())), init.data(),
                     init.size());
  stream->compute(std::make_shared<const Graph>(g));
  OpRun r;
  r.out.resize(static_cast<size_t>(out_words * rows));
  stream->get_tensor(g.tensors[4], r.out.data(), 4 * r.out.size());
  r.status = stream->synchronize();
  return r;
}

float as_float(int32_t w) { return std::bit_cast<float>(w); }

// The property the server relies on: sequences sampled on the device, step after step, with
// their histories growing, give the CPU sampler's tokens and reports exactly.
TEST(SampleOp, PicksWhatTheCpuSamplerPicksForManySeedsAndSettings) {
  constexpr int64_t kRows = 12;
  constexpr int kSteps = 25;
  const int64_t k = kSamplerMaxNProbs;
  auto device = cpu_device("CPU", 2);
  for (int32_t n_vocab : {700, 40000}) {
    Rng rng(static_cast<uint64_t>(n_vocab));
    std::vector<Sampler> on_cpu, on_op;
    for (int64_t r = 0; r < kRows; ++r) {
      const SamplerParams p = random_params(rng);
      on_cpu.emplace_back(p, n_vocab);
      on_op.emplace_back(p, n_vocab);
      std::vector<SampleBias> bias;
      for (int64_t i = 0; i < r % 4; ++i) {
        const float b = i == 2 ? -std::numeric_limits<float>::infinity() : rng.uniform() * 6 - 3;
        bias.push_back({static_cast<int32_t>(rng.next() % n_vocab), b});
      }
      on_cpu.back().set_logit_bias(bias);
      on_op.back().set_logit_bias(bias);
      for (int i = 0; i < 30; ++i) {  // a prompt in the penalty window
        const int32_t t = static_cast<int32_t>(rng.next() % 50);
        on_cpu.back().accept(t);
        on_op.back().accept(t);
      }
    }
    int64_t n_compared = 0;
    for (int step = 0; step < kSteps; ++step) {
      const std::vector<float> logits = random_logits(rng, n_vocab, kRows);
      // The op's inputs, from what each sequence's sampler would use next.
      std::vector<std::vector<SamplePenalty>> pen(kRows);
      int64_t width = 1;
      for (int64_t r = 0; r < kRows; ++r) {
        on_op[r].penalties(pen[r]);
        width = std::max<int64_t>(
            width, static_cast<int64_t>(pen[r].size() + on_op[r].logit_bias().size()));
      }
      std::vector<int32_t> words(kSampleWords * kRows);
      std::vector<int32_t> entries(2 * width * kRows, 0);
      std::vector<float> uniforms(kRows);
      for (int64_t r = 0; r < kRows; ++r) {
        sample_row_pack(on_op[r].settings(), pen[r], on_op[r].logit_bias(),
                        on_op[r].params().n_probs, words.data() + r * kSampleWords,
                        entries.data() + r * 2 * width);
        uniforms[r] = on_op[r].next_uniform();
      }
      const OpRun got = run_op(*device, logits, n_vocab, kRows, words, entries, width, uniforms,
                               sample_out_words(k));
      ASSERT_TRUE(got.status.is_ok()) << got.status.message();
      for (int64_t r = 0; r < kRows; ++r) {
        SCOPED_TRACE("vocab " + std::to_string(n_vocab) + " step " + std::to_string(step) +
                     " row " + std::to_string(r));
        const int32_t* o = got.out.data() + r * sample_out_words(k);
        const int32_t want = on_cpu[r].sample(logits.data() + r * n_vocab);
        ASSERT_EQ(o[0], want);
        EXPECT_EQ(o[1], std::bit_cast<int32_t>(on_cpu[r].last_logprob()));
        const std::vector<TokenLogprob>& top = on_cpu[r].last_top();
        for (int64_t i = 0; i < k; ++i) {
          if (i < static_cast<int64_t>(top.size())) {
            EXPECT_EQ(o[2 + 2 * i], top[i].token);
            EXPECT_EQ(o[3 + 2 * i], std::bit_cast<int32_t>(top[i].logprob));
          } else {
            EXPECT_EQ(o[2 + 2 * i], -1);
            EXPECT_EQ(as_float(o[3 + 2 * i]), 0.0f);
          }
        }
        on_cpu[r].accept(want);
        on_op[r].accept(o[0]);
        ++n_compared;
      }
    }
    EXPECT_EQ(n_compared, kRows * kSteps);
  }
}

// The tokens-only output is the first word of the full one, with any thread count.
TEST(SampleOp, TokensOnlyOutputAndThreadCountAgree) {
  constexpr int32_t kVocab = 3000;
  constexpr int64_t kRows = 9;
  Rng rng(5);
  const std::vector<float> logits = random_logits(rng, kVocab, kRows);
  std::vector<int32_t> words(kSampleWords * kRows);
  std::vector<int32_t> entries(2 * kRows, 0);
  std::vector<float> uniforms(kRows);
  for (int64_t r = 0; r < kRows; ++r) {
    SampleSettings s;
    s.temperature = r == 0 ? 0.0f : 1.0f;
    sample_row_pack(s, {}, {}, -1, words.data() + r * kSampleWords, entries.data() + r * 2);
    uniforms[r] = rng.uniform();
  }
  auto one = cpu_device("CPU", 1), three = cpu_device("CPU", 3);
  const OpRun a = run_op(*one, logits, kVocab, kRows, words, entries, 1, uniforms, 1);
  const OpRun b = run_op(*three, logits, kVocab, kRows, words, entries, 1, uniforms, 4);
  ASSERT_TRUE(a.status.is_ok()) << a.status.message();
  ASSERT_TRUE(b.status.is_ok()) << b.status.message();
  for (int64_t r = 0; r < kRows; ++r) {
    EXPECT_EQ(a.out[r], b.out[r * 4]) << "row " << r;
    // n_probs -1: nothing reported even where the output has room.
    EXPECT_EQ(b.out[r * 4 + 1], 0);
    EXPECT_EQ(b.out[r * 4 + 2], -1);
  }
}

// Records come from a peer: every field is checked, and the message names the row and field.
TEST(SampleOp, RefusesBadRecordsByName) {
  constexpr int32_t kVocab = 100;
  constexpr int64_t kRows = 2;
  constexpr int64_t kWidth = 2;
  const std::vector<float> logits(kVocab * kRows, 0.0f);
  struct Case {
    const char* what;
    void (*spoil)(std::vector<int32_t>& words, std::vector<int32_t>& entries,
                  std::vector<float>& uniforms);
  };
  const Case cases[] = {
      {"temperature = nan",
       [](auto& w, auto&, auto&) { w[kSampleWords] = std::bit_cast<int32_t>(std::nanf("")); }},
      {"top_k = -2", [](auto& w, auto&, auto&) { w[kSampleWords + 1] = -2; }},
      {"n_penalties = 3", [](auto& w, auto&, auto&) { w[kSampleWords + 7] = 3; }},
      {"n_biases = 2", [](auto& w, auto&, auto&) { w[kSampleWords + 8] = 2; }},
      {"n_probs = 21", [](auto& w, auto&, auto&) { w[kSampleWords + 9] = 21; }},
      {"token = 100", [](auto&, auto& e, auto&) { e[2 * kWidth] = 100; }},
      {"count = 0", [](auto&, auto& e, auto&) { e[2 * kWidth + 1] = 0; }},
      {"uniform = 1", [](auto&, auto&, auto& u) { u[1] = 1.0f; }},
      {"uniform = nan", [](auto&, auto&, auto& u) { u[1] = std::nanf(""); }},
  };
  auto device = cpu_device("CPU", 1);
  for (const Case& c : cases) {
    std::vector<int32_t> words(kSampleWords * kRows);
    std::vector<int32_t> entries(2 * kWidth * kRows, 0);
    std::vector<float> uniforms(kRows, 0.5f);
    SampleSettings s;
    s.repeat_penalty = 1.5f;
    const SamplePenalty pen[] = {{7, 2}};
    for (int64_t r = 0; r < kRows; ++r) {
      sample_row_pack(s, pen, {}, 0, words.data() + r * kSampleWords,
                      entries.data() + r * 2 * kWidth);
    }
    c.spoil(words, entries, uniforms);
    const OpRun got = run_op(*device, logits, kVocab, kRows, words, entries, kWidth, uniforms, 1);
    ASSERT_FALSE(got.status.is_ok()) << c.what;
    EXPECT_NE(got.status.message().find(c.what), std::string::npos) << got.status.message();
    EXPECT_NE(got.status.message().find("row 1"), std::string::npos) << got.status.message();
    EXPECT_NE(got.status.message().find("sample"), std::string::npos) << got.status.message();
  }
}

// Shapes are the graph's check: an output of odd width or more alternatives than reported is
// refused before anything runs.
TEST(SampleOp, GraphValidationChecksShapes) {
  auto graph = [](int64_t out_words, int64_t settings_words, int64_t uniforms) {
    Graph g;
    g.tensors = {make_tensor(1, 0, DType::kF32, 50, 3),
                 make_tensor(1, 0, DType::kI32, settings_words, 3),
                 make_tensor(1, 0, DType::kI32, 2, 4, 3), make_tensor(1, 0, DType::kF32, uniforms),
                 make_tensor(1, 0, DType::kI32, out_words, 3)};
    Node n;
    n.op = Op::kSample;
    n.src[0] = 0;
    n.src[1] = 1;
    n.src[2] = 2;
    n.src[3] = 3;
    n.out = 4;
    g.nodes.push_back(n);
    return g;
  };
  EXPECT_TRUE(graph_validate(graph(1, kSampleWords, 3)).is_ok());
  EXPECT_TRUE(graph_validate(graph(sample_out_words(kSampleMaxNProbs), kSampleWords, 3)).is_ok());
  EXPECT_FALSE(graph_validate(graph(3, kSampleWords, 3)).is_ok());
  EXPECT_FALSE(
      graph_validate(graph(sample_out_words(kSampleMaxNProbs + 1), kSampleWords, 3)).is_ok());
  EXPECT_FALSE(graph_validate(graph(1, kSampleWords - 1, 3)).is_ok());
  EXPECT_FALSE(graph_validate(graph(1, kSampleWords, 2)).is_ok());
}

}  // namespace
}  // namespace strata
