#include "server/workers.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "rpc/remote_backend.h"
#include "server/task.h"

namespace strata::server {
namespace {

// A label value in the Prometheus text format: backslash, quote and newline escaped.
std::string label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void family(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const char* name, const std::string& labels, uint64_t v) {
  out += std::string(name) + "{" + labels + "} " + std::to_string(v) + "\n";
}

void sample(std::string& out, const char* name, const std::string& labels, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.3f", v);
  out += std::string(name) + "{" + labels + "} " + buf + "\n";
}

// a + b for every counter: unsigned arithmetic wraps, so a - (0 - b) is the sum, and the sum
// follows the snapshot's fields without listing them.
rpc::StatsSnapshot add(const rpc::StatsSnapshot& a, const rpc::StatsSnapshot& b) {
  return a - (rpc::StatsSnapshot{} - b);
}

std::string seconds_text(std::chrono::steady_clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", std::max(0.0, to_seconds(d)));
  return buf;
}

}  // namespace

void render_rpc_metrics(std::string& out, const std::vector<WorkerStats>& workers) {
  if (workers.empty()) return;
  // Every command of the protocol, used or not, so that each series exists from the start.
  auto each_command = [&](auto fn) {
    for (const WorkerStats& w : workers) {
      const std::string ep = "endpoint=\"" + label_value(w.endpoint) + "\"";
      for (int c = rpc::kCommandFirst; c <= rpc::kCommandLast; ++c) {
        const auto cmd = static_cast<rpc::Command>(c);
        fn(ep + ",command=\"" + rpc::command_name(cmd) + "\"", w.stats.commands[c]);
      }
    }
  };
  auto each_worker = [&](auto fn) {
    for (const WorkerStats& w : workers) fn("endpoint=\"" + label_value(w.endpoint) + "\"", w);
  };
  family(out, "strata_rpc_messages_total", "counter",
         "Messages sent to a worker, by command (requests and one-way messages).");
  each_command([&](const std::string& labels, const rpc::CommandCounters& c) {
    sample(out, "strata_rpc_messages_total", labels, c.count);
  });
  family(out, "strata_rpc_bytes_total", "counter",
         "Bytes exchanged with a worker, headers included, by command and direction.");
  each_command([&](const std::string& labels, const rpc::CommandCounters& c) {
    sample(out, "strata_rpc_bytes_total", labels + ",direction=\"sent\"", c.bytes_sent);
    sample(out, "strata_rpc_bytes_total", labels + ",direction=\"received\"", c.bytes_received);
  });
  family(out, "strata_rpc_round_trips_total", "counter",
         "Requests sent to a worker that waited for a response.");
  each_worker([&](const std::string& ep, const WorkerStats& w) {
    sample(out, "strata_rpc_round_trips_total", ep, w.stats.round_trips);
  });
  family(out, "strata_rpc_decode_steps_total", "counter",
         "Graphs sent to a worker (one per decode step of each of its stages).");
  each_worker([&](const std::string& ep, const WorkerStats& w) {
    sample(out, "strata_rpc_decode_steps_total", ep, w.stats.steps);
  });
  family(out, "strata_rpc_handoff_bytes_total", "counter",
         "Bytes a worker sent straight to the next stage's worker for this server (hand-off).");
  each_worker([&](const std::string& ep, const WorkerStats& w) {
    sample(out, "strata_rpc_handoff_bytes_total", ep, w.stats.handoff_bytes);
  });
  family(out, "strata_rpc_weight_bytes_total", "counter",
         "Weight bytes loaded on a worker: sent over the network, or found in its cache.");
  each_worker([&](const std::string& ep, const WorkerStats& w) {
    sample(out, "strata_rpc_weight_bytes_total", ep + ",source=\"network\"",
           w.stats.weight_bytes_sent);
    sample(out, "strata_rpc_weight_bytes_total", ep + ",source=\"cache\"",
           w.stats.weight_bytes_cached);
  });
  family(out, "strata_rpc_worker_up", "gauge",
         "1 while the connection to a worker is usable, 0 while it is down or being restored.");
  each_worker([&](const std::string& ep, const WorkerStats& w) {
    sample(out, "strata_rpc_worker_up", ep, uint64_t{w.up ? 1u : 0u});
  });
  family(out, "strata_rpc_reconnect_attempts_total", "counter",
         "Attempts to reach a lost worker again (each opens a connection).");
  each_worker([&](const std::string& ep, const WorkerStats& w) {
    sample(out, "strata_rpc_reconnect_attempts_total", ep, w.reconnect_attempts);
  });
  family(out, "strata_rpc_reconnects_total", "counter",
         "Recoveries of a lost worker: reconnected, its weights and buffers placed again.");
  each_worker([&](const std::string& ep, const WorkerStats& w) {
    sample(out, "strata_rpc_reconnects_total", ep, w.reconnects);
  });
  family(out, "strata_rpc_worker_down_seconds_total", "counter",
         "Seconds a worker was not usable (lost or being restored), the current outage included.");
  each_worker([&](const std::string& ep, const WorkerStats& w) {
    sample(out, "strata_rpc_worker_down_seconds_total", ep, w.down_seconds);
  });
}

RemoteWorkers::RemoteWorkers(const Engine& engine, ReconnectPolicy policy) : policy_(policy) {
  auto links = links_.lock();
  for (const Stage& stage : engine.stages()) {
    if (!rpc::remote_device_connection(*stage.device)) continue;
    if (std::find(devices_.begin(), devices_.end(), stage.device) != devices_.end()) continue;
    devices_.push_back(stage.device);
    links->push_back(Link{WorkerLink(policy_), {}});
  }
}

std::string RemoteWorkers::label(size_t i) const {
  return rpc::remote_device_connection(*devices_[i])->label();
}

LinkState RemoteWorkers::state(size_t i) const { return (*links_.lock())[i].link.state(); }

std::string RemoteWorkers::describe_locked(size_t i, const Link& l, Clock::time_point now) const {
  const std::shared_ptr<rpc::Connection> conn = rpc::remote_device_connection(*devices_[i]);
  const WorkerLink& link = l.link;
  if (link.state() == LinkState::kRestoring) {
    return "worker " + conn->label() + " is back after " + seconds_text(link.down_for(now)) +
           " down; its weights and buffers are being placed again: retry later";
  }
  // Up but broken: lost a moment ago, and the recovery has not seen it yet.
  const std::string reason =
      link.state() == LinkState::kDown ? link.reason() : conn->broken().message();
  if (!policy_.enabled()) {
    return reason +
           " (a connection to a worker is not re-opened with STRATA_RPC_RECONNECT_MS=0: restart "
           "the worker, then the server)";
  }
  std::string m = "worker " + conn->label() + " is down";
  if (link.state() != LinkState::kDown) return m + " (" + reason + "); reconnecting: retry later";
  m += " (lost " + seconds_text(link.down_for(now)) + " ago: " + reason + "); reconnecting: ";
  m += "attempt " + std::to_string(link.failures() + 1) + " in " +
       seconds_text(std::max(link.next_attempt() - now, Clock::duration{0}));
  if (!link.last_error().empty()) m += " (the last one: " + link.last_error() + ")";
  return m + "; retry later";
}

std::string RemoteWorkers::backoff(size_t i) const {
  auto links = links_.lock();
  const WorkerLink& link = (*links)[i].link;
  return "attempt " + std::to_string(link.failures()) + " failed; the next in " +
         seconds_text(std::max(link.next_attempt() - Clock::now(), Clock::duration{0}));
}

Status RemoteWorkers::status() const {
  auto links = links_.lock();
  const Clock::time_point now = Clock::now();
  for (size_t i = 0; i < devices_.size(); ++i) {
    const bool broken = !rpc::remote_device_connection(*devices_[i])->broken().is_ok();
    if ((*links)[i].link.state() != LinkState::kUp || broken) {
      return Status(ErrorKind::kUnavailable, describe_locked(i, (*links)[i], now));
    }
  }
  return Status::ok();
}

int RemoteWorkers::retry_after_seconds() const {
  if (!policy_.enabled()) return 0;
  auto links = links_.lock();
  const Clock::time_point now = Clock::now();
  int after = 0;
  for (size_t i = 0; i < devices_.size(); ++i) {
    const WorkerLink& link = (*links)[i].link;
    const bool broken = !rpc::remote_device_connection(*devices_[i])->broken().is_ok();
    int s = 0;
    if (link.state() == LinkState::kDown) {
      s = static_cast<int>(std::ceil(to_seconds(link.next_attempt() - now)));
    }
    if (link.state() != LinkState::kUp || broken) after = std::max({after, s, 1});
  }
  return after;
}

Json RemoteWorkers::json() const {
  auto links = links_.lock();
  const Clock::time_point now = Clock::now();
  Json out = Json::array();
  for (size_t i = 0; i < devices_.size(); ++i) {
    const std::shared_ptr<rpc::Connection> conn = rpc::remote_device_connection(*devices_[i]);
    const WorkerLink& link = (*links)[i].link;
    const bool broken = !conn->broken().is_ok();
    LinkState state = link.state();
    if (state == LinkState::kUp && broken) state = LinkState::kDown;
    Json j = {{"name", conn->options().name},
              {"endpoint", conn->options().endpoint},
              {"state", link_state_name(state)}};
    if (link.state() != LinkState::kUp) {
      j["down_seconds"] = to_seconds(link.down_for(now));
      j["reason"] = link.reason();
    } else if (broken) {
      j["reason"] = conn->broken().message();
    }
    if (link.state() == LinkState::kDown) {
      j["failed_attempts"] = link.failures();
      j["next_attempt_seconds"] = std::max(0.0, to_seconds(link.next_attempt() - now));
      if (!link.last_error().empty()) j["last_error"] = link.last_error();
    }
    j["reconnects"] = link.reconnects();
    out.push_back(std::move(j));
  }
  return out;
}

std::vector<WorkerStats> RemoteWorkers::snapshot() const {
  auto links = links_.lock();
  const Clock::time_point now = Clock::now();
  std::vector<WorkerStats> out;
  for (size_t i = 0; i < devices_.size(); ++i) {
    const Link& l = (*links)[i];
    const std::shared_ptr<rpc::Connection> c = rpc::remote_device_connection(*devices_[i]);
    WorkerStats s;
    s.endpoint = c->options().endpoint;
    s.up = l.link.state() == LinkState::kUp && c->broken().is_ok();
    s.stats = add(l.retired, c->stats().snapshot());
    s.reconnect_attempts = l.link.attempts();
    s.reconnects = l.link.reconnects();
    s.down_seconds = to_seconds(l.link.down_total(now));
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<size_t> RemoteWorkers::mark_lost(Clock::time_point now) {
  auto links = links_.lock();
  std::vector<size_t> lost;
  for (size_t i = 0; i < devices_.size(); ++i) {
    WorkerLink& link = (*links)[i].link;
    if (link.state() != LinkState::kUp) continue;
    const Status broken = rpc::remote_device_connection(*devices_[i])->broken();
    if (broken.is_ok()) continue;
    link.lost(now, broken.message());
    lost.push_back(i);
  }
  return lost;
}

std::vector<size_t> RemoteWorkers::due(Clock::time_point now) const {
  auto links = links_.lock();
  std::vector<size_t> out;
  for (size_t i = 0; i < links->size(); ++i) {
    if ((*links)[i].link.due(now)) out.push_back(i);
  }
  return out;
}

Status RemoteWorkers::reconnect(size_t i) {
  Device& device = *devices_[i];
  const std::shared_ptr<rpc::Connection> old = rpc::remote_device_connection(device);
  Result<std::shared_ptr<rpc::Connection>> conn = rpc::Connection::open(old->options());
  auto links = links_.lock();
  Link& l = (*links)[i];
  Status s = conn.status();
  if (s.is_ok()) {
    // No message leaves on the old connection after it broke: its counters are final.
    const rpc::StatsSnapshot before = old->stats().snapshot();
    s = rpc::remote_device_set_connection(device, std::move(conn).value());
    if (s.is_ok()) l.retired = add(l.retired, before);
  }
  if (s.is_ok()) {
    l.link.connected();
  } else {
    l.link.failed(Clock::now(), s.message());
  }
  return s;
}

std::string RemoteWorkers::restored(size_t i) {
  auto links = links_.lock();
  WorkerLink& link = (*links)[i].link;
  const Clock::time_point now = Clock::now();
  const uint32_t attempts = link.failures() + 1;
  const std::string text = "after " + seconds_text(link.down_for(now)) + " down (" +
                           std::to_string(attempts) + (attempts == 1 ? " attempt)" : " attempts)");
  link.restored(now);
  return text;
}

void RemoteWorkers::restore_failed(size_t i, const std::string& why) {
  (*links_.lock())[i].link.failed(Clock::now(), why);
}

bool RemoteWorkers::all_up() const {
  auto links = links_.lock();
  return std::all_of(links->begin(), links->end(),
                     [](const Link& l) { return l.link.state() == LinkState::kUp; });
}

bool RemoteWorkers::any_down() const {
  auto links = links_.lock();
  return std::any_of(links->begin(), links->end(),
                     [](const Link& l) { return l.link.state() == LinkState::kDown; });
}

RemoteWorkers::Clock::time_point RemoteWorkers::next_attempt() const {
  auto links = links_.lock();
  Clock::time_point t = Clock::time_point::max();
  for (const Link& l : *links) {
    if (l.link.state() == LinkState::kDown) t = std::min(t, l.link.next_attempt());
  }
  return t;
}

}  // namespace strata::server
