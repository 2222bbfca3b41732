// A context: one KV cache over the model's stages, and the decode of batches through them.
//
// A batch holds tokens of several sequences at different positions (continuous batching); it is
// cut into micro-batches of at most n_batch tokens, and each micro-batch walks the stages in
// order. A context belongs to one thread (a pipeline group's decode thread); several contexts
// may share one Engine.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "engine/batch.h"
#include "engine/engine.h"
#include "engine/kv_cells.h"
#include "engine/seq_state.h"
#include "engine/step_draws.h"

namespace strata {

struct ContextParams {
  int64_t n_ctx = 2048;   // KV cells, shared by all sequences
  int64_t n_batch = 512;  // most tokens per micro-batch
  int32_t n_seq = 1;      // sequence ids [0, n_seq)
  DType kv_dtype = DType::kF16;
  // The longest a sequence may grow (0: n_ctx); picks LongRoPE's short or long factors.
  int64_t n_ctx_seq = 0;
  // The context's own CPU thread pools (borrowed; they outlive the context); none: the CPU
  // device's pool, shared with the device's other streams.
  StreamPools pools;
  // Each output row is the token's final hidden state after the output norm (n_embd floats,
  // embeddings(i)) instead of its logits; the last stage skips the output projection. No
  // backend sampling (decode refuses draws).
  bool embeddings = false;
};

class Context {
 public:
  static Result<std::unique_ptr<Context>> create(const Engine& engine, const ContextParams& p);
  ~Context();

  // Runs the batch. Positions of a sequence must continue where it stands (pos == seq_len).
  // On error the KV cache is as it was before the call.
  // With `draws` (backend sampling), the last stage's device samples the draws and only their
  // results come back, with the logits of the rows the draws name for reading (StepDraws).
  Status decode(const Batch& batch, StepDraws* draws = nullptr);

  // Logits of the i-th token that asked for output in the last decode, in batch order. After a
  // decode with draws, only the rows named by StepDraws::read_logits hold their logits.
  const float* logits(int64_t i) const { return logits_.data() + i * out_width_; }
  // With ContextParams::embeddings: the i-th output's hidden state, n_embd floats.
  const float* embeddings(int64_t i) const { return logits_.data() + i * out_width_; }
  int64_t n_outputs() const { return n_outputs_; }
  int64_t n_vocab() const { return n_vocab_; }

  const ContextParams& params() const { return params_; }
  const Model& model() const { return engine_.model(); }
  int32_t seq_len(int32_t seq) const { return cells_.seq_len(seq); }
  // The tokens whose KV the sequence holds, from position 0.
  const std::vector<int32_t>& seq_tokens(int32_t seq) const { return cells_.tokens(seq); }
  void seq_truncate(int32_t seq, int32_t p0) { cells_.seq_truncate(seq, p0); }
  void seq_copy(int32_t src, int32_t dst, int32_t n) { cells_.seq_copy(src, dst, n); }
  void clear() { cells_.clear(); }
  // Each op's time in the stages' later steps is added to *times (borrowed; null: none): a
  // profile, read between decode calls. Only stages whose streams time their ops (the CPU's)
  // add to it.
  void set_op_times(OpTimes* times) { op_times_ = times; }
  int64_t kv_used() const { return cells_.n_used(); }

  // Context shift: drops positions [n_keep, n_keep + n_discard) of `seq` and moves the later
  // ones down by n_discard, their keys re-rotated on every stage (op rope_shift), so that the
  // sequence holds positions 0..len-1 again. Cells shared with other sequences are copied first:
  // the others keep theirs as they were. A refused call changes nothing; if a device fails
  // during the shift, the sequence is cut back to its first n_keep positions.
  Status seq_shift(int32_t seq, int32_t n_keep, int32_t n_discard);

  // The state of sequence `seq` (its tokens and the K/V rows of every layer, read back from
  // every stage's device) in the format of engine/seq_state.h.
  Result<HostBytes> seq_state_save(int32_t seq);
  // Replaces sequence `seq` by a saved state. The bytes are untrusted: they are checked whole
  // (format, checksums, that they come from this model with this KV dtype, that they fit)
  // before the cache is touched, and a refused state leaves the sequence as it was. If a
  // device fails while the rows are written, the sequence is left empty.
  Status seq_state_restore(int32_t seq, std::span<const uint8_t> state);
  // The largest state this context can restore (for reading files: refuse larger ones unread).
  uint64_t seq_state_max_bytes() const;
  const SeqStateFingerprint& fingerprint() const { return fingerprint_; }

  // Sleep: frees the KV cache and the step buffers on every device and empties every sequence
  // (save what should survive first). Until wake() allocates them again, decode and the
  // sequence operations fail with kUnavailable. Before Engine::sleep, after Engine::wake.
  void sleep();
  Status wake();
  bool asleep() const { return asleep_; }
  // Reconnection: while asleep, replaces the streams of the stages on `device`, whose worker
  // came back on a new connection (the old streams belong to the lost one); wake() then places
  // the buffers on it. Sleep, renew_streams and wake are how a context survives a worker that
  // died: its sequences are empty afterwards, as after any sleep.
  void renew_streams(const Device& device);

 private:
  struct StageRuntime;
  Context(const Engine& engine, const ContextParams& p);
  Status decode_ubatch(const Batch& batch, int64_t begin, int64_t end, StepDraws* draws);

  const Engine& engine_;
  ContextParams params_;
  KvCells cells_;
  int64_t n_vocab_ = 0;
  int64_t out_width_ = 0;  // floats per output row: n_vocab, or n_embd for embeddings
  std::vector<std::unique_ptr<StageRuntime>> stages_;
  std::vector<float> logits_;
  int64_t n_outputs_ = 0;
  // Ends every stage's queued work; returns the first error in stage order (the cause: later
  // stages fail because they waited on it).
  Status drain();
  Status alloc_buffers();
  Status upload_rope_tables();
  Status check_awake() const;
  std::unique_ptr<Stream> new_stream(Device& device) const;
  // Copies the K/V rows of `seq` between the stages' caches and a state laid out as `layout`
  // says: reads them into `read_into`, or (when it is null) writes them from `write_from`.
  Status transfer_rows(int32_t seq, const SeqStateLayout& layout, uint8_t* read_into,
                       const uint8_t* write_from);

  std::vector<uint8_t> inputs_;  // host staging of a micro-batch's inputs
  std::vector<int32_t> drawn_;   // host staging of a micro-batch's draw results
  bool can_sample_ = false;      // the last stage's device runs the sample op
  float rope_mscale_[2] = {1.0f, 1.0f};
  SeqStateFingerprint fingerprint_;
  bool asleep_ = false;
  OpTimes* op_times_ = nullptr;
};

}  // namespace strata
