#include <cstring>

#include "backend/backend.h"

namespace strata {

Status Buffer::clear(uint8_t value) {
  void* p = host_ptr();
  if (p == nullptr) return unsupported("this buffer has no host memory to clear");
  std::memset(p, value, static_cast<size_t>(size()));
  return Status::ok();
}

}  // namespace strata
