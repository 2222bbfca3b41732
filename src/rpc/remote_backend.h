// A device that a worker serves over the network, seen as a local Device.
//
// Writes and graphs are one-way messages; reads are queued and leave together, as one
// GET_TENSORS, at the next point that needs them (a synchronize, an event, a graph, or a write
// that must stay behind them), and consecutive writes leave as one SET_TENSORS. A graph whose
// bytes equal the last one the stream sent is re-run by id (GRAPH_RECOMPUTE). So a decode step
// of a stage costs one round trip and three messages, whatever the batch size. Optional
// commands are used only when the worker advertised them; without them the stream falls back
// to one SET_TENSOR / GET_TENSOR per region and a full GRAPH_COMPUTE.
//
// Weights (Stream::set_tensor_weights) go in chunks of at most 64 MiB, and small neighbouring
// tensors are packed into blobs of about 1 MiB; each chunk or blob is first offered by content
// hash (SET_TENSOR_HASH), so a worker with a cache receives each weight's bytes once per
// machine, not once per start. The probes are pipelined (up to 64 in flight), so a load waits
// for about one round trip per 64 blobs.
//
// Streams and buffers share the device's one connection; a stream belongs to one thread.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "rpc/client.h"

namespace strata::rpc {

// Chunks of weights at least this large are offered by hash first.
constexpr uint64_t kHashMinBytes = uint64_t{1} << 20;
// Weight uploads are cut into messages of at most this size: each send then has a bound.
constexpr uint64_t kWeightChunkBytes = uint64_t{64} << 20;

// Connects to options.endpoint; the device is named options.name + "[endpoint]".
Result<std::unique_ptr<Device>> remote_device_new(const ClientOptions& options);

// The connection of a device made by remote_device_new (stats, capabilities); nullptr for
// other devices.
std::shared_ptr<Connection> remote_device_connection(Device& device);

// Reconnection (a worker that died and came back): makes `conn`, a connection opened with the
// options of the device's (Connection::open(old->options())), the device's. Buffers and
// streams made before keep the old connection and fail with its error: free them and make new
// ones (Context::sleep, renew_streams and wake; Engine::reload_device). Refused when the new
// worker cannot run an op or a weight dtype that the old one announced, since the layers on
// the device were placed for those. `device` must come from remote_device_new.
Status remote_device_set_connection(Device& device, std::shared_ptr<Connection> conn);

}  // namespace strata::rpc
