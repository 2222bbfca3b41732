// Whether the weights are used in place in the file's mapping or copied into memory.
#include "server/model_load.h"

#include <gtest/gtest.h>

namespace strata::server {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

TEST(WeightsMapped, AFlagDecidesWhateverTheSizes) {
  EXPECT_TRUE(weights_mapped(true, kGiB, 100 * kGiB));
  EXPECT_FALSE(weights_mapped(false, 100 * kGiB, kGiB)) << "--no-mmap copies even when tight";
}

TEST(WeightsMappedAuto, CopiesWhatTakesAtMostHalfTheFreeMemory) {
  EXPECT_FALSE(weights_mapped(std::nullopt, kGiB, 24 * kGiB));
  EXPECT_FALSE(weights_mapped(std::nullopt, 12 * kGiB, 24 * kGiB)) << "exactly half";
  EXPECT_TRUE(weights_mapped(std::nullopt, 12 * kGiB + 1, 24 * kGiB));
  EXPECT_TRUE(weights_mapped(std::nullopt, 40 * kGiB, 24 * kGiB))
      << "a model larger than memory runs from the page cache";
  EXPECT_TRUE(weights_mapped(std::nullopt, 1, 0)) << "no free memory known: map";
}

}  // namespace
}  // namespace strata::server
