#include "model/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>

namespace strata {
namespace {

// Limits, each with its denial-of-service reason. A count is also checked against the bytes
// left in the file, so memory use stays proportional to the file size; the ceilings bound it
// further for a huge but hostile file.
constexpr uint64_t kMaxKvs = uint64_t{1} << 20;          // real files hold a few dozen
constexpr uint64_t kMaxTensors = uint64_t{1} << 20;      // real files hold a few thousand
constexpr uint64_t kMaxKeyBytes = 65535;                 // the spec's limit on key length
constexpr uint64_t kMaxNameBytes = 65535;                // tensor names (ggml itself uses 64)
constexpr uint64_t kMaxStringBytes = uint64_t{1} << 30;  // one string value (chat templates)
constexpr uint64_t kMaxArrayLen = uint64_t{1} << 28;     // vocabularies are ~10^5..10^6
constexpr uint64_t kMaxAlignment = uint64_t{1} << 20;
constexpr int kMaxGgufDims = 4;
// Smallest encodings, used to bound counts by the bytes that remain.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;              // key length, 1-byte key, type, u8
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // empty name, 1 dim, type, offset

std::string quote(std::string_view s) {
  // Keys and names come from the file: keep messages printable and short.
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < 200; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  if (s.size() > 200) out += "...";
  return out + "'";
}

uint64_t scalar_size(GgufType t) { return gguf_scalar_size(t); }

}  // namespace

uint64_t gguf_scalar_size(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    default:
      return 0;
  }
}

namespace {

bool known_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kFloat64); }

bool is_integer(GgufType t) {
  return scalar_size(t) != 0 && t != GgufType::kFloat32 && t != GgufType::kFloat64 &&
         t != GgufType::kBool;
}

bool is_numeric(GgufType t) { return scalar_size(t) != 0 && t != GgufType::kBool; }

std::string type_str(uint32_t t) {
  if (known_type(t)) return std::string(gguf_type_name(static_cast<GgufType>(t)));
  return "unknown type " + std::to_string(t);
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // files are little-endian, as is every host we build for
  return v;
}

// Decodes one scalar at p into the three views of GgufKv.
void decode_scalar(GgufType t, const uint8_t* p, uint64_t* u, int64_t* i, double* f) {
  auto set_unsigned = [&](uint64_t v) {
    *u = v;
    *i = static_cast<int64_t>(v);
    *f = static_cast<double>(v);
  };
  auto set_signed = [&](int64_t v) {
    *u = v < 0 ? 0 : static_cast<uint64_t>(v);
    *i = v;
    *f = static_cast<double>(v);
  };
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kBool:
      set_unsigned(load<uint8_t>(p));
      break;
    case GgufType::kInt8:
      set_signed(load<int8_t>(p));
      break;
    case GgufType::kUint16:
      set_unsigned(load<uint16_t>(p));
      break;
    case GgufType::kInt16:
      set_signed(load<int16_t>(p));
      break;
    case GgufType::kUint32:
      set_unsigned(load<uint32_t>(p));
      break;
    case GgufType::kInt32:
      set_signed(load<int32_t>(p));
      break;
    case GgufType::kUint64:
      set_unsigned(load<uint64_t>(p));
      break;
    case GgufType::kInt64:
      set_signed(load<int64_t>(p));
      break;
    case GgufType::kFloat32:
      *f = load<float>(p);
      break;
    case GgufType::kFloat64:
      *f = load<double>(p);
      break;
    default:
      break;
  }
}

// A bounds-checked cursor over the file's bytes. Every read says what it was reading.
class Cursor {
 public:
  Cursor(const uint8_t* base, uint64_t size) : base_(base), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  const uint8_t* here() const { return base_ + pos_; }

  Status need(uint64_t n, const std::string& what) const {
    if (n > remaining()) {
      return out_of_range(what + ": needs " + std::to_string(n) + " bytes at offset " +
                          std::to_string(pos_) + ", only " + std::to_string(remaining()) +
                          " left in the file (size " + std::to_string(size_) + ")");
    }
    return Status::ok();
  }
  Status skip(uint64_t n, const std::string& what) {
    STRATA_RETURN_IF_ERROR(need(n, what));
    pos_ += n;
    return Status::ok();
  }
  template <typename T>
  Status read(T* v, const std::string& what) {
    STRATA_RETURN_IF_ERROR(need(sizeof(T), what));
    *v = load<T>(here());
    pos_ += sizeof(T);
    return Status::ok();
  }
  Status read_string(std::string* s, uint64_t limit, const std::string& what) {
    uint64_t len = 0;
    STRATA_RETURN_IF_ERROR(read(&len, what + " length"));
    if (len > limit) {
      return out_of_range(what + ": length " + std::to_string(len) + " exceeds the limit " +
                          std::to_string(limit));
    }
    STRATA_RETURN_IF_ERROR(need(len, what));
    s->assign(reinterpret_cast<const char*>(here()), len);
    pos_ += len;
    return Status::ok();
  }

 private:
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

Status read_value(Cursor& c, GgufKv& kv, const std::string& what) {
  if (kv.type == GgufType::kString) {
    return c.read_string(&kv.str, kMaxStringBytes, what + " string");
  }
  if (kv.type == GgufType::kArray) {
    uint32_t et = 0;
    STRATA_RETURN_IF_ERROR(c.read(&et, what + " array element type"));
    if (!known_type(et)) {
      return invalid_argument(what + ": array element type " + std::to_string(et) +
                              " is not a GGUF type (0..12)");
    }
    if (et == static_cast<uint32_t>(GgufType::kArray)) {
      return unsupported(what + ": nested arrays are not supported");
    }
    kv.array_type = static_cast<GgufType>(et);
    STRATA_RETURN_IF_ERROR(c.read(&kv.array_len, what + " array length"));
    const bool strings = kv.array_type == GgufType::kString;
    const uint64_t min_elem = strings ? 8 : scalar_size(kv.array_type);
    if (kv.array_len > kMaxArrayLen) {
      return out_of_range(what + ": array length " + std::to_string(kv.array_len) +
                          " exceeds the limit " + std::to_string(kMaxArrayLen));
    }
    if (kv.array_len > c.remaining() / min_elem) {
      return out_of_range(what + ": array length " + std::to_string(kv.array_len) + " of " +
                          type_str(et) + " needs at least " +
                          std::to_string(kv.array_len * min_elem) + " bytes, only " +
                          std::to_string(c.remaining()) + " left in the file");
    }
    if (strings) {
      kv.strings.resize(kv.array_len);
      for (uint64_t i = 0; i < kv.array_len; ++i) {
        STRATA_RETURN_IF_ERROR(
            c.read_string(&kv.strings[i], kMaxStringBytes, what + " element " + std::to_string(i)));
      }
      return Status::ok();
    }
    kv.array_data = c.here();
    return c.skip(kv.array_len * min_elem, what + " array data");
  }
  const uint64_t n = scalar_size(kv.type);
  STRATA_RETURN_IF_ERROR(c.need(n, what + " value"));
  if (kv.type == GgufType::kBool && *c.here() > 1) {
    return invalid_argument(what + ": bool value " + std::to_string(*c.here()) +
                            " is neither 0 nor 1");
  }
  decode_scalar(kv.type, c.here(), &kv.u64, &kv.i64, &kv.f64);
  return c.skip(n, what + " value");
}

bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
bool checked_add(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}

Status read_tensor_info(Cursor& c, uint64_t index, GgufTensorInfo& t) {
  const std::string at = "tensor " + std::to_string(index);
  STRATA_RETURN_IF_ERROR(c.read_string(&t.name, kMaxNameBytes, at + " name"));
  const std::string what = "tensor " + quote(t.name);
  uint32_t n_dims = 0;
  STRATA_RETURN_IF_ERROR(c.read(&n_dims, what + " n_dims"));
  if (n_dims < 1 || n_dims > kMaxGgufDims) {
    return invalid_argument(what + ": n_dims " + std::to_string(n_dims) + " is outside 1.." +
                            std::to_string(kMaxGgufDims));
  }
  t.n_dims = static_cast<int>(n_dims);
  uint64_t n_elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t ne = 0;
    STRATA_RETURN_IF_ERROR(c.read(&ne, what + " ne[" + std::to_string(d) + "]"));
    if (ne < 1 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return invalid_argument(what + ": ne[" + std::to_string(d) + "] = " + std::to_string(ne) +
                              " is outside 1..2^63-1");
    }
    if (!checked_mul(n_elements, ne, &n_elements) ||
        n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return out_of_range(what + ": element count overflows int64 at ne[" + std::to_string(d) +
                          "] = " + std::to_string(ne));
    }
    t.ne[d] = static_cast<int64_t>(ne);
  }
  uint32_t type_id = 0;
  STRATA_RETURN_IF_ERROR(c.read(&type_id, what + " type"));
  const DTypeInfo* info = dtype_info(type_id);
  if (info == nullptr || info->base != info->dtype) {
    return unsupported(what + ": type " + std::to_string(type_id) + " is not a known ggml type");
  }
  t.dtype = info->dtype;
  if (t.ne[0] % info->block_size != 0) {
    return invalid_argument(what + ": ne[0] = " + std::to_string(t.ne[0]) +
                            " is not a multiple of the " + std::string(info->name) +
                            " block size " + std::to_string(info->block_size));
  }
  uint64_t size = static_cast<uint64_t>(t.ne[0] / info->block_size);
  if (!checked_mul(size, info->block_bytes, &size)) {
    return out_of_range(what + ": size in bytes overflows uint64");
  }
  for (int d = 1; d < t.n_dims; ++d) {
    if (!checked_mul(size, static_cast<uint64_t>(t.ne[d]), &size)) {
      return out_of_range(what + ": size in bytes overflows uint64");
    }
  }
  t.size_bytes = size;
  return c.read(&t.offset, what + " offset");
}

}  // namespace

std::string_view gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
      return "uint8";
    case GgufType::kInt8:
      return "int8";
    case GgufType::kUint16:
      return "uint16";
    case GgufType::kInt16:
      return "int16";
    case GgufType::kUint32:
      return "uint32";
    case GgufType::kInt32:
      return "int32";
    case GgufType::kFloat32:
      return "float32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kUint64:
      return "uint64";
    case GgufType::kInt64:
      return "int64";
    case GgufType::kFloat64:
      return "float64";
  }
  return "unknown";
}

GgufFile::GgufFile(GgufFile&& o) noexcept { *this = std::move(o); }

GgufFile& GgufFile::operator=(GgufFile&& o) noexcept {
  if (this == &o) return *this;
  if (mapping_ != nullptr) munmap(mapping_, size_);
  path_ = std::move(o.path_);
  base_ = std::exchange(o.base_, nullptr);
  size_ = std::exchange(o.size_, 0);
  mapping_ = std::exchange(o.mapping_, nullptr);
  owned_ = std::move(o.owned_);
  version_ = o.version_;
  alignment_ = o.alignment_;
  data_offset_ = o.data_offset_;
  kvs_ = std::move(o.kvs_);
  tensors_ = std::move(o.tensors_);
  kv_index_ = std::move(o.kv_index_);
  tensor_index_ = std::move(o.tensor_index_);
  return *this;
}

GgufFile::~GgufFile() {
  if (mapping_ != nullptr) munmap(mapping_, size_);
}

Result<GgufFile> GgufFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    close(fd);
    return io_error(path + ": cannot stat: " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return invalid_argument(path + ": not a regular file");
  }
  GgufFile f;
  f.path_ = path;
  f.size_ = static_cast<size_t>(st.st_size);
  if (f.size_ > 0) {
    void* m = mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int e = errno;
      close(fd);
      return io_error(path + ": cannot map " + std::to_string(f.size_) +
                      " bytes: " + std::strerror(e));
    }
    f.mapping_ = m;
    f.base_ = static_cast<const uint8_t*>(m);
  }
  close(fd);  // the mapping keeps the file alive
  Status s = f.parse_all();
  if (!s.is_ok()) return s.with_context(path);
  return f;
}

Result<GgufFile> GgufFile::parse(std::shared_ptr<const std::vector<uint8_t>> bytes) {
  if (bytes == nullptr) return invalid_argument("no bytes to parse");
  GgufFile f;
  f.path_ = "<memory>";
  f.owned_ = std::move(bytes);
  f.base_ = f.owned_->data();
  f.size_ = f.owned_->size();
  STRATA_RETURN_IF_ERROR(f.parse_all());
  return f;
}

Status GgufFile::parse_all() {
  Cursor c(base_, size_);
  uint32_t magic = 0;
  STRATA_RETURN_IF_ERROR(c.read(&magic, "magic"));
  if (std::memcmp(base_, "GGUF", 4) != 0) {
    return invalid_argument("magic " +
                            quote(std::string_view(reinterpret_cast<const char*>(base_), 4)) +
                            " is not 'GGUF': not a GGUF file");
  }
  STRATA_RETURN_IF_ERROR(c.read(&version_, "version"));
  if (version_ != 2 && version_ != 3) {
    if ((version_ & 0xffffu) == 0 && version_ != 0) {
      return unsupported("version " + std::to_string(version_) +
                         " looks byte-swapped: big-endian GGUF files are not supported");
    }
    return unsupported("version " + std::to_string(version_) + " is not supported (2 or 3)");
  }
  uint64_t n_tensors = 0, n_kv = 0;
  STRATA_RETURN_IF_ERROR(c.read(&n_tensors, "n_tensors"));
  STRATA_RETURN_IF_ERROR(c.read(&n_kv, "n_kv"));
  if (n_kv > kMaxKvs) {
    return out_of_range("n_kv " + std::to_string(n_kv) + " exceeds the limit " +
                        std::to_string(kMaxKvs));
  }
  if (n_tensors > kMaxTensors) {
    return out_of_range("n_tensors " + std::to_string(n_tensors) + " exceeds the limit " +
                        std::to_string(kMaxTensors));
  }
  // Both counts are below 2^20, so these products cannot overflow.
  if (n_kv * kMinKvBytes + n_tensors * kMinTensorInfoBytes > c.remaining()) {
    return out_of_range("n_kv " + std::to_string(n_kv) + " and n_tensors " +
                        std::to_string(n_tensors) + " need at least " +
                        std::to_string(n_kv * kMinKvBytes + n_tensors * kMinTensorInfoBytes) +
                        " bytes, only " + std::to_string(c.remaining()) + " left in the file");
  }

  kvs_.resize(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    GgufKv& kv = kvs_[i];
    STRATA_RETURN_IF_ERROR(
        c.read_string(&kv.key, kMaxKeyBytes, "kv " + std::to_string(i) + " key"));
    const std::string what = "kv " + quote(kv.key);
    uint32_t type = 0;
    STRATA_RETURN_IF_ERROR(c.read(&type, what + " type"));
    if (!known_type(type)) {
      return invalid_argument(what + ": value type " + std::to_string(type) +
                              " is not a GGUF type (0..12)");
    }
    kv.type = static_cast<GgufType>(type);
    STRATA_RETURN_IF_ERROR(read_value(c, kv, what));
  }
  kv_index_.resize(kvs_.size());
  std::iota(kv_index_.begin(), kv_index_.end(), 0);
  std::sort(kv_index_.begin(), kv_index_.end(),
            [&](uint32_t a, uint32_t b) { return kvs_[a].key < kvs_[b].key; });
  for (size_t i = 1; i < kv_index_.size(); ++i) {
    if (kvs_[kv_index_[i]].key == kvs_[kv_index_[i - 1]].key) {
      return invalid_argument("kv " + quote(kvs_[kv_index_[i]].key) + " appears twice");
    }
  }

  alignment_ = 32;
  if (const GgufKv* a = find("general.alignment")) {
    if (!is_integer(a->type)) {
      return invalid_argument("kv 'general.alignment': type " + type_str(uint32_t(a->type)) +
                              " is not an integer type");
    }
    if (a->i64 <= 0 || a->u64 > kMaxAlignment || (a->u64 & (a->u64 - 1)) != 0) {
      const std::string v = a->i64 < 0 && a->type != GgufType::kUint64 ? std::to_string(a->i64)
                                                                       : std::to_string(a->u64);
      return invalid_argument("kv 'general.alignment': value " + v +
                              " is not a power of two in 1.." + std::to_string(kMaxAlignment));
    }
    alignment_ = a->u64;
  }

  tensors_.resize(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    STRATA_RETURN_IF_ERROR(read_tensor_info(c, i, tensors_[i]));
  }
  tensor_index_.resize(tensors_.size());
  std::iota(tensor_index_.begin(), tensor_index_.end(), 0);
  std::sort(tensor_index_.begin(), tensor_index_.end(),
            [&](uint32_t a, uint32_t b) { return tensors_[a].name < tensors_[b].name; });
  for (size_t i = 1; i < tensor_index_.size(); ++i) {
    if (tensors_[tensor_index_[i]].name == tensors_[tensor_index_[i - 1]].name) {
      return invalid_argument("tensor " + quote(tensors_[tensor_index_[i]].name) +
                              " appears twice");
    }
  }

  // The data section starts at the next multiple of the alignment. With no tensors a writer
  // may omit the padding, so only a file with tensors must reach it.
  data_offset_ = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  if (n_tensors == 0) {
    data_offset_ = std::min<uint64_t>(data_offset_, size_);
    return Status::ok();
  }
  if (data_offset_ > size_) {
    return out_of_range("data section at offset " + std::to_string(data_offset_) +
                        " starts past the end of the file (size " + std::to_string(size_) + ")");
  }
  const uint64_t data_size = size_ - data_offset_;
  for (const GgufTensorInfo& t : tensors_) {
    const std::string what = "tensor " + quote(t.name);
    if (t.offset % alignment_ != 0) {
      return invalid_argument(what + ": offset " + std::to_string(t.offset) +
                              " is not a multiple of the alignment " + std::to_string(alignment_));
    }
    uint64_t end = 0;
    if (!checked_add(t.offset, t.size_bytes, &end)) {
      return out_of_range(what + ": offset " + std::to_string(t.offset) + " + size " +
                          std::to_string(t.size_bytes) + " overflows uint64");
    }
    if (end > data_size) {
      return out_of_range(what + ": data [offset " + std::to_string(t.offset) + ", size " +
                          std::to_string(t.size_bytes) + ") ends past the file (data section " +
                          std::to_string(data_size) + " bytes at " + std::to_string(data_offset_) +
                          ", file size " + std::to_string(size_) + ")");
    }
  }
  std::vector<uint32_t> by_offset(tensors_.size());
  std::iota(by_offset.begin(), by_offset.end(), 0);
  std::sort(by_offset.begin(), by_offset.end(),
            [&](uint32_t a, uint32_t b) { return tensors_[a].offset < tensors_[b].offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& prev = tensors_[by_offset[i - 1]];
    const GgufTensorInfo& cur = tensors_[by_offset[i]];
    if (cur.offset < prev.offset + prev.size_bytes) {
      return invalid_argument("tensor " + quote(cur.name) + " at offset " +
                              std::to_string(cur.offset) + " overlaps tensor " + quote(prev.name) +
                              " [" + std::to_string(prev.offset) + ", " +
                              std::to_string(prev.offset + prev.size_bytes) + ")");
    }
  }
  return Status::ok();
}

const GgufKv* GgufFile::find(std::string_view key) const {
  auto it = std::lower_bound(kv_index_.begin(), kv_index_.end(), key,
                             [&](uint32_t i, std::string_view k) { return kvs_[i].key < k; });
  if (it == kv_index_.end() || kvs_[*it].key != key) return nullptr;
  return &kvs_[*it];
}

Status GgufFile::override_kv(GgufKv kv) {
  if (kv.key == "general.alignment") {
    return invalid_argument(
        "kv 'general.alignment' cannot be overridden: the file's data is laid "
        "out by it");
  }
  if (kv.type == GgufType::kArray) {
    return invalid_argument("kv " + quote(kv.key) + ": arrays cannot be overridden");
  }
  auto it = std::lower_bound(kv_index_.begin(), kv_index_.end(), kv.key,
                             [&](uint32_t i, const std::string& k) { return kvs_[i].key < k; });
  if (it != kv_index_.end() && kvs_[*it].key == kv.key) {
    kvs_[*it] = std::move(kv);
    return Status::ok();
  }
  const auto index = static_cast<uint32_t>(kvs_.size());
  kvs_.push_back(std::move(kv));
  kv_index_.insert(it, index);
  return Status::ok();
}

Result<GgufKv> parse_kv_override(std::string_view text) {
  const size_t eq = text.find('=');
  const size_t colon = eq == std::string_view::npos ? eq : text.find(':', eq);
  if (eq == 0 || colon == std::string_view::npos) {
    return invalid_argument("'" + std::string(text) + "' is not KEY=TYPE:VALUE");
  }
  GgufKv kv;
  kv.key = std::string(text.substr(0, eq));
  if (kv.key.size() > kMaxKeyBytes) {
    return out_of_range("key of " + std::to_string(kv.key.size()) + " bytes, past " +
                        std::to_string(kMaxKeyBytes));
  }
  const std::string_view type = text.substr(eq + 1, colon - eq - 1);
  const std::string value(text.substr(colon + 1));
  const auto bad = [&](const char* what) {
    return invalid_argument(kv.key + ": '" + value + "' is not " + what);
  };
  if (type == "int") {
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || errno == ERANGE) return bad("a 64-bit integer");
    kv.type = GgufType::kInt64;
    kv.i64 = v;
    kv.u64 = static_cast<uint64_t>(v);
    kv.f64 = static_cast<double>(v);
  } else if (type == "float") {
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !std::isfinite(v)) return bad("a finite number");
    kv.type = GgufType::kFloat64;
    kv.f64 = v;
  } else if (type == "bool") {
    if (value != "true" && value != "false") return bad("true or false");
    kv.type = GgufType::kBool;
    kv.u64 = value == "true";
    kv.i64 = static_cast<int64_t>(kv.u64);
  } else if (type == "str") {
    kv.type = GgufType::kString;
    kv.str = value;
  } else {
    return invalid_argument(kv.key + ": type '" + std::string(type) +
                            "' is not one of int, float, bool, str");
  }
  return kv;
}

const GgufTensorInfo* GgufFile::tensor(std::string_view name) const {
  auto it = std::lower_bound(tensor_index_.begin(), tensor_index_.end(), name,
                             [&](uint32_t i, std::string_view k) { return tensors_[i].name < k; });
  if (it == tensor_index_.end() || tensors_[*it].name != name) return nullptr;
  return &tensors_[*it];
}

namespace {

Status missing(std::string_view key) {
  return invalid_argument("kv '" + std::string(key) + "' is missing");
}

Status wrong_type(const GgufKv& kv, std::string_view wanted) {
  std::string got(gguf_type_name(kv.type));
  if (kv.type == GgufType::kArray) got += " of " + std::string(gguf_type_name(kv.array_type));
  return invalid_argument("kv " + quote(kv.key) + " has type " + got + ", expected " +
                          std::string(wanted));
}

}  // namespace

Result<std::string> GgufFile::get_string(std::string_view key) const {
  const GgufKv* kv = find(key);
  if (kv == nullptr) return missing(key);
  if (kv->type != GgufType::kString) return wrong_type(*kv, "string");
  return kv->str;
}

Result<uint64_t> GgufFile::get_uint(std::string_view key) const {
  const GgufKv* kv = find(key);
  if (kv == nullptr) return missing(key);
  if (!is_integer(kv->type)) return wrong_type(*kv, "an integer");
  if (kv->i64 < 0 && kv->type != GgufType::kUint64) {
    return invalid_argument("kv " + quote(kv->key) + ": value " + std::to_string(kv->i64) +
                            " is negative");
  }
  return kv->u64;
}

Result<double> GgufFile::get_float(std::string_view key) const {
  const GgufKv* kv = find(key);
  if (kv == nullptr) return missing(key);
  if (!is_numeric(kv->type)) return wrong_type(*kv, "a number");
  return kv->f64;
}

Result<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufKv* kv = find(key);
  if (kv == nullptr) return missing(key);
  if (kv->type != GgufType::kBool) return wrong_type(*kv, "bool");
  return kv->u64 != 0;
}

Result<std::vector<std::string>> GgufFile::get_strings(std::string_view key) const {
  const GgufKv* kv = find(key);
  if (kv == nullptr) return missing(key);
  if (kv->type != GgufType::kArray || kv->array_type != GgufType::kString) {
    return wrong_type(*kv, "array of string");
  }
  return kv->strings;
}

Result<std::vector<float>> GgufFile::get_f32_array(std::string_view key) const {
  const GgufKv* kv = find(key);
  if (kv == nullptr) return missing(key);
  if (kv->type != GgufType::kArray || !is_numeric(kv->array_type)) {
    return wrong_type(*kv, "array of numbers");
  }
  const uint64_t es = scalar_size(kv->array_type);
  std::vector<float> out(kv->array_len);
  for (uint64_t i = 0; i < kv->array_len; ++i) {
    uint64_t u = 0;
    int64_t s = 0;
    double f = 0;
    decode_scalar(kv->array_type, kv->array_data + i * es, &u, &s, &f);
    out[i] = static_cast<float>(f);
  }
  return out;
}

Result<std::vector<int32_t>> GgufFile::get_i32_array(std::string_view key) const {
  const GgufKv* kv = find(key);
  if (kv == nullptr) return missing(key);
  if (kv->type != GgufType::kArray || !is_integer(kv->array_type)) {
    return wrong_type(*kv, "array of integers");
  }
  const uint64_t es = scalar_size(kv->array_type);
  const bool is_u64 = kv->array_type == GgufType::kUint64;
  std::vector<int32_t> out(kv->array_len);
  for (uint64_t i = 0; i < kv->array_len; ++i) {
    uint64_t u = 0;
    int64_t s = 0;
    double f = 0;
    decode_scalar(kv->array_type, kv->array_data + i * es, &u, &s, &f);
    if ((is_u64 && u > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) ||
        (!is_u64 &&
         (s < std::numeric_limits<int32_t>::min() || s > std::numeric_limits<int32_t>::max()))) {
      return out_of_range("kv " + quote(kv->key) + " element " + std::to_string(i) + ": value " +
                          (is_u64 ? std::to_string(u) : std::to_string(s)) +
                          " does not fit in int32");
    }
    out[i] = static_cast<int32_t>(s);
  }
  return out;
}

}  // namespace strata
