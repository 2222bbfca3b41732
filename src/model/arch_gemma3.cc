// gemma3: Gemma 3 text models (1B, 4B, 12B, 27B). Gemma 2's layer without soft-capping, with
// an RMS norm over each query and key head; five of every six layers attend to a sliding
// window, with their own rope (base 10000, unscaled); the others use the file's base and
// scaling (linear 8 on the larger models).
#include <cmath>

#include "model/arch_common.h"

namespace strata {
namespace {

using LT = LayerTensor;

constexpr LayerTensorSpec kGemma3Tensors[] = {
    {LT::kAttnNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kNorm},
    {LT::kWq, Dim::kEmbd, Dim::kEmbdQ, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kWk, Dim::kEmbd, Dim::kEmbdKv, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kWv, Dim::kEmbd, Dim::kEmbdKv, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kQNorm, Dim::kHeadDim, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kNorm},
    {LT::kKNorm, Dim::kHeadDim, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kNorm},
    {LT::kWo, Dim::kEmbdQ, Dim::kEmbd, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kAttnPostNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kNorm},
    {LT::kFfnNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kNorm},
    {LT::kWGate, Dim::kEmbd, Dim::kFf, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kWUp, Dim::kEmbd, Dim::kFf, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kWDown, Dim::kFf, Dim::kEmbd, Dim::kOne, Presence::kRequired, TensorRole::kWeight},
    {LT::kFfnPostNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, Presence::kRequired, TensorRole::kNorm},
};

Status read_gemma3_hparams(const GgufFile& f, HParams& hp) {
  const std::string a = hp.arch_name + ".";
  hp.rope_mode = RopeMode::kNeox;
  hp.swa_pattern = 6;
  STRATA_ASSIGN_OR_RETURN(hp.n_swa, get_dim(f, a + "attention.sliding_window", 1 << 24));
  hp.rope_freq_base_swa = 10000.0f;
  hp.rope_freq_scale_swa = 1.0f;
  hp.embd_scale = std::sqrt(static_cast<float>(hp.n_embd));
  hp.attn_scale = gemma_query_scale(hp, /*n_layer_27b=*/62);
  return Status::ok();
}

}  // namespace

extern const ArchDef kArchGemma3{"gemma3", read_gemma3_hparams, kGemma3Tensors, build_layer_gemma};

}  // namespace strata
