// The block layouts checked against sources that share no code with strata:
//  - the numpy dequantiser of tests/reference/gguf_quants.py, written from the published
//    layouts, must give the same float32 values as strata's scalar dequantisers, for blocks
//    strata's quantisers wrote and for blocks llama.cpp's llama-quantize wrote;
//  - the GGUFs llama-quantize wrote from one f16 model (shared/models/llamacpp-written) must
//    dequantise to finite values close to that f16 model's, within a per-type error bound.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/dtype_traits.h"
#include "core/quant.h"
#include "model/gguf.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

const std::string kLlamacppDir = std::string(STRATA_SHARED_DIR) + "/models/llamacpp-written";
const std::string kPython = "/usr/bin/python3";

// Every tensor's values as float, row by row through strata's scalar dequantiser.
std::vector<float> dequantized(const GgufFile& f, const GgufTensorInfo& t, int64_t max_rows = -1) {
  const int64_t n = t.ne[0];
  int64_t rows = t.ne[1] * t.ne[2] * t.ne[3];
  if (max_rows >= 0) rows = std::min(rows, max_rows);
  const size_t row_bytes = dtype_row_bytes(t.dtype, n);
  std::vector<float> out(static_cast<size_t>(n * rows));
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(t.dtype, f.tensor_data(t) + r * row_bytes, out.data() + r * n, n);
  }
  return out;
}

std::vector<std::string> llamacpp_files() {
  std::vector<std::string> files;
  if (!fs::is_directory(kLlamacppDir)) return files;
  for (const auto& e : fs::directory_iterator(kLlamacppDir)) {
    if (e.path().extension() == ".gguf") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// ---- numpy cross-check ----

class Dump {
 public:
  Dump() : dir_(fs::temp_directory_path() / ("strata_quants_" + std::to_string(::getpid()))) {
    fs::create_directories(dir_);
    index_.open(dir_ / "index.txt");
  }
  ~Dump() { fs::remove_all(dir_); }

  void add(const std::string& name, DType t, const uint8_t* blocks, const std::vector<float>& y) {
    const int64_t n = static_cast<int64_t>(y.size());
    std::ofstream(dir_ / (name + ".q"), std::ios::binary)
        .write(reinterpret_cast<const char*>(blocks),
               static_cast<std::streamsize>(dtype_row_bytes(t, n)));
    std::ofstream(dir_ / (name + ".f32"), std::ios::binary)
        .write(reinterpret_cast<const char*>(y.data()),
               static_cast<std::streamsize>(y.size() * sizeof(float)));
    index_ << name << " " << static_cast<uint32_t>(t) << " " << n << "\n";
    ++count_;
  }

  // Runs the numpy check; returns its exit status and fills `output`.
  int check(std::string* output) {
    index_.close();
    const std::string cmd = kPython + " " + STRATA_SOURCE_DIR +
                            "/tests/reference/gguf_quants.py check " + dir_.string() + " 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) return -1;
    char buf[512];
    while (std::fgets(buf, sizeof buf, p) != nullptr) *output += buf;
    return ::pclose(p);
  }

  int count() const { return count_; }

 private:
  fs::path dir_;
  std::ofstream index_;
  int count_ = 0;
};

// Rows that reach every corner of a format: scales over several binades, a zero block, an
// outlier, all-positive and all-negative blocks (mins of either sign), exact ties.
std::vector<float> test_row(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    x[i] = dist(rng) * std::ldexp(1.0f, static_cast<int>((i / 32 + seed) % 13) - 6);
  }
  for (int64_t i = 0; i < 32; ++i) x[i] = 0.0f;
  x[40] = 50.0f;
  for (int64_t i = 64; i < 96; ++i) x[i] = std::fabs(x[i]) + 1.0f;
  for (int64_t i = 96; i < 128; ++i) x[i] = -std::fabs(x[i]) - 0.5f;
  for (int64_t i = 128; i < 160; ++i) x[i] = static_cast<float>(i % 9) - 4.0f;
  return x;
}

TEST(QuantReference, NumpyDequantisesLikeStrata) {
  if (std::system((kPython + " -c 'import numpy' 2> /dev/null").c_str()) != 0) {
    GTEST_SKIP() << kPython << " with numpy is not available";
  }
  Dump dump;
  // Blocks from strata's quantisers, every dtype with conversions.
  const int64_t n = 1024;
  for (const DTypeTraits& t : dtype_traits_all()) {
    if (!dtype_can_convert(t.dtype)) continue;  // a device layout: no rows of its own
    for (uint32_t seed = 1; seed <= 3; ++seed) {
      const std::vector<float> x = test_row(n, seed);
      std::vector<uint8_t> q(dtype_row_bytes(t.dtype, n));
      quantize_row(t.dtype, x.data(), q.data(), n);
      std::vector<float> y(static_cast<size_t>(n));
      dequantize_row(t.dtype, q.data(), y.data(), n);
      dump.add(std::string(dtype_name(t.dtype)) + "_" + std::to_string(seed), t.dtype, q.data(), y);
    }
  }
  // Blocks llama.cpp wrote: a few rows of every tensor type in those files.
  std::map<DType, int> from_files;
  for (const std::string& path : llamacpp_files()) {
    Result<GgufFile> f = GgufFile::open(path);
    ASSERT_TRUE(f.is_ok()) << f.status().message();
    for (const GgufTensorInfo& t : f->tensors()) {
      if (!dtype_can_convert(t.dtype) || from_files[t.dtype] >= 6) continue;
      ++from_files[t.dtype];
      const std::vector<float> y = dequantized(*f, t, 4);
      dump.add(fs::path(path).stem().string() + "_" + t.name, t.dtype, f->tensor_data(t), y);
    }
  }
  std::string output;
  const int status = dump.check(&output);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(std::count(output.begin(), output.end(), '\n'), dump.count()) << output;
}

// ---- llama.cpp's files against their f16 source ----

// Relative RMS error sqrt(sum (q - f)^2 / sum f^2) of a llama-quantize tensor against the f16
// tensor it was made from, by type. The weights are N(0, 0.15) and llama-quantize ran without
// an importance matrix, so the error is the format's own quantisation noise: about
// step / sqrt(12) / sigma for a grid of step `step`. With block maxima near 2.1 sigma (32
// elements) and ranges near 4.1 sigma, that predicts 0.005 for q8_0 (step 2.1/127), 0.017 for
// q6_K, 0.04 for the 5-bit types, 0.08 for the 4-bit ones, 0.13 for q3_K (16 elements,
// step 1.8/4) and 0.3 for q2_K (step 3.5/3). Measured on these files (worst tensor; every
// tensor of a type lies within 2% of it): q8_0 0.0054, q6_K 0.0179, q5_K 0.0364,
// q5_1 0.0382, q5_0 0.0430, q4_K 0.0718, q4_1 0.0787, q4_0 0.0864, iq4_nl 0.0766,
// iq4_xs 0.0772, q3_K 0.1515, q2_K 0.2982. The bounds are those plus 10%: a misread layout
// (a swapped nibble order, a wrong scale or min) costs far more than that.
struct FileBound {
  DType dtype;
  double max_rel_rms;
};

constexpr FileBound kFileBounds[] = {
    {DType::kQ8_0, 0.006},   {DType::kQ6_K, 0.020},   {DType::kQ5_K, 0.040}, {DType::kQ5_1, 0.042},
    {DType::kQ5_0, 0.048},   {DType::kQ4_K, 0.079},   {DType::kQ4_1, 0.087}, {DType::kQ4_0, 0.095},
    {DType::kIQ4_NL, 0.085}, {DType::kIQ4_XS, 0.085}, {DType::kQ3_K, 0.167}, {DType::kQ2_K, 0.33},
};

TEST(QuantReference, LlamaQuantizeFilesMatchTheirF16Source) {
  const std::vector<std::string> files = llamacpp_files();
  const std::string f16_path = kLlamacppDir + "/llama31-f16.gguf";
  if (files.empty() || !fs::exists(f16_path)) {
    GTEST_SKIP() << kLlamacppDir << " is absent";
  }
  Result<GgufFile> source = GgufFile::open(f16_path);
  ASSERT_TRUE(source.is_ok()) << source.status().message();
  std::map<DType, double> worst;
  int quantised = 0;
  for (const std::string& path : files) {
    if (path.find("llama31-") == std::string::npos || path == f16_path) continue;
    SCOPED_TRACE(path);
    Result<GgufFile> f = GgufFile::open(path);
    ASSERT_TRUE(f.is_ok()) << f.status().message();
    for (const GgufTensorInfo& t : f->tensors()) {
      ASSERT_TRUE(dtype_can_convert(t.dtype))
          << t.name << " has dtype " << dtype_name(t.dtype) << ", which strata cannot read";
      const std::vector<float> y = dequantized(*f, t);
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_TRUE(std::isfinite(y[i])) << t.name << " element " << i << " is " << y[i];
      }
      if (!dtype_is_quantized(t.dtype)) continue;
      const GgufTensorInfo* s = source->tensor(t.name);
      ASSERT_NE(s, nullptr) << t.name << " is not in the f16 file";
      const std::vector<float> ref = dequantized(*source, *s);
      ASSERT_EQ(ref.size(), y.size()) << t.name;
      double err = 0, norm = 0;
      for (size_t i = 0; i < y.size(); ++i) {
        err += (double{y[i]} - ref[i]) * (double{y[i]} - ref[i]);
        norm += double{ref[i]} * ref[i];
      }
      const double rel = std::sqrt(err / norm);
      worst[t.dtype] = std::max(worst[t.dtype], rel);
      ++quantised;
      double bound = -1;
      for (const FileBound& b : kFileBounds) {
        if (b.dtype == t.dtype) bound = b.max_rel_rms;
      }
      ASSERT_GE(bound, 0.0) << dtype_name(t.dtype) << " has no bound in kFileBounds";
      EXPECT_LE(rel, bound) << t.name << " (" << dtype_name(t.dtype) << ")";
    }
  }
  EXPECT_GT(quantised, 0);
  for (const auto& [dtype, rel] : worst) {
    std::printf("  %-7s worst relative RMS error %.4f\n", std::string(dtype_name(dtype)).c_str(),
                rel);
  }
}

}  // namespace
}  // namespace strata
