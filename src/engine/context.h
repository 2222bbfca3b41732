// A context: one KV cache over the model's stages, and the decode of batches through them.
//
// A batch holds tokens of several sequences at different positions (continuous batching); it is
// cut into micro-batches of at most n_batch tokens, and each micro-batch walks the stages in
// order. A context belongs to one thread (a pipeline group's decode thread); several contexts
// may share one Engine.
#pragma once

#include <memory>
#include <vector>

#include "engine/batch.h"
#include "engine/engine.h"
#include "engine/kv_cells.h"

namespace strata {

struct ContextParams {
  int64_t n_ctx = 2048;   // KV cells, shared by all sequences
  int64_t n_batch = 512;  // most tokens per micro-batch
  int32_t n_seq = 1;      // sequence ids [0, n_seq)
  DType kv_dtype = DType::kF16;
  // The longest a sequence may grow (0: n_ctx); picks LongRoPE's short or long factors.
  int64_t n_ctx_seq = 0;
};

class Context {
 public:
  static Result<std::unique_ptr<Context>> create(const Engine& engine, const ContextParams& p);
  ~Context();

  // Runs the batch. Positions of a sequence must continue where it stands (pos == seq_len).
  // On error the KV cache is as it was before the call.
  Status decode(const Batch& batch);

  // Logits of the i-th token that asked for output in the last decode, in batch order.
  const float* logits(int64_t i) const { return logits_.data() + i * n_vocab_; }
  int64_t n_outputs() const { return n_outputs_; }
  int64_t n_vocab() const { return n_vocab_; }

  const ContextParams& params() const { return params_; }
  const Model& model() const { return engine_.model(); }
  int32_t seq_len(int32_t seq) const { return cells_.seq_len(seq); }
  void seq_truncate(int32_t seq, int32_t p0) { cells_.seq_truncate(seq, p0); }
  void seq_copy(int32_t src, int32_t dst, int32_t n) { cells_.seq_copy(src, dst, n); }
  void clear() { cells_.clear(); }
  int64_t kv_used() const { return cells_.n_used(); }

 private:
  struct StageRuntime;
  Context(const Engine& engine, const ContextParams& p);
  Status decode_ubatch(const Batch& batch, int64_t begin, int64_t end);

  const Engine& engine_;
  ContextParams params_;
  KvCells cells_;
  int64_t n_vocab_ = 0;
  std::vector<std::unique_ptr<StageRuntime>> stages_;
  std::vector<float> logits_;
  int64_t n_outputs_ = 0;
  // Ends every stage's queued work; returns the first error in stage order (the cause: later
  // stages fail because they waited on it).
  Status drain();
  Status upload_rope_tables();

  std::vector<uint8_t> inputs_;  // host staging of a micro-batch's inputs
  // The hidden state moves between stages by asynchronous copy (each stage waits for the
  // previous stage's read on its own queue, and only the last stage is synchronised); off
  // (STRATA_RPC_NO_ASYNC_COPY=1), every stage is synchronised before the next one starts.
  bool async_copy_ = true;
  float rope_mscale_[2] = {1.0f, 1.0f};
};

}  // namespace strata
