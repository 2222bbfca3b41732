// SmallList<T, N>: a list whose first N items live in place (on the stack, for a local) and the
// rest on the heap. The decode step's ops keep their per-call lists (a pass's parts, a rope's
// angle table, attention's tasks) in these, so that a step of one token allocates nothing: each
// allocation and free touches the allocator's lines, which the step's streaming weights keep
// evicting from the caches (see core/function_ref.h).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <vector>

namespace strata {

template <typename T, size_t N>
class SmallList {
 public:
  SmallList() = default;
  // n copies of v.
  explicit SmallList(size_t n, const T& v = T{}) { resize(n, v); }

  void push_back(const T& v) {
    if (n_ < N) {
      local_[n_] = v;
    } else {
      if (n_ == N) heap_.assign(local_.begin(), local_.end());
      heap_.push_back(v);
    }
    ++n_;
  }
  // n items, each v.
  void resize(size_t n, const T& v = T{}) {
    clear();
    if (n > N) heap_.assign(n, v);
    if (n <= N) std::fill(local_.begin(), local_.begin() + n, v);
    n_ = n;
  }
  void clear() {
    n_ = 0;
    heap_.clear();
  }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  T* data() { return n_ <= N ? local_.data() : heap_.data(); }
  const T* data() const { return n_ <= N ? local_.data() : heap_.data(); }
  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }
  T& back() { return data()[n_ - 1]; }
  T* begin() { return data(); }
  T* end() { return data() + n_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + n_; }
  operator std::span<const T>() const { return {data(), n_}; }  // NOLINT: a list is its span
  operator std::span<T>() { return {data(), n_}; }              // NOLINT

 private:
  std::array<T, N> local_{};
  std::vector<T> heap_;
  size_t n_ = 0;
};

}  // namespace strata
