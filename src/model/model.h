// A loaded model: its GGUF file (tensor data used in place), hyperparameters,
// tokenizer and the table of its weight tensors, each checked for shape and dtype.
// Weights are immutable after load and shared by every context.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "model/arch.h"
#include "model/gguf.h"
#include "model/hparams.h"
#include "model/tokenizer.h"

namespace strata {

// The tensors of one layer, by LayerTensor; null where the layer has none.
struct LayerWeights {
  std::array<const GgufTensorInfo*, kLayerTensorCount> tensors{};
  const GgufTensorInfo* operator[](LayerTensor t) const { return tensors[static_cast<size_t>(t)]; }
};

class Model {
 public:
  // Opens `path`; `overrides` replace or add metadata before anything reads it (llama.cpp's
  // --override-kv: gguf.h, GgufFile::override_kv).
  static Result<std::unique_ptr<Model>> open(const std::string& path,
                                             const std::vector<GgufKv>& overrides = {});

  const GgufFile& file() const { return file_; }
  const HParams& hparams() const { return hparams_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  // The metadata overrides the model was opened with (they are part of its identity).
  const std::vector<GgufKv>& kv_overrides() const { return kv_overrides_; }
  const GgufTensorInfo* token_embd() const { return token_embd_; }    // [n_embd, n_vocab]
  const GgufTensorInfo* output_norm() const { return output_norm_; }  // F32 [n_embd]
  const GgufTensorInfo* output() const { return output_; }  // [n_embd, n_vocab]; may be embd
  const std::vector<LayerWeights>& layers() const { return layers_; }
  // Rope frequency divisors, F32 [n_rot / 2], where the file has them: Llama 3.1's
  // rope_freqs.weight, or LongRoPE's factors for short and long contexts. Read on the host to
  // build the rope tables (model/rope.h); never placed on a device.
  const GgufTensorInfo* rope_freqs() const { return rope_freqs_; }
  const GgufTensorInfo* rope_factors_short() const { return rope_short_; }
  const GgufTensorInfo* rope_factors_long() const { return rope_long_; }
  // Whether rope runs from rate tables (a frequency tensor, YaRN or LongRoPE) instead of the
  // plain rope op (model/rope.h).
  bool rope_uses_tables() const;
  // The tables of both rope kinds (HParams::rope_kind) for sequences of up to n_ctx_seq
  // positions: LongRoPE uses its long factors past the original context, as llama.cpp does.
  std::array<RopeTable, 2> rope_tables(int64_t n_ctx_seq) const;
  // Applies llama.cpp's rope flags (apply_rope_overrides) before any context is made: the rope
  // tables, the plain rope op's parameters and the saved states' fingerprint follow.
  Status override_rope(const RopeOverrides& o) { return apply_rope_overrides(o, hparams_); }
  // Bytes of the weights of layer il (for splitting by memory) and of the rest.
  uint64_t layer_bytes(int64_t il) const;
  uint64_t total_weight_bytes() const;
  // Whether the layer tensor `t` holds one matrix per expert (its architecture's row has
  // ne2 = Dim::kExpert): a token reads n_expert_used of them, not all.
  bool per_expert(LayerTensor t) const;
  // Bytes a one-token step reads of layer il: every tensor but those per expert, of which it
  // reads the n_expert_used experts the router picks (each expert's matrix is 1 / n_expert of
  // the tensor: whole rows, so whole blocks).
  uint64_t layer_bytes_per_token(int64_t il) const;

 private:
  Model(GgufFile file, HParams hparams, Tokenizer tokenizer)
      : file_(std::move(file)), hparams_(hparams), tokenizer_(std::move(tokenizer)) {}
  Status bind_tensors();

  GgufFile file_;
  HParams hparams_;
  Tokenizer tokenizer_;
  std::vector<GgufKv> kv_overrides_;
  const GgufTensorInfo* token_embd_ = nullptr;
  const GgufTensorInfo* output_norm_ = nullptr;
  const GgufTensorInfo* output_ = nullptr;
  const GgufTensorInfo* rope_freqs_ = nullptr;
  const GgufTensorInfo* rope_short_ = nullptr;
  const GgufTensorInfo* rope_long_ = nullptr;
  std::vector<LayerWeights> layers_;
};

}  // namespace strata
