#include "server/workers.h"

#include <cstdio>

#include "rpc/remote_backend.h"

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
  for (const WorkerStats& w : workers) {
    sample(out, "strata_rpc_round_trips_total", "endpoint=\"" + label_value(w.endpoint) + "\"",
           w.stats.round_trips);
  }
  family(out, "strata_rpc_decode_steps_total", "counter",
         "Graphs sent to a worker (one per decode step of each of its stages).");
  for (const WorkerStats& w : workers) {
    sample(out, "strata_rpc_decode_steps_total", "endpoint=\"" + label_value(w.endpoint) + "\"",
           w.stats.steps);
  }
  family(out, "strata_rpc_handoff_bytes_total", "counter",
         "Bytes a worker sent straight to the next stage's worker for this server (hand-off).");
  for (const WorkerStats& w : workers) {
    sample(out, "strata_rpc_handoff_bytes_total", "endpoint=\"" + label_value(w.endpoint) + "\"",
           w.stats.handoff_bytes);
  }
  family(out, "strata_rpc_weight_bytes_total", "counter",
         "Weight bytes loaded on a worker: sent over the network, or found in its cache.");
  for (const WorkerStats& w : workers) {
    const std::string ep = "endpoint=\"" + label_value(w.endpoint) + "\"";
    sample(out, "strata_rpc_weight_bytes_total", ep + ",source=\"network\"",
           w.stats.weight_bytes_sent);
    sample(out, "strata_rpc_weight_bytes_total", ep + ",source=\"cache\"",
           w.stats.weight_bytes_cached);
  }
  family(out, "strata_rpc_worker_up", "gauge",
         "1 while the connection to a worker is usable, 0 once it is broken.");
  for (const WorkerStats& w : workers) {
    sample(out, "strata_rpc_worker_up", "endpoint=\"" + label_value(w.endpoint) + "\"",
           w.up ? 1 : 0);
  }
}

RemoteWorkers::RemoteWorkers(const Engine& engine) {
  for (const Stage& stage : engine.stages()) {
    std::shared_ptr<rpc::Connection> c = rpc::remote_device_connection(*stage.device);
    if (!c) continue;
    bool seen = false;
    for (const auto& have : connections_) seen = seen || have == c;
    if (!seen) connections_.push_back(std::move(c));
  }
}

Status RemoteWorkers::status() const {
  for (const auto& c : connections_) {
    if (Status s = c->broken(); !s.is_ok()) {
      // The connection's errors name the worker already; say what it means for the server.
      return Status(ErrorKind::kUnavailable,
                    s.message() +
                        " (a connection to a worker is not re-opened: restart the "
                        "worker, then the server)");
    }
  }
  return Status::ok();
}

std::vector<WorkerStats> RemoteWorkers::snapshot() const {
  std::vector<WorkerStats> out;
  for (const auto& c : connections_) {
    out.push_back(WorkerStats{c->options().endpoint, c->broken().is_ok(), c->stats().snapshot()});
  }
  return out;
}

}  // namespace strata::server
