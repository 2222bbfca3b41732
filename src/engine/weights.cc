#include "engine/weights.h"

#include <algorithm>
#include <set>
#include <thread>

#include "core/check.h"
#include "core/rows16.h"
#include "core/thread_pool.h"

namespace strata {
namespace {

uint64_t upload_alignment(Device& device) {
  return std::max<uint64_t>(device.info().alignment, 32);
}

const uint8_t* file_data(const Model& model, uint64_t* size) {
  const GgufFile& file = model.file();
  *size = file.file_size() - file.data_offset();
  return file.tensor_data(file.tensors().front()) - file.tensors().front().offset;
}

// The tensors of layers [layer_begin, layer_end) whose rows the layer graph multiplies in parts
// (a fused dimension of the architecture's table: dim_parts) that do not all start on a group of
// 16 rows: a layout would split a group between two parts.
std::set<const GgufTensorInfo*> unaligned_views(const Model& model, int64_t layer_begin,
                                                int64_t layer_end) {
  const HParams& hp = model.hparams();
  std::set<const GgufTensorInfo*> out;
  for (const LayerTensorSpec& s : hp.arch->layer_tensors) {
    const std::vector<int64_t> parts = dim_parts(s.ne1, hp);
    if (std::all_of(parts.begin(), parts.end() - 1,
                    [](int64_t rows) { return rows % kLaneRows == 0; })) {
      continue;
    }
    for (int64_t il = layer_begin; il < layer_end; ++il) {
      const GgufTensorInfo* t =
          model.layers()[static_cast<size_t>(il)].tensors[static_cast<size_t>(s.id)];
      if (t != nullptr) out.insert(t);
    }
  }
  return out;
}

// Writes t's ne[2] * ne[3] matrices of ne[1] rows into dst in `layout`. One thread rearranges
// about 3 GB/s, so a large tensor's rows are cut into pieces of whole groups (each a matrix of
// the layout itself: its groups are the tensor's) over `pool`, at least 8 MiB a thread.
void pack_tensor(ThreadPool& pool, DType layout, const GgufTensorInfo& t, const uint8_t* src,
                 uint8_t* dst) {
  const size_t row_bytes = dtype_row_bytes(t.dtype, t.ne[0]);
  const int64_t n = t.ne[1];
  constexpr int64_t kPieceRows = 64 * kLaneRows;
  const int64_t pieces_per_matrix = (n + kPieceRows - 1) / kPieceRows;
  constexpr uint64_t kThreadBytes = uint64_t{8} << 20;
  const uint64_t piece_bytes = static_cast<uint64_t>(kPieceRows) * row_bytes;
  const auto grain = static_cast<int64_t>((kThreadBytes + piece_bytes - 1) / piece_bytes);
  pool.parallel_for(t.ne[2] * t.ne[3] * pieces_per_matrix, grain, [&](int, int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t i = p / pieces_per_matrix;
      const int64_t r0 = p % pieces_per_matrix * kPieceRows;
      const int64_t r1 = std::min(n, r0 + kPieceRows);
      const size_t at = (static_cast<size_t>(i * n) + static_cast<size_t>(r0)) * row_bytes;
      rows16_pack(layout, src + at, dst + at, r1 - r0, t.ne[0]);
    }
  });
}

}  // namespace

std::vector<const GgufTensorInfo*> stage_weight_tensors(const Model& model, int64_t layer_begin,
                                                        int64_t layer_end, bool with_embd,
                                                        bool with_output) {
  std::vector<const GgufTensorInfo*> tensors;
  for (int64_t il = layer_begin; il < layer_end; ++il) {
    for (const GgufTensorInfo* t : model.layers()[static_cast<size_t>(il)].tensors) {
      if (t != nullptr) tensors.push_back(t);
    }
  }
  if (with_embd) tensors.push_back(model.token_embd());
  if (with_output) {
    tensors.push_back(model.output_norm());
    if (!with_embd || model.output() != model.token_embd()) tensors.push_back(model.output());
  }
  return tensors;
}

uint64_t stage_weight_bytes(const std::vector<const GgufTensorInfo*>& tensors, uint64_t alignment) {
  uint64_t total = 0;
  for (const GgufTensorInfo* t : tensors)
    total += (t->size_bytes + alignment - 1) / alignment * alignment;
  return total;
}

bool device_maps_host(const Model& model, Device& device) {
  uint64_t size = 0;
  const uint8_t* data = file_data(model, &size);
  return device.buffer_from_host(data, size).is_ok();
}

Result<std::unique_ptr<DeviceWeights>> DeviceWeights::load(
    const Model& model, Device& device, int64_t layer_begin, int64_t layer_end, bool with_embd,
    bool with_output, bool use_mmap, const ProgressFn& progress, bool repack) {
  const std::vector<const GgufTensorInfo*> tensors =
      stage_weight_tensors(model, layer_begin, layer_end, with_embd, with_output);
  auto w = std::unique_ptr<DeviceWeights>(new DeviceWeights());
  uint64_t data_size = 0;
  const uint8_t* data = file_data(model, &data_size);
  auto host = use_mmap ? device.buffer_from_host(data, data_size)
                       : Result<std::unique_ptr<Buffer>>(unsupported("weights are copied"));
  if (host.is_ok()) {
    w->buffer_ = std::move(host).value();
    for (const GgufTensorInfo* t : tensors) w->offsets_[t] = t->offset;
    // Fault the stage's weights in now, with progress, so that the first token does not pay
    // for them; but not the experts: a token reads only those its router picks, so their pages
    // are read when first used and a model larger than memory runs from the page cache.
    std::set<const GgufTensorInfo*> expert_tensors;
    for (int64_t il = layer_begin; il < layer_end; ++il) {
      const LayerWeights& l = model.layers()[static_cast<size_t>(il)];
      for (size_t i = 0; i < kLayerTensorCount; ++i) {
        if (l.tensors[i] != nullptr && model.per_expert(static_cast<LayerTensor>(i))) {
          expert_tensors.insert(l.tensors[i]);
        }
      }
    }
    std::vector<const GgufTensorInfo*> resident;
    uint64_t resident_bytes = 0;
    for (const GgufTensorInfo* t : tensors) {
      if (expert_tensors.count(t) != 0) continue;
      resident.push_back(t);
      resident_bytes += t->size_bytes;
    }
    volatile uint8_t sink = 0;
    constexpr uint64_t kPage = 4096, kReport = uint64_t{16} << 20;
    uint64_t done = 0, reported = 0;
    for (const GgufTensorInfo* t : resident) {
      const uint8_t* p = model.file().tensor_data(*t);
      for (uint64_t off = 0; off < t->size_bytes; off += kPage) sink = sink + p[off];
      done += t->size_bytes;
      if (progress && done - reported >= kReport) {
        progress(done, resident_bytes);
        reported = done;
      }
    }
    if (progress) progress(resident_bytes, resident_bytes);
    return w;
  }
  if (host.status().kind() != ErrorKind::kUnsupported) return host.status();

  // Upload: pack the stage's tensors, aligned, into one buffer. No host copy: the stream reads
  // each tensor from the mapping (a remote device may skip the bytes it already holds). A
  // tensor put in a layout is rearranged from the mapping straight into a host buffer (the
  // CPU's), or else into one host buffer that each such tensor reuses, then uploaded.
  // A layout where the device offers one for the tensor's type, its rows are whole blocks of the
  // layout (q8_0's are pairs of blocks) and a matmul uses the tensor:
  // the token embedding only where it is the output matrix too (tied; get_rows reads its rows
  // back one by one), no fused projection whose parts cut a group.
  const DTypeSet offered = repack ? device.caps().weight_dtypes : DTypeSet();
  const std::set<const GgufTensorInfo*> unaligned = unaligned_views(model, layer_begin, layer_end);
  for (const GgufTensorInfo* t : tensors) {
    const std::optional<DType> layout = rows16_layout(t->dtype);
    if (!layout || !offered.test(static_cast<uint32_t>(*layout)) || t->ne[1] < kLaneRows ||
        t->ne[0] % dtype_block_size(*layout) != 0 || unaligned.count(t) != 0 ||
        (t == model.token_embd() && !(with_output && model.output() == t))) {
      continue;
    }
    w->layouts_[t] = *layout;
  }
  const uint64_t align = upload_alignment(device);
  uint64_t total = 0;
  for (const GgufTensorInfo* t : tensors) {
    w->offsets_[t] = total;
    total += (t->size_bytes + align - 1) / align * align;
  }
  STRATA_ASSIGN_OR_RETURN(w->buffer_, device.alloc_buffer(total));
  std::unique_ptr<Stream> stream = device.create_stream();
  uint64_t done = 0;
  std::vector<uint8_t> packed;
  // The machine's threads rearrange the tensors put in a layout; they sleep between tensors
  // (poll 0), not to spin beside the stream's copies.
  std::unique_ptr<ThreadPool> pack_pool;
  const auto pool = [&pack_pool]() -> ThreadPool& {
    if (pack_pool == nullptr) {
      ThreadPoolOptions o;
      o.n_threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 1024u));
      o.poll = 0;
      auto created = ThreadPool::create(o);
      STRATA_CHECK(created.is_ok(), "a pool of this machine's threads, placed anywhere");
      pack_pool = std::move(created).value();
    }
    return *pack_pool;
  };
  for (const GgufTensorInfo* t : tensors) {
    TensorRef dst = make_tensor(w->buffer_->handle(), w->offsets_[t], DType::kI8,
                                static_cast<int64_t>(t->size_bytes));
    const auto layout = w->layouts_.find(t);
    if (layout == w->layouts_.end()) {
      stream->set_tensor_weights(dst, model.file().tensor_data(*t), t->size_bytes);
    } else if (uint8_t* host = static_cast<uint8_t*>(w->buffer_->host_ptr())) {
      // A buffer in host memory (the CPU's): rearranged straight into it, one pass. No queued
      // write touches this tensor's bytes.
      pack_tensor(pool(), layout->second, *t, model.file().tensor_data(*t), host + w->offsets_[t]);
    } else {
      packed.resize(t->size_bytes);
      pack_tensor(pool(), layout->second, *t, model.file().tensor_data(*t), packed.data());
      stream->set_tensor_weights(dst, packed.data(), t->size_bytes);
      // The host buffer is the next packed tensor's.
      Status s = stream->synchronize();
      if (!s.is_ok()) return s.with_context("uploading weights to " + device.info().name);
    }
    done += t->size_bytes;
    if (progress) progress(done, total);
  }
  Status s = stream->synchronize();
  if (!s.is_ok()) return s.with_context("uploading weights to " + device.info().name);
  return w;
}

TensorRef DeviceWeights::ref(const GgufTensorInfo* t) const {
  auto it = offsets_.find(t);
  STRATA_CHECK(it != offsets_.end(), "tensor not placed on this device");
  const auto layout = layouts_.find(t);
  const DType dtype = layout != layouts_.end() ? layout->second : t->dtype;
  return make_tensor(buffer_->handle(), it->second, dtype, t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
}

}  // namespace strata
