// A model file whose weights use a dtype strata has no kernels for is refused at load with a
// message naming the tensor and the dtype and listing what is supported, from the dtype table.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/model.h"
#include "model/synth.h"

namespace strata {
namespace {

// Rewrites the dtype of tensor `name` in the tensor infos of a GGUF held in memory: after the
// name (u64 length, bytes) come n_dims (u32), ne (u64 each) and the dtype (u32).
bool set_tensor_dtype(std::vector<char>& file, const std::string& name, uint32_t dtype) {
  std::string key(8, '\0');
  const uint64_t len = name.size();
  std::memcpy(key.data(), &len, 8);
  key += name;
  const auto it = std::search(file.begin(), file.end(), key.begin(), key.end());
  if (it == file.end()) return false;
  size_t pos = static_cast<size_t>(it - file.begin()) + key.size();
  uint32_t n_dims;
  std::memcpy(&n_dims, &file[pos], 4);
  pos += 4 + 8 * static_cast<size_t>(n_dims);
  std::memcpy(&file[pos], &dtype, 4);
  return true;
}

// Opens a one-layer model of `dtype` whose ffn_up is relabelled `as` (an id of the same block
// size and bytes, so that the file stays valid otherwise); the status of opening it.
Status open_relabelled(DType dtype, uint32_t as, const std::string& name) {
  SynthParams p;
  p.n_embd = 256;
  p.n_layer = 1;
  p.n_ff = 512;
  p.dtype = dtype;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("strata_model_" + name + "_" + std::to_string(::getpid()) + ".gguf"))
                               .string();
  EXPECT_TRUE(synth_write(p, path).is_ok());
  {
    std::ifstream in(path, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(set_tensor_dtype(bytes, "blk.0.ffn_up.weight", as));
    std::ofstream(path, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  Result<std::unique_ptr<Model>> m = Model::open(path);
  std::filesystem::remove(path);
  return m.status();
}

TEST(ModelDtype, UnsupportedWeightDtypeNamesTensorAndSupportedTypes) {
  // iq3_s has q3_K's block size and bytes (256 elements in 110).
  ASSERT_EQ(dtype_block_bytes(DType::kIQ3_S), dtype_block_bytes(DType::kQ3_K));
  const Status s = open_relabelled(DType::kQ3_K, static_cast<uint32_t>(DType::kIQ3_S), "dtype");
  ASSERT_FALSE(s.is_ok());
  const std::string msg = s.message();
  for (const char* word : {"blk.0.ffn_up.weight", "iq3_s", "q3_K", "q2_K", "iq4_xs", "q4_1"}) {
    EXPECT_NE(msg.find(word), std::string::npos) << msg << " lacks " << word;
  }
  const size_t list = msg.find("supported:");
  ASSERT_NE(list, std::string::npos) << msg;
  EXPECT_EQ(msg.find("iq3_s", list), std::string::npos) << "iq3_s listed as supported: " << msg;
}

// A device layout's id (q4_K_r16: q4_K's blocks in another order) is never a type of a file.
TEST(ModelDtype, DeviceLayoutIdIsNotAFileType) {
  const Status s = open_relabelled(DType::kQ4_K, static_cast<uint32_t>(DType::kQ4_K_R16), "layout");
  ASSERT_FALSE(s.is_ok());
  const std::string msg = s.message();
  EXPECT_NE(msg.find("blk.0.ffn_up.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("type 64 is not a known ggml type"), std::string::npos) << msg;
}

}  // namespace
}  // namespace strata
