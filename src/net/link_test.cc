// The link model on a fake clock: departure times computed from the shape, byte order and
// content through the ring, and the cap that makes a full direction stop reading.
#include "net/link.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace strata::net {
namespace {

constexpr Nanos kMs = 1000000;
constexpr uint64_t kGbit = 1000000000;

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Takes every byte due at `now` (the ring may hand them out in two pieces).
std::vector<uint8_t> drain_due(LinkQueue& q, Nanos now) {
  std::vector<uint8_t> out;
  for (;;) {
    std::span<const uint8_t> d = q.due(now);
    if (d.empty()) return out;
    out.insert(out.end(), d.begin(), d.end());
    q.pop(d.size());
  }
}

TEST(LinkClock, SerialisationTimeIsBitsOverRateRoundedUp) {
  LinkClock c({0, kGbit});
  EXPECT_EQ(c.serialisation_ns(0), 0);
  EXPECT_EQ(c.serialisation_ns(1), 8);           // 8 bits at 1 bit/ns
  EXPECT_EQ(c.serialisation_ns(16384), 131072);  // a packet
  LinkClock slow({0, 3});                        // 3 bit/s: 8 bits take 2.67 s
  EXPECT_EQ(slow.serialisation_ns(1), 2666666667);
  LinkClock unlimited({5 * kMs, 0});
  EXPECT_EQ(unlimited.serialisation_ns(1 << 20), 0);
}

TEST(LinkClock, DelayOnlyAddsTheDelayToEveryArrival) {
  LinkClock c({2 * kMs, 0});
  EXPECT_EQ(c.depart(0, 100), 2 * kMs);
  EXPECT_EQ(c.depart(10, 1 << 20), 10 + 2 * kMs);
  EXPECT_EQ(c.depart(5 * kMs, 1), 7 * kMs);
}

TEST(LinkClock, BytesQueueBehindEachOtherThenTravel) {
  const Nanos d = kMs;
  LinkClock c({d, kGbit});
  // 1000 bytes take 8000 ns; the next 1000 handed over at once wait for them.
  EXPECT_EQ(c.depart(0, 1000), 8000 + d);
  EXPECT_EQ(c.depart(0, 1000), 16000 + d);
  // Handed over while the link is still busy (at 10 us): starts at 16 us.
  EXPECT_EQ(c.depart(10000, 500), 20000 + d);
  // After the link went idle, a send starts when it is handed over.
  EXPECT_EQ(c.depart(50000, 500), 54000 + d);
  // A zero-byte mark (an end of stream) follows the bytes before it.
  EXPECT_EQ(c.depart(50000, 0), 54000 + d);
}

TEST(LinkQueue, NothingLeavesBeforeItsTime) {
  LinkQueue q({kMs, 0}, 1 << 16);
  const std::vector<uint8_t> a = pattern(100, 1);
  ASSERT_EQ(q.push(0, a), a.size());
  EXPECT_TRUE(q.due(kMs - 1).empty());
  EXPECT_EQ(q.next_departure(), kMs);
  EXPECT_EQ(drain_due(q, kMs), a);
  EXPECT_EQ(q.held(), 0u);
  EXPECT_FALSE(q.next_departure().has_value());
}

TEST(LinkQueue, LargeReadsLeaveAPacketAtATime) {
  const Nanos d = kMs;
  LinkQueue q({d, kGbit}, 1 << 20);
  const std::vector<uint8_t> a = pattern(2 * kPacketBytes + 100, 2);
  ASSERT_EQ(q.push(0, a), a.size());
  const Nanos p = LinkClock({0, kGbit}).serialisation_ns(kPacketBytes);
  EXPECT_TRUE(q.due(p + d - 1).empty());
  EXPECT_EQ(q.due(p + d).size(), kPacketBytes);
  EXPECT_EQ(q.due(2 * p + d).size(), 2 * kPacketBytes);
  EXPECT_EQ(q.due(2 * p + 800 + d).size(), a.size());
  EXPECT_EQ(drain_due(q, 2 * p + 800 + d), a);
}

TEST(LinkQueue, PartialPopsKeepOrderAcrossPackets) {
  LinkQueue q({0, kGbit}, 1 << 20);
  const std::vector<uint8_t> a = pattern(3 * kPacketBytes, 3);
  ASSERT_EQ(q.push(0, a), a.size());
  std::vector<uint8_t> out;
  // Pop in odd sizes, at the time the whole read is due, as a slow destination would take it.
  const Nanos later = 10 * kMs;
  while (q.held() > 0) {
    std::span<const uint8_t> d = q.due(later);
    ASSERT_FALSE(d.empty());
    const size_t n = std::min<size_t>(d.size(), 777);
    out.insert(out.end(), d.begin(), d.begin() + static_cast<ptrdiff_t>(n));
    q.pop(n);
  }
  EXPECT_EQ(out, a);
}

TEST(LinkQueue, FullQueueHasNoRoomUntilBytesLeave) {
  const size_t cap = 1000;
  LinkQueue q({kMs, 0}, cap);
  const std::vector<uint8_t> a = pattern(1500, 4);
  EXPECT_EQ(q.push(0, a), cap);  // takes only what fits
  EXPECT_EQ(q.held(), cap);
  EXPECT_EQ(q.room(), 0u);
  EXPECT_TRUE(q.write_space().empty());
  EXPECT_EQ(q.push(0, std::span(a).subspan(cap)), 0u);
  // Leaving makes room, exactly as much as left.
  std::span<const uint8_t> d = q.due(kMs);
  ASSERT_EQ(d.size(), cap);
  q.pop(300);
  EXPECT_EQ(q.room(), 300u);
  EXPECT_EQ(q.push(kMs, std::span(a).subspan(cap)), 300u);
  EXPECT_EQ(q.room(), 0u);
}

// Random reads and writes on a fake clock, through a small ring that wraps many times: every
// byte comes out once, in order, never before the time the model gives it.
TEST(LinkQueue, RandomTrafficThroughAWrappingRing) {
  const LinkShape shape{300000, 200000000};  // 0.3 ms, 200 Mbit/s
  const size_t cap = 5000;
  LinkQueue q(shape, cap);
  const std::vector<uint8_t> in = pattern(400000, 5);
  std::vector<uint8_t> out;
  std::vector<Nanos> arrival_of;  // per byte: when the model lets it arrive
  LinkClock model(shape);
  std::mt19937 rng(6);
  size_t sent = 0;
  Nanos now = 0;
  while (out.size() < in.size()) {
    now += static_cast<Nanos>(rng() % 40000);
    // The source offers a random amount; the queue takes what fits in its contiguous space.
    const size_t n = std::min({size_t{rng() % 3000}, in.size() - sent, q.write_space().size()});
    if (n > 0) {
      std::copy_n(in.begin() + static_cast<ptrdiff_t>(sent), n, q.write_space().begin());
      q.commit(now, n);
      ASSERT_LE(q.held(), cap);
      const Nanos t = model.depart(now, n);  // reads are below a packet: one packet each
      for (size_t i = 0; i < n; ++i) arrival_of.push_back(t);
      sent += n;
    }
    // The destination takes a random amount of what is due.
    size_t budget = rng() % 4000;
    while (budget > 0) {
      std::span<const uint8_t> d = q.due(now);
      if (d.empty()) break;
      const size_t take = std::min(d.size(), budget);
      for (size_t i = 0; i < take; ++i) ASSERT_LE(arrival_of[out.size() + i], now);
      out.insert(out.end(), d.begin(), d.begin() + static_cast<ptrdiff_t>(take));
      q.pop(take);
      budget -= take;
    }
    // Nothing left behind that was due: the next held byte is not due yet.
    if (budget > 0 && q.held() > 0) {
      ASSERT_GT(arrival_of[out.size()], now);
    }
    if (sent == in.size() && q.held() > 0) now = std::max(now, *q.next_departure());
  }
  EXPECT_EQ(out, in);
}

TEST(LinkQueue, EndFollowsTheHeldBytesAndTheDelay) {
  const Nanos d = kMs;
  LinkQueue q({d, kGbit}, 1 << 16);
  ASSERT_EQ(q.push(0, pattern(1000, 7)), 1000u);  // arrives at 8 us + d
  q.close(1000);
  EXPECT_TRUE(q.closed());
  EXPECT_FALSE(q.end_departure().has_value());  // bytes still held
  EXPECT_FALSE(q.finished(100 * kMs));
  drain_due(q, 8000 + d);
  EXPECT_EQ(q.end_departure(), 8000 + d);  // right behind the last byte
  EXPECT_TRUE(q.finished(8000 + d));

  LinkQueue idle({d, 0}, 16);
  idle.close(5 * kMs);
  EXPECT_EQ(idle.end_departure(), 5 * kMs + d);
  EXPECT_FALSE(idle.finished(5 * kMs + d - 1));
  EXPECT_TRUE(idle.finished(5 * kMs + d));
}

}  // namespace
}  // namespace strata::net
