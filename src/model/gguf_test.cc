#include "model/gguf.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "model/gguf_writer.h"

namespace strata {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes serialize(const GgufWriter& w) {
  Result<Bytes> r = w.serialize();
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? std::move(r).value() : Bytes{};
}

Result<GgufFile> parse(const Bytes& b) { return GgufFile::parse(std::make_shared<const Bytes>(b)); }

// Parses and expects a failure whose message mentions every one of `words`.
void expect_error(const Bytes& b, std::vector<std::string> words) {
  Result<GgufFile> r = parse(b);
  ASSERT_FALSE(r.is_ok()) << "a malformed file was accepted";
  for (const std::string& w : words) {
    EXPECT_NE(r.status().message().find(w), std::string::npos)
        << "message '" << r.status().message() << "' does not mention '" << w << "'";
  }
}

template <typename T>
void poke(Bytes& b, size_t at, T v) {
  ASSERT_LE(at + sizeof(T), b.size());
  std::memcpy(b.data() + at, &v, sizeof(T));
}

// Position of the first byte after the length-prefixed string `s` in the header.
size_t after_string(const Bytes& b, const std::string& s) {
  const uint64_t len = s.size();
  Bytes needle(8);
  std::memcpy(needle.data(), &len, 8);
  needle.insert(needle.end(), s.begin(), s.end());
  auto it = std::search(b.begin(), b.end(), needle.begin(), needle.end());
  EXPECT_NE(it, b.end()) << "string '" << s << "' not found";
  return static_cast<size_t>(it - b.begin()) + needle.size();
}

struct TensorFields {
  size_t n_dims, ne0, type, offset;
};
TensorFields tensor_fields(const Bytes& b, const std::string& name) {
  const size_t p = after_string(b, name);
  uint32_t n_dims = 0;
  std::memcpy(&n_dims, b.data() + p, 4);
  return {p, p + 4, p + 4 + 8 * n_dims, p + 4 + 8 * n_dims + 4};
}

Bytes iota_bytes(size_t n, uint8_t start) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(start + i * 7);
  return b;
}

// A small file with a kv of every type and three tensors of different dtypes.
GgufWriter small_writer() {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u8("t.u8", 200);
  w.set_i8("t.i8", -100);
  w.set_u16("t.u16", 60000);
  w.set_i16("t.i16", -30000);
  w.set_u32("t.u32", 4000000000u);
  w.set_i32("t.i32", -2000000000);
  w.set_u64("t.u64", uint64_t{1} << 60);
  w.set_i64("t.i64", -(int64_t{1} << 60));
  w.set_f32("t.f32", 1.5f);
  w.set_f64("t.f64", -2.25);
  w.set_bool("t.bool", true);
  w.set_strings("t.strings", {"a", "", "\xe2\x96\x81hello"});
  w.set_f32_array("t.f32s", {1.0f, -2.0f, 0.5f});
  w.set_i32_array("t.i32s", {1, -2, 3});
  const uint64_t big[2] = {1, uint64_t{1} << 40};
  w.set_array("t.u64s", GgufType::kUint64, big, 2);
  EXPECT_TRUE(w.add_tensor("t.a", DType::kF32, {8, 2}, iota_bytes(64, 1)).is_ok());
  EXPECT_TRUE(w.add_tensor("t.b", DType::kQ8_0, {32, 2}, iota_bytes(68, 2)).is_ok());
  EXPECT_TRUE(w.add_tensor("t.c", DType::kF16, {4}, iota_bytes(8, 3)).is_ok());
  return w;
}

Bytes small_file() { return serialize(small_writer()); }

TEST(Gguf, RoundTripEveryKvAndTensor) {
  const Bytes b = small_file();
  Result<GgufFile> r = parse(b);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const GgufFile& f = *r;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  EXPECT_EQ(f.kvs().size(), 16u);
  EXPECT_EQ(f.kvs()[0].key, "general.architecture");  // file order kept
  EXPECT_EQ(f.get_string("general.architecture").value(), "llama");
  EXPECT_EQ(f.get_uint("t.u8").value(), 200u);
  EXPECT_EQ(f.find("t.i8")->i64, -100);
  EXPECT_EQ(f.get_uint("t.u16").value(), 60000u);
  EXPECT_EQ(f.find("t.i16")->i64, -30000);
  EXPECT_EQ(f.get_uint("t.u32").value(), 4000000000u);
  EXPECT_EQ(f.find("t.i32")->i64, -2000000000);
  EXPECT_EQ(f.get_uint("t.u64").value(), uint64_t{1} << 60);
  EXPECT_EQ(f.find("t.i64")->i64, -(int64_t{1} << 60));
  EXPECT_EQ(f.get_float("t.f32").value(), 1.5);
  EXPECT_EQ(f.get_float("t.f64").value(), -2.25);
  EXPECT_EQ(f.get_float("t.u16").value(), 60000.0);
  EXPECT_EQ(f.get_bool("t.bool").value(), true);
  EXPECT_EQ(f.get_strings("t.strings").value(),
            (std::vector<std::string>{"a", "", "\xe2\x96\x81hello"}));
  EXPECT_EQ(f.get_f32_array("t.f32s").value(), (std::vector<float>{1.0f, -2.0f, 0.5f}));
  EXPECT_EQ(f.get_i32_array("t.i32s").value(), (std::vector<int32_t>{1, -2, 3}));
  EXPECT_EQ(f.get_f32_array("t.i32s").value(), (std::vector<float>{1.0f, -2.0f, 3.0f}));
  EXPECT_EQ(f.find("t.u64s")->array_len, 2u);
  EXPECT_EQ(f.find("t.nothing"), nullptr);

  ASSERT_EQ(f.tensors().size(), 3u);
  struct Want {
    const char* name;
    DType dtype;
    int n_dims;
    int64_t ne0, ne1;
    size_t size;
    uint8_t start;
  };
  const Want wants[] = {{"t.a", DType::kF32, 2, 8, 2, 64, 1},
                        {"t.b", DType::kQ8_0, 2, 32, 2, 68, 2},
                        {"t.c", DType::kF16, 1, 4, 1, 8, 3}};
  for (const Want& want : wants) {
    const GgufTensorInfo* t = f.tensor(want.name);
    ASSERT_NE(t, nullptr) << want.name;
    EXPECT_EQ(t->dtype, want.dtype);
    EXPECT_EQ(t->n_dims, want.n_dims);
    EXPECT_EQ(t->ne[0], want.ne0);
    EXPECT_EQ(t->ne[1], want.ne1);
    EXPECT_EQ(t->size_bytes, want.size);
    EXPECT_EQ(t->offset % 32, 0u);
    const Bytes expect = iota_bytes(want.size, want.start);
    EXPECT_EQ(std::memcmp(f.tensor_data(*t), expect.data(), want.size), 0) << want.name;
  }
  EXPECT_EQ(f.tensor("t.d"), nullptr);
}

// --override-kv: a value replaces the file's in place or joins the sorted index, and every getter
// reads it as it reads the file's values.
TEST(Gguf, OverridesReplaceOrAddAndEveryGetterSeesThem) {
  auto f = parse(small_file());
  ASSERT_TRUE(f.is_ok());
  const size_t n = f->kvs().size();
  for (const char* text : {"t.u32=int:7", "t.f32=float:-0.5", "t.bool=bool:false", "a.new=str:x,y",
                           "zz.last=int:-3", "0.first=float:2", "m.middle=bool:true"}) {
    auto kv = parse_kv_override(text);
    ASSERT_TRUE(kv.is_ok()) << text << ": " << kv.status().message();
    ASSERT_TRUE(f->override_kv(std::move(kv).value()).is_ok()) << text;
  }
  EXPECT_EQ(f->kvs().size(), n + 4);
  EXPECT_EQ(*f->get_uint("t.u32"), 7u);
  EXPECT_EQ(*f->get_float("t.u32"), 7.0);
  EXPECT_EQ(*f->get_float("t.f32"), -0.5);
  EXPECT_FALSE(*f->get_bool("t.bool"));
  EXPECT_EQ(*f->get_string("a.new"), "x,y");     // the value is everything after the colon
  EXPECT_FALSE(f->get_uint("zz.last").is_ok());  // negative
  EXPECT_EQ(f->find("zz.last")->i64, -3);
  EXPECT_EQ(*f->get_float("0.first"), 2.0);
  EXPECT_TRUE(*f->get_bool("m.middle"));
  // The file's other keys are still found through the grown index.
  EXPECT_EQ(*f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->find("t.i16")->i64, -30000);
  EXPECT_EQ(f->get_strings("t.strings")->size(), 3u);
  // A float where an integer is read, and the other way round, as with the file's own types.
  ASSERT_TRUE(f->override_kv(*parse_kv_override("t.u8=float:1.5")).is_ok());
  EXPECT_FALSE(f->get_uint("t.u8").is_ok());
  GgufKv array;
  array.key = "t.f32s";
  array.type = GgufType::kArray;
  EXPECT_FALSE(f->override_kv(array).is_ok());
  EXPECT_FALSE(f->override_kv(*parse_kv_override("general.alignment=int:64")).is_ok());
}

TEST(Gguf, WriterFileSizeMatchesOutput) {
  GgufWriter w = small_writer();
  EXPECT_EQ(w.file_size(), serialize(w).size());
}

TEST(Gguf, OpenMapsFileAndMoves) {
  const std::string path = ::testing::TempDir() + "/gguf_open_test.gguf";
  ASSERT_TRUE(small_writer().write(path).is_ok());
  Result<GgufFile> r = GgufFile::open(path);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  GgufFile f = std::move(r).value();
  GgufFile g = std::move(f);
  EXPECT_EQ(g.path(), path);
  EXPECT_EQ(g.file_size(), small_file().size());
  const GgufTensorInfo* t = g.tensor("t.b");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(std::memcmp(g.tensor_data(*t), iota_bytes(68, 2).data(), 68), 0);
  std::remove(path.c_str());
}

TEST(Gguf, OpenMissingFileNamesThePath) {
  Result<GgufFile> r = GgufFile::open("/nonexistent/dir/x.gguf");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::kIo);
  EXPECT_NE(r.status().message().find("/nonexistent/dir/x.gguf"), std::string::npos);
}

TEST(Gguf, OpenErrorNamesThePath) {
  const std::string path = ::testing::TempDir() + "/gguf_bad_magic.gguf";
  Bytes b = small_file();
  b[0] = 'X';
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size());
  Result<GgufFile> r = GgufFile::open(path);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find(path), std::string::npos);
  EXPECT_NE(r.status().message().find("magic"), std::string::npos);
  std::remove(path.c_str());
}

TEST(Gguf, EveryTruncationFailsCleanly) {
  const Bytes b = small_file();
  Result<GgufFile> whole = parse(b);
  ASSERT_TRUE(whole.is_ok());
  uint64_t data_end = 0;
  for (const GgufTensorInfo& t : whole->tensors()) {
    data_end = std::max(data_end, whole->data_offset() + t.offset + t.size_bytes);
  }
  for (size_t n = 0; n < b.size(); ++n) {
    Result<GgufFile> r = parse(Bytes(b.begin(), b.begin() + n));
    // Only the padding after the last tensor may go missing.
    if (n < data_end) {
      ASSERT_FALSE(r.is_ok()) << "prefix of " << n << " bytes accepted";
      EXPECT_FALSE(r.status().message().empty());
    }
  }
}

// Random corruption of the header must give an error or a consistent file, never a crash
// or a read out of bounds (run under ASan to see the latter).
TEST(Gguf, RandomHeaderCorruptionNeverCrashes) {
  const Bytes good = small_file();
  Result<GgufFile> whole = parse(good);
  ASSERT_TRUE(whole.is_ok());
  const size_t header = whole->data_offset();
  uint64_t x = 12345;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  int accepted = 0;
  for (int round = 0; round < 3000; ++round) {
    Bytes b = good;
    const int flips = 1 + static_cast<int>(next() % 4);
    for (int i = 0; i < flips; ++i) b[next() % header] ^= static_cast<uint8_t>(1 + next() % 255);
    Result<GgufFile> r = parse(b);
    if (!r.is_ok()) {
      EXPECT_FALSE(r.status().message().empty());
      continue;
    }
    ++accepted;
    for (const GgufTensorInfo& t : r->tensors()) {
      ASSERT_LE(r->data_offset() + t.offset + t.size_bytes, b.size()) << t.name;
    }
  }
  EXPECT_LT(accepted, 3000);
}

TEST(Gguf, BadMagic) {
  Bytes b = small_file();
  std::memcpy(b.data(), "GGML", 4);
  expect_error(b, {"magic", "GGML"});
}

TEST(Gguf, BadVersion) {
  Bytes b = small_file();
  poke<uint32_t>(b, 4, 7);
  expect_error(b, {"version", "7"});
  poke<uint32_t>(b, 4, 1);
  expect_error(b, {"version", "1"});
  poke<uint32_t>(b, 4, 0x03000000);
  expect_error(b, {"version", "big-endian"});
}

TEST(Gguf, VersionTwoAccepted) {
  Bytes b = small_file();
  poke<uint32_t>(b, 4, 2);
  Result<GgufFile> r = parse(b);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->version(), 2u);
}

TEST(Gguf, AbsurdKvCount) {
  Bytes b = small_file();
  poke<uint64_t>(b, 16, uint64_t{1} << 62);
  expect_error(b, {"n_kv", "4611686018427387904", "limit"});
  poke<uint64_t>(b, 16, 100000);  // below the ceiling, above what the bytes can hold
  expect_error(b, {"n_kv", "100000", "left in the file"});
}

TEST(Gguf, AbsurdTensorCount) {
  Bytes b = small_file();
  poke<uint64_t>(b, 8, ~uint64_t{0});
  expect_error(b, {"n_tensors", "18446744073709551615", "limit"});
}

TEST(Gguf, HugeKeyLength) {
  Bytes b = small_file();
  poke<uint64_t>(b, 24, uint64_t{1} << 63);
  expect_error(b, {"kv 0 key", "9223372036854775808", "limit"});
}

TEST(Gguf, HugeStringValueLength) {
  Bytes b = small_file();
  // general.architecture is first: its value length follows the key and the type.
  const size_t at = after_string(b, "general.architecture") + 4;
  poke<uint64_t>(b, at, uint64_t{1} << 63);
  expect_error(b, {"general.architecture", "9223372036854775808"});
  poke<uint64_t>(b, at, 1000);  // under the ceiling, past the end
  expect_error(b, {"general.architecture", "1000", "left in the file"});
}

TEST(Gguf, HugeArrayCount) {
  Bytes b = small_file();
  const size_t count_at = after_string(b, "t.f32s") + 8;
  poke<uint64_t>(b, count_at, uint64_t{1} << 62);
  expect_error(b, {"t.f32s", "array length", "limit"});
  poke<uint64_t>(b, count_at, 1000000);
  expect_error(b, {"t.f32s", "array length", "1000000", "left in the file"});
  Bytes s = small_file();
  poke<uint64_t>(s, after_string(s, "t.strings") + 8, 5000000);
  expect_error(s, {"t.strings", "array length", "5000000"});
}

TEST(Gguf, NestedArrayRefused) {
  Bytes b = small_file();
  poke<uint32_t>(b, after_string(b, "t.f32s") + 4, 9);
  expect_error(b, {"t.f32s", "nested"});
}

TEST(Gguf, UnknownKvType) {
  Bytes b = small_file();
  poke<uint32_t>(b, after_string(b, "t.u8"), 13);
  expect_error(b, {"t.u8", "type 13"});
  Bytes a = small_file();
  poke<uint32_t>(a, after_string(a, "t.f32s") + 4, 99);
  expect_error(a, {"t.f32s", "element type 99"});
}

TEST(Gguf, BadBoolValue) {
  Bytes b = small_file();
  b[after_string(b, "t.bool") + 4] = 2;
  expect_error(b, {"t.bool", "bool value 2"});
}

TEST(Gguf, DuplicateKey) {
  GgufWriter w;
  w.set_u32("dup.a", 1);
  w.set_u32("dup.b", 2);
  Bytes b = serialize(w);
  b[after_string(b, "dup.b") - 1] = 'a';
  expect_error(b, {"dup.a", "twice"});
}

TEST(Gguf, DuplicateTensorName) {
  Bytes b = small_file();
  b[after_string(b, "t.b") - 1] = 'a';
  expect_error(b, {"t.a", "twice"});
}

TEST(Gguf, UnknownDtype) {
  Bytes b = small_file();
  poke<uint32_t>(b, tensor_fields(b, "t.a").type, 99);
  expect_error(b, {"t.a", "type 99"});
  poke<uint32_t>(b, tensor_fields(b, "t.a").type, 4);  // a removed ggml type (q4_2)
  expect_error(b, {"t.a", "type 4"});
}

TEST(Gguf, BadNDims) {
  for (uint32_t n : {0u, 5u, 0xffffffffu}) {
    Bytes b = small_file();
    poke<uint32_t>(b, tensor_fields(b, "t.c").n_dims, n);
    expect_error(b, {"t.c", "n_dims", std::to_string(n)});
  }
}

TEST(Gguf, ZeroOrNegativeDimension) {
  Bytes b = small_file();
  poke<uint64_t>(b, tensor_fields(b, "t.a").ne0 + 8, 0);
  expect_error(b, {"t.a", "ne[1] = 0"});
  poke<int64_t>(b, tensor_fields(b, "t.a").ne0 + 8, -5);
  expect_error(b, {"t.a", "ne[1]"});
}

TEST(Gguf, ElementCountOverflow) {
  Bytes b = small_file();
  const TensorFields f = tensor_fields(b, "t.a");
  poke<uint64_t>(b, f.ne0, uint64_t{1} << 40);
  poke<uint64_t>(b, f.ne0 + 8, uint64_t{1} << 30);
  expect_error(b, {"t.a", "overflows", "ne[1]"});
}

TEST(Gguf, RowNotMultipleOfBlock) {
  Bytes b = small_file();
  poke<uint64_t>(b, tensor_fields(b, "t.b").ne0, 33);
  expect_error(b, {"t.b", "ne[0] = 33", "block size 32"});
}

TEST(Gguf, OffsetPastEnd) {
  Bytes b = small_file();
  poke<uint64_t>(b, tensor_fields(b, "t.c").offset, 1 << 20);
  expect_error(b, {"t.c", "offset 1048576", "ends past the file"});
}

TEST(Gguf, OffsetPlusSizeWraps) {
  Bytes b = small_file();
  // Aligned, and the 64-byte tensor would end past 2^64.
  poke<uint64_t>(b, tensor_fields(b, "t.a").offset, ~uint64_t{0} - 31);
  expect_error(b, {"t.a", "overflows"});
}

TEST(Gguf, MisalignedOffset) {
  Bytes b = small_file();
  const size_t at = tensor_fields(b, "t.c").offset;
  uint64_t off = 0;
  std::memcpy(&off, b.data() + at, 8);
  poke<uint64_t>(b, at, off + 4);
  expect_error(b, {"t.c", "not a multiple of the alignment 32"});
}

TEST(Gguf, OverlappingTensors) {
  Bytes b = small_file();
  uint64_t off_a = 0;
  std::memcpy(&off_a, b.data() + tensor_fields(b, "t.a").offset, 8);
  poke<uint64_t>(b, tensor_fields(b, "t.c").offset, off_a + 32);  // inside t.a's 64 bytes
  expect_error(b, {"overlaps", "t.a", "t.c"});
}

TEST(Gguf, BadAlignmentValue) {
  for (uint32_t a : {0u, 48u, 1u << 21}) {
    GgufWriter w;
    w.set_u32("general.alignment", a);
    expect_error(serialize(w), {"general.alignment", std::to_string(a)});
  }
  GgufWriter neg;
  neg.set_i32("general.alignment", -32);
  expect_error(serialize(neg), {"general.alignment", "-32"});
  GgufWriter huge;
  huge.set_u64("general.alignment", uint64_t{1} << 63);
  expect_error(serialize(huge), {"general.alignment", "9223372036854775808"});
  GgufWriter s;
  s.set_string("general.alignment", "32");
  expect_error(serialize(s), {"general.alignment", "string"});
}

TEST(Gguf, CustomAlignmentRespected) {
  GgufWriter w;
  ASSERT_TRUE(w.set_alignment(64).is_ok());
  ASSERT_TRUE(w.add_tensor("x", DType::kF32, {3}, iota_bytes(12, 0)).is_ok());
  ASSERT_TRUE(w.add_tensor("y", DType::kF32, {5}, iota_bytes(20, 9)).is_ok());
  Result<GgufFile> r = parse(serialize(w));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->alignment(), 64u);
  EXPECT_EQ(r->data_offset() % 64, 0u);
  EXPECT_EQ(r->tensor("y")->offset, 64u);
  EXPECT_EQ(std::memcmp(r->tensor_data(*r->tensor("y")), iota_bytes(20, 9).data(), 20), 0);
  EXPECT_FALSE(w.set_alignment(128).is_ok());  // after tensors: refused
  GgufWriter bad;
  EXPECT_FALSE(bad.set_alignment(24).is_ok());
}

TEST(Gguf, GetterWrongTypeNamesKeyAndTypes) {
  Result<GgufFile> r = parse(small_file());
  ASSERT_TRUE(r.is_ok());
  Result<std::string> s = r->get_string("t.u32");
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("t.u32"), std::string::npos);
  EXPECT_NE(s.status().message().find("uint32"), std::string::npos);
  EXPECT_NE(s.status().message().find("string"), std::string::npos);
  Result<uint64_t> neg = r->get_uint("t.i32");
  ASSERT_FALSE(neg.is_ok());
  EXPECT_NE(neg.status().message().find("negative"), std::string::npos);
  EXPECT_FALSE(r->get_bool("t.u8").is_ok());
  EXPECT_FALSE(r->get_float("general.architecture").is_ok());
  Result<std::vector<std::string>> strs = r->get_strings("t.f32s");
  ASSERT_FALSE(strs.is_ok());
  EXPECT_NE(strs.status().message().find("array of float32"), std::string::npos);
  Result<uint64_t> missing = r->get_uint("no.such.key");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("no.such.key"), std::string::npos);
  Result<std::vector<int32_t>> big = r->get_i32_array("t.u64s");
  ASSERT_FALSE(big.is_ok());
  EXPECT_NE(big.status().message().find("1099511627776"), std::string::npos);
}

TEST(Gguf, WriterRefusesBadTensors) {
  GgufWriter w;
  EXPECT_FALSE(w.add_tensor("q", DType::kQ8_0, {33}, Bytes(36)).is_ok());
  EXPECT_FALSE(w.add_tensor("z", DType::kF32, {0}, Bytes{}).is_ok());
  EXPECT_FALSE(w.add_tensor("five", DType::kF32, {1, 1, 1, 1, 1}, Bytes(4)).is_ok());
  EXPECT_FALSE(w.add_tensor("size", DType::kF32, {4}, Bytes(15)).is_ok());
  ASSERT_TRUE(w.add_tensor("ok", DType::kF32, {4}, Bytes(16)).is_ok());
  EXPECT_FALSE(w.add_tensor("ok", DType::kF32, {4}, Bytes(16)).is_ok());
  EXPECT_EQ(w.n_tensors(), 1u);
  Result<GgufFile> r = parse(serialize(w));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->tensors().size(), 1u);
}

TEST(Gguf, FillErrorFailsWriteAndLeavesNoFile) {
  GgufWriter w;
  ASSERT_TRUE(w.add_tensor("t", DType::kF32, {4}, [](std::span<uint8_t>) {
                 return invalid_argument("no data");
               }).is_ok());
  const std::string path = ::testing::TempDir() + "/gguf_fill_error.gguf";
  std::remove(path.c_str());
  Status s = w.write(path);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("'t'"), std::string::npos);
  EXPECT_FALSE(std::ifstream(path).good());
}

TEST(Gguf, EmptyFileWithoutTensors) {
  GgufWriter w;
  w.set_string("general.name", "x");
  Result<GgufFile> r = parse(serialize(w));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(r->tensors().empty());
  expect_error(Bytes{}, {"magic"});
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// Copies every kv and tensor of `f`, in file order, into a writer.
void copy_into(const GgufFile& f, GgufWriter& w) {
  for (const GgufKv& kv : f.kvs()) {
    switch (kv.type) {
      case GgufType::kUint8:
        w.set_u8(kv.key, static_cast<uint8_t>(kv.u64));
        break;
      case GgufType::kInt8:
        w.set_i8(kv.key, static_cast<int8_t>(kv.i64));
        break;
      case GgufType::kUint16:
        w.set_u16(kv.key, static_cast<uint16_t>(kv.u64));
        break;
      case GgufType::kInt16:
        w.set_i16(kv.key, static_cast<int16_t>(kv.i64));
        break;
      case GgufType::kUint32:
        w.set_u32(kv.key, static_cast<uint32_t>(kv.u64));
        break;
      case GgufType::kInt32:
        w.set_i32(kv.key, static_cast<int32_t>(kv.i64));
        break;
      case GgufType::kUint64:
        w.set_u64(kv.key, kv.u64);
        break;
      case GgufType::kInt64:
        w.set_i64(kv.key, kv.i64);
        break;
      case GgufType::kFloat32:
        w.set_f32(kv.key, static_cast<float>(kv.f64));
        break;
      case GgufType::kFloat64:
        w.set_f64(kv.key, kv.f64);
        break;
      case GgufType::kBool:
        w.set_bool(kv.key, kv.u64 != 0);
        break;
      case GgufType::kString:
        w.set_string(kv.key, kv.str);
        break;
      case GgufType::kArray:
        if (kv.array_type == GgufType::kString) {
          w.set_strings(kv.key, kv.strings);
        } else {
          w.set_array(kv.key, kv.array_type, kv.array_data, kv.array_len);
        }
        break;
    }
  }
  for (const GgufTensorInfo& t : f.tensors()) {
    const uint8_t* data = f.tensor_data(t);
    ASSERT_TRUE(w.add_tensor(t.name, t.dtype, std::vector<int64_t>(t.ne, t.ne + t.n_dims),
                             Bytes(data, data + t.size_bytes))
                    .is_ok());
  }
}

// A file written by llama.cpp's converter, read and written back, must come out the same
// bytes: the writer's layout (order, padding, offsets) is the reference implementation's.
TEST(Gguf, RealFileRewritesByteIdentical) {
  const std::string path = std::string(STRATA_SHARED_DIR) + "/models/stories260K.gguf";
  if (!std::ifstream(path).good()) GTEST_SKIP() << path << " is absent";
  Result<GgufFile> r = GgufFile::open(path);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->tensors().size(), 48u);
  EXPECT_EQ(r->get_uint("llama.embedding_length").value(), 64u);
  EXPECT_EQ(r->get_uint("llama.block_count").value(), 5u);
  EXPECT_EQ(r->get_uint("llama.feed_forward_length").value(), 172u);
  EXPECT_EQ(r->get_strings("tokenizer.ggml.tokens").value().size(), 512u);
  GgufWriter w;
  copy_into(*r, w);
  const Bytes out = serialize(w);
  std::ifstream in(path, std::ios::binary);
  const Bytes original((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(out.size(), original.size());
  EXPECT_TRUE(out == original);
}

}  // namespace
}  // namespace strata
