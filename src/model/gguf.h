// GGUF v3 (and v2) reader over a read-only memory mapping.
//
// Goal: parse an untrusted file without ever reading, allocating or pointing past what was
// checked. Every count, length, offset and size is validated against the file size and named
// limits before use; a bad file yields a Status naming the field, its value and the limit.
// Tensor data is used in place (pointers into the mapping), never copied.
// Non-goal: editing a file in place (see gguf_writer.h for writing).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace strata {

// Value types as GGUF numbers them.
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

std::string_view gguf_type_name(GgufType t);
// Bytes of one value of a scalar type; 0 for strings, arrays and unknown types.
uint64_t gguf_scalar_size(GgufType t);

// One metadata key/value. Scalars are decoded; string arrays are decoded into `strings`;
// numeric arrays stay in the mapping (`array_data`, `array_len` elements of `array_type`).
struct GgufKv {
  std::string key;
  GgufType type = GgufType::kUint8;
  uint64_t u64 = 0;  // any unsigned integer, or a non-negative signed one; bool as 0/1
  int64_t i64 = 0;   // any integer
  double f64 = 0;    // any float (and integers, converted)
  std::string str;   // kString
  GgufType array_type = GgufType::kUint8;  // kArray
  uint64_t array_len = 0;
  const uint8_t* array_data = nullptr;  // numeric arrays: little-endian elements in the file
  std::vector<std::string> strings;     // arrays of strings
};

struct GgufTensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};  // ne[0] is the contiguous (row) dimension
  uint64_t offset = 0;           // from the start of the data section
  uint64_t size_bytes = 0;       // checked: offset + size_bytes is inside the file
  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

// One override in llama.cpp's --override-kv syntax, KEY=TYPE:VALUE with TYPE int (int64),
// float (float64), bool (true or false) or str; an error names what is wrong.
Result<GgufKv> parse_kv_override(std::string_view text);

class GgufFile {
 public:
  // Maps and parses the file. Errors name the file, the field and the limit.
  static Result<GgufFile> open(const std::string& path);
  // Parses bytes held in memory (tests, and files received whole).
  static Result<GgufFile> parse(std::shared_ptr<const std::vector<uint8_t>> bytes);

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  size_t file_size() const { return size_; }
  const std::string& path() const { return path_; }

  const std::vector<GgufKv>& kvs() const { return kvs_; }
  const GgufKv* find(std::string_view key) const;
  // Puts `kv` in place of the file's value of its key, or adds it (llama.cpp's --override-kv):
  // every reader after it sees the new value. general.alignment is refused, since the data is
  // laid out by it; so are arrays (llama.cpp overrides scalars only).
  Status override_kv(GgufKv kv);

  // Typed getters: an error names the key when it is missing or of the wrong type.
  Result<std::string> get_string(std::string_view key) const;
  Result<uint64_t> get_uint(std::string_view key) const;  // any non-negative integer type
  Result<double> get_float(std::string_view key) const;   // float or integer types
  Result<bool> get_bool(std::string_view key) const;
  // Arrays: the element type is converted where it is numeric; an error names the key.
  Result<std::vector<std::string>> get_strings(std::string_view key) const;
  Result<std::vector<float>> get_f32_array(std::string_view key) const;
  Result<std::vector<int32_t>> get_i32_array(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* tensor(std::string_view name) const;
  // Points into the mapping; valid while this GgufFile lives.
  const uint8_t* tensor_data(const GgufTensorInfo& t) const {
    return base_ + data_offset_ + t.offset;
  }

 private:
  GgufFile() = default;
  Status parse_all();

  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  void* mapping_ = nullptr;  // munmap'ed by the destructor when set
  std::shared_ptr<const std::vector<uint8_t>> owned_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<GgufKv> kvs_;
  std::vector<GgufTensorInfo> tensors_;
  // Indices sorted by key / name: lookups in O(log n) and the duplicate check.
  std::vector<uint32_t> kv_index_;
  std::vector<uint32_t> tensor_index_;
};

}  // namespace strata
