#include "rpc/stats.h"

#include <cstdio>

namespace strata::rpc {

StatsSnapshot StatsSnapshot::operator-(const StatsSnapshot& b) const {
  StatsSnapshot d;
  for (size_t i = 0; i < commands.size(); ++i) {
    d.commands[i].count = commands[i].count - b.commands[i].count;
    d.commands[i].bytes_sent = commands[i].bytes_sent - b.commands[i].bytes_sent;
    d.commands[i].bytes_received = commands[i].bytes_received - b.commands[i].bytes_received;
  }
  d.steps = steps - b.steps;
  d.step_messages = step_messages - b.step_messages;
  d.step_round_trips = step_round_trips - b.step_round_trips;
  d.step_bytes_sent = step_bytes_sent - b.step_bytes_sent;
  d.step_bytes_received = step_bytes_received - b.step_bytes_received;
  d.round_trips = round_trips - b.round_trips;
  d.weight_bytes_sent = weight_bytes_sent - b.weight_bytes_sent;
  d.weight_bytes_cached = weight_bytes_cached - b.weight_bytes_cached;
  d.weight_bytes_large_sent = weight_bytes_large_sent - b.weight_bytes_large_sent;
  d.handoffs = handoffs - b.handoffs;
  d.handoff_bytes = handoff_bytes - b.handoff_bytes;
  return d;
}

void RpcStats::on_send(Command c, uint64_t bytes, bool request, bool step) {
  Atomic& a = commands_[static_cast<size_t>(c)];
  a.count.fetch_add(1, std::memory_order_relaxed);
  a.bytes_sent.fetch_add(bytes, std::memory_order_relaxed);
  if (request) round_trips_.fetch_add(1, std::memory_order_relaxed);
  if (c == Command::kGraphCompute || c == Command::kGraphRecompute ||
      c == Command::kHandoffCompute) {
    steps_.fetch_add(1, std::memory_order_relaxed);
  }
  if (step) {
    step_messages_.fetch_add(1, std::memory_order_relaxed);
    step_bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
    if (request) step_round_trips_.fetch_add(1, std::memory_order_relaxed);
  }
}

void RpcStats::on_receive(Command c, uint64_t bytes, bool step) {
  commands_[static_cast<size_t>(c)].bytes_received.fetch_add(bytes, std::memory_order_relaxed);
  if (step) step_bytes_received_.fetch_add(bytes, std::memory_order_relaxed);
}

void RpcStats::on_weights(uint64_t sent, uint64_t cached, bool large) {
  weight_sent_.fetch_add(sent, std::memory_order_relaxed);
  weight_cached_.fetch_add(cached, std::memory_order_relaxed);
  if (large) weight_large_sent_.fetch_add(sent, std::memory_order_relaxed);
}

void RpcStats::on_handoff(uint64_t bytes) {
  handoffs_.fetch_add(1, std::memory_order_relaxed);
  handoff_bytes_.fetch_add(bytes, std::memory_order_relaxed);
}

StatsSnapshot RpcStats::snapshot() const {
  StatsSnapshot s;
  for (size_t i = 0; i < commands_.size(); ++i) {
    s.commands[i].count = commands_[i].count.load(std::memory_order_relaxed);
    s.commands[i].bytes_sent = commands_[i].bytes_sent.load(std::memory_order_relaxed);
    s.commands[i].bytes_received = commands_[i].bytes_received.load(std::memory_order_relaxed);
  }
  s.steps = steps_.load(std::memory_order_relaxed);
  s.step_messages = step_messages_.load(std::memory_order_relaxed);
  s.step_round_trips = step_round_trips_.load(std::memory_order_relaxed);
  s.step_bytes_sent = step_bytes_sent_.load(std::memory_order_relaxed);
  s.step_bytes_received = step_bytes_received_.load(std::memory_order_relaxed);
  s.round_trips = round_trips_.load(std::memory_order_relaxed);
  s.weight_bytes_sent = weight_sent_.load(std::memory_order_relaxed);
  s.weight_bytes_cached = weight_cached_.load(std::memory_order_relaxed);
  s.weight_bytes_large_sent = weight_large_sent_.load(std::memory_order_relaxed);
  s.handoffs = handoffs_.load(std::memory_order_relaxed);
  s.handoff_bytes = handoff_bytes_.load(std::memory_order_relaxed);
  return s;
}

namespace {

std::string human(uint64_t bytes) {
  char buf[32];
  if (bytes >= (1u << 20)) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / 1048576.0);
  } else if (bytes >= 1024) {
    std::snprintf(buf, sizeof(buf), "%.1f KiB", static_cast<double>(bytes) / 1024.0);
  } else {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  }
  return buf;
}

}  // namespace

std::string rpc_stats_format(const std::string& endpoint, const std::string& period,
                             const StatsSnapshot& s) {
  uint64_t messages = 0, sent = 0, received = 0;
  for (const CommandCounters& c : s.commands) {
    messages += c.count;
    sent += c.bytes_sent;
    received += c.bytes_received;
  }
  char line[256];
  std::snprintf(
      line, sizeof(line), "rpc %s %s: %llu messages, %llu round trips, %s sent, %s received\n",
      endpoint.c_str(), period.c_str(), static_cast<unsigned long long>(messages),
      static_cast<unsigned long long>(s.round_trips), human(sent).c_str(), human(received).c_str());
  std::string out = line;
  for (uint8_t c = kCommandFirst; c <= kCommandLast; ++c) {
    const CommandCounters& k = s.commands[c];
    if (k.count == 0) continue;
    std::snprintf(line, sizeof(line), "  %-16s count %llu  sent %llu  received %llu\n",
                  command_name(static_cast<Command>(c)), static_cast<unsigned long long>(k.count),
                  static_cast<unsigned long long>(k.bytes_sent),
                  static_cast<unsigned long long>(k.bytes_received));
    out += line;
  }
  if (s.steps > 0) {
    const double n = static_cast<double>(s.steps);
    std::snprintf(line, sizeof(line),
                  "  per step (%llu steps): %.2f messages, %.2f round trips, %.0f bytes sent, "
                  "%.0f bytes received\n",
                  static_cast<unsigned long long>(s.steps), s.step_messages / n,
                  s.step_round_trips / n, s.step_bytes_sent / n, s.step_bytes_received / n);
    out += line;
  }
  if (s.handoffs > 0 && s.steps > 0) {
    std::snprintf(line, sizeof(line),
                  "  hand-off: %llu sends to the next stage's worker, %.0f bytes per step, "
                  "worker to worker\n",
                  static_cast<unsigned long long>(s.handoffs),
                  static_cast<double>(s.handoff_bytes) / static_cast<double>(s.steps));
    out += line;
  }
  if (s.weight_bytes_sent + s.weight_bytes_cached > 0) {
    std::snprintf(line, sizeof(line),
                  "  weights: %llu bytes sent (%llu in chunks >= 1 MiB), %llu bytes from the "
                  "worker's cache\n",
                  static_cast<unsigned long long>(s.weight_bytes_sent),
                  static_cast<unsigned long long>(s.weight_bytes_large_sent),
                  static_cast<unsigned long long>(s.weight_bytes_cached));
    out += line;
  }
  return out;
}

}  // namespace strata::rpc
