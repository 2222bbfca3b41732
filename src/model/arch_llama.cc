// llama: Llama 1/2/3, Mistral, TinyLlama, SmolLM and their fine-tunes. Pre-norm residual
// blocks of grouped-query self-attention and a SwiGLU feed-forward network, RMS norms, rope on
// pairs (2i, 2i+1). Attention biases are optional (some fine-tunes carry them).
//
// Mixtral is a llama file with llama.expert_count: every layer's FFN is then a mixture of
// n_ff-wide SwiGLU experts behind a router, the softmax of its logits over all experts taken at
// the top n_expert_used and renormalised to sum to one (llama.cpp's build for this
// architecture; it has no shared experts).
#include "model/arch_common.h"

namespace strata {
namespace {

using LT = LayerTensor;

constexpr LayerTensorSpec kLlamaTensors[] = {
    {LT::kAttnNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kNorm},
    {LT::kWq, Dim::kEmbd, Dim::kEmbdQ, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kWk, Dim::kEmbd, Dim::kEmbdKv, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kWv, Dim::kEmbd, Dim::kEmbdKv, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kBq, Dim::kEmbdQ, Dim::kOne, Dim::kOne, Presence::kOptional, TensorRole::kBias},
    {LT::kBk, Dim::kEmbdKv, Dim::kOne, Dim::kOne, Presence::kOptional, TensorRole::kBias},
    {LT::kBv, Dim::kEmbdKv, Dim::kOne, Dim::kOne, Presence::kOptional, TensorRole::kBias},
    {LT::kWo, Dim::kEmbdQ, Dim::kEmbd, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kFfnNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kNorm},
    {LT::kWGate, Dim::kEmbd, Dim::kFf, Dim::kOne, Presence::kDenseFfn, TensorRole::kWeight},
    {LT::kWUp, Dim::kEmbd, Dim::kFf, Dim::kOne, Presence::kDenseFfn, TensorRole::kWeight},
    {LT::kWDown, Dim::kFf, Dim::kEmbd, Dim::kOne, Presence::kDenseFfn, TensorRole::kWeight},
    {LT::kFfnGateInp, Dim::kEmbd, Dim::kExpert, Dim::kOne, Presence::kMoeFfn, TensorRole::kRouter},
    {LT::kWGateExps, Dim::kEmbd, Dim::kFfExp, Dim::kExpert, Presence::kMoeFfn, TensorRole::kWeight},
    {LT::kWUpExps, Dim::kEmbd, Dim::kFfExp, Dim::kExpert, Presence::kMoeFfn, TensorRole::kWeight},
    {LT::kWDownExps, Dim::kFfExp, Dim::kEmbd, Dim::kExpert, Presence::kMoeFfn, TensorRole::kWeight},
};

Status read_llama_hparams(const GgufFile&, HParams& hp) {
  hp.rope_mode = RopeMode::kNormal;
  hp.n_ff_exp = hp.n_ff;
  hp.expert_gating = MoeGating::kSoftmax;
  hp.expert_weights_norm = true;
  return Status::ok();
}

}  // namespace

extern const ArchDef kArchLlama{"llama", read_llama_hparams, kLlamaTensors,
                                build_layer_pre_norm_swiglu};

}  // namespace strata
