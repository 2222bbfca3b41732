// Data tied to its lock: a MutexGuarded<T> holds a T that is reachable only through a Locked
// handle, which holds the mutex for as long as it lives. A field that threads share cannot be
// read or written without its lock, and the compiler, not a comment, says so.
//
//   MutexGuarded<std::deque<Task>> queue;
//   queue.lock()->push_back(task);           // locked for this statement
//   queue.notify_one();
//   auto q = queue.lock();                    // locked until q goes out of scope
//   q.wait([](const auto& d) { return !d.empty(); });
//   q.unlocked([&] { run(task); });           // released for the call, locked again after
//
// Not in a range-for's header: `for (x : queue.lock()->items)` unlocks before the loop body
// runs (C++20 ends the Locked temporary with the header's expression). Name the handle first.
//
// Each MutexGuarded carries a condition variable, so that waiting for a state of T and telling
// the waiters about a change need no second object beside it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>

namespace strata {

template <typename T>
class MutexGuarded {
 public:
  // The locked value: T through -> and *, and waits on the guard's condition variable, which
  // release the lock while they sleep (as std::condition_variable's do).
  template <typename U>
  class Locked {
   public:
    U* operator->() const { return value_; }
    U& operator*() const { return *value_; }

    // Sleeps until pred(value) holds.
    template <typename Pred>
    void wait(Pred pred) {
      cv_->wait(lock_, [&] { return pred(static_cast<const U&>(*value_)); });
    }
    // Sleeps until pred(value) holds or the deadline passes; returns pred(value).
    template <typename Clock, typename Duration, typename Pred>
    bool wait_until(const std::chrono::time_point<Clock, Duration>& deadline, Pred pred) {
      return cv_->wait_until(lock_, deadline, [&] { return pred(static_cast<const U&>(*value_)); });
    }
    template <typename Rep, typename Period, typename Pred>
    bool wait_for(const std::chrono::duration<Rep, Period>& d, Pred pred) {
      return wait_until(std::chrono::steady_clock::now() + d, std::move(pred));
    }
    // Sleeps until a notify or the deadline (or a spurious wake-up): for a loop that looks at
    // more than the value between its waits.
    template <typename Clock, typename Duration>
    void wait_until(const std::chrono::time_point<Clock, Duration>& deadline) {
      cv_->wait_until(lock_, deadline);
    }

    // Runs fn() with the lock released and takes it again before returning, also when fn
    // throws: work that must not hold the lock (a call that may take it) inside a locked
    // section. The value may have changed when fn returns.
    template <typename Fn>
    decltype(auto) unlocked(Fn&& fn) {
      struct Relock {
        std::unique_lock<std::mutex>& lock;
        ~Relock() { lock.lock(); }
      };
      lock_.unlock();
      Relock relock{lock_};
      return std::forward<Fn>(fn)();
    }

   private:
    friend class MutexGuarded;
    Locked(std::mutex& m, std::condition_variable& cv, U& value)
        : lock_(m), cv_(&cv), value_(&value) {}
    std::unique_lock<std::mutex> lock_;
    std::condition_variable* cv_;
    U* value_;
  };

  template <typename... A>
  explicit MutexGuarded(A&&... args) : value_(std::forward<A>(args)...) {}
  MutexGuarded(const MutexGuarded&) = delete;
  MutexGuarded& operator=(const MutexGuarded&) = delete;

  Locked<T> lock() { return Locked<T>(mutex_, cv_, value_); }
  Locked<const T> lock() const { return Locked<const T>(mutex_, cv_, value_); }

  // Wakes waiters of Locked::wait; call after the change, with or without the lock.
  void notify_one() const { cv_.notify_one(); }
  void notify_all() const { cv_.notify_all(); }

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  T value_;
};

}  // namespace strata
