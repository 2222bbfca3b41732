#include "engine/kv_cells.h"

#include <algorithm>

#include "core/check.h"

namespace strata {

KvCells::KvCells(int64_t n_cells, int32_t n_seq) : refs_(n_cells, 0), seqs_(n_seq) { clear(); }

void KvCells::clear() {
  std::fill(refs_.begin(), refs_.end(), 0);
  free_.resize(refs_.size());
  for (size_t i = 0; i < free_.size(); ++i) free_[i] = static_cast<int32_t>(free_.size() - 1 - i);
  for (Seq& s : seqs_) {
    s.cells.clear();
    s.tokens.clear();
  }
}

Result<int32_t> KvCells::take_free() {
  if (free_.empty()) {
    return out_of_range("the KV cache is full (" + std::to_string(n_cells()) +
                        " cells): raise the context size");
  }
  const int32_t cell = free_.back();
  free_.pop_back();
  refs_[cell] = 1;
  return cell;
}

Result<int32_t> KvCells::append(int32_t seq, int32_t pos, int32_t token) {
  if (seq < 0 || seq >= n_seq()) {
    return out_of_range("sequence id " + std::to_string(seq) + " outside [0, " +
                        std::to_string(n_seq()) + ")");
  }
  if (pos != seq_len(seq)) {
    return invalid_argument("sequence " + std::to_string(seq) + ": position " +
                            std::to_string(pos) + " given, the next position is " +
                            std::to_string(seq_len(seq)));
  }
  STRATA_ASSIGN_OR_RETURN(const int32_t cell, take_free());
  seqs_[seq].cells.push_back(cell);
  seqs_[seq].tokens.push_back(token);
  return cell;
}

void KvCells::release(int32_t cell) {
  STRATA_CHECK(refs_[cell] > 0);
  if (--refs_[cell] == 0) {
    // Keep the free list sorted high to low so that the lowest cell is reused first.
    free_.insert(std::upper_bound(free_.begin(), free_.end(), cell, std::greater<int32_t>()), cell);
  }
}

void KvCells::seq_truncate(int32_t seq, int32_t p0) {
  STRATA_CHECK(seq >= 0 && seq < n_seq());
  Seq& s = seqs_[seq];
  if (p0 < 0) p0 = 0;
  while (static_cast<int32_t>(s.cells.size()) > p0) {
    release(s.cells.back());
    s.cells.pop_back();
    s.tokens.pop_back();
  }
}

void KvCells::seq_copy(int32_t src, int32_t dst, int32_t n) {
  STRATA_CHECK(src >= 0 && src < n_seq() && dst >= 0 && dst < n_seq());
  if (src == dst) {
    seq_truncate(dst, n);
    return;
  }
  seq_truncate(dst, 0);
  n = std::min(n, seq_len(src));
  for (int32_t i = 0; i < n; ++i) {
    const int32_t cell = seqs_[src].cells[i];
    ++refs_[cell];
    seqs_[dst].cells.push_back(cell);
    seqs_[dst].tokens.push_back(seqs_[src].tokens[i]);
  }
}

void KvCells::seq_remove(int32_t seq, int32_t p0, int32_t p1) {
  STRATA_CHECK(seq >= 0 && seq < n_seq() && 0 <= p0 && p0 <= p1 && p1 <= seq_len(seq));
  Seq& s = seqs_[seq];
  for (int32_t p = p0; p < p1; ++p) release(s.cells[p]);
  s.cells.erase(s.cells.begin() + p0, s.cells.begin() + p1);
  s.tokens.erase(s.tokens.begin() + p0, s.tokens.begin() + p1);
}

Result<std::pair<int32_t, int32_t>> KvCells::seq_unshare(int32_t seq, int32_t pos) {
  STRATA_CHECK(seq >= 0 && seq < n_seq() && pos >= 0 && pos < seq_len(seq));
  const int32_t old = seqs_[seq].cells[pos];
  STRATA_ASSIGN_OR_RETURN(const int32_t cell, take_free());
  seqs_[seq].cells[pos] = cell;
  release(old);
  return std::make_pair(old, cell);
}

}  // namespace strata
