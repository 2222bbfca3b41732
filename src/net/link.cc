#include "net/link.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"

namespace strata::net {

Nanos LinkClock::serialisation_ns(uint64_t bytes) const {
  if (shape_.bits_per_second == 0 || bytes == 0) return 0;
  // bytes <= 2^50 keeps bits * 1e9 within 128 bits with room; round up so that a long run of
  // small packets never goes faster than the rate.
  const unsigned __int128 bits = static_cast<unsigned __int128>(bytes) * 8u * 1000000000u;
  const unsigned __int128 ns = (bits + shape_.bits_per_second - 1) / shape_.bits_per_second;
  return static_cast<Nanos>(std::min<unsigned __int128>(ns, std::numeric_limits<Nanos>::max() / 2));
}

Nanos LinkClock::depart(Nanos now, uint64_t bytes) {
  const Nanos start = std::max(now, busy_until_);
  busy_until_ = start + serialisation_ns(bytes);
  return busy_until_ + shape_.delay_ns;
}

LinkQueue::LinkQueue(LinkShape shape, size_t capacity)
    : clock_(shape),
      capacity_(capacity),
      ring_(std::make_unique_for_overwrite<uint8_t[]>(capacity)) {
  STRATA_CHECK(capacity > 0);
}

std::span<uint8_t> LinkQueue::write_space() {
  const size_t tail = (head_ + held_) % capacity_;
  const size_t contiguous = tail >= head_ && held_ < capacity_ ? capacity_ - tail : head_ - tail;
  return {ring_.get() + tail, std::min(contiguous, room())};
}

void LinkQueue::commit(Nanos now, size_t n) {
  STRATA_CHECK(n <= room());
  STRATA_CHECK(!closed());
  held_ += n;
  while (n > 0) {
    const size_t bytes = std::min(n, kPacketBytes);
    const Nanos departs = clock_.depart(now, bytes);
    // Bytes that leave together are one packet, however they were read.
    if (!packets_.empty() && packets_.back().departs == departs) {
      packets_.back().bytes += bytes;
    } else {
      packets_.push_back({bytes, departs});
    }
    n -= bytes;
  }
}

size_t LinkQueue::push(Nanos now, std::span<const uint8_t> bytes) {
  size_t taken = 0;
  while (taken < bytes.size()) {
    std::span<uint8_t> space = write_space();
    if (space.empty()) break;
    const size_t n = std::min(space.size(), bytes.size() - taken);
    std::memcpy(space.data(), bytes.data() + taken, n);
    commit(now, n);
    taken += n;
  }
  return taken;
}

std::span<const uint8_t> LinkQueue::due(Nanos now) const {
  size_t n = 0;
  for (const Packet& p : packets_) {
    if (p.departs > now) break;
    n += p.bytes;
  }
  return {ring_.get() + head_, std::min(n, capacity_ - head_)};
}

void LinkQueue::pop(size_t n) {
  STRATA_CHECK(n <= held_);
  head_ = (head_ + n) % capacity_;
  held_ -= n;
  while (n > 0) {
    Packet& p = packets_.front();
    const size_t take = std::min(n, p.bytes);
    p.bytes -= take;
    n -= take;
    if (p.bytes == 0) packets_.pop_front();
  }
  if (held_ == 0) head_ = 0;  // an empty ring starts again at 0: fewer wrapped writes
}

std::optional<Nanos> LinkQueue::next_departure() const {
  if (packets_.empty()) return std::nullopt;
  return packets_.front().departs;
}

void LinkQueue::close(Nanos now) {
  if (!end_) end_ = clock_.depart(now, 0);
}

std::optional<Nanos> LinkQueue::end_departure() const {
  if (!end_ || held_ > 0) return std::nullopt;
  return end_;
}

bool LinkQueue::finished(Nanos now) const {
  const std::optional<Nanos> t = end_departure();
  return t && *t <= now;
}

}  // namespace strata::net
