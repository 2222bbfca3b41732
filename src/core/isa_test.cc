#include "core/isa.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(Isa, Rows16PrefetchTakesADecimalByteCountUpTo64KiB) {
  EXPECT_EQ(parse_rows16_prefetch("0"), size_t{0});
  EXPECT_EQ(parse_rows16_prefetch("4608"), size_t{4608});
  EXPECT_EQ(parse_rows16_prefetch("65536"), size_t{65536});
  for (const char* bad :
       {"", "65537", "-64", "+64", "4k", "64 ", " 64", "0x40", "99999999999999999999999"}) {
    EXPECT_EQ(parse_rows16_prefetch(bad), std::nullopt) << bad;
  }
}

}  // namespace
}  // namespace strata
