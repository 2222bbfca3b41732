// Embeddings' host side (engine/embedding.h): pooling and normalisation against direct
// computations, the model's pooling key; and a context of embeddings gives each row the output
// norm of the hidden state that its logits are the projection of.
#include "engine/embedding.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/context.h"
#include "model/gguf.h"
#include "unit/cpu_engine.h"
#include "unit/synth_file.h"

namespace strata {
namespace {

TEST(Embedding, PoolsRowsAsNamed) {
  // Three tokens of four values.
  const std::vector<float> rows = {1, 2, 3, 4, 5, 6, 7, 8, -3, 1, 2, 9};
  EXPECT_EQ(pool_rows(rows.data(), 3, 4, Pooling::kNone), rows);
  EXPECT_EQ(pool_rows(rows.data(), 3, 4, Pooling::kCls), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(pool_rows(rows.data(), 3, 4, Pooling::kLast), (std::vector<float>{-3, 1, 2, 9}));
  EXPECT_EQ(pool_rows(rows.data(), 3, 4, Pooling::kMean), (std::vector<float>{1, 3, 4, 7}));
  for (const char* name : {"none", "mean", "cls", "last"}) {
    ASSERT_TRUE(pooling_from_name(name).has_value()) << name;
    EXPECT_STREQ(pooling_name(*pooling_from_name(name)), name);
  }
  EXPECT_FALSE(pooling_from_name("rank").has_value());
}

TEST(Embedding, NormalisesAsLlamaCppDoes) {
  const std::vector<float> x = {3, -4, 0, 12, 1, 0, 0, 0};  // two vectors of four
  const auto norm = [&](int p) {
    std::vector<float> v = x;
    normalize_embeddings(v, 4, p);
    return v;
  };
  EXPECT_EQ(norm(-1), x);
  const std::vector<float> euclid = norm(2);
  EXPECT_FLOAT_EQ(euclid[0], 3.0f / 13);
  EXPECT_FLOAT_EQ(euclid[1], -4.0f / 13);
  EXPECT_FLOAT_EQ(euclid[3], 12.0f / 13);
  EXPECT_FLOAT_EQ(euclid[4], 1.0f);
  const std::vector<float> taxicab = norm(1);
  EXPECT_FLOAT_EQ(taxicab[3], 12.0f / 19);
  const std::vector<float> max_abs = norm(0);
  EXPECT_FLOAT_EQ(max_abs[3], 32760.0f);
  EXPECT_FLOAT_EQ(max_abs[1], -4.0f * 32760 / 12);
  const std::vector<float> p3 = norm(3);
  const double n3 = std::cbrt(27.0 + 64 + 1728);
  EXPECT_NEAR(p3[3], 12 / n3, 1e-6);
  std::vector<float> zero(4, 0.0f);
  normalize_embeddings(zero, 4, 2);
  EXPECT_EQ(zero, std::vector<float>(4, 0.0f));
}

SynthParams small_model() {
  SynthParams p;
  p.n_embd = 64;
  p.n_layer = 2;
  p.n_head = 4;
  p.n_head_kv = 2;
  p.n_ff = 128;
  p.n_vocab = 300;
  p.dtype = DType::kF32;
  p.seed = 4;
  return p;
}

TEST(Embedding, TheModelsPoolingKey) {
  const std::string path = testing::synth_file("embedding_model", small_model());
  auto plain = Model::open(path);
  ASSERT_TRUE(plain.is_ok()) << plain.status().message();
  auto none = model_pooling(**plain);
  ASSERT_TRUE(none.is_ok());
  EXPECT_EQ(*none, Pooling::kNone);
  const auto with = [&](const char* kv) {
    auto o = parse_kv_override(kv);
    EXPECT_TRUE(o.is_ok()) << kv;
    auto m = Model::open(path, {*o});
    EXPECT_TRUE(m.is_ok()) << m.status().message();
    return model_pooling(**m);
  };
  auto last = with("llama.pooling_type=int:3");
  ASSERT_TRUE(last.is_ok());
  EXPECT_EQ(*last, Pooling::kLast);
  auto rank = with("llama.pooling_type=int:4");
  ASSERT_FALSE(rank.is_ok());
  EXPECT_NE(rank.status().message().find("llama.pooling_type = 4"), std::string::npos);
}

// The embeddings of a context, projected by the output matrix, are the logits of another
// context over the same tokens: the one thing the embeddings mode leaves out is that product.
TEST(Embedding, ContextRowsAreWhatTheLogitsProject) {
  const std::string path = testing::synth_file("embedding_model", small_model());
  const std::vector<int32_t> ids = {1, 17, 33, 5, 90, 12};
  std::vector<std::vector<float>> logits, hidden;
  for (bool embeddings : {false, true}) {
    const std::unique_ptr<Engine> engine = testing::cpu_engine(path, 2);
    ContextParams cp;
    cp.n_ctx = 64;
    cp.embeddings = embeddings;
    auto ctx = Context::create(*engine, cp);
    ASSERT_TRUE(ctx.is_ok()) << ctx.status().message();
    Batch b;
    for (size_t i = 0; i < ids.size(); ++i) b.add(ids[i], static_cast<int32_t>(i), 0, i % 2 == 1);
    ASSERT_TRUE((*ctx)->decode(b).is_ok());
    ASSERT_EQ((*ctx)->n_outputs(), 3);
    const Model& m = engine->model();
    const int64_t width = embeddings ? m.hparams().n_embd : m.hparams().n_vocab;
    for (int64_t r = 0; r < 3; ++r) {
      const float* row = embeddings ? (*ctx)->embeddings(r) : (*ctx)->logits(r);
      (embeddings ? hidden : logits).emplace_back(row, row + width);
    }
    if (embeddings) {
      // No draws from a context without logits.
      StepDraws draws;
      EXPECT_FALSE((*ctx)->decode(b, &draws).is_ok());
      // The output matrix (f32 [n_embd, n_vocab]) times each row gives the logits.
      const GgufTensorInfo* out = m.output();
      const auto* w = reinterpret_cast<const float*>(m.file().tensor_data(*out));
      const int64_t n_embd = m.hparams().n_embd;
      for (int64_t r = 0; r < 3; ++r) {
        for (int64_t v = 0; v < m.hparams().n_vocab; ++v) {
          double dot = 0;
          for (int64_t i = 0; i < n_embd; ++i) dot += double(w[v * n_embd + i]) * hidden[r][i];
          ASSERT_NEAR(dot, logits[r][v], 1e-4 * (1 + std::fabs(logits[r][v])))
              << "row " << r << " token " << v;
        }
      }
    }
  }
}

// Inputs decoded a few at a time (2 sequences, 16 cells) give each the vector it gets alone in a
// context of its own; an input longer than the context, or empty, is refused by number.
TEST(Embedding, InputsInChunksEmbedAsAlone) {
  const std::string path = testing::synth_file("embedding_model", small_model());
  const std::unique_ptr<Engine> engine = testing::cpu_engine(path, 2);
  const auto context = [&](int64_t n_ctx, int32_t n_seq) {
    ContextParams cp;
    cp.n_ctx = n_ctx;
    cp.n_seq = n_seq;
    cp.embeddings = true;
    auto ctx = Context::create(*engine, cp);
    EXPECT_TRUE(ctx.is_ok()) << ctx.status().message();
    return std::move(ctx).value();
  };
  const std::vector<std::vector<int32_t>> inputs = {
      {1, 5, 9}, {2, 4, 6, 8, 10, 12, 14}, {7}, {3, 3, 3, 3, 3, 3, 3, 3, 3, 3}, {11, 13}};
  const std::unique_ptr<Context> small = context(16, 2);
  for (Pooling p : {Pooling::kMean, Pooling::kCls, Pooling::kLast, Pooling::kNone}) {
    auto together = embed_inputs(*small, inputs, p, 2);
    ASSERT_TRUE(together.is_ok()) << together.status().message();
    ASSERT_EQ(together->size(), inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::unique_ptr<Context> own = context(16, 1);
      auto alone = embed_inputs(*own, {inputs[i]}, p, 2);
      ASSERT_TRUE(alone.is_ok());
      EXPECT_EQ((*together)[i], (*alone)[0]) << pooling_name(p) << " input " << i;
    }
  }
  auto too_long = embed_inputs(*small, {inputs[0], std::vector<int32_t>(17, 1)}, Pooling::kMean, 2);
  ASSERT_FALSE(too_long.is_ok());
  EXPECT_NE(too_long.status().message().find("input 1 has 17 tokens; the context holds 16"),
            std::string::npos);
  EXPECT_FALSE(embed_inputs(*small, {{}}, Pooling::kMean, 2).is_ok());
}

}  // namespace
}  // namespace strata
