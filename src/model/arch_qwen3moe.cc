// qwen3moe: Qwen 3 mixture-of-experts models (Qwen3-30B-A3B, Qwen3-235B-A22B). The qwen3
// block (per-head q/k RMS norms before NeoX rope, no biases, an explicit head size) whose FFN
// is a mixture of SwiGLU experts of width expert_feed_forward_length: softmax of the router
// logits over all experts, the top expert_used_count taken and renormalised to sum to one.
// No shared experts (Qwen2-MoE's ffn_*_shexp are not part of this architecture).
#include "model/arch_common.h"

namespace strata {
namespace {

using LT = LayerTensor;

constexpr LayerTensorSpec kQwen3MoeTensors[] = {
    {LT::kAttnNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kNorm},
    {LT::kWq, Dim::kEmbd, Dim::kEmbdQ, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kWk, Dim::kEmbd, Dim::kEmbdKv, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kWv, Dim::kEmbd, Dim::kEmbdKv, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kQNorm, Dim::kHeadDim, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kNorm},
    {LT::kKNorm, Dim::kHeadDim, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kNorm},
    {LT::kWo, Dim::kEmbdQ, Dim::kEmbd, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kFfnNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kNorm},
    {LT::kFfnGateInp, Dim::kEmbd, Dim::kExpert, Dim::kOne, Presence::kRequired,
     TensorRole::kRouter},
    {LT::kWGateExps, Dim::kEmbd, Dim::kFfExp, Dim::kExpert, Presence::kRequired,
     TensorRole::kWeight},
    {LT::kWUpExps, Dim::kEmbd, Dim::kFfExp, Dim::kExpert, Presence::kRequired, TensorRole::kWeight},
    {LT::kWDownExps, Dim::kFfExp, Dim::kEmbd, Dim::kExpert, Presence::kRequired,
     TensorRole::kWeight},
};

Status read_qwen3moe_hparams(const GgufFile&, HParams& hp) {
  if (hp.n_expert == 0) {
    return invalid_argument(
        "qwen3moe.expert_count is missing or 0: a qwen3moe model has experts (with "
        "qwen3moe.expert_used_count of them per token)");
  }
  hp.rope_mode = RopeMode::kNeox;
  // llama.cpp's default when expert_feed_forward_length is absent.
  hp.n_ff_exp = hp.n_ff / hp.n_expert_used;
  hp.expert_gating = MoeGating::kSoftmax;
  hp.expert_weights_norm = true;
  return Status::ok();
}

}  // namespace

extern const ArchDef kArchQwen3Moe{"qwen3moe", read_qwen3moe_hparams, kQwen3MoeTensors,
                                   build_layer_pre_norm_swiglu};

}  // namespace strata
