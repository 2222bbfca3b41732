// libFuzzer target: the GGUF reader (header, metadata, tensor infos) and what reads the
// metadata next (every typed getter, the hyperparameters). Any input must end in a file or an
// error, never in a crash or a sanitizer report; an accepted file keeps every tensor's data
// inside the input and every lookup finds what the file holds. Seeded by scripts/fuzz.sh from
// small synthetic models and the files of STRATA_SHARED_DIR/models, cut where their data begins.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/gguf.h"
#include "model/hparams.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto bytes = std::make_shared<const std::vector<uint8_t>>(data, data + size);
  const uint8_t* begin = bytes->data();
  strata::Result<strata::GgufFile> f = strata::GgufFile::parse(bytes);
  if (!f) return 0;
  if (f->data_offset() > size) __builtin_trap();
  for (const strata::GgufKv& kv : f->kvs()) {
    if (f->find(kv.key) != &kv) __builtin_trap();
    (void)f->get_string(kv.key);
    (void)f->get_uint(kv.key);
    (void)f->get_float(kv.key);
    (void)f->get_bool(kv.key);
    (void)f->get_strings(kv.key);
    (void)f->get_f32_array(kv.key);
    (void)f->get_i32_array(kv.key);
  }
  volatile uint8_t sink = 0;
  for (const strata::GgufTensorInfo& t : f->tensors()) {
    if (f->tensor(t.name) != &t) __builtin_trap();
    if (t.size_bytes == 0) continue;
    const uint8_t* p = f->tensor_data(t);
    if (p < begin || p + t.size_bytes > begin + size) __builtin_trap();
    sink = sink + p[0] + p[t.size_bytes - 1];  // AddressSanitizer checks both ends
  }
  (void)strata::hparams_from_gguf(*f);
  return 0;
}
