// What the graph of a stage needs of its device, for the check that every stage's device can
// run it before any weight is uploaded (Engine::create).
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "model/model.h"

namespace strata {

// The ops and weight dtypes of the stage's real graph (graph_needs of build_stage_graph's
// output), so that nobody keeps a list by hand: the graph is built, not run, over a device
// that holds nothing, for a decode step (one token) and for a prompt chunk (two tokens, one
// output), which between them take every path of the builder; with `shift`, also the graph of
// a context shift (build_stage_shift_graph); with `sample`, the last stage's graph ends with
// draws (backend sampling). No weight byte is read.
Result<DeviceCaps> stage_graph_needs(const Model& model, int64_t layer_begin, int64_t layer_end,
                                     bool first, bool last, DType kv_dtype, bool shift = false,
                                     bool sample = false);

}  // namespace strata
