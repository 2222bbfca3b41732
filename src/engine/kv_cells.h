// Which KV cache cell holds which (sequence, position).
//
// Each sequence is a list of cells in position order, positions 0..len-1. Cells are shared
// between sequences by reference count (seq_copy), so that n completions of one prompt or a
// cached prefix reuse the prompt's KV without recomputing it. Attention walks a sequence's own
// list in position order, so a token's result never depends on where its cells sit or on what
// else is in the cache.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace strata {

class KvCells {
 public:
  KvCells(int64_t n_cells, int32_t n_seq);

  int64_t n_cells() const { return static_cast<int64_t>(refs_.size()); }
  int32_t n_seq() const { return static_cast<int32_t>(seqs_.size()); }
  int64_t n_used() const { return n_cells() - static_cast<int64_t>(free_.size()); }

  // Appends position `pos` of `seq` (it must equal seq_len(seq)) in a free cell.
  Result<int32_t> append(int32_t seq, int32_t pos);
  int32_t seq_len(int32_t seq) const { return static_cast<int32_t>(seqs_[seq].size()); }
  const std::vector<int32_t>& cells(int32_t seq) const { return seqs_[seq]; }

  // Drops positions >= p0 of seq.
  void seq_truncate(int32_t seq, int32_t p0);
  // dst becomes the first n positions of src, sharing its cells.
  void seq_copy(int32_t src, int32_t dst, int32_t n);
  void clear();

 private:
  void release(int32_t cell);

  std::vector<int32_t> refs_;               // per cell: how many sequences hold it
  std::vector<int32_t> free_;               // free cells, highest first (pop_back = lowest)
  std::vector<std::vector<int32_t>> seqs_;  // per sequence: cells in position order
};

}  // namespace strata
