#include "model/arch.h"

#include "core/check.h"
#include "model/arch_common.h"

namespace strata {

extern const ArchDef kArchLlama;
extern const ArchDef kArchQwen2;
extern const ArchDef kArchQwen3;

namespace {

// Every architecture strata runs; adding one is a file and a line here.
const ArchDef* const kArchs[] = {&kArchLlama, &kArchQwen2, &kArchQwen3};

// GGUF names in LayerTensor order.
constexpr std::string_view kLayerTensorNames[] = {
    "attn_norm.weight",   "attn_q.weight",      "attn_k.weight",   "attn_v.weight",
    "attn_q.bias",        "attn_k.bias",        "attn_v.bias",     "attn_q_norm.weight",
    "attn_k_norm.weight", "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight",
    "ffn_up.weight",      "ffn_down.weight",
};
static_assert(std::size(kLayerTensorNames) == kLayerTensorCount);

}  // namespace

std::string_view layer_tensor_name(LayerTensor t) {
  const size_t i = static_cast<size_t>(t);
  STRATA_CHECK(i < kLayerTensorCount, "LayerTensor value outside the table");
  return kLayerTensorNames[i];
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
  }
  STRATA_CHECK(false, "Dim value outside the enum");
  return 0;
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
  const int32_t ffn = g.ffn_swiglu(l, g.rms_norm(x_attn, l[LT::kFfnNorm]));
  return g.add(x_attn, ffn, dst);
}

}  // namespace strata
