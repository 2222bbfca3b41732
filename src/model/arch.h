// Architectures: what differs between the model families strata runs.
//
// An architecture is one ArchDef: how its hyperparameters are read beyond the common keys, the
// tensors each layer has (a table of rows naming a LayerTensor, its shape and whether it must
// be there) and how one layer is built into a graph. Each lives in its own file,
// model/arch_NAME.cc, and is listed once in arch.cc's table; nothing else names an
// architecture. Every layer tensor any architecture uses is a LayerTensor, whose GGUF name is
// given in one table (arch.cc), so loading, placement and synthetic generation enumerate the
// same list.
//
// Non-goal: architectures whose layers are not a residual stream of [n_embd, T] rows (encoders,
// recurrent models); those need more than a table row.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace strata {

class GgufFile;
struct GgufTensorInfo;
struct HParams;
struct LayerWeights;
class LayerGraph;

// Every tensor a layer can have, across architectures. The GGUF name is "blk.N." followed by
// layer_tensor_name(t).
enum class LayerTensor : uint8_t {
  kAttnNorm,      // attn_norm.weight    F32 [n_embd]
  kWq,            // attn_q.weight       [n_embd, n_embd_q]
  kWk,            // attn_k.weight       [n_embd, n_embd_kv]
  kWv,            // attn_v.weight       [n_embd, n_embd_kv]
  kBq,            // attn_q.bias         F32 [n_embd_q]
  kBk,            // attn_k.bias         F32 [n_embd_kv]
  kBv,            // attn_v.bias         F32 [n_embd_kv]
  kQNorm,         // attn_q_norm.weight  F32 [head_dim]
  kKNorm,         // attn_k_norm.weight  F32 [head_dim]
  kWo,            // attn_output.weight  [n_embd_q, n_embd]
  kFfnNorm,       // ffn_norm.weight     F32 [n_embd]
  kWGate,         // ffn_gate.weight     [n_embd, n_ff]
  kWUp,           // ffn_up.weight       [n_embd, n_ff]
  kWDown,         // ffn_down.weight     [n_ff, n_embd]
  kWqkv,          // attn_qkv.weight     [n_embd, n_embd_q + 2 n_embd_kv]: q, k, v rows fused
  kAttnPostNorm,  // post_attention_norm.weight F32 [n_embd]: norm of the attention output
  kFfnPostNorm,   // post_ffw_norm.weight       F32 [n_embd]: norm of the FFN output
  // Mixture of experts: the router and the experts' matrices, expert e's at e * nb[2].
  kFfnGateInp,  // ffn_gate_inp.weight   [n_embd, n_expert]: router logits
  kWGateExps,   // ffn_gate_exps.weight  [n_embd, n_ff_exp, n_expert]
  kWUpExps,     // ffn_up_exps.weight    [n_embd, n_ff_exp, n_expert]
  kWDownExps,   // ffn_down_exps.weight  [n_ff_exp, n_embd, n_expert]
  // gpt-oss: biases everywhere, attention sinks, and per-expert biases (row e: expert e's).
  kBo,           // attn_output.bias      F32 [n_embd]
  kAttnSinks,    // attn_sinks.weight     F32 [n_head]: each query head's sink logit
  kFfnGateInpB,  // ffn_gate_inp.bias     F32 [n_expert]: router bias
  kBGateExps,    // ffn_gate_exps.bias    F32 [n_ff_exp, n_expert]
  kBUpExps,      // ffn_up_exps.bias      F32 [n_ff_exp, n_expert]
  kBDownExps,    // ffn_down_exps.bias    F32 [n_embd, n_expert]
  kCount,
};
inline constexpr size_t kLayerTensorCount = static_cast<size_t>(LayerTensor::kCount);

std::string_view layer_tensor_name(LayerTensor t);

// A dimension of a layer tensor, computed from the hyperparameters (dim_value()).
// kQkv: n_embd_q + 2 n_embd_kv (fused q/k/v); kFf2: 2 n_ff (fused gate and up); kExpert:
// n_expert; kFfExp: n_ff_exp (one expert's feed-forward width); kHead: n_head.
enum class Dim : uint8_t {
  kOne,
  kEmbd,
  kEmbdQ,
  kEmbdKv,
  kHeadDim,
  kFf,
  kQkv,
  kFf2,
  kExpert,
  kFfExp,
  kHead
};
int64_t dim_value(Dim d, const HParams& hp);
// The parts a fused dimension's rows are multiplied in (LayerGraph::mul_mat_rows), in row order:
// kQkv's q, k and v rows, kFf2's gate and up rows; the whole dim_value for any other.
std::vector<int64_t> dim_parts(Dim d, const HParams& hp);

// How synthetic models draw a tensor's values (model/synth.cc); loading ignores it. kRouter:
// a matrix kept in F32 whatever the file's type, as llama-quantize leaves ffn_gate_inp.
enum class TensorRole : uint8_t { kNorm, kBias, kWeight, kRouter };

// Whether a layer has a tensor. The FFN rows of an architecture that comes dense or with
// experts (llama: Mixtral is a llama file with expert_count) say which kind they belong to:
// kDenseFfn rows are required in a model without experts (HParams::n_expert == 0) and absent
// in one with them, kMoeFfn rows the other way round.
enum class Presence : uint8_t { kRequired, kOptional, kDenseFfn, kMoeFfn };

// One row of an architecture's layer table. Vectors (ne1 = kOne) and biases (kBias, also the
// per-expert [n, n_expert] ones) must be F32 in a file; a row with ne2 = kExpert holds one
// [ne0, ne1] matrix per expert.
struct LayerTensorSpec {
  LayerTensor id;
  Dim ne0;
  Dim ne1;
  Dim ne2;
  Presence presence;
  TensorRole role;
};

// Whether layers of the model `hp` describes may have the row's tensor, and must.
bool spec_applies(const LayerTensorSpec& s, const HParams& hp);
bool spec_required(const LayerTensorSpec& s, const HParams& hp);

// The graph of one layer: x is the residual stream F32 [n_embd, T] (a tensor of g's builder);
// the result is written to `dst` when dst >= 0 (the stage's output tensor), else to scratch,
// and its index returned.
using BuildLayerFn = int32_t (*)(LayerGraph& g, const LayerWeights& l, int32_t x, int32_t dst);

// Reads the keys particular to an architecture after the common ones (hparams.cc), and sets
// the defaults it implies (the rope mode, say).
using ReadHParamsFn = Status (*)(const GgufFile& f, HParams& hp);

struct ArchDef {
  std::string_view name;  // general.architecture
  ReadHParamsFn read_hparams;
  std::span<const LayerTensorSpec> layer_tensors;
  BuildLayerFn build_layer;
};

// Every architecture strata runs, in a fixed order.
std::span<const ArchDef* const> arch_all();
// nullptr for an architecture strata does not run.
const ArchDef* arch_find(std::string_view name);
// "llama, qwen2, ..." for error messages.
std::string arch_names();

}  // namespace strata
