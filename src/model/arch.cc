#include "model/arch.h"

#include <cmath>

#include "core/check.h"
#include "model/arch_common.h"

namespace strata {

extern const ArchDef kArchLlama;
extern const ArchDef kArchQwen2;
extern const ArchDef kArchQwen3;
extern const ArchDef kArchPhi3;
extern const ArchDef kArchGemma2;
extern const ArchDef kArchGemma3;
extern const ArchDef kArchQwen3Moe;
extern const ArchDef kArchGptOss;

namespace {

// Every architecture strata runs; adding one is a file and a line here.
const ArchDef* const kArchs[] = {&kArchLlama,  &kArchQwen2,  &kArchQwen3,    &kArchPhi3,
                                 &kArchGemma2, &kArchGemma3, &kArchQwen3Moe, &kArchGptOss};

// The GGUF name of every LayerTensor, in enum order.
struct LayerTensorName {
  LayerTensor id;
  std::string_view name;
};
constexpr LayerTensorName kLayerTensorNames[] = {
    {LayerTensor::kAttnNorm, "attn_norm.weight"},
    {LayerTensor::kWq, "attn_q.weight"},
    {LayerTensor::kWk, "attn_k.weight"},
    {LayerTensor::kWv, "attn_v.weight"},
    {LayerTensor::kBq, "attn_q.bias"},
    {LayerTensor::kBk, "attn_k.bias"},
    {LayerTensor::kBv, "attn_v.bias"},
    {LayerTensor::kQNorm, "attn_q_norm.weight"},
    {LayerTensor::kKNorm, "attn_k_norm.weight"},
    {LayerTensor::kWo, "attn_output.weight"},
    {LayerTensor::kFfnNorm, "ffn_norm.weight"},
    {LayerTensor::kWGate, "ffn_gate.weight"},
    {LayerTensor::kWUp, "ffn_up.weight"},
    {LayerTensor::kWDown, "ffn_down.weight"},
    {LayerTensor::kWqkv, "attn_qkv.weight"},
    {LayerTensor::kAttnPostNorm, "post_attention_norm.weight"},
    {LayerTensor::kFfnPostNorm, "post_ffw_norm.weight"},
    {LayerTensor::kFfnGateInp, "ffn_gate_inp.weight"},
    {LayerTensor::kWGateExps, "ffn_gate_exps.weight"},
    {LayerTensor::kWUpExps, "ffn_up_exps.weight"},
    {LayerTensor::kWDownExps, "ffn_down_exps.weight"},
    {LayerTensor::kBo, "attn_output.bias"},
    {LayerTensor::kAttnSinks, "attn_sinks.weight"},
    {LayerTensor::kFfnGateInpB, "ffn_gate_inp.bias"},
    {LayerTensor::kBGateExps, "ffn_gate_exps.bias"},
    {LayerTensor::kBUpExps, "ffn_up_exps.bias"},
    {LayerTensor::kBDownExps, "ffn_down_exps.bias"},
};
constexpr bool names_in_enum_order() {
  for (size_t i = 0; i < std::size(kLayerTensorNames); ++i) {
    if (static_cast<size_t>(kLayerTensorNames[i].id) != i) return false;
  }
  return std::size(kLayerTensorNames) == kLayerTensorCount;
}
static_assert(names_in_enum_order(), "one name per LayerTensor, in enum order");

}  // namespace

std::string_view layer_tensor_name(LayerTensor t) {
  const size_t i = static_cast<size_t>(t);
  STRATA_CHECK(i < kLayerTensorCount, "LayerTensor value outside the table");
  return kLayerTensorNames[i].name;
}

std::vector<int64_t> dim_parts(Dim d, const HParams& hp) {
  if (d == Dim::kQkv) return {hp.n_embd_q(), hp.n_embd_kv(), hp.n_embd_kv()};
  if (d == Dim::kFf2) return {hp.n_ff, hp.n_ff};
  return {dim_value(d, hp)};
}

int64_t dim_value(Dim d, const HParams& hp) {
  switch (d) {
    case Dim::kOne:
      return 1;
    case Dim::kEmbd:
      return hp.n_embd;
    case Dim::kEmbdQ:
      return hp.n_embd_q();
    case Dim::kEmbdKv:
      return hp.n_embd_kv();
    case Dim::kHeadDim:
      return hp.head_dim;
    case Dim::kFf:
      return hp.n_ff;
    case Dim::kQkv:
      return hp.n_embd_q() + 2 * hp.n_embd_kv();
    case Dim::kFf2:
      return 2 * hp.n_ff;
    case Dim::kExpert:
      return hp.n_expert;
    case Dim::kFfExp:
      return hp.n_ff_exp;
    case Dim::kHead:
      return hp.n_head;
  }
  STRATA_CHECK(false, "Dim value outside the enum");
  return 0;
}

bool spec_applies(const LayerTensorSpec& s, const HParams& hp) {
  if (s.presence == Presence::kDenseFfn) return hp.n_expert == 0;
  if (s.presence == Presence::kMoeFfn) return hp.n_expert > 0;
  return true;
}

bool spec_required(const LayerTensorSpec& s, const HParams& hp) {
  return s.presence != Presence::kOptional && spec_applies(s, hp);
}

std::span<const ArchDef* const> arch_all() { return kArchs; }

const ArchDef* arch_find(std::string_view name) {
  for (const ArchDef* a : kArchs) {
    if (a->name == name) return a;
  }
  return nullptr;
}

std::string arch_names() {
  std::string s;
  for (const ArchDef* a : kArchs) s += (s.empty() ? "" : ", ") + std::string(a->name);
  return s;
}

int32_t build_layer_pre_norm_swiglu(LayerGraph& g, const LayerWeights& l, int32_t x, int32_t dst) {
  using LT = LayerTensor;
  const int32_t attn = g.self_attention(l, g.rms_norm(x, l[LT::kAttnNorm]));
  const int32_t x_attn = g.add(x, attn);
  // A layer with a router has experts (Mixtral's llama layers, qwen3moe's).
  const int32_t h = g.rms_norm(x_attn, l[LT::kFfnNorm]);
  const int32_t ffn = l[LT::kFfnGateInp] != nullptr ? g.ffn_moe(l, h) : g.ffn_swiglu(l, h);
  return g.add(x_attn, ffn, dst);
}

int32_t build_layer_gemma(LayerGraph& g, const LayerWeights& l, int32_t x, int32_t dst) {
  using LT = LayerTensor;
  const int32_t attn = g.self_attention(l, g.rms_norm(x, l[LT::kAttnNorm]));
  const int32_t x_attn = g.add(x, g.rms_norm(attn, l[LT::kAttnPostNorm]));
  const int32_t ffn = g.ffn_geglu(l, g.rms_norm(x_attn, l[LT::kFfnNorm]));
  return g.add(x_attn, g.rms_norm(ffn, l[LT::kFfnPostNorm]), dst);
}

float gemma_query_scale(const HParams& hp, int64_t n_layer_27b) {
  const int64_t d = hp.n_layer == n_layer_27b ? hp.n_embd / hp.n_head : hp.head_dim;
  return 1.0f / std::sqrt(static_cast<float>(d));
}

}  // namespace strata
