// gpt-oss: OpenAI's open-weight mixtures of experts (gpt-oss-20b, gpt-oss-120b), as llama.cpp's
// LLM_ARCH_OPENAI_MOE runs them. The pre-norm block of grouped-query attention and a mixture
// of experts, with:
// - biases on the q, k, v and output projections, on the router and on every expert's gate,
//   up and down rows (per expert: row e of ffn_*_exps.bias);
// - attention sinks: a learned logit per query head that joins each softmax's denominator;
// - sliding-window attention (attention.sliding_window, 128 in the released models) on the
//   even layers (attention.sliding_window_pattern, default 2), full attention on the odd;
// - NeoX rope with YaRN scaling (factor 32 over 4096 positions in the released models);
// - the router's top experts weighted by a softmax over the selected logits only, not
//   renormalised (llama.cpp's SOFTMAX_WEIGHT gating);
// - the experts' clamped SwiGLU, swiglu_oai with alpha 1.702 and limit 7, the constants
//   llama.cpp's graph uses (they are not GGUF keys);
// - the FFN's input norm named post_attention_norm.
// Chat uses OpenAI's "harmony" format, which the file's own Jinja template renders.
#include <cmath>

#include "model/arch_common.h"

namespace strata {
namespace {

using LT = LayerTensor;

constexpr LayerTensorSpec kGptOssTensors[] = {
    {LT::kAttnNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kNorm},
    {LT::kWq, Dim::kEmbd, Dim::kEmbdQ, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kWk, Dim::kEmbd, Dim::kEmbdKv, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kWv, Dim::kEmbd, Dim::kEmbdKv, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kBq, Dim::kEmbdQ, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kBias},
    {LT::kBk, Dim::kEmbdKv, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kBias},
    {LT::kBv, Dim::kEmbdKv, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kBias},
    {LT::kAttnSinks, Dim::kHead, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kBias},
    {LT::kWo, Dim::kEmbdQ, Dim::kEmbd, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kBo, Dim::kEmbd, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kBias},
    {LT::kAttnPostNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kNorm},
    {LT::kFfnGateInp, Dim::kEmbd, Dim::kExpert, Dim::kOne, Presence::kRequired,
     TensorRole::kRouter},
    {LT::kFfnGateInpB, Dim::kExpert, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kBias},
    {LT::kWGateExps, Dim::kEmbd, Dim::kFfExp, Dim::kExpert, Presence::kRequired,
     TensorRole::kWeight},
    {LT::kBGateExps, Dim::kFfExp, Dim::kExpert, Dim::kOne, Presence::kRequired, TensorRole::kBias},
    {LT::kWUpExps, Dim::kEmbd, Dim::kFfExp, Dim::kExpert, Presence::kRequired, TensorRole::kWeight},
    {LT::kBUpExps, Dim::kFfExp, Dim::kExpert, Dim::kOne, Presence::kRequired, TensorRole::kBias},
    {LT::kWDownExps, Dim::kFfExp, Dim::kEmbd, Dim::kExpert, Presence::kRequired,
     TensorRole::kWeight},
    {LT::kBDownExps, Dim::kEmbd, Dim::kExpert, Dim::kOne, Presence::kRequired, TensorRole::kBias},
};

Status read_gptoss_hparams(const GgufFile& f, HParams& hp) {
  const std::string a = hp.arch_name + ".";
  if (hp.n_expert == 0) {
    return invalid_argument(a + "expert_count is missing or 0: a gpt-oss model has experts (with " +
                            a + "expert_used_count of them per token)");
  }
  hp.rope_mode = RopeMode::kNeox;
  // No default: llama.cpp requires the key.
  STRATA_ASSIGN_OR_RETURN(hp.n_swa, get_dim(f, a + "attention.sliding_window", 1 << 24));
  STRATA_ASSIGN_OR_RETURN(hp.swa_pattern,
                          get_dim(f, a + "attention.sliding_window_pattern", 4096, 2));
  // The sliding layers keep the others' rope scaling, with their own base when the file has one.
  if (f.find(a + "rope.freq_base_swa") != nullptr) {
    STRATA_ASSIGN_OR_RETURN(hp.rope_freq_base_swa, get_positive(f, a + "rope.freq_base_swa", 0));
    hp.rope_freq_scale_swa = hp.rope_freq_scale;
  }
  // llama.cpp scales the scores by 1 / sqrt(n_rot), the head size in the released models.
  hp.attn_scale = 1.0f / std::sqrt(static_cast<float>(hp.n_rot));
  hp.n_ff_exp = 0;  // expert_feed_forward_length is required
  hp.expert_gating = MoeGating::kSoftmaxSelected;
  hp.expert_weights_norm = false;
  hp.swiglu_oai_alpha = 1.702f;
  hp.swiglu_oai_limit = 7.0f;
  return Status::ok();
}

// x + attn(norm(x)), then + moe(post_attention_norm(.)).
int32_t build_layer_gptoss(LayerGraph& g, const LayerWeights& l, int32_t x, int32_t dst) {
  const int32_t attn = g.self_attention(l, g.rms_norm(x, l[LT::kAttnNorm]));
  const int32_t x_attn = g.add(x, attn);
  const int32_t ffn = g.ffn_moe(l, g.rms_norm(x_attn, l[LT::kAttnPostNorm]));
  return g.add(x_attn, ffn, dst);
}

}  // namespace

extern const ArchDef kArchGptOss{"gpt-oss", read_gptoss_hparams, kGptOssTensors,
                                 build_layer_gptoss};

}  // namespace strata
