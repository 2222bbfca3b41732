// Saving, restoring and erasing a slot's KV cache (/slots/{id}?action=save|restore|erase).
//
// The HTTP side (paths, names, answers) is the dispatcher's; the KV side is the engine's and
// runs on the owning group's decode thread. A server without an implementation answers these
// actions with 501.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace strata::server {

struct SlotFileResult {
  int32_t n_tokens = 0;  // tokens saved, restored or erased
  uint64_t n_bytes = 0;  // bytes written or read (0 for erase)
  double ms = 0;
};

class SlotStore {
 public:
  virtual ~SlotStore() = default;
  // `slot` is the server-wide slot id (as /slots lists it); `path` is a file under
  // --slot-save-path whose name the dispatcher has already checked. Errors name the file and
  // what is wrong with it (truncated, another model's); a failed restore leaves the slot empty
  // and usable.
  virtual Result<SlotFileResult> save(int32_t slot, const std::string& path) = 0;
  virtual Result<SlotFileResult> restore(int32_t slot, const std::string& path) = 0;
  virtual Result<SlotFileResult> erase(int32_t slot) = 0;
  // Evaluates again the tokens whose KV the slot lost with a worker that died (n_tokens: how
  // many; 0 when it lost none). Optional.
  virtual Result<SlotFileResult> rebuild(int32_t slot) {
    return unsupported("rebuilding a slot is not supported by this server");
  }
};

}  // namespace strata::server
