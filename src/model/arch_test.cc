#include "model/arch.h"

#include <gtest/gtest.h>

#include <filesystem>
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

// A synthetic model of every architecture loads, and each layer binds exactly the tensors
// its table requires (the generator writes those and no optional ones).
TEST(Arch, EverySyntheticModelBindsItsRequiredTensors) {
  for (const ArchDef* a : arch_all()) {
    SynthParams p;
    p.arch = std::string(a->name);
    p.n_embd = 64;
    p.n_head = 4;
    p.n_head_kv = 2;
    p.n_ff = 96;
    p.n_vocab = 300;
    auto m = Model::open(testing::synth_file("arch_" + p.arch, p));
    ASSERT_TRUE(m.is_ok()) << a->name << ": " << m.status().message();
    const Model& model = *m.value();
    EXPECT_EQ(model.hparams().arch, a);
    for (int64_t il = 0; il < model.hparams().n_layer; ++il) {
      const LayerWeights& l = model.layers()[static_cast<size_t>(il)];
      uint64_t bytes = 0;
      for (const LayerTensorSpec& s : a->layer_tensors) {
        const GgufTensorInfo* t = l[s.id];
        EXPECT_EQ(t != nullptr, s.required) << a->name << " " << layer_tensor_name(s.id);
        if (t == nullptr) continue;
        EXPECT_EQ(t->name,
                  "blk." + std::to_string(il) + "." + std::string(layer_tensor_name(s.id)));
        bytes += t->size_bytes;
      }
      EXPECT_EQ(model.layer_bytes(il), bytes);
    }
  }
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
