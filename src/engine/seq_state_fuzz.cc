// libFuzzer target: a sequence's saved state (a slot file restored over HTTP, untrusted) through
// the header parser and the whole-state check, against a context of each KV dtype. The two
// checksums are made to match the input first, so that mutations reach the fields behind them
// (a crafted file can match them too: they detect damage, they do not authenticate).
// Build and run with scripts/fuzz.sh.
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "engine/seq_state.h"

namespace {

// The fingerprint that scripts/fuzz.sh's seeds are written for: a 2-layer llama with one kv
// head of 32 values.
strata::SeqStateFingerprint fingerprint(strata::DType kv) {
  strata::SeqStateFingerprint fp;
  fp.arch = "llama";
  fp.n_layer = 2;
  fp.n_embd = 64;
  fp.n_head = 2;
  fp.n_head_kv = 1;
  fp.head_dim = 32;
  fp.n_rot = 32;
  fp.n_vocab = 300;
  fp.kv_dtype = kv;
  fp.tensor_table_hash = 1;
  fp.weights_hash = 2;
  fp.hparams_hash = 3;
  return fp;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  if (size >= strata::kSeqStateHeaderBytes) {
    const uint64_t payload = XXH3_64bits(bytes.data() + strata::kSeqStateHeaderBytes,
                                         size - strata::kSeqStateHeaderBytes);
    std::memcpy(bytes.data() + 24, &payload, 8);
    const uint64_t header = XXH3_64bits(bytes.data(), 128);
    std::memcpy(bytes.data() + 128, &header, 8);
  }
  const std::span<const uint8_t> state(bytes);
  (void)strata::seq_state_parse_header(state);
  for (strata::DType kv : {strata::DType::kF16, strata::DType::kF32, strata::DType::kQ8_0}) {
    (void)strata::seq_state_check(state, fingerprint(kv), 64);
  }
  return 0;
}
