// gemma2: Gemma 2 (2B, 9B, 27B). Embeddings scaled by sqrt(n_embd); each half of a layer is
// norm -> block -> norm -> residual (post-attention and post-FFN norms); a GELU-gated FFN;
// attention scores and final logits soft-capped with tanh; every other layer (the even ones)
// attends to a sliding window of 4096 positions. Rope in NeoX order, tied embeddings.
#include <cmath>

#include "model/arch_common.h"

namespace strata {
namespace {

using LT = LayerTensor;

constexpr LayerTensorSpec kGemma2Tensors[] = {
    {LT::kAttnNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kNorm},
    {LT::kWq, Dim::kEmbd, Dim::kEmbdQ, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kWk, Dim::kEmbd, Dim::kEmbdKv, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kWv, Dim::kEmbd, Dim::kEmbdKv, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kWo, Dim::kEmbdQ, Dim::kEmbd, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kAttnPostNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kNorm},
    {LT::kFfnNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kNorm},
    {LT::kWGate, Dim::kEmbd, Dim::kFf, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kWUp, Dim::kEmbd, Dim::kFf, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kWDown, Dim::kFf, Dim::kEmbd, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kFfnPostNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kNorm},
};

Status read_gemma2_hparams(const GgufFile& f, HParams& hp) {
  const std::string a = hp.arch_name + ".";
  hp.rope_mode = RopeMode::kNeox;
  hp.swa_pattern = 2;
  STRATA_ASSIGN_OR_RETURN(hp.n_swa, get_dim(f, a + "attention.sliding_window", 1 << 24, 4096));
  STRATA_ASSIGN_OR_RETURN(hp.attn_softcap, get_positive(f, a + "attn_logit_softcapping", 50.0f));
  STRATA_ASSIGN_OR_RETURN(hp.final_softcap, get_positive(f, a + "final_logit_softcapping", 30.0f));
  hp.embd_scale = std::sqrt(static_cast<float>(hp.n_embd));
  hp.attn_scale = gemma_query_scale(hp, /*n_layer_27b=*/46);
  return Status::ok();
}

}  // namespace

extern const ArchDef kArchGemma2{"gemma2", read_gemma2_hparams, kGemma2Tensors, build_layer_gemma};

}  // namespace strata
