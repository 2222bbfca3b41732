// Embeddings: what llama.cpp's llama-embedding and llama-server's embedding endpoints make of a
// context's final hidden states (ContextParams::embeddings): one vector per text by the model's
// pooling, normalised as asked.
//
// Goals: llama.cpp's pooling types and normalisations, by its names and numbers; the same bytes
// for the same hidden states on every machine (sums in token order, in double). Non-goals:
// rank pooling (a classifier head), models that are not decoders.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/context.h"
#include "model/model.h"

namespace strata {

// llama.cpp's pooling types (GGUF `{arch}.pooling_type` 0..3): every token's vector, their
// mean, the first token's (cls), the last token's.
enum class Pooling : uint8_t { kNone, kMean, kCls, kLast };

const char* pooling_name(Pooling p);
// "none", "mean", "cls", "last"; nullopt for another name.
std::optional<Pooling> pooling_from_name(std::string_view name);

// The model's pooling: its `{arch}.pooling_type` key, or kNone when it has none (llama.cpp's
// default for a decoder). Rank pooling (4) and unknown values are an error naming the key.
Result<Pooling> model_pooling(const Model& model);

// The vectors of one sequence's n_tokens rows of n_embd floats (position order): all of them
// (kNone), or the one the pooling makes.
std::vector<float> pool_rows(const float* rows, int64_t n_tokens, int64_t n_embd, Pooling p);

// llama.cpp's embd_normalize, in place over each n-float vector of `v`: -1 none, 0 scaled so
// that the largest magnitude is 32760 (int16's range), 1 taxicab, 2 euclidean (the default),
// p > 2 the p-norm. A vector of norm 0 becomes zeros.
void normalize_embeddings(std::vector<float>& v, int64_t n, int norm);

// Each input (token ids) as a sequence of `ctx`, a context of embeddings (ContextParams::
// embeddings), emptied before and after: as many inputs a decode as the context has sequences
// and cells, only the rows the pooling needs asked for. Returns each input's vector (pooling
// none: its every token's, one after the other), normalised by `normalize`. An input longer
// than the context is an error naming both; so is an empty one.
Result<std::vector<std::vector<float>>> embed_inputs(
    Context& ctx, const std::vector<std::vector<int32_t>>& inputs, Pooling pooling, int normalize);

}  // namespace strata
