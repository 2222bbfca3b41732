// qwen2: Qwen 1.5 / 2 / 2.5 and the DeepSeek-R1 Qwen distills. The llama block with biases
// on the q/k/v projections and rope on pairs (i, i + n_rot/2) (NeoX order).
#include "model/arch_common.h"

namespace strata {
namespace {

using LT = LayerTensor;

constexpr LayerTensorSpec kQwen2Tensors[] = {
    {LT::kAttnNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kNorm},
    {LT::kWq, Dim::kEmbd, Dim::kEmbdQ, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kWk, Dim::kEmbd, Dim::kEmbdKv, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kWv, Dim::kEmbd, Dim::kEmbdKv, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kBq, Dim::kEmbdQ, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kBias},
    {LT::kBk, Dim::kEmbdKv, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kBias},
    {LT::kBv, Dim::kEmbdKv, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kBias},
    {LT::kWo, Dim::kEmbdQ, Dim::kEmbd, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kFfnNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kNorm},
    {LT::kWGate, Dim::kEmbd, Dim::kFf, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kWUp, Dim::kEmbd, Dim::kFf, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kWDown, Dim::kFf, Dim::kEmbd, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
};

Status read_qwen2_hparams(const GgufFile&, HParams& hp) {
  hp.rope_mode = RopeMode::kNeox;
  return Status::ok();
}

}  // namespace

extern const ArchDef kArchQwen2{"qwen2", read_qwen2_hparams, kQwen2Tensors,
                                build_layer_pre_norm_swiglu};

}  // namespace strata
