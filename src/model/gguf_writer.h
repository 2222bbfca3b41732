// GGUF v3 writer: metadata, tensor infos, alignment padding and tensor data, in the layout
// that gguf.h reads and that llama.cpp (ggml's gguf) reads.
//
// Goal: write a model of any size without holding it in memory twice: a tensor's bytes may
// come from a callback that runs at write time, one tensor at a time. Keys keep the order of
// their first set; setting a key again replaces its value.
// Non-goal: editing an existing file; big-endian output.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "model/gguf.h"

namespace strata {

class GgufWriter {
 public:
  // Fills exactly dst.size() bytes (the tensor's size) with the tensor's data.
  using TensorFill = std::function<Status(std::span<uint8_t> dst)>;

  GgufWriter() = default;

  void set_u8(std::string_view key, uint8_t v) { set_scalar(key, GgufType::kUint8, &v, 1); }
  void set_i8(std::string_view key, int8_t v) { set_scalar(key, GgufType::kInt8, &v, 1); }
  void set_u16(std::string_view key, uint16_t v) { set_scalar(key, GgufType::kUint16, &v, 2); }
  void set_i16(std::string_view key, int16_t v) { set_scalar(key, GgufType::kInt16, &v, 2); }
  void set_u32(std::string_view key, uint32_t v) { set_scalar(key, GgufType::kUint32, &v, 4); }
  void set_i32(std::string_view key, int32_t v) { set_scalar(key, GgufType::kInt32, &v, 4); }
  void set_u64(std::string_view key, uint64_t v) { set_scalar(key, GgufType::kUint64, &v, 8); }
  void set_i64(std::string_view key, int64_t v) { set_scalar(key, GgufType::kInt64, &v, 8); }
  void set_f32(std::string_view key, float v) { set_scalar(key, GgufType::kFloat32, &v, 4); }
  void set_f64(std::string_view key, double v) { set_scalar(key, GgufType::kFloat64, &v, 8); }
  void set_bool(std::string_view key, bool v);
  void set_string(std::string_view key, std::string_view v);
  void set_strings(std::string_view key, const std::vector<std::string>& v);
  // A numeric array: `count` little-endian elements of `elem` (not kString / kArray).
  void set_array(std::string_view key, GgufType elem, const void* data, uint64_t count);
  void set_f32_array(std::string_view key, const std::vector<float>& v) {
    set_array(key, GgufType::kFloat32, v.data(), v.size());
  }
  void set_i32_array(std::string_view key, const std::vector<int32_t>& v) {
    set_array(key, GgufType::kInt32, v.data(), v.size());
  }
  // Also stored as the key general.alignment (uint32). Must be a power of two.
  Status set_alignment(uint32_t alignment);
  uint64_t alignment() const { return alignment_; }

  // `ne` has 1..4 entries, ne[0] the contiguous one; ne[0] must be a multiple of the block
  // size. Errors name the tensor.
  Status add_tensor(std::string_view name, DType dtype, std::vector<int64_t> ne,
                    std::vector<uint8_t> data);
  Status add_tensor(std::string_view name, DType dtype, std::vector<int64_t> ne, TensorFill fill);

  size_t n_kv() const { return kvs_.size(); }
  size_t n_tensors() const { return tensors_.size(); }
  // Size of the file that write() produces.
  uint64_t file_size() const;

  // Writes to `path` through a temporary file renamed into place, so a failed write never
  // leaves a truncated model under the final name.
  Status write(const std::string& path) const;
  // The whole file in memory (tests, small files).
  Result<std::vector<uint8_t>> serialize() const;

 private:
  struct Kv {
    std::string key;
    std::vector<uint8_t> encoded;  // type and value, as stored after the key
  };
  struct Tensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> ne;
    uint64_t size = 0;
    uint64_t offset = 0;  // in the data section
    TensorFill fill;
  };

  void set_scalar(std::string_view key, GgufType type, const void* v, size_t n);
  void set_encoded(std::string_view key, std::vector<uint8_t> encoded);
  std::vector<uint8_t> header() const;  // everything before the data section, padded
  // Produces the file's bytes in order, one tensor in memory at a time.
  Status emit(const std::function<Status(const uint8_t*, size_t)>& sink) const;

  uint64_t alignment_ = 32;
  std::vector<Kv> kvs_;
  std::vector<Tensor> tensors_;
  uint64_t data_size_ = 0;
};

}  // namespace strata
