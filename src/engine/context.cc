#include "engine/context.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <map>

#include "core/check.h"
#include "core/sample.h"
#include "engine/graph_builder.h"

namespace strata {
namespace {

// Cell lists are padded to a multiple of this so that consecutive decode steps have the same
// graph shapes (a remote device re-runs a cached graph when the shape has not changed).
constexpr int64_t kListPad = 256;
// The draws' entry lists are padded to a multiple of this for the same reason: a penalty window
// grows by a token per step until it is full.
constexpr int64_t kEntryPad = 64;

}  // namespace

struct Context::StageRuntime {
  const Stage* stage = nullptr;
  std::unique_ptr<Stream> stream;
  std::unique_ptr<Buffer> kv;
  std::vector<TensorRef> k_cache, v_cache;
  std::unique_ptr<Buffer> io;
  std::unique_ptr<Buffer> scratch;
  std::unique_ptr<Buffer> rope;  // the rope rate tables, when the model has them
  TensorRef rope_rates[2];
  std::vector<float> hidden;  // host staging of this stage's output hidden state
  Event hidden_ready;         // completes when `hidden` holds this micro-batch's output
  // The last step's graph, built from `graph_tensors` into the scratch buffer `graph_scratch`
  // (handle, size): the next step with the same tensors runs it again instead of building
  // it (a decode step's graph is the same step after step: lists are padded, the io layout
  // depends on the batch's sizes only). Dropped when the context sleeps.
  std::shared_ptr<const Graph> graph;
  StageTensors graph_tensors;
  std::pair<uint64_t, uint64_t> graph_scratch{0, 0};

  // Grows `buf` to at least `need` bytes (by half again, to avoid growing every step).
  Status ensure(std::unique_ptr<Buffer>& buf, uint64_t need) {
    if (buf && buf->size() >= need) return Status::ok();
    const uint64_t size = std::max(need, buf ? buf->size() + buf->size() / 2 : need);
    buf.reset();
    STRATA_ASSIGN_OR_RETURN(buf, stage->device->alloc_buffer(size));
    return Status::ok();
  }
};

Context::Context(const Engine& engine, const ContextParams& p)
    : engine_(engine), params_(p), cells_(p.n_ctx, p.n_seq) {}

Context::~Context() = default;

Result<std::unique_ptr<Context>> Context::create(const Engine& engine, const ContextParams& p) {
  if (p.n_ctx < 1 || p.n_ctx > (int64_t{1} << 24)) {
    return out_of_range("context size " + std::to_string(p.n_ctx) + " outside [1, 2^24]");
  }
  if (p.n_batch < 1 || p.n_seq < 1 || p.n_seq > 4096) {
    return out_of_range("n_batch must be >= 1 and n_seq in [1, 4096]");
  }
  STRATA_RETURN_IF_ERROR(kv_dtype_check(p.kv_dtype, engine.model().hparams()));
  auto ctx = std::unique_ptr<Context>(new Context(engine, p));
  ctx->n_vocab_ = engine.model().hparams().n_vocab;
  ctx->out_width_ = p.embeddings ? engine.model().hparams().n_embd : ctx->n_vocab_;
  ctx->can_sample_ =
      engine.stages().back().device->caps().ops.test(static_cast<uint32_t>(Op::kSample));
  for (const Stage& s : engine.stages()) {
    auto rt = std::make_unique<StageRuntime>();
    rt->stage = &s;
    rt->stream = ctx->new_stream(*s.device);
    ctx->stages_.push_back(std::move(rt));
  }
  STRATA_RETURN_IF_ERROR(ctx->alloc_buffers());
  if (engine.model().rope_uses_tables()) {
    const std::array<RopeTable, 2> tables =
        engine.model().rope_tables(p.n_ctx_seq > 0 ? p.n_ctx_seq : p.n_ctx);
    ctx->fingerprint_ = seq_state_fingerprint(engine.model(), p.kv_dtype, &tables);
  } else {
    ctx->fingerprint_ = seq_state_fingerprint(engine.model(), p.kv_dtype, nullptr);
  }
  return ctx;
}

// The KV cache of every stage, and the rope tables: what a context holds on its devices beside
// the step buffers, which grow on demand.
Status Context::alloc_buffers() {
  const HParams& hp = engine_.model().hparams();
  const ContextParams& p = params_;
  const uint64_t row = dtype_row_bytes(p.kv_dtype, hp.n_embd_kv());
  for (auto& rt : stages_) {
    const Stage& s = *rt->stage;
    const int64_t n_layers = s.layer_end - s.layer_begin;
    const uint64_t per_cache = device_align_up(row * static_cast<uint64_t>(p.n_ctx));
    if (n_layers == 0) continue;
    auto kv = s.device->alloc_buffer(per_cache * 2 * static_cast<uint64_t>(n_layers));
    if (!kv.is_ok()) {
      return kv.status().with_context("KV cache of " + std::to_string(n_layers) + " layers on " +
                                      s.device->info().name);
    }
    rt->kv = std::move(kv).value();
    // Cleared now, so that its pages are mapped before the first request writes its cells (11
    // ms of page faults in the first prompt of a 20-layer model; docs/engine.md).
    if (Status st = rt->kv->clear(0); !st.is_ok()) {
      return st.with_context("KV cache on " + s.device->info().name);
    }
    rt->k_cache.clear();
    rt->v_cache.clear();
    for (int64_t l = 0; l < n_layers; ++l) {
      const uint64_t off = per_cache * 2 * static_cast<uint64_t>(l);
      rt->k_cache.push_back(kv_cache_tensor(rt->kv->handle(), off, p.kv_dtype, hp, p.n_ctx));
      rt->v_cache.push_back(
          kv_cache_tensor(rt->kv->handle(), off + per_cache, p.kv_dtype, hp, p.n_ctx));
    }
  }
  if (engine_.model().rope_uses_tables()) STRATA_RETURN_IF_ERROR(upload_rope_tables());
  return Status::ok();
}

void Context::sleep() {
  (void)drain();
  cells_.clear();
  for (auto& rt : stages_) {
    rt->kv.reset();
    rt->k_cache.clear();
    rt->v_cache.clear();
    rt->io.reset();
    rt->scratch.reset();
    rt->rope.reset();
    rt->hidden = {};
    rt->graph.reset();
  }
  asleep_ = true;
}

Status Context::wake() {
  if (!asleep_) return Status::ok();
  if (engine_.asleep()) return unavailable("the engine is asleep: wake it first");
  Status s = alloc_buffers();
  if (!s.is_ok()) {
    for (auto& rt : stages_) rt->kv.reset();
    return s;
  }
  asleep_ = false;
  return Status::ok();
}

void Context::renew_streams(const Device& device) {
  STRATA_CHECK(asleep_, "streams are renewed while the context sleeps");
  for (auto& rt : stages_) {
    if (rt->stage->device == &device) rt->stream = new_stream(*rt->stage->device);
  }
}

std::unique_ptr<Stream> Context::new_stream(Device& device) const {
  return params_.pools.pool != nullptr ? device.create_stream_on(params_.pools)
                                       : device.create_stream();
}

Status Context::check_awake() const {
  if (asleep_ || engine_.asleep()) return unavailable("the model is asleep (idle): wake it first");
  return Status::ok();
}

// The tables depend on the longest sequence (LongRoPE's short or long factors), so they belong
// to the context; every stage gets its own copy, written once, by a stream of its own that
// writes them as weights: they are constants of the model and the context, not traffic of the
// decode steps (the RPC stats count a weight stream's messages as the load).
Status Context::upload_rope_tables() {
  const HParams& hp = engine_.model().hparams();
  const int64_t n_ctx_seq = params_.n_ctx_seq > 0 ? params_.n_ctx_seq : params_.n_ctx;
  const std::array<RopeTable, 2> tables = engine_.model().rope_tables(n_ctx_seq);
  const int64_t n = hp.n_rot / 2;
  std::vector<float> both;
  for (const RopeTable& t : tables) both.insert(both.end(), t.rate.begin(), t.rate.end());
  for (int kind = 0; kind < 2; ++kind) rope_mscale_[kind] = tables[kind].mscale;
  for (auto& rt : stages_) {
    const uint64_t bytes = 4 * both.size();
    STRATA_RETURN_IF_ERROR(rt->ensure(rt->rope, bytes));
    for (int kind = 0; kind < 2; ++kind) {
      rt->rope_rates[kind] =
          make_tensor(rt->rope->handle(), 4 * static_cast<uint64_t>(kind * n), DType::kF32, n);
    }
    const std::unique_ptr<Stream> load = rt->stage->device->create_stream();
    load->set_tensor_weights(
        make_tensor(rt->rope->handle(), 0, DType::kI8, static_cast<int64_t>(bytes)), both.data(),
        bytes);
    Status s = load->synchronize();
    if (!s.is_ok()) return s.with_context("rope tables on " + rt->stage->device->info().name);
  }
  return Status::ok();
}

Status Context::decode(const Batch& batch, StepDraws* draws) {
  STRATA_RETURN_IF_ERROR(check_awake());
  const int64_t n = batch.size();
  if (n == 0) return invalid_argument("empty batch");
  if (static_cast<int64_t>(batch.pos.size()) != n || static_cast<int64_t>(batch.seq.size()) != n ||
      static_cast<int64_t>(batch.output.size()) != n) {
    return invalid_argument("batch arrays differ in length");
  }
  std::map<int32_t, int32_t> start;  // seq -> length before this batch, for the rollback
  for (int64_t i = 0; i < n; ++i) {
    if (batch.tokens[i] < 0 || batch.tokens[i] >= n_vocab_) {
      return out_of_range("token " + std::to_string(batch.tokens[i]) +
                          " outside the vocabulary [0, " + std::to_string(n_vocab_) + ")");
    }
    if (batch.seq[i] < 0 || batch.seq[i] >= params_.n_seq) {
      return out_of_range("sequence id " + std::to_string(batch.seq[i]) + " outside [0, " +
                          std::to_string(params_.n_seq) + ")");
    }
    start.emplace(batch.seq[i], cells_.seq_len(batch.seq[i]));
  }
  int64_t total_outputs = 0;
  for (uint8_t o : batch.output) total_outputs += o ? 1 : 0;
  if (draws != nullptr && params_.embeddings) {
    return invalid_argument("a context of embeddings has no logits to sample or read");
  }
  if (draws != nullptr) {
    auto check_row = [&](int32_t o) {
      if (o >= 0 && o < total_outputs) return Status::ok();
      return out_of_range("a draw names output row " + std::to_string(o) + " of a batch of " +
                          std::to_string(total_outputs) + " outputs");
    };
    for (const StepDraws::Draw& d : draws->draws()) STRATA_RETURN_IF_ERROR(check_row(d.output));
    for (int32_t o : draws->logits_rows()) STRATA_RETURN_IF_ERROR(check_row(o));
    if (draws->size() > 0 && !can_sample_) {
      return unsupported(engine_.stages().back().device->info().name +
                         " cannot run op 'sample' (backend sampling): update its worker");
    }
    draws->prepare_results();
  }
  logits_.resize(static_cast<size_t>(total_outputs * out_width_));
  n_outputs_ = 0;
  for (int64_t b = 0; b < n; b += params_.n_batch) {
    Status s = decode_ubatch(batch, b, std::min(n, b + params_.n_batch), draws);
    if (!s.is_ok()) {
      for (const auto& [seq, len] : start) cells_.seq_truncate(seq, len);
      n_outputs_ = 0;
      return s;
    }
  }
  return Status::ok();
}

Status Context::decode_ubatch(const Batch& batch, int64_t begin, int64_t end, StepDraws* draws) {
  const HParams& hp = engine_.model().hparams();
  const int64_t T = end - begin;

  // Cells for the new tokens, and each sequence's list.
  std::vector<int32_t> kv_idx(T);
  std::vector<int32_t> list_of_seq(params_.n_seq, -1);
  std::vector<int32_t> lists;
  std::vector<int32_t> tok(2 * T);
  std::vector<int32_t> out_rows;
  for (int64_t i = 0; i < T; ++i) {
    const int32_t seq = batch.seq[begin + i];
    STRATA_ASSIGN_OR_RETURN(kv_idx[i],
                            cells_.append(seq, batch.pos[begin + i], batch.tokens[begin + i]));
    if (list_of_seq[seq] < 0) {
      list_of_seq[seq] = static_cast<int32_t>(lists.size());
      lists.push_back(seq);
    }
    tok[2 * i] = list_of_seq[seq];
    tok[2 * i + 1] = batch.pos[begin + i] + 1;
    if (batch.output[begin + i]) out_rows.push_back(static_cast<int32_t>(i));
  }
  int64_t max_len = 1;
  for (int32_t seq : lists) max_len = std::max<int64_t>(max_len, cells_.seq_len(seq));
  max_len = std::min<int64_t>((max_len + kListPad - 1) / kListPad * kListPad, params_.n_ctx);
  const int64_t n_lists = static_cast<int64_t>(lists.size());
  const int64_t n_out = static_cast<int64_t>(out_rows.size());

  // One host blob of every input: one write per stage.
  struct Part {
    const void* data;
    uint64_t bytes;
    uint64_t offset;
  };
  std::vector<int32_t> cells(static_cast<size_t>(max_len * n_lists), 0);
  for (int64_t l = 0; l < n_lists; ++l) {
    const auto& c = cells_.cells(lists[l]);
    std::copy(c.begin(), c.end(), cells.begin() + l * max_len);
  }
  std::vector<Part> parts = {
      {batch.tokens.data() + begin, 4 * static_cast<uint64_t>(T), 0},
      {batch.pos.data() + begin, 4 * static_cast<uint64_t>(T), 0},
      {kv_idx.data(), 4 * static_cast<uint64_t>(T), 0},
      {cells.data(), 4 * cells.size(), 0},
      {tok.data(), 4 * tok.size(), 0},
      {out_rows.data(), 4 * std::max<uint64_t>(out_rows.size(), 1), 0},
  };
  if (out_rows.empty()) out_rows.push_back(0);  // keeps the part's pointer valid
  parts.back().data = out_rows.data();
  uint64_t blob = 0;
  for (Part& p : parts) {
    p.offset = blob;
    blob = device_align_up(blob + p.bytes);
  }

  // Backend sampling: the draws from this micro-batch's outputs, and the rows of logits to read
  // back. Their inputs follow the blob, in the last stage's write only.
  const int64_t base = n_outputs_;
  std::vector<int32_t> local;  // draw indices
  std::vector<int32_t> local_rows;
  std::vector<int32_t> read_rows;
  int64_t max_entries = 0;
  if (draws != nullptr) {
    for (int32_t d = 0; d < draws->size(); ++d) {
      const StepDraws::Draw& dr = draws->draws()[static_cast<size_t>(d)];
      if (dr.output < base || dr.output >= base + n_out) continue;
      local.push_back(d);
      local_rows.push_back(static_cast<int32_t>(dr.output - base));
      max_entries = std::max<int64_t>(max_entries, dr.n_entries);
    }
    for (int32_t o : draws->logits_rows()) {
      if (o >= base && o < base + n_out) read_rows.push_back(static_cast<int32_t>(o - base));
    }
    std::sort(read_rows.begin(), read_rows.end());
    read_rows.erase(std::unique(read_rows.begin(), read_rows.end()), read_rows.end());
  }
  const int64_t n_draws = static_cast<int64_t>(local.size());
  bool identity = n_draws == n_out;
  for (int64_t i = 0; identity && i < n_draws; ++i) identity = local_rows[i] == i;
  const int64_t width =
      max_entries == 0 ? 1 : (max_entries + kEntryPad - 1) / kEntryPad * kEntryPad;
  const int64_t out_words = draws != nullptr ? draws->out_words() : 1;
  const uint64_t at_rows = blob;
  const uint64_t at_settings =
      at_rows + (identity ? 0 : device_align_up(4 * static_cast<uint64_t>(n_draws)));
  const uint64_t at_entries =
      at_settings + device_align_up(4 * kSampleWords * static_cast<uint64_t>(n_draws));
  const uint64_t at_uniforms =
      at_entries + device_align_up(8 * static_cast<uint64_t>(width * n_draws));
  const uint64_t sample_end =
      n_draws > 0 ? at_uniforms + device_align_up(4 * static_cast<uint64_t>(n_draws)) : blob;

  inputs_.assign(sample_end, 0);
  for (const Part& p : parts) std::memcpy(inputs_.data() + p.offset, p.data, p.bytes);
  if (n_draws > 0) {
    int32_t* rows = reinterpret_cast<int32_t*>(inputs_.data() + at_rows);
    int32_t* settings = reinterpret_cast<int32_t*>(inputs_.data() + at_settings);
    int32_t* entries = reinterpret_cast<int32_t*>(inputs_.data() + at_entries);
    float* uniforms = reinterpret_cast<float*>(inputs_.data() + at_uniforms);
    for (int64_t i = 0; i < n_draws; ++i) {
      const int32_t d = local[static_cast<size_t>(i)];
      if (!identity) rows[i] = local_rows[static_cast<size_t>(i)];
      std::memcpy(settings + i * kSampleWords, draws->words(d), 4 * kSampleWords);
      const size_t n_entries =
          static_cast<size_t>(draws->draws()[static_cast<size_t>(d)].n_entries);
      // A draw without entries may have no array at all: memcpy from null is undefined.
      if (n_entries > 0) std::memcpy(entries + i * 2 * width, draws->entries(d), 8 * n_entries);
      uniforms[i] = draws->uniform(d);
    }
  }

  const uint64_t hidden_bytes = device_align_up(4 * static_cast<uint64_t>(hp.n_embd * T));
  // A stage's io buffer: the step's inputs (the draws' too on the last stage), the hidden state
  // in, the output, the draws' results.
  struct IoLayout {
    uint64_t in_bytes, hidden_off, out_off, drawn_off, end;
  };
  auto io_layout = [&](const Stage& st) {
    IoLayout l;
    const uint64_t out_bytes =
        st.last
            ? device_align_up(4 * static_cast<uint64_t>(out_width_ * std::max<int64_t>(n_out, 1)))
            : hidden_bytes;
    l.in_bytes = st.last ? sample_end : blob;
    l.hidden_off = l.in_bytes;
    l.out_off = l.in_bytes + (st.first ? 0 : hidden_bytes);
    l.drawn_off = l.out_off + out_bytes;
    l.end = l.drawn_off +
            (st.last ? device_align_up(4 * static_cast<uint64_t>(out_words * n_draws)) : 0);
    return l;
  };

  bool input_handed_off = false;  // the stage's input went to it from the previous device
  for (size_t si = 0; si < stages_.size(); ++si) {
    StageRuntime& rt = *stages_[si];
    const Stage& st = *rt.stage;
    // Work of earlier stages may be queued already: end it before returning an error, so that
    // nothing writes into the staging after this call.
    auto fail = [&](const Status& s) {
      (void)drain();
      return s.with_context("stage " + std::to_string(si) + " on " + st.device->info().name);
    };
    const IoLayout layout = io_layout(st);
    const uint64_t in_bytes = layout.in_bytes;
    const uint64_t hidden_off = layout.hidden_off;
    const uint64_t out_off = layout.out_off;
    const uint64_t drawn_off = layout.drawn_off;
    if (Status s = rt.ensure(rt.io, layout.end); !s) return fail(s);
    const uint64_t io = rt.io->handle();

    StageTensors t;
    t.n_tokens = T;
    t.n_outputs = n_out;
    t.ids = make_tensor(io, parts[0].offset, DType::kI32, T);
    t.pos = make_tensor(io, parts[1].offset, DType::kI32, T);
    t.kv_idx = make_tensor(io, parts[2].offset, DType::kI32, T);
    t.cells = make_tensor(io, parts[3].offset, DType::kI32, max_len, n_lists);
    t.tok = make_tensor(io, parts[4].offset, DType::kI32, 2, T);
    t.out_rows = make_tensor(io, parts[5].offset, DType::kI32, std::max<int64_t>(n_out, 1));
    t.hidden_in = make_tensor(io, hidden_off, DType::kF32, hp.n_embd, T);
    t.out = st.last ? make_tensor(io, out_off, DType::kF32, out_width_, std::max<int64_t>(n_out, 1))
                    : make_tensor(io, out_off, DType::kF32, hp.n_embd, T);
    t.embeddings = st.last && params_.embeddings;
    t.k_cache = rt.k_cache;
    t.v_cache = rt.v_cache;
    for (int kind = 0; kind < 2; ++kind) {
      t.rope_rates[kind] = rt.rope_rates[kind];
      t.rope_mscale[kind] = rope_mscale_[kind];
    }

    if (st.last && n_out == 0) {
      // Nothing asked for logits: the last stage still has to fill the KV cache of its layers.
      t.n_outputs = 1;
    }
    if (st.last && n_draws > 0) {
      t.n_draws = n_draws;
      if (!identity) t.draw_rows = make_tensor(io, at_rows, DType::kI32, n_draws);
      t.draw_settings = make_tensor(io, at_settings, DType::kI32, kSampleWords, n_draws);
      t.draw_entries = make_tensor(io, at_entries, DType::kI32, 2, width, n_draws);
      t.draw_uniforms = make_tensor(io, at_uniforms, DType::kF32, n_draws);
      t.drawn = make_tensor(io, drawn_off, DType::kI32, out_words, n_draws);
    }
    if (!rt.graph || rt.graph_tensors != t || !rt.scratch ||
        rt.graph_scratch != std::make_pair(rt.scratch->handle(), rt.scratch->size())) {
      GraphBuilder b;
      build_stage_graph(b, engine_.model(), *st.weights, st.layer_begin, st.layer_end, st.first,
                        st.last, t);
      if (Status s = rt.ensure(rt.scratch, b.plan(kDeviceAlign)); !s) return fail(s);
      rt.graph = std::make_shared<const Graph>(b.finish(rt.scratch->handle()));
      rt.graph_tensors = t;
      rt.graph_scratch = {rt.scratch->handle(), rt.scratch->size()};
    }
    const std::shared_ptr<const Graph>& graph = rt.graph;

    rt.stream->set_tensor(make_tensor(io, 0, DType::kI8, static_cast<int64_t>(in_bytes)),
                          inputs_.data(), in_bytes);
    if (!st.first && !input_handed_off) {
      const StageRuntime& prev = *stages_[si - 1];
      const size_t bytes = 4 * prev.hidden.size();
      // Copied once the previous stage's read is done: a stream that copies asynchronously waits
      // for it on its own queue, one that does not (a remote stream with
      // ClientOptions::async_copy off) on this thread, and the stages then run one by one.
      rt.stream->set_tensor_after(t.hidden_in, prev.hidden.data(), bytes, prev.hidden_ready);
    }
    // Hand-off: the output goes from this stage's device straight into the next stage's io
    // buffer (grown now, before anything of this step is queued on it), when both can.
    bool handed_off = false;
    if (!st.last) {
      StageRuntime& next = *stages_[si + 1];
      const IoLayout next_layout = io_layout(*next.stage);
      if (Status s = next.ensure(next.io, next_layout.end); !s) return fail(s);
      handed_off = rt.stream->handoff(
          *next.stream, t.out,
          make_tensor(next.io->handle(), next_layout.hidden_off, DType::kF32, hp.n_embd, T),
          4 * static_cast<size_t>(hp.n_embd * T));
    }
    input_handed_off = handed_off;
    rt.stream->set_batch(T > 1);
    rt.stream->set_op_times(op_times_);
    rt.stream->compute(graph);
    if (st.last && draws == nullptr) {
      if (n_out > 0) {
        rt.stream->get_tensor(t.out, logits_.data() + n_outputs_ * out_width_,
                              4 * static_cast<size_t>(n_out * out_width_));
      }
    } else if (st.last) {
      // Only the draws' results, and the logits of the rows sampled on the CPU (a run of
      // consecutive rows in one region).
      for (size_t i = 0; i < read_rows.size();) {
        size_t j = i + 1;
        while (j < read_rows.size() && read_rows[j] == read_rows[j - 1] + 1) ++j;
        const int64_t r = read_rows[i];
        const int64_t len = static_cast<int64_t>(j - i);
        const uint64_t row_bytes = 4 * static_cast<uint64_t>(n_vocab_);
        rt.stream->get_tensor(make_tensor(io, out_off + row_bytes * static_cast<uint64_t>(r),
                                          DType::kF32, n_vocab_, len),
                              logits_.data() + (n_outputs_ + r) * n_vocab_,
                              row_bytes * static_cast<size_t>(len));
        i = j;
      }
      if (n_draws > 0) {
        drawn_.resize(static_cast<size_t>(out_words * n_draws));
        rt.stream->get_tensor(t.drawn, drawn_.data(), 4 * drawn_.size());
      }
    } else if (!handed_off) {
      rt.hidden.resize(static_cast<size_t>(hp.n_embd * T));
      rt.stream->get_tensor(t.out, rt.hidden.data(), 4 * rt.hidden.size());
    }
    // Only the last stage is synchronised: an earlier one is waited for by the next stage's copy,
    // or, when it handed off, by the next stage's device.
    if (st.last) {
      Status s = rt.stream->synchronize();
      if (!s.is_ok()) {
        // A later stage fails when an earlier one did: report the earliest error.
        Status first = drain();
        return first.is_ok() ? fail(s) : first;
      }
    } else {
      // A stage that handed its output off is not waited for by the next: no event, and no
      // round trip for one.
      rt.hidden_ready = handed_off ? Event() : rt.stream->record();
      rt.stream->flush();
    }
  }
  for (int64_t i = 0; i < n_draws; ++i) {
    std::memcpy(draws->result(local[static_cast<size_t>(i)]), drawn_.data() + i * out_words,
                4 * static_cast<size_t>(out_words));
  }
  n_outputs_ += n_out;
  return Status::ok();
}

Status Context::drain() {
  Status first;
  for (size_t si = 0; si < stages_.size(); ++si) {
    Status s = stages_[si]->stream->synchronize();
    stages_[si]->hidden_ready = Event();
    if (!s.is_ok() && first.is_ok()) {
      first = s.with_context("stage " + std::to_string(si) + " on " +
                             stages_[si]->stage->device->info().name);
    }
  }
  return first;
}

// --- Context shift ---------------------------------------------------------------------------

Status Context::seq_shift(int32_t seq, int32_t n_keep, int32_t n_discard) {
  if (seq < 0 || seq >= params_.n_seq) {
    return out_of_range("sequence id " + std::to_string(seq) + " outside [0, " +
                        std::to_string(params_.n_seq) + ")");
  }
  STRATA_RETURN_IF_ERROR(check_awake());
  const int32_t len = cells_.seq_len(seq);
  if (n_keep < 0 || n_discard < 1 || n_keep > len - n_discard) {
    return invalid_argument("shift of sequence " + std::to_string(seq) + " (" +
                            std::to_string(len) + " positions): keep " + std::to_string(n_keep) +
                            ", discard " + std::to_string(n_discard) +
                            " must have keep >= 0, discard >= 1, keep + discard <= length");
  }
  for (const auto& rt : stages_) {
    const Stage& st = *rt->stage;
    if (st.layer_end > st.layer_begin &&
        !st.device->caps().ops.test(static_cast<uint32_t>(Op::kRopeShift))) {
      return unsupported(st.device->info().name +
                         " cannot run op 'rope_shift' (context shift): update its worker");
    }
  }
  // Copy on write needs a free cell per shared cell that moves; the discarded cells held by
  // this sequence alone come free first.
  const std::vector<int32_t>& list = cells_.cells(seq);
  int64_t shared = 0, freed = 0;
  for (int32_t p = n_keep; p < len; ++p) {
    const bool own = cells_.refs(list[p]) == 1;
    if (p < n_keep + n_discard) {
      freed += own ? 1 : 0;
    } else {
      shared += own ? 0 : 1;
    }
  }
  if (shared > cells_.n_free() + freed) {
    return out_of_range("shift of sequence " + std::to_string(seq) + ": " + std::to_string(shared) +
                        " cells shared with other sequences need copies, " +
                        std::to_string(cells_.n_free() + freed) + " cells are free");
  }

  cells_.seq_remove(seq, n_keep, n_keep + n_discard);
  std::vector<int32_t> copy_src, copy_dst;
  const int32_t new_len = cells_.seq_len(seq);
  for (int32_t p = n_keep; p < new_len; ++p) {
    if (cells_.refs(cells_.cells(seq)[p]) == 1) continue;
    Result<std::pair<int32_t, int32_t>> moved = cells_.seq_unshare(seq, p);
    STRATA_CHECK(moved.is_ok(), "cells counted free above");
    copy_src.push_back(moved->first);
    copy_dst.push_back(moved->second);
  }
  const std::vector<int32_t> cells(cells_.cells(seq).begin() + n_keep, cells_.cells(seq).end());
  if (cells.empty()) return Status::ok();
  const std::vector<int32_t> delta(cells.size(), -n_discard);

  const int64_t n = static_cast<int64_t>(cells.size());
  const int64_t n_copies = static_cast<int64_t>(copy_src.size());
  const uint64_t at_dst = device_align_up(4 * static_cast<uint64_t>(n_copies));
  const uint64_t at_cells = at_dst + at_dst;
  const uint64_t at_delta = at_cells + device_align_up(4 * static_cast<uint64_t>(n));
  const uint64_t blob = at_delta + device_align_up(4 * static_cast<uint64_t>(n));
  inputs_.assign(blob, 0);
  // An empty vector's data() may be null, which memcpy may not be given even for 0 bytes.
  auto put = [&](uint64_t at, const std::vector<int32_t>& v) {
    if (!v.empty()) std::memcpy(inputs_.data() + at, v.data(), 4 * v.size());
  };
  put(0, copy_src);
  put(at_dst, copy_dst);
  put(at_cells, cells);
  put(at_delta, delta);

  Status failed;
  for (size_t si = 0; si < stages_.size() && failed.is_ok(); ++si) {
    StageRuntime& rt = *stages_[si];
    const Stage& st = *rt.stage;
    if (st.layer_end == st.layer_begin) continue;
    failed = rt.ensure(rt.io, blob);
    if (!failed.is_ok()) break;
    const uint64_t io = rt.io->handle();
    ShiftTensors t;
    t.n_copies = n_copies;
    t.copy_src = make_tensor(io, 0, DType::kI32, std::max<int64_t>(n_copies, 1));
    t.copy_dst = make_tensor(io, at_dst, DType::kI32, std::max<int64_t>(n_copies, 1));
    t.cells = make_tensor(io, at_cells, DType::kI32, n);
    t.delta = make_tensor(io, at_delta, DType::kI32, n);
    t.k_cache = rt.k_cache;
    t.v_cache = rt.v_cache;
    for (int kind = 0; kind < 2; ++kind) t.rope_rates[kind] = rt.rope_rates[kind];
    GraphBuilder b;
    build_stage_shift_graph(b, engine_.model(), st.layer_begin, st.layer_end, t);
    failed = rt.ensure(rt.scratch, b.plan(kDeviceAlign));
    if (!failed.is_ok()) break;
    rt.stream->set_tensor(make_tensor(io, 0, DType::kI8, static_cast<int64_t>(blob)),
                          inputs_.data(), blob);
    rt.stream->compute(std::make_shared<const Graph>(b.finish(rt.scratch->handle())));
    rt.stream->flush();
  }
  // Every stage shifts its own layers: they run side by side, and all must have finished.
  const Status drained = drain();
  if (failed.is_ok()) failed = drained;
  if (!failed.is_ok()) {
    cells_.seq_truncate(seq, n_keep);
    return failed.with_context("shifting sequence " + std::to_string(seq));
  }
  return Status::ok();
}

// --- Sequence state ------------------------------------------------------------------------

Status Context::transfer_rows(int32_t seq, const SeqStateLayout& layout, uint8_t* read_into,
                              const uint8_t* write_from) {
  STRATA_RETURN_IF_ERROR(check_awake());
  // Cells taken one after the other sit side by side: one region per run of consecutive cells.
  struct Run {
    int32_t cell, pos, len;
  };
  std::vector<Run> runs;
  const std::vector<int32_t>& cells = cells_.cells(seq);
  for (int32_t p = 0; p < static_cast<int32_t>(cells.size()); ++p) {
    if (!runs.empty() && runs.back().cell + runs.back().len == cells[p]) {
      ++runs.back().len;
    } else {
      runs.push_back({cells[p], p, 1});
    }
  }
  // A cell's values of one kv head: the caches are head-major (alloc_buffers), one plane per kv
  // head, as the state's rows are (SeqStateLayout).
  const uint64_t seg = layout.head_bytes();
  // A remote stream sends its queued reads or writes as one batched message: keep each under
  // the protocol's region count and a size a worker takes without strain.
  constexpr size_t kMaxRegions = 4096;
  constexpr uint64_t kMaxBatchBytes = uint64_t{64} << 20;
  for (auto& rt : stages_) {
    size_t regions = 0;
    uint64_t batch_bytes = 0;
    const int64_t n_layers = rt->stage->layer_end - rt->stage->layer_begin;
    for (int64_t li = 0; li < n_layers; ++li) {
      const uint64_t layer = static_cast<uint64_t>(rt->stage->layer_begin + li);
      for (int kv = 0; kv < 2; ++kv) {
        const TensorRef& cache = kv == 0 ? rt->k_cache[li] : rt->v_cache[li];
        STRATA_CHECK(cache.nb[1] == seg && static_cast<uint64_t>(cache.ne[2]) == layout.n_planes,
                     "transfer_rows: the cache is not head-major");
        for (uint64_t plane = 0; plane < layout.n_planes; ++plane) {
          const uint64_t host = layout.plane_offset(layer, kv, plane);
          const uint64_t device = cache.offset + plane * cache.nb[2];
          for (const Run& r : runs) {
            const uint64_t bytes = seg * static_cast<uint64_t>(r.len);
            const TensorRef region =
                make_tensor(cache.buffer, device + seg * static_cast<uint64_t>(r.cell), DType::kI8,
                            static_cast<int64_t>(bytes));
            const uint64_t at = host + seg * static_cast<uint64_t>(r.pos);
            if (read_into != nullptr) {
              rt->stream->get_tensor(region, read_into + at, bytes);
            } else {
              // Read when the write leaves, not copied now: the state outlives the drain below,
              // and a remote stream would otherwise copy every row into its staging first.
              rt->stream->set_tensor_after(region, write_from + at, bytes, Event());
            }
            batch_bytes += bytes;
            if (++regions >= kMaxRegions || batch_bytes >= kMaxBatchBytes) {
              rt->stream->flush();
              regions = 0;
              batch_bytes = 0;
            }
          }
        }
      }
    }
    rt->stream->flush();
  }
  return drain();
}

Result<HostBytes> Context::seq_state_save(int32_t seq) {
  static_assert(std::endian::native == std::endian::little, "states are little-endian");
  if (seq < 0 || seq >= params_.n_seq) {
    return out_of_range("sequence id " + std::to_string(seq) + " outside [0, " +
                        std::to_string(params_.n_seq) + ")");
  }
  const uint32_t n = static_cast<uint32_t>(cells_.seq_len(seq));
  HostBytes state = seq_state_alloc(fingerprint_, n);
  const SeqStateLayout layout{n, seq_state_row_bytes(fingerprint_), fingerprint_.n_head_kv};
  std::memcpy(state.data() + layout.tokens_offset(), cells_.tokens(seq).data(), 4 * size_t{n});
  STRATA_RETURN_IF_ERROR(transfer_rows(seq, layout, state.data(), nullptr));
  seq_state_seal(fingerprint_, n, state);
  return state;
}

uint64_t Context::seq_state_max_bytes() const {
  return kSeqStateHeaderBytes +
         seq_state_payload_bytes(fingerprint_, static_cast<uint64_t>(params_.n_ctx));
}

Status Context::seq_state_restore(int32_t seq, std::span<const uint8_t> state) {
  if (seq < 0 || seq >= params_.n_seq) {
    return out_of_range("sequence id " + std::to_string(seq) + " outside [0, " +
                        std::to_string(params_.n_seq) + ")");
  }
  STRATA_ASSIGN_OR_RETURN(
      const SeqStateHeader h,
      seq_state_check(state, fingerprint_, static_cast<uint32_t>(params_.n_ctx)));
  // The cells the sequence frees by being replaced, plus the free ones, must hold the state.
  int64_t own = 0;
  for (int32_t c : cells_.cells(seq)) own += cells_.refs(c) == 1 ? 1 : 0;
  if (cells_.n_free() + own < h.n_tokens) {
    return out_of_range("a state of " + std::to_string(h.n_tokens) +
                        " tokens needs as many KV cells, " + std::to_string(cells_.n_free() + own) +
                        " are free");
  }
  cells_.seq_truncate(seq, 0);
  const SeqStateLayout layout{h.n_tokens, seq_state_row_bytes(fingerprint_),
                              fingerprint_.n_head_kv};
  const uint8_t* tokens = state.data() + layout.tokens_offset();
  for (uint32_t i = 0; i < h.n_tokens; ++i) {
    int32_t t;
    std::memcpy(&t, tokens + 4 * size_t{i}, 4);
    Result<int32_t> cell = cells_.append(seq, static_cast<int32_t>(i), t);
    STRATA_CHECK(cell.is_ok(), "cells counted free above");
  }
  Status s = transfer_rows(seq, layout, nullptr, state.data());
  if (!s.is_ok()) {
    cells_.seq_truncate(seq, 0);
    return s.with_context("restoring sequence " + std::to_string(seq));
  }
  return Status::ok();
}

}  // namespace strata
