// FunctionRef<R(Args...)>: a reference to a callable, for the hot paths that call back into a
// lambda while the lambda is alive (a thread pool's pass, a matmul's per-rows hook). Unlike a
// std::function it never copies the callable, so a lambda of any number of captures costs no
// heap allocation: a decode step makes hundreds of passes, and each allocation and free touches
// the allocator's lines, which the step's streaming weights keep evicting from the caches.
// (C++26 has std::function_ref; this is the part of it the engine needs.)
#pragma once

#include <type_traits>
#include <utility>

namespace strata {

template <typename Sig>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  // Refers to fn, which must outlive every call through this reference (a temporary lambda
  // passed as an argument lives until the call that takes it returns).
  template <typename F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> &&
           std::is_invocable_r_v<R, const F&, Args...>)
      FunctionRef(
          const F& fn)  // NOLINT(google-explicit-constructor): converts as lambdas are passed
      : fn_(&fn), call_([](const void* f, Args... args) -> R {
          return (*static_cast<const F*>(f))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(fn_, std::forward<Args>(args)...); }

 private:
  const void* fn_;
  R (*call_)(const void*, Args...);
};

}  // namespace strata
