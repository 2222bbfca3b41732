// llama: Llama 1/2/3, Mistral, TinyLlama, SmolLM and their fine-tunes. Pre-norm residual
// blocks of grouped-query self-attention and a SwiGLU feed-forward network, RMS norms, rope on
// pairs (2i, 2i+1). Attention biases are optional (some fine-tunes carry them).
#include "model/arch_common.h"

namespace strata {
namespace {

using LT = LayerTensor;

constexpr LayerTensorSpec kLlamaTensors[] = {
    {LT::kAttnNorm, Dim::kEmbd, Dim::kOne, true, TensorRole::kNorm},
    {LT::kWq, Dim::kEmbd, Dim::kEmbdQ, true, TensorRole::kWeight},
    {LT::kWk, Dim::kEmbd, Dim::kEmbdKv, true, TensorRole::kWeight},
    {LT::kWv, Dim::kEmbd, Dim::kEmbdKv, true, TensorRole::kWeight},
    {LT::kBq, Dim::kEmbdQ, Dim::kOne, false, TensorRole::kBias},
    {LT::kBk, Dim::kEmbdKv, Dim::kOne, false, TensorRole::kBias},
    {LT::kBv, Dim::kEmbdKv, Dim::kOne, false, TensorRole::kBias},
    {LT::kWo, Dim::kEmbdQ, Dim::kEmbd, true, TensorRole::kWeight},
    {LT::kFfnNorm, Dim::kEmbd, Dim::kOne, true, TensorRole::kNorm},
    {LT::kWGate, Dim::kEmbd, Dim::kFf, true, TensorRole::kWeight},
    {LT::kWUp, Dim::kEmbd, Dim::kFf, true, TensorRole::kWeight},
    {LT::kWDown, Dim::kFf, Dim::kEmbd, true, TensorRole::kWeight},
};

Status read_llama_hparams(const GgufFile&, HParams& hp) {
  hp.rope_mode = RopeMode::kNormal;
  return Status::ok();
}

}  // namespace

extern const ArchDef kArchLlama{"llama", read_llama_hparams, kLlamaTensors,
                                build_layer_pre_norm_swiglu};

}  // namespace strata
