// phi3: Phi-3 and Phi-3.5 (mini, medium). The llama block with q, k and v fused in one
// projection (attn_qkv) and the gate and up projections fused in ffn_up (gate rows first),
// rope in NeoX order, and LongRoPE's short and long frequency factors on the 128k models.
// llama.cpp ignores Phi-3's sliding window (its GGUFs do not describe it correctly); so do we.
#include "model/arch_common.h"

namespace strata {
namespace {

using LT = LayerTensor;

constexpr LayerTensorSpec kPhi3Tensors[] = {
    {LT::kAttnNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kNorm},
    {LT::kWqkv, Dim::kEmbd, Dim::kQkv, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kWo, Dim::kEmbdQ, Dim::kEmbd, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kFfnNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kNorm},
    {LT::kWUp, Dim::kEmbd, Dim::kFf2, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kWDown, Dim::kFf, Dim::kEmbd, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
};

Status read_phi3_hparams(const GgufFile&, HParams& hp) {
  hp.rope_mode = RopeMode::kNeox;
  return Status::ok();
}

}  // namespace

extern const ArchDef kArchPhi3{"phi3", read_phi3_hparams, kPhi3Tensors,
                               build_layer_pre_norm_swiglu};

}  // namespace strata
