#include "engine/weights.h"

#include <algorithm>
#include <set>

#include "core/check.h"

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

Result<std::unique_ptr<DeviceWeights>> DeviceWeights::load(const Model& model, Device& device,
                                                           int64_t layer_begin, int64_t layer_end,
                                                           bool with_embd, bool with_output,
                                                           bool use_mmap,
                                                           const ProgressFn& progress) {
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
  // each tensor from the mapping (a remote device may skip the bytes it already holds).
  const uint64_t align = upload_alignment(device);
  uint64_t total = 0;
  for (const GgufTensorInfo* t : tensors) {
    w->offsets_[t] = total;
    total += (t->size_bytes + align - 1) / align * align;
  }
  STRATA_ASSIGN_OR_RETURN(w->buffer_, device.alloc_buffer(total));
  std::unique_ptr<Stream> stream = device.create_stream();
  uint64_t done = 0;
  for (const GgufTensorInfo* t : tensors) {
    TensorRef dst = make_tensor(w->buffer_->handle(), w->offsets_[t], DType::kI8,
                                static_cast<int64_t>(t->size_bytes));
    stream->set_tensor_weights(dst, model.file().tensor_data(*t), t->size_bytes);
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
  TensorRef r =
      make_tensor(buffer_->handle(), it->second, t->dtype, t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
  return r;
}

}  // namespace strata
