// libFuzzer target: the header decoder and every request/response decoder, fed the same bytes.
// Build and run with scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <span>

#include "rpc/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata::rpc;
  const std::span<const uint8_t> p(data, size);
  if (size >= kHeaderBytes) (void)header_decode(p.first(kHeaderBytes), kMaxMessageBytes);
  // The first byte picks the decoder so that each sees the whole input.
  if (size == 0) return 0;
  const std::span<const uint8_t> rest = p.subspan(1);
  switch (data[0] % 21) {
    case 0:
      (void)decode_hello_request(rest);
      break;
    case 1:
      (void)decode_hello_response(rest);
      break;
    case 2:
      (void)decode_device_info_response(rest);
      break;
    case 3:
      (void)decode_alloc_buffer_request(rest);
      break;
    case 4:
      (void)decode_alloc_buffer_response(rest);
      break;
    case 5:
      (void)decode_free_buffer_request(rest);
      break;
    case 6:
      (void)decode_buffer_clear_request(rest);
      break;
    case 7: {
      auto r = decode_set_tensor_request(rest);
      // The data span must lie inside the input.
      if (r && !r->data.empty() &&
          (r->data.data() < rest.data() ||
           r->data.data() + r->data.size() > rest.data() + rest.size())) {
        __builtin_trap();
      }
      break;
    }
    case 8: {
      auto r = decode_set_tensors_request(rest);
      if (r) {
        uint64_t total = 0;
        for (const Region& g : r->regions) total += g.size;
        if (total != r->data.size()) __builtin_trap();
      }
      break;
    }
    case 9:
      (void)decode_set_tensor_hash_request(rest);
      break;
    case 10:
      (void)decode_set_tensor_hash_response(rest);
      break;
    case 11:
      (void)decode_get_tensor_request(rest);
      break;
    case 12:
      (void)decode_get_tensors_request(rest, uint64_t{1} << 20);
      break;
    case 13:
      (void)decode_copy_tensor_request(rest);
      break;
    case 14:
      (void)decode_graph_compute_request(rest);
      break;
    case 15:
      (void)decode_graph_recompute_request(rest);
      break;
    case 16:
      (void)decode_handoff_ticket_response(rest);
      break;
    case 17:
      (void)decode_handoff_connect_request(rest);
      break;
    case 18:
      (void)decode_handoff_attach_request(rest);
      break;
    case 19: {
      auto r = decode_handoff_data(rest);
      if (r && r->status == 0 && r->bytes.size() != r->dst.size) __builtin_trap();
      break;
    }
    case 20:
      (void)decode_handoff_compute_request(rest);
      break;
  }
  return 0;
}
