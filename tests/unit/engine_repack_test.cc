// Repacking (EngineOptions::repack): copied weights of the types with a rows-in-lanes layout
// (q2_K, q3_K, q4_K, q5_K, q6_K, iq4_xs, q8_0, q4_0, mxfp4) go in it
// (core/rows16.h) on a device that offers the layout, the CPU's or a worker's, and every logit is
// the bytes of the file's layout: dense and mixture-of-experts models, q4_K_M's mix, tied
// embeddings, a split.
#include <gtest/gtest.h>

#include "core/dtype_traits.h"
#include "core/isa.h"
#include "core/rows16.h"
#include "engine/engine.h"
#include "rpc/remote_backend.h"
#include "unit/engine_testing.h"
#include "unit/synth_file.h"

namespace strata {
namespace {

using testing::cpu_device;
using testing::greedy_logits;

struct RepackRun {
  std::vector<uint8_t> logits;
  int layouts = 0;         // weights placed in a device layout, over all stages
  int k_quant = 0;         // weights of a type with a layout placed, over all stages
  int worker_layouts = 0;  // of `layouts`, on the worker's stage
};

// Greedy logits of the model at `path` over the CPU alone, or split with a worker, its weights
// copied and repacked or not; and what the stages hold.
RepackRun repack_run(const std::string& path, bool repack, bool split) {
  RepackRun out;
  std::unique_ptr<rpc::Worker> worker;
  std::vector<std::unique_ptr<Device>> devices;
  devices.push_back(cpu_device("CPU"));
  if (split) {
    worker = testing::start_local_worker();
    if (worker == nullptr) return out;
    rpc::ClientOptions co;
    co.endpoint = worker->address();
    co.name = "RPC0";
    auto remote = rpc::remote_device_new(co);
    EXPECT_TRUE(remote.is_ok()) << remote.status().message();
    if (!remote.is_ok()) return out;
    devices.push_back(std::move(remote).value());
  }
  auto model = Model::open(path);
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  if (!model.is_ok()) return out;
  EngineOptions eo;
  eo.use_mmap = false;
  eo.repack = repack;
  if (split) eo.split = {1, 1};
  auto engine = Engine::create(std::move(model).value(), std::move(devices), eo);
  EXPECT_TRUE(engine.is_ok()) << engine.status().message();
  if (!engine.is_ok()) return out;
  const Model& m = (*engine)->model();
  for (const Stage& s : (*engine)->stages()) {
    std::vector<const GgufTensorInfo*> tensors =
        stage_weight_tensors(m, s.layer_begin, s.layer_end, s.first, s.last);
    for (const GgufTensorInfo* t : tensors) {
      if (!rows16_layout(t->dtype)) continue;
      ++out.k_quant;
      const DType placed = s.weights->ref(t).dtype;
      if (placed != t->dtype) {
        ++out.layouts;
        if (s.device->info().name.rfind("RPC0", 0) == 0) ++out.worker_layouts;
        EXPECT_TRUE(dtype_is_layout(placed));
        EXPECT_EQ(dtype_info(placed).base, t->dtype);
        if (t == m.token_embd()) {
          EXPECT_TRUE(s.last && m.output() == t) << "an embedding that is not the output matrix";
        }
      }
    }
  }
  out.logits = greedy_logits(**engine, 3, 6);
  return out;
}

// The same logits with and without the layout; the layout used where the CPU offers it.
// The run with the layout, for the caller's own checks.
RepackRun expect_repack_same_logits(const std::string& path, bool split) {
  const RepackRun plain = repack_run(path, false, split);
  RepackRun packed = repack_run(path, true, split);
  EXPECT_FALSE(plain.logits.empty());
  EXPECT_EQ(plain.layouts, 0);
  EXPECT_EQ(packed.logits, plain.logits) << "a layout changed a logit";
  EXPECT_GT(packed.k_quant, 0);
  if (dtype_layout_pays(DType::kQ4_K_R16, isa_active())) {
    EXPECT_GT(packed.layouts, 0) << "no weight went into rows in lanes";
    // The worker (this build, this CPU) offers the layout too: the host packs what it uploads.
    if (split) {
      EXPECT_GT(packed.worker_layouts, 0) << "the worker's stage kept the file layout";
    }
  } else {
    std::fprintf(stderr, "%s: the CPU has no kernel of its own for q4_K_r16: not used\n",
                 isa_name(isa_active()));
  }
  return packed;
}

SynthParams repack_llama() {
  SynthParams p;
  p.n_embd = 256;
  p.n_layer = 2;
  p.n_head = 4;
  p.n_head_kv = 2;
  p.n_ff = 512;
  p.n_vocab = 320;
  p.dtype = DType::kQ4_K;
  p.seed = 21;
  return p;
}

TEST(EngineRepack, DenseQ4KMixGivesTheFileLayoutsLogits) {
  SynthParams p = repack_llama();
  p.mix = "q4_K_M";
  expect_repack_same_logits(testing::synth_file("repack_mix", p), false);
}

// Every type with a layout: a q3_K_M mix (q3_K, q4_K, q5_K, q6_K), q2_K, q5_K, iq4_xs, q8_0, q4_0,
// each weight of those types in its layout but the token embedding (get_rows reads its rows in
// the file's layout; the output matrix is another tensor), split over a worker for two of them.
TEST(EngineRepack, EveryTypeWithALayoutGivesTheFileLayoutsLogits) {
  struct Case {
    const char* name;
    DType dtype;
    const char* mix;
    bool split;
  };
  for (const Case& c :
       {Case{"repack_q3km", DType::kQ4_K, "q3_K_M", false},
        Case{"repack_q2k", DType::kQ2_K, "", true}, Case{"repack_q5k", DType::kQ5_K, "", false},
        Case{"repack_iq4xs", DType::kIQ4_XS, "", false}, Case{"repack_q80", DType::kQ8_0, "", true},
        Case{"repack_q80", DType::kQ8_0, "", false}, Case{"repack_q40", DType::kQ4_0, "", false}}) {
    SCOPED_TRACE(c.name);
    SynthParams p = repack_llama();
    p.dtype = c.dtype;
    p.mix = c.mix;
    const RepackRun packed = expect_repack_same_logits(testing::synth_file(c.name, p), c.split);
    if (dtype_layout_pays(DType::kQ4_K_R16, isa_active()) && !c.split) {
      EXPECT_EQ(packed.layouts, packed.k_quant - 1) << "a weight kept the file's layout";
    }
  }
}

// q8_0's layout takes rows of whole pairs of blocks: ffn_down, whose rows are n_ff = 544
// elements (17 blocks), keeps the file's layout in every layer, the other matrices take it.
TEST(EngineRepack, Q8_0RowsThatAreNotWholeUnitsKeepTheFileLayout) {
  SynthParams p = repack_llama();
  p.dtype = DType::kQ8_0;
  p.n_ff = 544;
  for (bool split : {false, true}) {
    SCOPED_TRACE(split ? "split" : "local");
    const RepackRun packed =
        expect_repack_same_logits(testing::synth_file("repack_q80_ff544", p), split);
    if (dtype_layout_pays(DType::kQ8_0_R16, isa_active()) && !split) {
      EXPECT_EQ(packed.layouts, packed.k_quant - 1 - static_cast<int>(p.n_layer));
    }
  }
}

TEST(EngineRepack, TiedEmbeddingGoesInTheLayoutForTheOutputMatrix) {
  SynthParams p = repack_llama();
  p.tied_output = true;
  const RepackRun packed = expect_repack_same_logits(testing::synth_file("repack_tied", p), false);
  // The embedding is the output matrix too: in the layout, get_rows reading its rows back;
  // every q4_K matrix with it.
  if (dtype_layout_pays(DType::kQ4_K_R16, isa_active())) {
    EXPECT_EQ(packed.layouts, packed.k_quant);
  }
}

// Split, the first stage reads the embedding's rows (file layout) and the last multiplies by it
// (the layout): each stage's copy as its use asks.
TEST(EngineRepack, TiedEmbeddingSplitOverAWorker) {
  SynthParams p = repack_llama();
  p.tied_output = true;
  expect_repack_same_logits(testing::synth_file("repack_tied", p), true);
}

// Phi-3 multiplies its fused attn_qkv in q, k and v parts: with 8-row k and v parts (head_dim 8,
// one KV head) a group would straddle two parts, so that tensor keeps the file's layout while
// the others (the fused gate/up's parts are whole groups) take the layout.
TEST(EngineRepack, AFusedTensorWhosePartsCutAGroupKeepsTheFileLayout) {
  SynthParams p = repack_llama();
  p.arch = "phi3";
  p.n_head = 32;
  p.n_head_kv = 1;
  const RepackRun packed = expect_repack_same_logits(testing::synth_file("repack_phi3", p), false);
  if (dtype_layout_pays(DType::kQ4_K_R16, isa_active())) {
    // Per layer attn_qkv stays, and the token embedding (get_rows alone reads it); attn_output,
    // ffn_up (fused), ffn_down and the output matrix go in the layout.
    EXPECT_EQ(packed.layouts, packed.k_quant - static_cast<int>(p.n_layer) - 1);
  }
}

TEST(EngineRepack, MixtureOfExpertsGivesTheFileLayoutsLogits) {
  SynthParams p = repack_llama();
  p.arch = "qwen3moe";
  p.head_dim = 64;
  p.n_expert = 8;
  p.n_expert_used = 2;
  p.n_ff_exp = 256;
  expect_repack_same_logits(testing::synth_file("repack_moe", p), false);
}

// gpt-oss as released: mxfp4 experts beside q8_0 matrices, all in rows in lanes (the experts
// one matrix at a time) but the token embedding, locally and over a worker.
TEST(EngineRepack, GptOssMxfp4ExpertsAndQ8_0GiveTheFileLayoutsLogits) {
  SynthParams p = repack_llama();
  p.arch = "gpt-oss";
  p.dtype = DType::kQ8_0;
  p.expert_dtype = DType::kMXFP4;
  p.n_expert = 8;
  p.n_expert_used = 4;
  p.n_ff_exp = 256;
  p.n_swa = 5;
  for (bool split : {false, true}) {
    SCOPED_TRACE(split ? "split" : "local");
    const RepackRun packed =
        expect_repack_same_logits(testing::synth_file("repack_gptoss", p), split);
    if (dtype_layout_pays(DType::kMXFP4_R16, isa_active()) && !split) {
      EXPECT_EQ(packed.layouts, packed.k_quant - 1);
    }
  }
}

TEST(EngineRepack, SplitOverAWorkerGivesTheFileLayoutsLogits) {
  expect_repack_same_logits(testing::synth_file("repack_split", repack_llama()), true);
}

}  // namespace
}  // namespace strata
