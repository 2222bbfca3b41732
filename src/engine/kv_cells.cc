#include "engine/kv_cells.h"

#include <algorithm>
#include <bit>

#include "core/check.h"

namespace strata {

KvCells::KvCells(int64_t n_cells, int32_t n_seq)
    : refs_(n_cells, 0), free_bits_((n_cells + 63) / 64), seqs_(n_seq) {
  clear();
}

void KvCells::clear() {
  std::fill(refs_.begin(), refs_.end(), 0);
  std::fill(free_bits_.begin(), free_bits_.end(), ~uint64_t{0});
  if (n_cells() % 64 != 0) free_bits_.back() = (uint64_t{1} << (n_cells() % 64)) - 1;
  n_free_ = n_cells();
  for (Seq& s : seqs_) {
    s.cells.clear();
    s.tokens.clear();
  }
}

int64_t KvCells::next_free(int64_t from) const {
  for (int64_t w = from / 64; w < static_cast<int64_t>(free_bits_.size()); ++w) {
    uint64_t bits = free_bits_[w];
    if (w == from / 64) bits &= ~uint64_t{0} << (from % 64);
    if (bits != 0) return w * 64 + std::countr_zero(bits);
  }
  return n_cells();
}

int64_t KvCells::next_used(int64_t from) const {
  for (int64_t w = from / 64; w < static_cast<int64_t>(free_bits_.size()); ++w) {
    uint64_t bits = ~free_bits_[w];
    if (w == from / 64) bits &= ~uint64_t{0} << (from % 64);
    if (bits != 0) return std::min(n_cells(), w * 64 + std::countr_zero(bits));
  }
  return n_cells();
}

Result<int32_t> KvCells::take_free(int32_t after) {
  if (n_free_ == 0) {
    return out_of_range("the KV cache is full (" + std::to_string(n_cells()) +
                        " cells): raise the context size");
  }
  int64_t cell = after + 1;
  if (after < 0 || cell >= n_cells() || !is_free(cell)) {
    // The free run with the most room. A run right after some sequence's last cell is that
    // sequence's to grow into: start in its middle. Ties go to the lowest cell.
    std::vector<int32_t> tails;
    for (const Seq& s : seqs_) {
      if (!s.cells.empty()) tails.push_back(s.cells.back());
    }
    std::sort(tails.begin(), tails.end());
    int64_t best_room = 0;
    for (int64_t a = next_free(0); a < n_cells();) {
      const int64_t b = next_used(a);
      const bool behind_a_tail = a > 0 && std::binary_search(tails.begin(), tails.end(), a - 1);
      const int64_t skip = behind_a_tail ? (b - a) / 2 : 0;
      if (b - a - skip > best_room) {
        best_room = b - a - skip;
        cell = a + skip;
      }
      a = next_free(b);
    }
  }
  free_bits_[cell / 64] &= ~(uint64_t{1} << (cell % 64));
  --n_free_;
  refs_[cell] = 1;
  return static_cast<int32_t>(cell);
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
  Seq& s = seqs_[seq];
  STRATA_ASSIGN_OR_RETURN(const int32_t cell, take_free(s.cells.empty() ? -1 : s.cells.back()));
  s.cells.push_back(cell);
  s.tokens.push_back(token);
  return cell;
}

void KvCells::release(int32_t cell) {
  STRATA_CHECK(refs_[cell] > 0);
  if (--refs_[cell] == 0) {
    free_bits_[cell / 64] |= uint64_t{1} << (cell % 64);
    ++n_free_;
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
  STRATA_ASSIGN_OR_RETURN(const int32_t cell, take_free(pos > 0 ? seqs_[seq].cells[pos - 1] : -1));
  seqs_[seq].cells[pos] = cell;
  release(old);
  return std::make_pair(old, cell);
}

}  // namespace strata
