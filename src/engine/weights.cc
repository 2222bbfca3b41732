#include "engine/weights.h"

#include <set>

#include "core/check.h"

namespace strata {

Result<std::unique_ptr<DeviceWeights>> DeviceWeights::load(const Model& model, Device& device,
                                                           int64_t layer_begin, int64_t layer_end,
                                                           bool with_embd, bool with_output,
                                                           const ProgressFn& progress) {
  std::vector<const GgufTensorInfo*> tensors;
  for (int64_t il = layer_begin; il < layer_end; ++il) {
    const LayerWeights& l = model.layers()[static_cast<size_t>(il)];
    for (const GgufTensorInfo* t : {l.attn_norm, l.wq, l.wk, l.wv, l.wo, l.bq, l.bk, l.bv, l.q_norm,
                                    l.k_norm, l.ffn_norm, l.w_gate, l.w_up, l.w_down}) {
      if (t != nullptr) tensors.push_back(t);
    }
  }
  if (with_embd) tensors.push_back(model.token_embd());
  if (with_output) {
    tensors.push_back(model.output_norm());
    if (!with_embd || model.output() != model.token_embd()) tensors.push_back(model.output());
  }

  auto w = std::unique_ptr<DeviceWeights>(new DeviceWeights());
  const GgufFile& file = model.file();
  const uint8_t* data = file.tensor_data(file.tensors().front()) - file.tensors().front().offset;
  const uint64_t data_size = file.file_size() - file.data_offset();
  auto host = device.buffer_from_host(data, data_size);
  if (host.is_ok()) {
    w->buffer_ = std::move(host).value();
    for (const GgufTensorInfo* t : tensors) w->offsets_[t] = t->offset;
    // Fault the mapping in now, with progress, so that the first token does not pay for it.
    volatile uint8_t sink = 0;
    constexpr uint64_t kPage = 4096, kReport = uint64_t{16} << 20;
    for (uint64_t off = 0; off < data_size; off += kPage) {
      sink = sink + data[off];
      if (progress && off % kReport == 0) progress(off, data_size);
    }
    if (progress) progress(data_size, data_size);
    return w;
  }
  if (host.status().kind() != ErrorKind::kUnsupported) return host.status();

  // Upload: pack the stage's tensors, aligned, into one buffer.
  const uint64_t align = std::max<uint64_t>(device.info().alignment, 32);
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
    stream->set_tensor(dst, file.tensor_data(*t), t->size_bytes);
    done += t->size_bytes;
    if (progress) progress(done, total);
  }
  STRATA_RETURN_IF_ERROR(stream->synchronize());
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
