// The time model of one direction of an emulated network link, and the bytes it holds.
//
// Goal: benchmarks of real links on one machine (`strata proxy`): a relay reads bytes from one
// socket, holds them as a link would, and writes each byte to the other socket at the time it
// would have reached the far end. Non-goals: loss, reordering, jitter, a shared medium.
//
// The model is netem's "delay D rate R" with a serialisation-time rate (not a token bucket):
// the link sends one byte after another at R bits/s, and each byte then travels D more. Bytes
// handed to the link at time t begin to be sent when the link is free (at t, or when the bytes
// before them have been sent), and arrive D after their last bit was sent:
//
//   start   = max(t, busy_until)
//   busy_until = start + bytes * 8 / R        (no rate: = start)
//   arrival = busy_until + D
//
// So an idle link delivers a small message D after it was sent, a busy link queues, and no
// byte overtakes another. Bytes are timed in packets of at most kPacketBytes, so a large read
// leaves the link a packet at a time, as it would on a wire, rather than all at its end.
//
// Everything here is pure: times are given by the caller (a fake clock in tests), no sockets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <span>

namespace strata::net {

using Nanos = int64_t;  // a point on a monotonic clock, or a duration, in nanoseconds

// What a link does to one direction of traffic.
struct LinkShape {
  Nanos delay_ns = 0;            // one-way propagation delay
  uint64_t bits_per_second = 0;  // serialisation rate; 0: unlimited
};

// The largest run of bytes timed as one: 16 KiB is 131 us at 1 Gbit/s, fine-grained enough for
// the links benchmarked, and few enough wake-ups at that rate (about 7600 per second).
constexpr size_t kPacketBytes = 16 * 1024;

class LinkClock {
 public:
  explicit LinkClock(LinkShape shape) : shape_(shape) {}

  // The time at which `bytes` bytes handed to the link at `now` have all reached the far end.
  // Calls must come in the order the bytes are sent, with `now` never going back.
  Nanos depart(Nanos now, uint64_t bytes);
  // How long the link takes to send `bytes` bytes (rounded up to a nanosecond).
  Nanos serialisation_ns(uint64_t bytes) const;

 private:
  LinkShape shape_;
  Nanos busy_until_ = std::numeric_limits<Nanos>::min();
};

// The bytes one direction holds: read from the source, not yet written to the destination.
// A FIFO ring of at most `capacity` bytes; each packet carries the time it may leave. A full
// queue has no room(): its owner stops reading from the source, so that TCP's flow control
// holds the sender back instead of this queue growing.
class LinkQueue {
 public:
  LinkQueue(LinkShape shape, size_t capacity);

  size_t capacity() const { return capacity_; }
  size_t held() const { return held_; }
  size_t room() const { return capacity_ - held_; }

  // Free space for the next bytes from the source: contiguous, at most room(), empty when full.
  std::span<uint8_t> write_space();
  // The first n bytes of write_space() were read at `now`.
  void commit(Nanos now, size_t n);
  // Copies as many of `bytes` as there is room for (commit at `now`); returns how many.
  size_t push(Nanos now, std::span<const uint8_t> bytes);

  // The held bytes whose time has come at `now`, from the front: contiguous, so possibly
  // fewer than all that are due when the ring wraps (the rest follow after pop()).
  std::span<const uint8_t> due(Nanos now) const;
  // Drops the first n bytes (n <= due(now).size() for the `now` of that call).
  void pop(size_t n);
  // When the first held byte may leave; nullopt when nothing is held.
  std::optional<Nanos> next_departure() const;

  // The source ended at `now`: the end reaches the far end after every byte held, as a FIN
  // would, and no earlier than the link's delay.
  void close(Nanos now);
  bool closed() const { return end_.has_value(); }
  // When the end may be passed on (closed and nothing held); nullopt before.
  std::optional<Nanos> end_departure() const;
  // The end has been reached: closed, every byte popped, and its time has come.
  bool finished(Nanos now) const;

 private:
  struct Packet {
    size_t bytes;
    Nanos departs;
  };

  LinkClock clock_;
  size_t capacity_;
  std::unique_ptr<uint8_t[]> ring_;  // capacity_ bytes, uninitialised until used
  size_t head_ = 0;                  // ring index of the first held byte
  size_t held_ = 0;
  std::deque<Packet> packets_;  // in ring order; departures never decrease
  std::optional<Nanos> end_;
};

}  // namespace strata::net
