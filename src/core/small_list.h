// SmallList<T, N>: a list whose first N items live in place (on the stack, for a local) and the
// rest on the heap. The decode step's ops keep their per-call lists (a pass's parts, a rope's
// angle table, attention's tasks) in these, so that a step of one token allocates nothing: each
// allocation and free touches the allocator's lines, which the step's streaming weights keep
// evicting from the caches (see core/function_ref.h). The place for N items is left as it is
// until items are put there: a list of 32 parts does not write 4 KiB of stack on each call.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

namespace strata {

template <typename T, size_t N>
class SmallList {
  static_assert(std::is_trivially_destructible_v<T> && std::is_trivially_copyable_v<T>,
                "SmallList keeps plain values: its items are never destroyed");

 public:
  SmallList() = default;
  SmallList(const SmallList&) = delete;
  SmallList& operator=(const SmallList&) = delete;
  // n copies of v.
  explicit SmallList(size_t n, const T& v = T{}) { resize(n, v); }

  void push_back(const T& v) {
    if (n_ < N) {
      std::construct_at(local() + n_, v);
    } else {
      if (n_ == N) heap_.assign(local(), local() + N);
      heap_.push_back(v);
    }
    ++n_;
  }
  // n items, each v.
  void resize(size_t n, const T& v = T{}) {
    clear();
    if (n > N) {
      heap_.assign(n, v);
    } else {
      for (size_t i = 0; i < n; ++i) std::construct_at(local() + i, v);
    }
    n_ = n;
  }
  void clear() {
    n_ = 0;
    heap_.clear();
  }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  T* data() { return n_ <= N ? local() : heap_.data(); }
  const T* data() const { return n_ <= N ? local() : heap_.data(); }
  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }
  T* begin() { return data(); }
  T* end() { return data() + n_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + n_; }
  operator std::span<const T>() const { return {data(), n_}; }  // NOLINT: a list is its span

 private:
  // The items in place (an array of unsigned char provides storage for them, C++20).
  T* local() { return reinterpret_cast<T*>(place_); }
  const T* local() const { return reinterpret_cast<const T*>(place_); }

  alignas(T) unsigned char place_[N == 0 ? 1 : N * sizeof(T)];
  std::vector<T> heap_;
  size_t n_ = 0;
};

}  // namespace strata
