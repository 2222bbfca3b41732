#include "model/arch.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <set>

#include "model/model.h"
#include "model/synth.h"
#include "unit/synth_file.h"

namespace strata {
namespace {

TEST(Arch, NamesAndLayerTablesHaveNoDuplicates) {
  std::set<std::string_view> names;
  for (const ArchDef* a : arch_all()) {
    EXPECT_TRUE(names.insert(a->name).second) << a->name;
    EXPECT_EQ(arch_find(a->name), a);
    std::set<LayerTensor> ids;
    for (const LayerTensorSpec& s : a->layer_tensors) {
      EXPECT_TRUE(ids.insert(s.id).second) << a->name << ": " << layer_tensor_name(s.id);
    }
  }
  EXPECT_EQ(arch_find("mamba"), nullptr);
}

// A synthetic model of every architecture (with experts where its table has them, and
// llama also with them: Mixtral-style) loads, and each layer binds exactly the tensors its
// table requires for that model (the generator writes those and no optional ones).
TEST(Arch, EverySyntheticModelBindsItsRequiredTensors) {
  struct Case {
    const ArchDef* arch;
    int64_t n_expert;
  };
  std::vector<Case> cases;
  for (const ArchDef* a : arch_all()) {
    bool experts = false, dense = true;
    for (const LayerTensorSpec& s : a->layer_tensors) {
      experts = experts || s.ne2 == Dim::kExpert;
      dense = dense && !(s.ne2 == Dim::kExpert && s.presence == Presence::kRequired);
    }
    if (dense) cases.push_back({a, 0});
    if (experts) cases.push_back({a, 4});
  }
  ASSERT_GE(cases.size(), arch_all().size() + 1) << "llama, dense and with experts";
  for (const Case& c : cases) {
    SynthParams p;
    p.arch = std::string(c.arch->name);
    p.n_embd = 64;
    p.n_head = 4;
    p.n_head_kv = 2;
    p.n_ff = 96;
    p.n_vocab = 300;
    p.n_expert = c.n_expert;
    p.n_expert_used = c.n_expert > 0 ? 2 : 0;
    const std::string label = p.arch + (c.n_expert > 0 ? "_experts" : "");
    auto m = Model::open(testing::synth_file("arch_" + label, p));
    ASSERT_TRUE(m.is_ok()) << label << ": " << m.status().message();
    const Model& model = *m.value();
    EXPECT_EQ(model.hparams().arch, c.arch);
    EXPECT_EQ(model.hparams().n_expert, c.n_expert);
    for (int64_t il = 0; il < model.hparams().n_layer; ++il) {
      const LayerWeights& l = model.layers()[static_cast<size_t>(il)];
      uint64_t bytes = 0, per_token = 0;
      for (const LayerTensorSpec& s : c.arch->layer_tensors) {
        const GgufTensorInfo* t = l[s.id];
        EXPECT_EQ(t != nullptr, spec_required(s, model.hparams()))
            << label << " " << layer_tensor_name(s.id);
        if (t == nullptr) continue;
        EXPECT_EQ(t->name,
                  "blk." + std::to_string(il) + "." + std::string(layer_tensor_name(s.id)));
        EXPECT_EQ(t->ne[2], s.ne2 == Dim::kExpert ? c.n_expert : 1) << t->name;
        bytes += t->size_bytes;
        // F32: a token reads 2 of the 4 experts' matrices.
        per_token += s.ne2 == Dim::kExpert ? 4 * t->ne[0] * t->ne[1] * 2 : t->size_bytes;
      }
      EXPECT_EQ(model.layer_bytes(il), bytes);
      EXPECT_EQ(model.layer_bytes_per_token(il), per_token) << label;
    }
  }
}

// A model file with `edit` applied to the metadata of the synthetic model `p`.
Result<std::unique_ptr<Model>> open_edited(const SynthParams& p,
                                           const std::function<void(GgufWriter&)>& edit) {
  auto w = synth_model(p);
  if (!w.is_ok()) return w.status();
  edit(w.value());
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("strata_arch_edited_" + std::to_string(::getpid()) + ".gguf"))
                               .string();
  STRATA_RETURN_IF_ERROR(w.value().write(path));
  auto m = Model::open(path);
  std::filesystem::remove(path);
  return m;
}

SynthParams small_moe(const std::string& arch) {
  SynthParams p;
  p.arch = arch;
  p.n_embd = 64;
  p.n_head = 4;
  p.n_head_kv = 2;
  p.n_ff = 96;
  p.n_vocab = 300;
  p.n_expert = 4;
  p.n_expert_used = 2;
  p.n_ff_exp = arch == "llama" ? 0 : 32;
  return p;
}

// The experts' hyperparameters: the architectures' defaults (llama.cpp's for qwen3moe and
// Mixtral: softmax over all experts, the top k renormalised, no scale), and the keys that
// override them.
TEST(ArchExperts, DefaultsAndKeysThatOverrideThem) {
  for (const std::string arch : {"qwen3moe", "llama"}) {
    auto m = open_edited(small_moe(arch), [](GgufWriter&) {});
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    const HParams& hp = (*m)->hparams();
    EXPECT_EQ(hp.n_expert, 4);
    EXPECT_EQ(hp.n_expert_used, 2);
    EXPECT_EQ(hp.n_ff_exp, arch == "llama" ? 96 : 32) << arch;
    EXPECT_EQ(hp.expert_gating, MoeGating::kSoftmax);
    EXPECT_TRUE(hp.expert_weights_norm);
    EXPECT_EQ(hp.expert_weights_scale, 1.0f);
  }
  auto m = open_edited(small_moe("qwen3moe"), [](GgufWriter& w) {
    w.set_u32("qwen3moe.expert_gating_func", 2);
    w.set_bool("qwen3moe.expert_weights_norm", false);
    w.set_f32("qwen3moe.expert_weights_scale", 2.5f);
  });
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ((*m)->hparams().expert_gating, MoeGating::kSigmoid);
  EXPECT_FALSE((*m)->hparams().expert_weights_norm);
  EXPECT_EQ((*m)->hparams().expert_weights_scale, 2.5f);
}

// gpt-oss: llama.cpp's defaults for what its files leave out (softmax over the selected
// experts, not renormalised; a window on every other layer; the clamped SwiGLU's constants;
// scores by 1 / sqrt(n_rot)), and the keys that override them.
TEST(ArchExperts, GptOssDefaultsAndKeys) {
  {
    auto m = open_edited(small_moe("gpt-oss"), [](GgufWriter&) {});
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    const HParams& hp = (*m)->hparams();
    EXPECT_EQ(hp.expert_gating, MoeGating::kSoftmaxSelected);
    EXPECT_FALSE(hp.expert_weights_norm);
    EXPECT_EQ(hp.n_ff_exp, 32);
    EXPECT_EQ(hp.n_swa, 128);
    EXPECT_EQ(hp.swa_pattern, 2);
    EXPECT_TRUE(hp.is_swa(0));
    EXPECT_FALSE(hp.is_swa(1));
    EXPECT_EQ(hp.rope_mode, RopeMode::kNeox);
    EXPECT_EQ(hp.rope_scaling.type, RopeScaling::kYarn);
    EXPECT_EQ(hp.rope_freq_scale, 1.0f / 32);
    EXPECT_EQ(hp.rope_kind(0), 0);  // the sliding layers rope as the others
    EXPECT_EQ(hp.swiglu_oai_alpha, 1.702f);
    EXPECT_EQ(hp.swiglu_oai_limit, 7.0f);
    EXPECT_EQ(hp.attn_scale, 1.0f / std::sqrt(16.0f));
    EXPECT_TRUE((*m)->rope_uses_tables());
  }
  auto m = open_edited(small_moe("gpt-oss"), [](GgufWriter& w) {
    w.set_u32("gpt-oss.attention.sliding_window_pattern", 4);
    w.set_f32("gpt-oss.rope.freq_base_swa", 10000.0f);
  });
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  const HParams& hp = (*m)->hparams();
  EXPECT_TRUE(hp.is_swa(2));
  EXPECT_FALSE(hp.is_swa(3));
  EXPECT_EQ(hp.rope_kind(0), 1);
  EXPECT_EQ(hp.rope_base(1), 10000.0f);
  EXPECT_EQ(hp.rope_scale(1), 1.0f / 32);
}

// Bad expert metadata is refused with the key, the value and the limit; a file whose expert
// tensors do not have the shape the metadata implies is refused naming the tensor.
TEST(ArchExperts, BadMetadataAndShapesAreErrorsNamingTheKey) {
  struct Case {
    std::string arch;
    std::function<void(GgufWriter&)> edit;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      {"qwen3moe",
       [](GgufWriter& w) { w.set_u32("qwen3moe.expert_used_count", 0); },
       {"qwen3moe.expert_used_count = 0", "[1, qwen3moe.expert_count = 4]"}},
      {"qwen3moe",
       [](GgufWriter& w) { w.set_u32("qwen3moe.expert_used_count", 5); },
       {"qwen3moe.expert_used_count = 5", "[1, qwen3moe.expert_count = 4]"}},
      {"qwen3moe",
       [](GgufWriter& w) { w.set_u32("qwen3moe.expert_count", 600); },
       {"qwen3moe.expert_count = 600", "512"}},
      {"qwen3moe",
       [](GgufWriter& w) {
         w.set_u32("qwen3moe.expert_count", 0);
         w.set_u32("qwen3moe.expert_used_count", 0);
       },
       {"qwen3moe.expert_count is missing or 0"}},
      {"llama",
       [](GgufWriter& w) { w.set_u32("llama.expert_count", 0); },
       {"llama.expert_used_count = 2", "llama.expert_count is absent or 0"}},
      {"qwen3moe",
       [](GgufWriter& w) { w.set_u32("qwen3moe.expert_gating_func", 7); },
       {"qwen3moe.expert_gating_func = 7", "not supported"}},
      {"qwen3moe",
       [](GgufWriter& w) { w.set_f32("qwen3moe.expert_weights_scale", -1.0f); },
       {"qwen3moe.expert_weights_scale", "[0, 1000]"}},
      {"qwen3moe",
       [](GgufWriter& w) { w.set_u32("qwen3moe.expert_feed_forward_length", 0); },
       {"qwen3moe.expert_feed_forward_length = 0", "[1, "}},
      {"qwen3moe",
       [](GgufWriter& w) { w.set_u32("qwen3moe.expert_feed_forward_length", 64); },
       {"blk.0.ffn_gate_exps.weight", "[64, 32, 4, 1]", "expected [64, 64, 4]"}},
      {"llama",
       [](GgufWriter& w) { w.set_u32("llama.expert_count", 3); },
       {"blk.0.ffn_gate_inp.weight", "[64, 4, 1, 1]", "expected [64, 3]"}},
      {"gpt-oss",
       [](GgufWriter& w) { w.set_u32("gpt-oss.attention.sliding_window", 0); },
       {"gpt-oss.attention.sliding_window = 0", "[1, "}},
      {"gpt-oss",
       [](GgufWriter& w) { w.set_string("gpt-oss.attention.sliding_window_pattern", "x"); },
       {"gpt-oss.attention.sliding_window_pattern"}},
      {"gpt-oss",
       [](GgufWriter& w) { w.set_u32("gpt-oss.expert_count", 5); },
       {"blk.0.ffn_gate_inp.weight", "expected [64, 5]"}},
      {"gpt-oss",
       [](GgufWriter& w) {
         w.set_u32("gpt-oss.expert_count", 0);
         w.set_u32("gpt-oss.expert_used_count", 0);
       },
       {"gpt-oss.expert_count is missing or 0"}},
  };
  for (const Case& c : cases) {
    auto m = open_edited(small_moe(c.arch), c.edit);
    ASSERT_FALSE(m.is_ok()) << c.want[0];
    for (const std::string& w : c.want) {
      EXPECT_NE(m.status().message().find(w), std::string::npos)
          << "want '" << w << "' in: " << m.status().message();
    }
  }
  // An architecture without experts refuses a file that says it has some.
  SynthParams dense = small_moe("qwen2");
  dense.n_expert = dense.n_expert_used = dense.n_ff_exp = 0;
  auto m = open_edited(dense, [](GgufWriter& w) {
    w.set_u32("qwen2.expert_count", 4);
    w.set_u32("qwen2.expert_used_count", 2);
  });
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("qwen2.expert_count = 4"), std::string::npos)
      << m.status().message();
}

TEST(Arch, UnknownArchitectureIsAnErrorListingTheKnownOnes) {
  SynthParams p;
  p.n_vocab = 300;
  auto w = synth_model(p);
  ASSERT_TRUE(w.is_ok());
  w.value().set_string("general.architecture", "mamba");
  const std::string path =
      (std::filesystem::temp_directory_path() / "strata_arch_mamba.gguf").string();
  ASSERT_TRUE(w.value().write(path).is_ok());
  auto m = Model::open(path);
  std::filesystem::remove(path);
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("'mamba'"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find(arch_names()), std::string::npos) << m.status().message();
}

}  // namespace
}  // namespace strata
