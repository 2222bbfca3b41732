// Which KV cache cell holds which (sequence, position), and which token is at each position.
//
// Each sequence is a list of cells in position order, positions 0..len-1. Cells are shared
// between sequences by reference count (seq_copy), so that n completions of one prompt or a
// cached prefix reuse the prompt's KV without recomputing it. Attention walks a sequence's own
// list in position order, so a token's result never depends on where its cells sit or on what
// else is in the cache. The tokens ride along so that a sequence's state can be saved whole.
//
// Where a sequence's next cell goes (take_free): the cell after its last one when that is free, so
// that a sequence's cells run side by side even while several sequences decode in turn. A
// sequence that cannot grow in place, or starts, takes the free run with the most room: a run
// after a cell that is some sequence's last starts in its middle, leaving the first half to that
// sequence. Long runs keep a sequence's KV in few stretches: its state moves over a worker as one
// region per run and plane (Context::transfer_rows), and its attention reads contiguous memory.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/status.h"

namespace strata {

class KvCells {
 public:
  KvCells(int64_t n_cells, int32_t n_seq);

  int64_t n_cells() const { return static_cast<int64_t>(refs_.size()); }
  int32_t n_seq() const { return static_cast<int32_t>(seqs_.size()); }
  int64_t n_used() const { return n_cells() - n_free_; }
  int64_t n_free() const { return n_free_; }

  // Appends `token` at position `pos` of `seq` (pos must equal seq_len(seq)) in a free cell.
  Result<int32_t> append(int32_t seq, int32_t pos, int32_t token);
  int32_t seq_len(int32_t seq) const { return static_cast<int32_t>(seqs_[seq].cells.size()); }
  const std::vector<int32_t>& cells(int32_t seq) const { return seqs_[seq].cells; }
  const std::vector<int32_t>& tokens(int32_t seq) const { return seqs_[seq].tokens; }
  // How many sequences hold the cell.
  int32_t refs(int32_t cell) const { return refs_[cell]; }

  // Drops positions >= p0 of seq.
  void seq_truncate(int32_t seq, int32_t p0);
  // dst becomes the first n positions of src, sharing its cells.
  void seq_copy(int32_t src, int32_t dst, int32_t n);
  // Drops positions [p0, p1) of seq; the positions after them move down by p1 - p0. Only the
  // bookkeeping: the caller re-rotates the moved keys (Context::seq_shift).
  void seq_remove(int32_t seq, int32_t p0, int32_t p1);
  // Gives position `pos` of seq a cell of its own in place of a shared one (copy on write);
  // returns (old cell, new cell), or an error when no cell is free.
  Result<std::pair<int32_t, int32_t>> seq_unshare(int32_t seq, int32_t pos);
  void clear();

 private:
  struct Seq {
    std::vector<int32_t> cells;   // in position order
    std::vector<int32_t> tokens;  // the token at each position
  };
  bool is_free(int64_t cell) const { return (free_bits_[cell / 64] >> (cell % 64) & 1) != 0; }
  // The first free cell at or after `from`, or n_cells().
  int64_t next_free(int64_t from) const;
  // The first cell at or after `from` that is not free, or n_cells().
  int64_t next_used(int64_t from) const;
  void release(int32_t cell);
  // Takes a free cell for a position whose preceding position's cell is `after` (-1: none).
  Result<int32_t> take_free(int32_t after);

  std::vector<int32_t> refs_;        // per cell: how many sequences hold it
  std::vector<uint64_t> free_bits_;  // bit c % 64 of word c / 64: cell c is free
  int64_t n_free_ = 0;
  std::vector<Seq> seqs_;
};

}  // namespace strata
