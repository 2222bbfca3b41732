// qwen3: Qwen 3 dense models. The llama block with an RMS norm over each query and key head
// before rope (NeoX order), no projection biases, and an explicit head size
// (attention.key_length) that need not be n_embd / n_head.
#include "model/arch_common.h"

namespace strata {
namespace {

using LT = LayerTensor;

constexpr LayerTensorSpec kQwen3Tensors[] = {
    {LT::kAttnNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kNorm},
    {LT::kWq, Dim::kEmbd, Dim::kEmbdQ, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kWk, Dim::kEmbd, Dim::kEmbdKv, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kWv, Dim::kEmbd, Dim::kEmbdKv, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kQNorm, Dim::kHeadDim, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kNorm},
    {LT::kKNorm, Dim::kHeadDim, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kNorm},
    {LT::kWo, Dim::kEmbdQ, Dim::kEmbd, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kFfnNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kNorm},
    {LT::kWGate, Dim::kEmbd, Dim::kFf, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kWUp, Dim::kEmbd, Dim::kFf, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kWDown, Dim::kFf, Dim::kEmbd, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
};

Status read_qwen3_hparams(const GgufFile&, HParams& hp) {
  hp.rope_mode = RopeMode::kNeox;
  return Status::ok();
}

}  // namespace

extern const ArchDef kArchQwen3{"qwen3", read_qwen3_hparams, kQwen3Tensors,
                                build_layer_pre_norm_swiglu};

}  // namespace strata
