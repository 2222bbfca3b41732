// Graphs as bytes, for GRAPH_COMPUTE. Little-endian, fixed layout:
//
//   0  u32 magic kGraphMagic, 4 u32 version (1 or 2), 8 u32 n_tensors, 12 u32 n_nodes
//   16 tensors[n_tensors], 88 bytes each:
//        0 u64 buffer, 8 u64 offset, 16 u32 dtype, 20 u32 reserved (0), 24 i64 ne[4], 56 u64 nb[4]
//   then nodes[n_nodes]; version 1, 60 bytes each:
//        0 u32 op, 4 i32 src[5], 24 i32 out, 28 i32 iparams[4], 44 f32 fparams[4]
//   version 2, 64 bytes each:
//        0 u32 op, 4 i32 src[6], 28 i32 out, 32 i32 iparams[4], 48 f32 fparams[4]
//
// graph_serialize writes version 1 unless a node uses its sixth input (only gpt-oss's
// attention_sink does), so that a worker that reads version 1 only keeps running every graph
// it can run; the split planner never sends it one with attention_sink, an op it does not
// announce (docs/rpc.md). graph_deserialize reads both.
// graph_deserialize trusts nothing: the size must match the counts exactly (checked
// arithmetic), counts are under the limits below, every dtype and op is known, every src/out
// index names a tensor (or is -1 where an input is optional), and graph_validate checks shapes.
// Buffers and placement are the device's check (cpu_graph_compute). Nodes run in order, so a
// graph cannot express a cycle: a node that names a tensor a later node writes reads that
// tensor's memory as it is, like any input.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "graph/graph.h"

namespace strata {

constexpr uint32_t kGraphMagic = 0x31524753;  // bytes 'S' 'G' 'R' '1'
constexpr uint32_t kGraphVersion = 2;         // the newest version this build reads and writes
constexpr uint32_t kGraphVersionFiveSrc = 1;  // nodes of five inputs
constexpr size_t kGraphHeaderBytes = 16;
constexpr size_t kGraphTensorBytes = 88;
// A node's bytes in a graph of `version` (1 or 2).
constexpr size_t graph_node_bytes(uint32_t version) { return version == 1 ? 60 : 64; }
constexpr int graph_node_srcs(uint32_t version) { return version == 1 ? 5 : 6; }

// Denial-of-service bounds. A forward pass of the largest model we run (126 layers, ~20 nodes
// and ~30 tensors per layer) needs under 8k of each; 64k leaves room and caps a hostile graph
// at ~9.6 MiB of decoded structs and 64k node validations.
constexpr uint32_t kMaxGraphTensors = 1 << 16;
constexpr uint32_t kMaxGraphNodes = 1 << 16;

std::vector<uint8_t> graph_serialize(const Graph& g);
Result<Graph> graph_deserialize(std::span<const uint8_t> bytes);

}  // namespace strata
