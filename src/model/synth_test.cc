#include "model/synth.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/quant.h"
#include "model/gguf.h"

namespace strata {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes synth_bytes(const SynthParams& p) {
  Result<GgufWriter> w = synth_model(p);
  EXPECT_TRUE(w.is_ok()) << w.status().message();
  if (!w.is_ok()) return {};
  Result<Bytes> b = w->serialize();
  EXPECT_TRUE(b.is_ok()) << b.status().message();
  return b.is_ok() ? std::move(b).value() : Bytes{};
}

GgufFile synth_parse(const SynthParams& p) {
  Result<GgufFile> f = GgufFile::parse(std::make_shared<const Bytes>(synth_bytes(p)));
  if (!f.is_ok()) {
    ADD_FAILURE() << f.status().message();
    std::abort();
  }
  return std::move(f).value();
}

SynthParams small(const std::string& arch, DType dtype = DType::kF32) {
  SynthParams p;
  p.arch = arch;
  p.n_embd = 256;
  p.n_layer = 2;
  p.n_head = 4;
  p.n_head_kv = 2;
  p.n_ff = 512;
  p.n_vocab = 600;
  p.dtype = dtype;
  return p;
}

void expect_shape(const GgufFile& f, const std::string& name, DType dtype,
                  std::vector<int64_t> ne) {
  const GgufTensorInfo* t = f.tensor(name);
  ASSERT_NE(t, nullptr) << name << " missing";
  EXPECT_EQ(t->dtype, dtype) << name;
  ASSERT_EQ(t->n_dims, static_cast<int>(ne.size())) << name;
  for (size_t d = 0; d < ne.size(); ++d) EXPECT_EQ(t->ne[d], ne[d]) << name << " ne[" << d << "]";
}

std::vector<float> dequantized(const GgufFile& f, const std::string& name) {
  const GgufTensorInfo* t = f.tensor(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return {};
  std::vector<float> out(static_cast<size_t>(t->n_elements()));
  const size_t row_bytes = dtype_row_bytes(t->dtype, t->ne[0]);
  for (int64_t r = 0; r < t->n_elements() / t->ne[0]; ++r) {
    dequantize_row(t->dtype, f.tensor_data(*t) + r * row_bytes, out.data() + r * t->ne[0],
                   t->ne[0]);
  }
  return out;
}

void mean_std(const std::vector<float>& v, double* mean, double* std) {
  double s = 0, s2 = 0;
  for (float x : v) s += x;
  *mean = s / v.size();
  for (float x : v) s2 += (x - *mean) * (x - *mean);
  *std = std::sqrt(s2 / v.size());
}

TEST(Synth, SameParamsSameBytes) {
  const SynthParams p = small("llama", DType::kQ8_0);
  const Bytes a = synth_bytes(p);
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, synth_bytes(p));
  SynthParams q = p;
  q.seed = 2;
  const Bytes b = synth_bytes(q);
  EXPECT_EQ(a.size(), b.size());
  EXPECT_NE(a, b);
}

TEST(Synth, WriteMatchesSerialisedBytes) {
  const SynthParams p = small("qwen2", DType::kF16);
  const std::string path = ::testing::TempDir() + "/synth_write_test.gguf";
  ASSERT_TRUE(synth_write(p, path).is_ok());
  std::ifstream in(path, std::ios::binary);
  const Bytes on_disk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(on_disk, synth_bytes(p));
  Result<GgufFile> f = GgufFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  std::remove(path.c_str());
}

TEST(Synth, LlamaMetadataAndTensors) {
  const SynthParams p = small("llama");
  const GgufFile f = synth_parse(p);
  EXPECT_EQ(f.get_string("general.architecture").value(), "llama");
  EXPECT_EQ(f.get_uint("general.file_type").value(), 0u);
  EXPECT_EQ(f.get_uint("llama.context_length").value(), 2048u);
  EXPECT_EQ(f.get_uint("llama.embedding_length").value(), 256u);
  EXPECT_EQ(f.get_uint("llama.block_count").value(), 2u);
  EXPECT_EQ(f.get_uint("llama.feed_forward_length").value(), 512u);
  EXPECT_EQ(f.get_uint("llama.attention.head_count").value(), 4u);
  EXPECT_EQ(f.get_uint("llama.attention.head_count_kv").value(), 2u);
  EXPECT_EQ(f.get_uint("llama.attention.key_length").value(), 64u);
  EXPECT_EQ(f.get_uint("llama.attention.value_length").value(), 64u);
  EXPECT_FLOAT_EQ(f.get_float("llama.attention.layer_norm_rms_epsilon").value(), 1e-5f);
  EXPECT_FLOAT_EQ(f.get_float("llama.rope.freq_base").value(), 10000.0f);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model").value(), "llama");
  EXPECT_EQ(f.get_uint("tokenizer.ggml.bos_token_id").value(), 1u);
  EXPECT_EQ(f.get_uint("tokenizer.ggml.eos_token_id").value(), 2u);
  EXPECT_TRUE(f.get_bool("tokenizer.ggml.add_bos_token").value());

  EXPECT_EQ(f.tensors().size(), 1u + 2u * 9u + 2u);
  expect_shape(f, "token_embd.weight", DType::kF32, {256, 600});
  expect_shape(f, "output_norm.weight", DType::kF32, {256});
  expect_shape(f, "output.weight", DType::kF32, {256, 600});
  for (const std::string b : {"blk.0.", "blk.1."}) {
    expect_shape(f, b + "attn_norm.weight", DType::kF32, {256});
    expect_shape(f, b + "attn_q.weight", DType::kF32, {256, 256});
    expect_shape(f, b + "attn_k.weight", DType::kF32, {256, 128});
    expect_shape(f, b + "attn_v.weight", DType::kF32, {256, 128});
    expect_shape(f, b + "attn_output.weight", DType::kF32, {256, 256});
    expect_shape(f, b + "ffn_norm.weight", DType::kF32, {256});
    expect_shape(f, b + "ffn_gate.weight", DType::kF32, {256, 512});
    expect_shape(f, b + "ffn_up.weight", DType::kF32, {256, 512});
    expect_shape(f, b + "ffn_down.weight", DType::kF32, {512, 256});
  }
  EXPECT_EQ(f.tensor("blk.0.attn_q.bias"), nullptr);
  EXPECT_EQ(f.tensor("blk.2.attn_q.weight"), nullptr);
}

TEST(Synth, Qwen2HasBiasesAndChatMl) {
  const GgufFile f = synth_parse(small("qwen2"));
  expect_shape(f, "blk.1.attn_q.bias", DType::kF32, {256});
  expect_shape(f, "blk.1.attn_k.bias", DType::kF32, {128});
  expect_shape(f, "blk.1.attn_v.bias", DType::kF32, {128});
  EXPECT_EQ(f.tensor("blk.0.attn_q_norm.weight"), nullptr);
  EXPECT_FLOAT_EQ(f.get_float("qwen2.rope.freq_base").value(), 1e6f);
  EXPECT_FLOAT_EQ(f.get_float("qwen2.attention.layer_norm_rms_epsilon").value(), 1e-6f);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model").value(), "gpt2");
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre").value(), "qwen2");
  EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_bos_token").value());
  const std::string tmpl = f.get_string("tokenizer.chat_template").value();
  EXPECT_NE(tmpl.find("<|im_start|>"), std::string::npos);
  EXPECT_NE(tmpl.find("add_generation_prompt"), std::string::npos);
}

TEST(Synth, Qwen3HasHeadNormsAndCustomHeadDim) {
  SynthParams p = small("qwen3");
  p.head_dim = 128;  // as Qwen3 does: n_head * head_dim != n_embd
  const GgufFile f = synth_parse(p);
  expect_shape(f, "blk.0.attn_q_norm.weight", DType::kF32, {128});
  expect_shape(f, "blk.0.attn_k_norm.weight", DType::kF32, {128});
  expect_shape(f, "blk.0.attn_q.weight", DType::kF32, {256, 512});
  expect_shape(f, "blk.0.attn_k.weight", DType::kF32, {256, 256});
  expect_shape(f, "blk.0.attn_output.weight", DType::kF32, {512, 256});
  EXPECT_EQ(f.tensor("blk.0.attn_q.bias"), nullptr);
  EXPECT_EQ(f.get_uint("qwen3.attention.key_length").value(), 128u);
}

TEST(Synth, TiedOutputOmitsOutputWeight) {
  SynthParams p = small("llama");
  p.tied_output = true;
  const GgufFile f = synth_parse(p);
  EXPECT_EQ(f.tensor("output.weight"), nullptr);
  EXPECT_NE(f.tensor("token_embd.weight"), nullptr);
}

// Every dtype with kernels: the file parses, the metadata names the type, and the weights
// have the distribution asked for (mean 0, std 1/sqrt(fan_in); norms near 1), which shows
// the blocks were written in the layout the dequantiser reads.
TEST(Synth, EveryDtypeParsesWithExpectedStatistics) {
  const std::pair<DType, uint32_t> cases[] = {
      {DType::kF32, 0},   {DType::kF16, 1},   {DType::kBF16, 32},   {DType::kQ8_0, 7},
      {DType::kQ4_0, 2},  {DType::kQ4_K, 14}, {DType::kQ5_K, 16},   {DType::kQ6_K, 18},
      {DType::kQ4_1, 3},  {DType::kQ5_0, 8},  {DType::kQ5_1, 9},    {DType::kIQ4_NL, 25},
      {DType::kQ2_K, 10}, {DType::kQ3_K, 11}, {DType::kIQ4_XS, 30}, {DType::kMXFP4, 38}};
  for (const auto& [dtype, ftype] : cases) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const GgufFile f = synth_parse(small("llama", dtype));
    EXPECT_EQ(f.get_uint("general.file_type").value(), ftype);
    EXPECT_EQ(f.find("general.quantization_version") != nullptr, dtype_is_quantized(dtype));
    expect_shape(f, "blk.0.ffn_down.weight", dtype, {512, 256});
    expect_shape(f, "blk.0.ffn_norm.weight", DType::kF32, {256});
    double mean = 0, std = 0;
    mean_std(dequantized(f, "blk.0.ffn_gate.weight"), &mean, &std);
    // 131072 draws: the sample std is within 1%; 4-bit rounding adds up to ~10% of noise.
    EXPECT_NEAR(mean, 0.0, 0.01 * 0.0625);
    EXPECT_NEAR(std, 0.0625, 0.12 * 0.0625);
    mean_std(dequantized(f, "blk.0.ffn_down.weight"), &mean, &std);
    EXPECT_NEAR(std, 1.0 / std::sqrt(512.0), 0.12 / std::sqrt(512.0));
    mean_std(dequantized(f, "blk.1.attn_norm.weight"), &mean, &std);
    EXPECT_NEAR(mean, 1.0, 0.03);
    EXPECT_NEAR(std, 0.1, 0.02);
  }
}

TEST(Synth, SpmVocabIsCompleteAndConsistent) {
  const GgufFile f = synth_parse(small("llama"));
  const std::vector<std::string> tokens = f.get_strings("tokenizer.ggml.tokens").value();
  const std::vector<float> scores = f.get_f32_array("tokenizer.ggml.scores").value();
  const std::vector<int32_t> types = f.get_i32_array("tokenizer.ggml.token_type").value();
  ASSERT_EQ(tokens.size(), 600u);
  ASSERT_EQ(scores.size(), 600u);
  ASSERT_EQ(types.size(), 600u);
  EXPECT_EQ(tokens[0], "<unk>");
  EXPECT_EQ(types[0], 2);
  EXPECT_EQ(tokens[1], "<s>");
  EXPECT_EQ(types[1], 3);
  EXPECT_EQ(tokens[2], "</s>");
  EXPECT_EQ(types[2], 3);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    EXPECT_EQ(tokens[3 + b], name);
    EXPECT_EQ(types[3 + b], 6);
  }
  const std::set<std::string> unique(tokens.begin(), tokens.end());
  EXPECT_EQ(unique.size(), tokens.size()) << "duplicate pieces";
  const std::string space = "\xe2\x96\x81";
  EXPECT_EQ(unique.count(space), 1u);
  EXPECT_EQ(unique.count(space + "the"), 1u);
  EXPECT_EQ(unique.count("e"), 1u);
  for (size_t i = 259; i < tokens.size(); ++i) {
    EXPECT_EQ(types[i], 1) << tokens[i];
    if (i > 259) {
      EXPECT_LT(scores[i], scores[i - 1]) << tokens[i];
    }
    // Every multi-character piece is reachable by adding one ASCII character to a piece.
    const std::string& t = tokens[i];
    if (t.size() > 1 && t != space) {
      EXPECT_EQ(unique.count(t.substr(0, t.size() - 1)), 1u) << t;
    }
  }
}

TEST(Synth, BpeVocabIsCompleteAndConsistent) {
  const GgufFile f = synth_parse(small("qwen2"));
  const std::vector<std::string> tokens = f.get_strings("tokenizer.ggml.tokens").value();
  const std::vector<std::string> merges = f.get_strings("tokenizer.ggml.merges").value();
  const std::vector<int32_t> types = f.get_i32_array("tokenizer.ggml.token_type").value();
  ASSERT_EQ(tokens.size(), 600u);
  ASSERT_EQ(types.size(), 600u);
  EXPECT_EQ(f.find("tokenizer.ggml.scores"), nullptr);
  // GPT-2's byte map: '!' is the first token, space is U+0120 'Ġ', newline U+010A 'Ċ'.
  EXPECT_EQ(tokens[0], "!");
  const std::set<std::string> bytes(tokens.begin(), tokens.begin() + 256);
  EXPECT_EQ(bytes.size(), 256u);
  EXPECT_EQ(bytes.count("\xc4\xa0"), 1u);
  EXPECT_EQ(bytes.count("\xc4\x8a"), 1u);
  EXPECT_EQ(bytes.count("a"), 1u);
  EXPECT_EQ(bytes.count(" "), 0u);
  EXPECT_EQ(tokens[597], "<|endoftext|>");
  EXPECT_EQ(tokens[598], "<|im_start|>");
  EXPECT_EQ(tokens[599], "<|im_end|>");
  for (int i = 597; i < 600; ++i) EXPECT_EQ(types[i], 3);
  EXPECT_EQ(f.get_uint("tokenizer.ggml.eos_token_id").value(), 599u);
  EXPECT_EQ(f.get_uint("tokenizer.ggml.bos_token_id").value(), 597u);
  const std::set<std::string> unique(tokens.begin(), tokens.end());
  EXPECT_EQ(unique.size(), tokens.size()) << "duplicate tokens";
  EXPECT_EQ(unique.count("\xc4\xa0the"), 1u);
  EXPECT_EQ(merges.size(), 600u - 256u - 3u);
  for (const std::string& m : merges) {
    const size_t sp = m.find(' ');
    ASSERT_NE(sp, std::string::npos) << m;
    const std::string left = m.substr(0, sp), right = m.substr(sp + 1);
    EXPECT_EQ(unique.count(left), 1u) << m;
    EXPECT_EQ(unique.count(right), 1u) << m;
    EXPECT_EQ(unique.count(left + right), 1u) << m;
  }
}

TEST(Synth, LargeVocabFillsWithUniquePieces) {
  SynthParams p = small("llama");
  p.n_embd = 32;
  p.n_head = 2;
  p.n_head_kv = 1;
  p.n_ff = 32;
  p.n_layer = 1;
  p.n_vocab = 32000;
  const GgufFile f = synth_parse(p);
  const std::vector<std::string> tokens = f.get_strings("tokenizer.ggml.tokens").value();
  ASSERT_EQ(tokens.size(), 32000u);
  EXPECT_EQ(std::set<std::string>(tokens.begin(), tokens.end()).size(), 32000u);
}

void expect_invalid(const SynthParams& p, std::vector<std::string> words) {
  Status s = synth_validate(p);
  ASSERT_FALSE(s.is_ok());
  for (const std::string& w : words) {
    EXPECT_NE(s.message().find(w), std::string::npos) << s.message() << " lacks " << w;
  }
  EXPECT_FALSE(synth_model(p).is_ok());
}

TEST(Synth, ValidationNamesTheProblem) {
  SynthParams p = small("llama", DType::kQ8_0);
  p.n_ff = 100;
  expect_invalid(p, {"ffn_down", "100", "32"});
  p = small("llama", DType::kQ4_K);
  p.n_embd = 384;
  p.n_head = 6;
  p.n_head_kv = 2;
  expect_invalid(p, {"token_embd", "384", "256"});
  p = small("llama");
  p.n_embd = 250;
  expect_invalid(p, {"n_embd", "250", "n_head"});
  p = small("llama");
  p.n_head_kv = 3;
  expect_invalid(p, {"n_head", "n_head_kv", "3"});
  p = small("llama");
  p.n_vocab = 100;
  expect_invalid(p, {"n_vocab", "100", "260"});
  p = small("llama", DType::kIQ2_XXS);
  expect_invalid(p, {"iq2_xxs", "kernels", "q4_K", "iq4_xs"});
  p = small("gpt9");
  expect_invalid(p, {"gpt9"});
  p = small("llama");
  p.head_dim = 33;
  expect_invalid(p, {"head_dim", "33"});
  p = small("llama");
  p.n_layer = 0;
  expect_invalid(p, {"n_layer", "0"});
  p = small("qwen2");
  p.n_expert = 4;
  p.n_expert_used = 2;
  expect_invalid(p, {"qwen2", "no experts", "4"});
  p = small("qwen3moe");
  expect_invalid(p, {"n_expert", "0", "1..512"});
  p.n_expert = 4;
  p.n_expert_used = 5;
  expect_invalid(p, {"n_expert_used", "5", "1..4"});
  p = small("llama");
  p.n_expert = 4;
  p.n_expert_used = 2;
  p.n_ff_exp = 64;
  expect_invalid(p, {"n_ff_exp", "64", "n_ff"});
  p = small("qwen3moe", DType::kQ8_0);
  p.n_expert = 4;
  p.n_expert_used = 2;
  p.n_ff_exp = 40;
  expect_invalid(p, {"ffn_down_exps", "40", "32"});
}

// Experts: the metadata the converters write, the router in F32 whatever the dtype, and the
// experts' matrices as one 3-D tensor each, quantised row by row.
TEST(Synth, ExpertsMetadataAndTensors) {
  SynthParams p = small("qwen3moe", DType::kQ8_0);
  p.n_expert = 8;
  p.n_expert_used = 2;
  p.n_ff_exp = 64;
  const GgufFile file = synth_parse(p);
  const GgufFile* f = &file;
  EXPECT_EQ(f->get_uint("qwen3moe.expert_count").value(), 8u);
  EXPECT_EQ(f->get_uint("qwen3moe.expert_used_count").value(), 2u);
  EXPECT_EQ(f->get_uint("qwen3moe.expert_feed_forward_length").value(), 64u);
  const GgufTensorInfo* router = f->tensor("blk.0.ffn_gate_inp.weight");
  ASSERT_NE(router, nullptr);
  EXPECT_EQ(router->dtype, DType::kF32);
  const GgufTensorInfo* down = f->tensor("blk.1.ffn_down_exps.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->dtype, DType::kQ8_0);
  EXPECT_EQ(down->n_dims, 3);
  EXPECT_EQ(down->ne[0], 64);
  EXPECT_EQ(down->ne[1], p.n_embd);
  EXPECT_EQ(down->ne[2], 8);
  EXPECT_EQ(f->tensor("blk.0.ffn_gate.weight"), nullptr);
  // Mixtral-style: llama with experts of width n_ff, and no expert_feed_forward_length.
  p = small("llama");
  p.n_expert = 4;
  p.n_expert_used = 2;
  const GgufFile mixtral = synth_parse(p);
  const GgufFile* g = &mixtral;
  EXPECT_EQ(g->find("llama.expert_feed_forward_length"), nullptr);
  const GgufTensorInfo* up = g->tensor("blk.0.ffn_up_exps.weight");
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(up->ne[1], p.n_ff);
  EXPECT_EQ(up->ne[2], 4);
  EXPECT_EQ(g->tensor("blk.0.ffn_up.weight"), nullptr);
}

// gpt-oss as released, scaled down: its rope (base 150000, YaRN factor 32 over 4096 positions)
// and window (128) unless told otherwise, biases everywhere (F32, the experts' one row per
// expert), a sink per head, mxfp4 experts beside q8_0 matrices (file type "MXFP4 MoE"), and the
// harmony tokens with <|return|> as EOS.
TEST(Synth, GptOssMetadataAndTensors) {
  SynthParams p = small("gpt-oss", DType::kQ8_0);
  p.n_expert = 8;
  p.n_expert_used = 4;
  p.n_ff_exp = 64;
  p.expert_dtype = DType::kMXFP4;
  const GgufFile f = synth_parse(p);
  EXPECT_EQ(f.get_uint("general.file_type").value(), 38u);
  EXPECT_EQ(f.get_uint("gpt-oss.attention.sliding_window").value(), 128u);
  EXPECT_EQ(f.get_string("gpt-oss.rope.scaling.type").value(), "yarn");
  EXPECT_EQ(f.get_float("gpt-oss.rope.scaling.factor").value(), 32.0);
  EXPECT_EQ(f.get_uint("gpt-oss.rope.scaling.original_context_length").value(), 4096u);
  EXPECT_EQ(f.get_float("gpt-oss.rope.freq_base").value(), 150000.0);
  EXPECT_EQ(f.get_uint("gpt-oss.expert_feed_forward_length").value(), 64u);
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre").value(), "gpt-4o");
  const std::vector<std::string> tokens = f.get_strings("tokenizer.ggml.tokens").value();
  EXPECT_EQ(tokens[f.get_uint("tokenizer.ggml.eos_token_id").value()], "<|return|>");
  EXPECT_NE(f.get_string("tokenizer.chat_template").value().find("<|channel|>"), std::string::npos);
  expect_shape(f, "blk.0.attn_sinks.weight", DType::kF32, {4});
  expect_shape(f, "blk.0.attn_output.bias", DType::kF32, {256});
  expect_shape(f, "blk.1.post_attention_norm.weight", DType::kF32, {256});
  expect_shape(f, "blk.0.ffn_gate_inp.weight", DType::kF32, {256, 8});
  expect_shape(f, "blk.0.ffn_gate_inp.bias", DType::kF32, {8});
  expect_shape(f, "blk.1.ffn_gate_exps.weight", DType::kMXFP4, {256, 64, 8});
  expect_shape(f, "blk.1.ffn_gate_exps.bias", DType::kF32, {64, 8});
  expect_shape(f, "blk.1.ffn_up_exps.bias", DType::kF32, {64, 8});
  expect_shape(f, "blk.1.ffn_down_exps.weight", DType::kMXFP4, {64, 256, 8});
  expect_shape(f, "blk.1.ffn_down_exps.bias", DType::kF32, {256, 8});
  expect_shape(f, "blk.0.attn_q.weight", DType::kQ8_0, {256, 256});
  EXPECT_EQ(f.tensor("blk.0.ffn_norm.weight"), nullptr);
  // Sinks are logits of the scores' size, not small biases.
  const std::vector<float> sinks = dequantized(f, "blk.0.attn_sinks.weight");
  EXPECT_GT(
      *std::max_element(sinks.begin(), sinks.end()) - *std::min_element(sinks.begin(), sinks.end()),
      0.5f);
  // Rope options given win over the defaults.
  p.rope_scaling = "none";
  p.n_swa = 16;
  const GgufFile plain = synth_parse(p);
  EXPECT_EQ(plain.get_string("gpt-oss.rope.scaling.type").value(), "none");
  EXPECT_EQ(plain.find("gpt-oss.rope.scaling.factor"), nullptr);
  EXPECT_EQ(plain.get_uint("gpt-oss.attention.sliding_window").value(), 16u);
  // Expert dtypes are checked like the others.
  p.n_ff_exp = 48;
  Status s = synth_validate(p);
  EXPECT_NE(s.message().find("ffn_down_exps.weight"), std::string::npos) << s.message();
  p.n_ff_exp = 64;
  p.n_vocab = 264;
  s = synth_validate(p);
  EXPECT_NE(s.message().find("n_vocab 264"), std::string::npos) << s.message();
}

// The command line: gen writes a file the reader accepts, info reads it, bad flags fail.
TEST(Synth, CommandGenAndInfo) {
  const std::string path = ::testing::TempDir() + "/synth_cmd_test.gguf";
  const std::string bin = STRATA_BINARY;
  const std::string gen = bin + " gguf gen -o " + path +
                          " --arch qwen2 --n-layer 1 --n-embd 64 --n-head 2 --n-head-kv 1"
                          " --n-ff 128 --n-vocab 300 --dtype q8_0 --seed 7 --tied > /dev/null";
  ASSERT_EQ(std::system(gen.c_str()), 0) << gen;
  Result<GgufFile> f = GgufFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->get_string("general.architecture").value(), "qwen2");
  EXPECT_EQ(f->tensor("output.weight"), nullptr);
  expect_shape(*f, "blk.0.ffn_down.weight", DType::kQ8_0, {128, 64});
  EXPECT_EQ(f->get_strings("tokenizer.ggml.tokens").value().size(), 300u);
  EXPECT_EQ(std::system((bin + " gguf info " + path + " > /dev/null").c_str()), 0);
  EXPECT_NE(std::system((bin + " gguf gen -o " + path + " --dtype iq2_xxs 2> /dev/null").c_str()),
            0);
  EXPECT_NE(std::system((bin + " gguf info " + path + ".absent 2> /dev/null").c_str()), 0);
  std::remove(path.c_str());
}

// A scripted model says its script and stops, whatever the prompt, greedy and sampled (its
// logits single out one token by sqrt(n_embd) ~ 18, so even temperature 0.8 keeps to it).
TEST(Synth, ScriptedModelSaysItsScript) {
  const std::string dir = ::testing::TempDir();
  const std::string script = dir + "/synth_script.json";
  const std::vector<std::string> pieces = {"<tool_call>", "\n{\"name\": ", "\"f\", ",
                                           "\"arguments\": {}}", "\n</tool_call>"};
  {
    std::ofstream out(script);
    out << R"(["<tool_call>", "\n{\"name\": ", "\"f\", ", "\"arguments\": {}}", "\n</tool_call>"])";
  }
  std::string expected;
  for (const std::string& p : pieces) expected += p;
  const std::string path = dir + "/synth_script.gguf";
  const std::string bin = STRATA_BINARY;
  const std::string gen = bin + " gguf gen -o " + path + " --script " + script +
                          " --n-embd 320 --n-vocab 300 --n-layer 2 --n-ff 64 > /dev/null";
  ASSERT_EQ(std::system(gen.c_str()), 0) << gen;
  for (const std::string prompt : {"hello", "What is the weather in Paris?", "x"}) {
    for (const char* temp : {"0", "0.8"}) {
      const std::string cmd =
          bin + " run -m " + path + " -p '" + prompt + "' -n 40 --temp " + temp + " 2>/dev/null";
      FILE* f = popen(cmd.c_str(), "r");
      ASSERT_NE(f, nullptr);
      std::string out;
      char buf[256];
      for (size_t n; (n = fread(buf, 1, sizeof(buf), f)) > 0;) out.append(buf, n);
      EXPECT_EQ(pclose(f), 0);
      // The prompt, the script, and the newline run prints after an EOS.
      EXPECT_EQ(out, prompt + expected + "\n") << cmd;
    }
  }
  SynthParams bad;
  bad.script = {"a", "b"};
  EXPECT_NE(synth_validate(bad).message().find("n_embd >= n_vocab"), std::string::npos);
  bad.n_embd = 512;
  bad.script.push_back("");
  EXPECT_NE(synth_validate(bad).message().find("piece 2 is empty"), std::string::npos);
  bad.script.pop_back();
  bad.arch = "qwen2";
  EXPECT_FALSE(synth_validate(bad).is_ok());
  EXPECT_NE(
      std::system((bin + " gguf gen -o " + path + " --script " + path + " 2>/dev/null").c_str()),
      0);
  std::remove(path.c_str());
  std::remove(script.c_str());
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// gguf gen --mix gives every tensor the type llama-quantize gave it in the files llama.cpp wrote
// for the same shape (n_embd 256, 2 layers, n_ff 768, rope_freqs aside).
TEST(SynthMix, TypesOfEveryTensorAsLlamaQuantize) {
  const std::string dir = std::string(STRATA_SHARED_DIR) + "/models/llamacpp-written";
  for (const auto& [mix, file] : {std::pair<std::string, std::string>{"q4_K_M", "Q4_K_M"},
                                  {"q5_K_M", "Q5_K_M"},
                                  {"q3_K_M", "Q3_K_M"}}) {
    const std::string path = dir + "/llama31-" + file + ".gguf";
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
    auto theirs = GgufFile::open(path);
    ASSERT_TRUE(theirs.is_ok()) << theirs.status().message();
    SynthParams p;
    p.n_embd = 256;
    p.n_layer = 2;
    p.n_head = 4;
    p.n_head_kv = 2;
    p.n_ff = 768;
    p.n_vocab = 512;
    p.mix = mix;
    const std::string ours_path =
        (std::filesystem::temp_directory_path() / ("strata_mix_" + mix + ".gguf")).string();
    ASSERT_TRUE(synth_write(p, ours_path).is_ok());
    auto ours = GgufFile::open(ours_path);
    std::filesystem::remove(ours_path);
    ASSERT_TRUE(ours.is_ok()) << ours.status().message();
    int compared = 0;
    for (const GgufTensorInfo& t : theirs->tensors()) {
      if (t.name == "rope_freqs.weight") continue;
      const GgufTensorInfo* o = ours->tensor(t.name);
      ASSERT_NE(o, nullptr) << mix << ": " << t.name << " missing";
      EXPECT_EQ(dtype_name(o->dtype), dtype_name(t.dtype)) << mix << ": " << t.name;
      ++compared;
    }
    EXPECT_EQ(compared, 21) << mix;
  }
}

}  // namespace
}  // namespace strata
