// One decode step's worth of tokens, from any number of sequences at any positions.
#pragma once

#include <cstdint>
#include <vector>

namespace strata {

struct Batch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> pos;     // position of each token in its sequence
  std::vector<int32_t> seq;     // sequence id of each token
  std::vector<uint8_t> output;  // 1 where the logits of the token are wanted

  void add(int32_t token, int32_t position, int32_t seq_id, bool want_output) {
    tokens.push_back(token);
    pos.push_back(position);
    seq.push_back(seq_id);
    output.push_back(want_output ? 1 : 0);
  }
  void clear() {
    tokens.clear();
    pos.clear();
    seq.clear();
    output.clear();
  }
  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
};

}  // namespace strata
