// What the RPC tests share: a wait that must end for another reason than its timeout, and a
// message encoded as the payload a peer sends.
#pragma once

#include <cstdint>
#include <vector>

#include "rpc/protocol.h"

namespace strata::rpc {

inline constexpr int kLongMs = 20000;

template <typename T>
std::vector<uint8_t> payload(const T& m) {
  std::vector<uint8_t> b;
  encode(m, &b);
  return b;
}

}  // namespace strata::rpc
