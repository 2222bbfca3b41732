#include "model/gguf_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>

#include "core/check.h"

namespace strata {
namespace {

void put(std::vector<uint8_t>& out, const void* p, size_t n) {
  // resize + memcpy rather than insert: GCC 12 warns falsely on small inserts.
  const size_t at = out.size();
  out.resize(at + n);
  if (n != 0) std::memcpy(out.data() + at, p, n);
}
void put_u32(std::vector<uint8_t>& out, uint32_t v) { put(out, &v, 4); }
void put_u64(std::vector<uint8_t>& out, uint64_t v) { put(out, &v, 8); }
void put_string(std::vector<uint8_t>& out, std::string_view s) {
  put_u64(out, s.size());
  put(out, s.data(), s.size());
}

uint64_t pad_to(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Closes the FILE and removes the temporary file unless released.
struct TempFile {
  std::string path;
  FILE* f = nullptr;
  bool keep = false;
  ~TempFile() {
    if (f != nullptr) std::fclose(f);
    if (!keep) std::remove(path.c_str());
  }
};

}  // namespace

void GgufWriter::set_encoded(std::string_view key, std::vector<uint8_t> encoded) {
  for (Kv& kv : kvs_) {
    if (kv.key == key) {
      kv.encoded = std::move(encoded);
      return;
    }
  }
  kvs_.push_back(Kv{std::string(key), std::move(encoded)});
}

void GgufWriter::set_scalar(std::string_view key, GgufType type, const void* v, size_t n) {
  std::vector<uint8_t> e;
  put_u32(e, static_cast<uint32_t>(type));
  put(e, v, n);
  set_encoded(key, std::move(e));
}

void GgufWriter::set_bool(std::string_view key, bool v) {
  const uint8_t b = v ? 1 : 0;
  set_scalar(key, GgufType::kBool, &b, 1);
}

void GgufWriter::set_string(std::string_view key, std::string_view v) {
  std::vector<uint8_t> e;
  put_u32(e, static_cast<uint32_t>(GgufType::kString));
  put_string(e, v);
  set_encoded(key, std::move(e));
}

void GgufWriter::set_strings(std::string_view key, const std::vector<std::string>& v) {
  std::vector<uint8_t> e;
  put_u32(e, static_cast<uint32_t>(GgufType::kArray));
  put_u32(e, static_cast<uint32_t>(GgufType::kString));
  put_u64(e, v.size());
  for (const std::string& s : v) put_string(e, s);
  set_encoded(key, std::move(e));
}

void GgufWriter::set_array(std::string_view key, GgufType elem, const void* data, uint64_t count) {
  const size_t es = gguf_scalar_size(elem);
  STRATA_CHECK(es != 0, "set_array takes numeric element types only");
  std::vector<uint8_t> e;
  put_u32(e, static_cast<uint32_t>(GgufType::kArray));
  put_u32(e, static_cast<uint32_t>(elem));
  put_u64(e, count);
  put(e, data, count * es);
  set_encoded(key, std::move(e));
}

Status GgufWriter::set_alignment(uint32_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    return invalid_argument("alignment " + std::to_string(alignment) + " is not a power of two");
  }
  if (!tensors_.empty()) return invalid_argument("set the alignment before adding tensors");
  alignment_ = alignment;
  set_u32("general.alignment", alignment);
  return Status::ok();
}

Status GgufWriter::add_tensor(std::string_view name, DType dtype, std::vector<int64_t> ne,
                              std::vector<uint8_t> data) {
  auto bytes = std::make_shared<std::vector<uint8_t>>(std::move(data));
  const size_t given = bytes->size();
  STRATA_RETURN_IF_ERROR(add_tensor(name, dtype, std::move(ne), [bytes](std::span<uint8_t> dst) {
    std::memcpy(dst.data(), bytes->data(), dst.size());
    return Status::ok();
  }));
  if (given != tensors_.back().size) {
    const uint64_t want = tensors_.back().size;
    data_size_ = tensors_.back().offset;
    tensors_.pop_back();
    return invalid_argument("tensor '" + std::string(name) + "': " + std::to_string(given) +
                            " bytes of data given, its shape needs " + std::to_string(want));
  }
  return Status::ok();
}

Status GgufWriter::add_tensor(std::string_view name, DType dtype, std::vector<int64_t> ne,
                              TensorFill fill) {
  const std::string what = "tensor '" + std::string(name) + "'";
  for (const Tensor& t : tensors_) {
    if (t.name == name) return invalid_argument(what + " added twice");
  }
  if (ne.empty() || ne.size() > 4) {
    return invalid_argument(what + ": " + std::to_string(ne.size()) + " dimensions, not 1..4");
  }
  const DTypeInfo& info = dtype_info(dtype);
  uint64_t size = 0;
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] < 1) {
      return invalid_argument(what + ": ne[" + std::to_string(d) + "] = " + std::to_string(ne[d]) +
                              " is not positive");
    }
    if (d == 0) {
      if (ne[0] % info.block_size != 0) {
        return invalid_argument(what + ": ne[0] = " + std::to_string(ne[0]) +
                                " is not a multiple of the " + std::string(info.name) +
                                " block size " + std::to_string(info.block_size));
      }
      size = static_cast<uint64_t>(ne[0] / info.block_size) * info.block_bytes;
    } else if (__builtin_mul_overflow(size, static_cast<uint64_t>(ne[d]), &size)) {
      return out_of_range(what + ": size overflows uint64");
    }
  }
  Tensor t{std::string(name), dtype, std::move(ne), size, data_size_, std::move(fill)};
  data_size_ = pad_to(data_size_ + size, alignment_);
  tensors_.push_back(std::move(t));
  return Status::ok();
}

std::vector<uint8_t> GgufWriter::header() const {
  std::vector<uint8_t> h = {'G', 'G', 'U', 'F'};
  put_u32(h, 3);
  put_u64(h, tensors_.size());
  put_u64(h, kvs_.size());
  for (const Kv& kv : kvs_) {
    put_string(h, kv.key);
    put(h, kv.encoded.data(), kv.encoded.size());
  }
  for (const Tensor& t : tensors_) {
    put_string(h, t.name);
    put_u32(h, static_cast<uint32_t>(t.ne.size()));
    for (int64_t n : t.ne) put_u64(h, static_cast<uint64_t>(n));
    put_u32(h, static_cast<uint32_t>(t.dtype));
    put_u64(h, t.offset);
  }
  h.resize(pad_to(h.size(), alignment_), 0);
  return h;
}

uint64_t GgufWriter::file_size() const { return header().size() + data_size_; }

Status GgufWriter::emit(const std::function<Status(const uint8_t*, size_t)>& sink) const {
  const std::vector<uint8_t> h = header();
  STRATA_RETURN_IF_ERROR(sink(h.data(), h.size()));
  uint64_t pos = 0;
  std::vector<uint8_t> buf;
  for (const Tensor& t : tensors_) {
    STRATA_CHECK(pos == t.offset, "tensor offsets out of step");
    buf.assign(t.size, 0);
    STRATA_RETURN_IF_ERROR(t.fill(std::span<uint8_t>(buf)).with_context("tensor '" + t.name + "'"));
    STRATA_RETURN_IF_ERROR(sink(buf.data(), buf.size()));
    const uint64_t padded = pad_to(t.size, alignment_);
    buf.assign(padded - t.size, 0);
    STRATA_RETURN_IF_ERROR(sink(buf.data(), buf.size()));
    pos += padded;
  }
  return Status::ok();
}

Result<std::vector<uint8_t>> GgufWriter::serialize() const {
  std::vector<uint8_t> out;
  STRATA_RETURN_IF_ERROR(emit([&](const uint8_t* p, size_t n) {
    out.insert(out.end(), p, p + n);
    return Status::ok();
  }));
  return out;
}

Status GgufWriter::write(const std::string& path) const {
  TempFile tmp;
  tmp.path = path + ".tmp." + std::to_string(getpid());
  tmp.f = std::fopen(tmp.path.c_str(), "wb");
  if (tmp.f == nullptr) return io_error(tmp.path + ": cannot create: " + std::strerror(errno));
  STRATA_RETURN_IF_ERROR(emit([&](const uint8_t* p, size_t n) -> Status {
    if (n != 0 && std::fwrite(p, 1, n, tmp.f) != n) {
      return io_error(tmp.path + ": write failed: " + std::strerror(errno));
    }
    return Status::ok();
  }));
  FILE* f = std::exchange(tmp.f, nullptr);
  if (std::fclose(f) != 0) return io_error(tmp.path + ": close failed: " + std::strerror(errno));
  if (std::rename(tmp.path.c_str(), path.c_str()) != 0) {
    return io_error(path + ": cannot rename " + tmp.path + " into place: " + std::strerror(errno));
  }
  tmp.keep = true;
  return Status::ok();
}

}  // namespace strata
