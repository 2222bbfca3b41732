// The saved state of one sequence: its tokens and the K/V rows of every layer, in a
// self-describing byte format (the layout is in docs/engine.md, "A sequence's state as bytes").
//
// A state restores into a context of the same model only: the header carries a fingerprint of
// the model (architecture, shapes, KV dtype, hashes of the tensor table, of a sample of the
// weights and of the hyperparameters that shape the keys), and checksums over the header and
// the payload. Bytes to restore are untrusted (a file anyone could have written): every field
// is checked, and the sizes against the file's length and the context's limits, before a byte
// of the payload is used.
//
// Non-goals: reading states of other programs (llama.cpp's slot files); converting between KV
// dtypes; portability to big-endian hosts.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/host_bytes.h"
#include "core/status.h"
#include "model/model.h"

namespace strata {

// What a state must agree on with the context it is restored into.
struct SeqStateFingerprint {
  std::string arch;  // at most kSeqStateArchBytes - 1 bytes
  uint32_t n_layer = 0;
  uint32_t n_embd = 0;
  uint32_t n_head = 0;
  uint32_t n_head_kv = 0;
  uint32_t head_dim = 0;
  uint32_t n_rot = 0;
  uint32_t n_vocab = 0;
  DType kv_dtype = DType::kF16;
  uint64_t tensor_table_hash = 0;  // names, dtypes and shapes of every tensor, in file order
  uint64_t weights_hash = 0;       // the first bytes of every tensor's data
  uint64_t hparams_hash = 0;       // norm eps, rope (its tables when used), windows, scales

  bool operator==(const SeqStateFingerprint&) const = default;
};

constexpr size_t kSeqStateArchBytes = 32;
constexpr size_t kSeqStateHeaderBytes = 136;
constexpr uint32_t kSeqStateVersion = 2;

// The fingerprint of `model` with a KV cache of `kv_dtype`; `rope` holds the context's rope
// tables when the model uses them (their rates depend on the context length with LongRoPE).
SeqStateFingerprint seq_state_fingerprint(const Model& model, DType kv_dtype,
                                          const std::array<RopeTable, 2>* rope);

// Bytes of one K or V row: n_head_kv * head_dim values of kv_dtype.
uint64_t seq_state_row_bytes(const SeqStateFingerprint& fp);
// Payload bytes of a state of n_tokens tokens: the tokens, then per layer its K rows and its V
// rows in position order. Past 2^63 (only reachable with header fields nobody checked yet) the
// result saturates at UINT64_MAX.
uint64_t seq_state_payload_bytes(const SeqStateFingerprint& fp, uint64_t n_tokens);

struct SeqStateHeader {
  SeqStateFingerprint fingerprint;
  uint32_t n_tokens = 0;
  uint64_t payload_bytes = 0;
  uint64_t payload_hash = 0;
};

// Where things are in a state's bytes. A layer's K (and its V) is n_planes planes, one per kv
// head, each holding that head's values of the n_tokens positions in order (the CPU's cache
// layout, so that a run of cells is one region per head).
struct SeqStateLayout {
  uint64_t n_tokens = 0;
  uint64_t row_bytes = 0;  // a position's K (or V) bytes, all its kv heads
  uint64_t n_planes = 1;   // kv heads; row_bytes is a multiple of it
  uint64_t tokens_offset() const { return kSeqStateHeaderBytes; }
  uint64_t head_bytes() const { return row_bytes / n_planes; }
  // Kv head `plane` of position 0 of the layer's K (kv = 0) or V (kv = 1).
  uint64_t plane_offset(uint64_t layer, int kv, uint64_t plane) const {
    return kSeqStateHeaderBytes + 4 * n_tokens +
           (2 * layer + static_cast<uint64_t>(kv)) * n_tokens * row_bytes +
           plane * n_tokens * head_bytes();
  }
};

// A zeroed state of n_tokens for `fp`, to fill at the layout's offsets and then seal.
HostBytes seq_state_alloc(const SeqStateFingerprint& fp, uint32_t n_tokens);
// Writes the header (with both checksums) of a filled state.
void seq_state_seal(const SeqStateFingerprint& fp, uint32_t n_tokens, std::span<uint8_t> state);

// Checks the header alone: magic, version, size, its checksum, and that its fields are sane
// (the architecture a string, the KV dtype one of f16/f32, the payload size the one its
// fields imply). Enough to decide whether to read the rest of a file.
Result<SeqStateHeader> seq_state_parse_header(std::span<const uint8_t> bytes);

// Checks a whole state before it is restored: the header as above, then that it was saved from
// `expect` (a message naming every field that differs), that its tokens fit `max_tokens` and
// the vocabulary, that the bytes are exactly header + payload, and the payload checksum.
Result<SeqStateHeader> seq_state_check(std::span<const uint8_t> bytes,
                                       const SeqStateFingerprint& expect, uint32_t max_tokens);

// Writes a state to `path` through a temporary file and a rename, so that a reader never sees
// half a file. Reads one back, refusing a file longer than max_bytes before reading it whole.
Status seq_state_write_file(const std::string& path, std::span<const uint8_t> state);
Result<HostBytes> seq_state_read_file(const std::string& path, uint64_t max_bytes);

}  // namespace strata
