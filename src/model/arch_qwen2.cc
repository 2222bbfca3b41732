// qwen2: Qwen 1.5 / 2 / 2.5 and the DeepSeek-R1 Qwen distills. The llama block with biases
// on the q/k/v projections and rope on pairs (i, i + n_rot/2) (NeoX order).
#include "model/arch_common.h"

namespace strata {
namespace {

using LT = LayerTensor;

constexpr LayerTensorSpec kQwen2Tensors[] = {
    {LT::kAttnNorm, Dim::kEmbd, Dim::kOne, true, TensorRole::kNorm},
    {LT::kWq, Dim::kEmbd, Dim::kEmbdQ, true, TensorRole::kWeight},
    {LT::kWk, Dim::kEmbd, Dim::kEmbdKv, true, TensorRole::kWeight},
    {LT::kWv, Dim::kEmbd, Dim::kEmbdKv, true, TensorRole::kWeight},
    {LT::kBq, Dim::kEmbdQ, Dim::kOne, true, TensorRole::kBias},
    {LT::kBk, Dim::kEmbdKv, Dim::kOne, true, TensorRole::kBias},
    {LT::kBv, Dim::kEmbdKv, Dim::kOne, true, TensorRole::kBias},
    {LT::kWo, Dim::kEmbdQ, Dim::kEmbd, true, TensorRole::kWeight},
    {LT::kFfnNorm, Dim::kEmbd, Dim::kOne, true, TensorRole::kNorm},
    {LT::kWGate, Dim::kEmbd, Dim::kFf, true, TensorRole::kWeight},
    {LT::kWUp, Dim::kEmbd, Dim::kFf, true, TensorRole::kWeight},
    {LT::kWDown, Dim::kFf, Dim::kEmbd, true, TensorRole::kWeight},
};

Status read_qwen2_hparams(const GgufFile&, HParams& hp) {
  hp.rope_mode = RopeMode::kNeox;
  return Status::ok();
}

}  // namespace

extern const ArchDef kArchQwen2{"qwen2", read_qwen2_hparams, kQwen2Tensors,
                                build_layer_pre_norm_swiglu};

}  // namespace strata
