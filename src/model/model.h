// A loaded llama-family model: its GGUF file (tensor data used in place), hyperparameters,
// tokenizer and the table of its weight tensors, each checked for shape and dtype.
// Weights are immutable after load and shared by every context.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/gguf.h"
#include "model/hparams.h"
#include "model/tokenizer.h"

namespace strata {

struct LayerWeights {
  const GgufTensorInfo* attn_norm = nullptr;  // F32 [n_embd]
  const GgufTensorInfo* wq = nullptr;         // [n_embd, n_embd_q]
  const GgufTensorInfo* wk = nullptr;         // [n_embd, n_embd_kv]
  const GgufTensorInfo* wv = nullptr;         // [n_embd, n_embd_kv]
  const GgufTensorInfo* wo = nullptr;         // [n_embd_q, n_embd]
  const GgufTensorInfo* bq = nullptr;         // qwen2: F32 [n_embd_q]
  const GgufTensorInfo* bk = nullptr;         // qwen2: F32 [n_embd_kv]
  const GgufTensorInfo* bv = nullptr;         // qwen2: F32 [n_embd_kv]
  const GgufTensorInfo* q_norm = nullptr;     // qwen3: F32 [head_dim]
  const GgufTensorInfo* k_norm = nullptr;     // qwen3: F32 [head_dim]
  const GgufTensorInfo* ffn_norm = nullptr;   // F32 [n_embd]
  const GgufTensorInfo* w_gate = nullptr;     // [n_embd, n_ff]
  const GgufTensorInfo* w_up = nullptr;       // [n_embd, n_ff]
  const GgufTensorInfo* w_down = nullptr;     // [n_ff, n_embd]
};

class Model {
 public:
  static Result<std::unique_ptr<Model>> open(const std::string& path);

  const GgufFile& file() const { return file_; }
  const HParams& hparams() const { return hparams_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const GgufTensorInfo* token_embd() const { return token_embd_; }    // [n_embd, n_vocab]
  const GgufTensorInfo* output_norm() const { return output_norm_; }  // F32 [n_embd]
  const GgufTensorInfo* output() const { return output_; }  // [n_embd, n_vocab]; may be embd
  const std::vector<LayerWeights>& layers() const { return layers_; }
  // Bytes of the weights of layer il (for splitting by memory) and of the rest.
  uint64_t layer_bytes(int64_t il) const;
  uint64_t total_weight_bytes() const;

 private:
  Model(GgufFile file, HParams hparams, Tokenizer tokenizer)
      : file_(std::move(file)), hparams_(hparams), tokenizer_(std::move(tokenizer)) {}
  Status bind_tensors();

  GgufFile file_;
  HParams hparams_;
  Tokenizer tokenizer_;
  const GgufTensorInfo* token_embd_ = nullptr;
  const GgufTensorInfo* output_norm_ = nullptr;
  const GgufTensorInfo* output_ = nullptr;
  std::vector<LayerWeights> layers_;
};

}  // namespace strata
