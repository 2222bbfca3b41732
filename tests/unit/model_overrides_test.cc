// llama.cpp's flags over a model's own metadata: the rope flags (--rope-scaling, --rope-scale,
// --rope-freq-base, --rope-freq-scale, --yarn-*) and --override-kv. The oracle is the file: a
// model whose metadata says what the flags say, its weights the same bytes, must give the same
// logits bit for bit. What is read from metadata is checked against the numpy reference
// (tests/integration/reference.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backend/cpu_backend.h"
#include "engine/context.h"
#include "engine/seq_state.h"
#include "server/model_load.h"
#include "unit/engine_testing.h"
#include "unit/synth_file.h"

namespace strata {
namespace {

using testing::argmax;
using testing::Loaded;

// A small model of `arch` (weights from one seed whatever the rope metadata) with `edit` applied.
std::string rope_synth_file(const std::string& name, const std::string& arch,
                            void (*edit)(SynthParams&)) {
  SynthParams p;
  p.arch = arch;
  p.n_embd = 256;
  p.n_layer = 2;
  p.n_head = 4;
  p.n_head_kv = 2;
  p.n_ff = 512;
  p.n_vocab = 384;
  p.dtype = DType::kQ8_0;
  p.seed = 11;
  if (arch == "gpt-oss") {
    p.n_expert = 4;
    p.n_expert_used = 2;
    p.n_ff_exp = 256;
    p.n_swa = 5;
  }
  if (edit != nullptr) edit(p);
  return testing::synth_file("rope_" + name, p);
}

Result<std::unique_ptr<Model>> open_with_rope(const std::string& path, const RopeOverrides& o) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Model> m, Model::open(path));
  STRATA_RETURN_IF_ERROR(m->override_rope(o));
  return m;
}

// Every logit row of 24 greedy steps after a 40-token prompt (positions far enough for linear
// scaling and YaRN's ramp over 64 positions to move the logits), bytewise.
std::vector<uint8_t> greedy_logits_of(Result<std::unique_ptr<Model>> model) {
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  if (!model.is_ok()) return {};
  std::vector<std::unique_ptr<Device>> devices;
  CpuDeviceOptions co;
  co.n_threads = 2;
  devices.push_back(cpu_device_new(co));
  auto engine = Engine::create(std::move(model).value(), std::move(devices), EngineOptions{});
  EXPECT_TRUE(engine.is_ok()) << engine.status().message();
  ContextParams cp;
  cp.n_ctx = 128;
  cp.n_seq = 1;
  auto ctx = Context::create(**engine, cp);
  EXPECT_TRUE(ctx.is_ok()) << ctx.status().message();
  std::vector<uint8_t> out;
  Batch b;
  for (int32_t i = 0; i < 40; ++i) b.add(3 + (i * 37) % 300, i, 0, i == 39);
  for (int step = 0; step < 24; ++step) {
    const Status st = (*ctx)->decode(b);
    EXPECT_TRUE(st.is_ok()) << st.message();
    if (!st.is_ok()) return out;
    const float* l = (*ctx)->logits(0);
    const auto* bytes = reinterpret_cast<const uint8_t*>(l);
    out.insert(out.end(), bytes, bytes + 4 * (*ctx)->n_vocab());
    const int32_t next = argmax(l, (*ctx)->n_vocab());
    b.clear();
    b.add(next, (*ctx)->seq_len(0), 0, true);
  }
  return out;
}

std::vector<uint8_t> rope_greedy_logits(const std::string& path, const RopeOverrides& o) {
  return greedy_logits_of(open_with_rope(path, o));
}

struct RopeCase {
  const char* name;
  const char* arch;
  void (*file)(SynthParams&);  // the metadata that says what the flags say
  void (*base)(SynthParams&);  // the file the flags are given with (null: no rope metadata)
  RopeOverrides flags;
};

void PrintTo(const RopeCase& c, std::ostream* os) { *os << c.name; }

RopeOverrides yarn_4x_flags() {
  RopeOverrides o;
  o.type = RopeScaling::kYarn;
  o.scale = 4;
  o.yarn_orig_ctx = 64;
  return o;
}

std::vector<RopeCase> rope_cases() {
  std::vector<RopeCase> c;
  c.push_back({"yarn", "qwen2",
               [](SynthParams& p) {
                 p.rope_scaling = "yarn";
                 p.rope_factor = 4;
                 p.rope_orig_ctx = 64;
               },
               nullptr, yarn_4x_flags()});
  RopeOverrides scale2;
  scale2.scale = 2;
  c.push_back({"linear_scale", "llama",
               [](SynthParams& p) {
                 p.rope_scaling = "linear";
                 p.rope_factor = 2;
               },
               nullptr, scale2});
  RopeOverrides freq_half;
  freq_half.freq_scale = 0.5f;
  c.push_back({"linear_freq_scale", "llama",
               [](SynthParams& p) {
                 p.rope_scaling = "linear";
                 p.rope_factor = 2;
               },
               nullptr, freq_half});
  RopeOverrides base;
  base.freq_base = 50000;
  c.push_back({"base", "llama", [](SynthParams& p) { p.rope_freq_base = 50000; }, nullptr, base});
  // `none` undoes a file's scaling: the plain file is the oracle.
  RopeOverrides none;
  none.type = RopeScaling::kNone;
  c.push_back({"none", "llama", nullptr,
               [](SynthParams& p) {
                 p.rope_scaling = "linear";
                 p.rope_factor = 2;
               },
               none});
  // The YaRN flags over a YaRN file: a different original context and factor.
  RopeOverrides retune;
  retune.scale = 4;
  retune.yarn_orig_ctx = 64;
  c.push_back({"yarn_retuned", "qwen2",
               [](SynthParams& p) {
                 p.rope_scaling = "yarn";
                 p.rope_factor = 4;
                 p.rope_orig_ctx = 64;
               },
               [](SynthParams& p) {
                 p.rope_scaling = "yarn";
                 p.rope_factor = 8;
                 p.rope_orig_ctx = 32;
               },
               retune});
  return c;
}

class RopeFlags : public ::testing::TestWithParam<RopeCase> {};

TEST_P(RopeFlags, GiveTheLogitsOfTheFileThatSaysTheSame) {
  const RopeCase& c = GetParam();
  const std::string oracle = rope_synth_file(std::string(c.name) + "_oracle", c.arch, c.file);
  const std::string given = rope_synth_file(std::string(c.name) + "_given", c.arch, c.base);
  const std::vector<uint8_t> want = rope_greedy_logits(oracle, {});
  const std::vector<uint8_t> without = rope_greedy_logits(given, {});
  const std::vector<uint8_t> with = rope_greedy_logits(given, c.flags);
  ASSERT_FALSE(want.empty());
  EXPECT_NE(without, want) << "the rope settings do not move these logits: the test shows nothing";
  EXPECT_EQ(with, want);
}

INSTANTIATE_TEST_SUITE_P(Cases, RopeFlags, ::testing::ValuesIn(rope_cases()),
                         [](const ::testing::TestParamInfo<RopeCase>& i) { return i.param.name; });

// llama.cpp ropes sliding layers with the base and scale they were trained with
// (rope_freq_base_train_swa); gpt-oss's share the others', so after --rope-freq-base they keep
// the file's table as their own and only the full layers change.
TEST(RopeOverrides, SlidingLayersKeepTheirTrainedRope) {
  const std::string path = rope_synth_file("gptoss", "gpt-oss", nullptr);
  auto plain = Model::open(path);
  ASSERT_TRUE(plain.is_ok()) << plain.status().message();
  ASSERT_EQ((*plain)->hparams().rope_kind(0), 0);
  ASSERT_TRUE((*plain)->hparams().is_swa(0));
  RopeOverrides o;
  o.freq_base = 40000;
  auto moved = open_with_rope(path, o);
  ASSERT_TRUE(moved.is_ok()) << moved.status().message();
  const HParams& hp = (*moved)->hparams();
  EXPECT_EQ(hp.rope_kind(0), 1);  // layer 0 slides
  EXPECT_EQ(hp.rope_kind(1), 0);
  const auto before = (*plain)->rope_tables(128);
  const auto after = (*moved)->rope_tables(128);
  EXPECT_EQ(after[1].rate, before[0].rate);
  EXPECT_EQ(after[1].mscale, before[0].mscale);
  EXPECT_NE(after[0].rate, before[0].rate);
  EXPECT_EQ(after[0].mscale, before[0].mscale);  // YaRN's magnitude follows the scale, not the base
}

// A state saved under one rope is another model's: the fingerprint differs, so it is refused.
TEST(RopeOverrides, SavedStatesKnowTheRope) {
  const std::string path = rope_synth_file("base_given", "llama", nullptr);
  auto plain = Model::open(path);
  ASSERT_TRUE(plain.is_ok());
  RopeOverrides o;
  o.freq_base = 20000;
  auto moved = open_with_rope(path, o);
  ASSERT_TRUE(moved.is_ok());
  EXPECT_NE(seq_state_fingerprint(**plain, DType::kF16, nullptr),
            seq_state_fingerprint(**moved, DType::kF16, nullptr));
  EXPECT_EQ(seq_state_fingerprint(**plain, DType::kF16, nullptr),
            seq_state_fingerprint(**open_with_rope(path, {}), DType::kF16, nullptr));
}

TEST(RopeOverrides, WhatCannotApplyIsRefusedByName) {
  const auto refused = [](const std::string& path, const RopeOverrides& o,
                          const std::string& words) {
    auto m = open_with_rope(path, o);
    ASSERT_FALSE(m.is_ok());
    EXPECT_NE(m.status().message().find(words), std::string::npos) << m.status().message();
  };
  const std::string plain = rope_synth_file("base_given", "llama", nullptr);
  RopeOverrides ext;
  ext.yarn_ext_factor = 0.5f;
  refused(plain, ext, "the --yarn-* flags apply to YaRN, and this model's rope is linear");
  RopeOverrides both;
  both.scale = 2;
  both.freq_scale = 0.5f;
  refused(plain, both, "--rope-scale and --rope-freq-scale both set the scale");
  RopeOverrides to_yarn = yarn_4x_flags();
  to_yarn.yarn_ext_factor = 0.5f;  // with --rope-scaling yarn, the same flag is taken
  EXPECT_TRUE(open_with_rope(plain, to_yarn).is_ok());

  const std::string longrope = rope_synth_file("longrope", "phi3", [](SynthParams& p) {
    p.rope_scaling = "longrope";
    p.rope_orig_ctx = 16;
  });
  RopeOverrides type;
  type.type = RopeScaling::kYarn;
  refused(longrope, type, "LongRoPE, whose factors come from the file");
  RopeOverrides scale;
  scale.scale = 2;
  refused(longrope, scale, "LongRoPE");
  RopeOverrides lr_base;
  lr_base.freq_base = 20000;  // the base is not the factors'
  EXPECT_TRUE(open_with_rope(longrope, lr_base).is_ok());
}

// The flags' text: ranges named, llama.cpp's "from the model" values left unset.
TEST(RopeOverrides, FlagTextIsCheckedAndUnsetValuesKeepTheModels) {
  RopeOverrides o;
  EXPECT_TRUE(server::set_rope_flag(o, "--yarn-ext-factor", "-1").is_ok());
  EXPECT_TRUE(server::set_rope_flag(o, "--yarn-attn-factor", "-1.00").is_ok());
  EXPECT_TRUE(server::set_rope_flag(o, "--rope-freq-base", "0").is_ok());
  EXPECT_TRUE(server::set_rope_flag(o, "--rope-freq-scale", "0").is_ok());
  EXPECT_TRUE(server::set_rope_flag(o, "--yarn-orig-ctx", "0").is_ok());
  EXPECT_TRUE(o.empty());
  EXPECT_TRUE(server::set_rope_flag(o, "--yarn-beta-slow", "2").is_ok());
  EXPECT_EQ(o.yarn_beta_slow, 2.0f);
  EXPECT_TRUE(server::set_rope_flag(o, "--yarn-beta-slow", "-1").is_ok());  // the last one wins
  EXPECT_FALSE(o.yarn_beta_slow.has_value());
  EXPECT_FALSE(server::set_rope_flag(o, "--rope-scale", "-1").is_ok());
  EXPECT_FALSE(server::set_rope_flag(o, "--rope-freq-base", "0.5").is_ok());
  EXPECT_FALSE(server::set_rope_flag(o, "--yarn-ext-factor", "nan").is_ok());
  EXPECT_FALSE(server::set_rope_flag(o, "--rope-other", "1").is_ok());
  for (const server::RopeFlag& f : server::rope_flags()) {
    EXPECT_EQ(std::string(f.env).rfind("LLAMA_ARG_", 0), 0u) << f.name;
  }
}

// --override-kv: the same weights with the value in the file, bit for bit; and otherwise without.
void moe_4_of_8(SynthParams& p) {
  p.n_expert = 8;
  p.n_expert_used = 4;
  p.n_ff_exp = 256;
}
void moe_2_of_8(SynthParams& p) {
  moe_4_of_8(p);
  p.n_expert_used = 2;
}

TEST(KvOverrides, GiveTheLogitsOfTheFileThatSaysTheSame) {
  struct Case {
    const char* name;
    const char* arch;
    void (*given)(SynthParams&);   // the file the overrides are given with
    void (*oracle)(SynthParams&);  // the file that says what they say
    const char* overrides;
  };
  const Case cases[] = {
      {"eps", "llama", nullptr, [](SynthParams& p) { p.rms_eps = 1e-2; },
       "llama.attention.layer_norm_rms_epsilon=float:0.01"},
      // Fewer experts per token: the speed trade MoE users make.
      {"experts", "qwen3moe", moe_4_of_8, moe_2_of_8, "qwen3moe.expert_used_count=int:2"},
      // Two overrides of one key: the last wins.
      {"experts_twice", "qwen3moe", moe_4_of_8, moe_2_of_8,
       "qwen3moe.expert_used_count=int:3,qwen3moe.expert_used_count=int:2"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string given =
        rope_synth_file(std::string("kv_") + c.name + "_given", c.arch, c.given);
    const std::string oracle =
        rope_synth_file(std::string("kv_") + c.name + "_oracle", c.arch, c.oracle);
    std::vector<GgufKv> kvs;
    ASSERT_TRUE(server::add_kv_overrides(kvs, c.overrides).is_ok());
    const std::vector<uint8_t> want = greedy_logits_of(Model::open(oracle));
    ASSERT_FALSE(want.empty());
    EXPECT_NE(greedy_logits_of(Model::open(given)), want) << "the value moves nothing here";
    EXPECT_EQ(greedy_logits_of(Model::open(given, kvs)), want);
  }
}

TEST(KvOverrides, ReachTheTokenizerAndTheFingerprint) {
  const std::string path = rope_synth_file("base_given", "llama", nullptr);
  auto plain = Model::open(path);
  ASSERT_TRUE(plain.is_ok());
  ASSERT_TRUE((*plain)->tokenizer().add_bos());
  std::vector<GgufKv> kvs;
  ASSERT_TRUE(server::add_kv_overrides(kvs, "tokenizer.ggml.add_bos_token=bool:false").is_ok());
  auto no_bos = Model::open(path, kvs);
  ASSERT_TRUE(no_bos.is_ok()) << no_bos.status().message();
  EXPECT_FALSE((*no_bos)->tokenizer().add_bos());
  // A state saved with other metadata is another model's.
  EXPECT_NE(seq_state_fingerprint(**plain, DType::kF16, nullptr),
            seq_state_fingerprint(**no_bos, DType::kF16, nullptr));
}

TEST(KvOverrides, BadOnesAreRefusedByName) {
  const std::string path = rope_synth_file("base_given", "llama", nullptr);
  const auto refused = [&](const std::string& text, const std::string& words) {
    std::vector<GgufKv> kvs;
    Status s = server::add_kv_overrides(kvs, text);
    if (s.is_ok()) {
      auto m = Model::open(path, kvs);
      ASSERT_FALSE(m.is_ok()) << text;
      s = m.status();
    }
    EXPECT_NE(s.message().find(words), std::string::npos) << text << ": " << s.message();
  };
  refused("llama.block_count=str:two",
          "kv 'llama.block_count' has type string, expected an integer");
  refused("llama.block_count=int:3", "blk.2");  // the tensors of a third layer are missing
  refused("llama.expert_used_count=int:2", "expert");
  refused("general.alignment=int:64", "'general.alignment' cannot be overridden");
  refused("llama.block_count", "is not KEY=TYPE:VALUE");
  refused("=int:3", "is not KEY=TYPE:VALUE");
  refused("llama.block_count=int:3x", "llama.block_count: '3x' is not a 64-bit integer");
  refused("k=int:99999999999999999999", "is not a 64-bit integer");
  refused("k=float:inf", "is not a finite number");
  refused("k=bool:yes", "is not true or false");
  refused("k=u32:1", "type 'u32' is not one of int, float, bool, str");
  refused("llama.context_length=int:-5", "negative");
}

}  // namespace
}  // namespace strata
