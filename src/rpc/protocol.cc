#include "rpc/protocol.h"

#include <xxhash.h>

#include <algorithm>
#include <bitset>
#include <cstring>

namespace strata::rpc {
namespace {

void put_u8(std::vector<uint8_t>* out, uint8_t v) { out->push_back(v); }
void put_u16(std::vector<uint8_t>* out, uint16_t v) {
  for (int i = 0; i < 2; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_u32(std::vector<uint8_t>* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_u64(std::vector<uint8_t>* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_bytes(std::vector<uint8_t>* out, const uint8_t* p, size_t n) {
  out->insert(out->end(), p, p + n);
}
void put_region(std::vector<uint8_t>* out, const Region& r) {
  put_u64(out, r.buffer);
  put_u64(out, r.offset);
  put_u64(out, r.size);
}

uint64_t load_le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// Reads fields in order; every read checks the bytes left, and the first failure sticks so
// that a decoder reads all fields and checks once.
class Reader {
 public:
  Reader(std::span<const uint8_t> p, const char* what) : p_(p), what_(what) {}
  uint8_t u8(const char* field) { return static_cast<uint8_t>(take(field, 1)); }
  uint16_t u16(const char* field) { return static_cast<uint16_t>(take(field, 2)); }
  uint32_t u32(const char* field) { return static_cast<uint32_t>(take(field, 4)); }
  uint64_t u64(const char* field) { return take(field, 8); }
  Region region(const char* field) {
    Region r;
    r.buffer = u64(field);
    r.offset = u64(field);
    r.size = u64(field);
    return r;
  }
  template <size_t N>
  void bytes(std::array<uint8_t, N>* out, const char* field) {
    std::span<const uint8_t> s = span(field, N);
    if (!s.empty()) std::memcpy(out->data(), s.data(), N);
  }
  std::span<const uint8_t> span(const char* field, uint64_t n) {
    if (!ok()) return {};
    if (n > remaining()) {
      fail(field,
           "needs " + std::to_string(n) + " bytes, " + std::to_string(remaining()) + " left");
      return {};
    }
    std::span<const uint8_t> s = p_.subspan(pos_, static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }
  uint64_t remaining() const { return p_.size() - pos_; }
  bool ok() const { return status_.is_ok(); }
  void fail(const char* field, const std::string& why) {
    if (ok()) status_ = invalid_argument(std::string(what_) + " field '" + field + "': " + why);
  }
  // The status after all fields: trailing bytes are an error unless `allow_trailing`.
  Status finish(bool allow_trailing = false) {
    if (ok() && !allow_trailing && remaining() != 0) {
      status_ = invalid_argument(std::string(what_) + ": " + std::to_string(remaining()) +
                                 " unexpected trailing bytes");
    }
    return status_;
  }

 private:
  uint64_t take(const char* field, int n) {
    std::span<const uint8_t> s = span(field, static_cast<uint64_t>(n));
    return s.empty() ? 0 : load_le(s.data(), n);
  }
  std::span<const uint8_t> p_;
  size_t pos_ = 0;
  const char* what_;
  Status status_;
};

// The words of a bit set, bit b of word w for id 64 w + b; as few words as hold its highest bit.
template <size_t N>
std::vector<uint64_t> bits_to_words(const std::bitset<N>& bits) {
  std::vector<uint64_t> words;
  for (size_t i = 0; i < N; ++i) {
    if (!bits.test(i)) continue;
    words.resize(i / 64 + 1, 0);
    words[i / 64] |= uint64_t{1} << (i % 64);
  }
  return words;
}

// Reads n words into `bits` (n checked against kMaxCapWords); ids past N are ignored.
template <size_t N>
void words_to_bits(Reader& r, uint32_t n, const char* field, std::bitset<N>* bits) {
  for (uint32_t w = 0; w < n; ++w) {
    const uint64_t word = r.u64(field);
    for (uint32_t b = 0; b < 64; ++b) {
      const size_t id = size_t{w} * 64 + b;
      if ((word >> b & 1) != 0 && id < N) bits->set(id);
    }
  }
}

// a + b, or false when it wraps.
bool add_checked(uint64_t a, uint64_t b, uint64_t* sum) {
  return !__builtin_add_overflow(a, b, sum);
}

Status read_regions(Reader& r, uint32_t n, std::vector<Region>* regions, uint64_t* total,
                    uint64_t max_total, const char* what) {
  if (n > kMaxBatchRegions) {
    return out_of_range(std::string(what) + " field 'n': " + std::to_string(n) +
                        " regions, limit " + std::to_string(kMaxBatchRegions));
  }
  // Count against the bytes present before the vector is sized.
  if (uint64_t{n} * kRegionBytes > r.remaining()) {
    return invalid_argument(std::string(what) + " field 'n': " + std::to_string(n) +
                            " regions need " + std::to_string(uint64_t{n} * kRegionBytes) +
                            " bytes, " + std::to_string(r.remaining()) + " left");
  }
  regions->resize(n);
  *total = 0;
  for (uint32_t i = 0; i < n; ++i) {
    (*regions)[i] = r.region("region");
    if (!add_checked(*total, (*regions)[i].size, total) || *total > max_total) {
      return out_of_range(std::string(what) + " region " + std::to_string(i) +
                          ": the sizes add up past the limit " + std::to_string(max_total));
    }
  }
  return Status::ok();
}

}  // namespace

const char* command_name(Command c) {
  switch (c) {
    case Command::kHello:
      return "HELLO";
    case Command::kDeviceInfo:
      return "DEVICE_INFO";
    case Command::kAllocBuffer:
      return "ALLOC_BUFFER";
    case Command::kFreeBuffer:
      return "FREE_BUFFER";
    case Command::kBufferClear:
      return "BUFFER_CLEAR";
    case Command::kSetTensor:
      return "SET_TENSOR";
    case Command::kSetTensors:
      return "SET_TENSORS";
    case Command::kSetTensorHash:
      return "SET_TENSOR_HASH";
    case Command::kGetTensor:
      return "GET_TENSOR";
    case Command::kGetTensors:
      return "GET_TENSORS";
    case Command::kCopyTensor:
      return "COPY_TENSOR";
    case Command::kGraphCompute:
      return "GRAPH_COMPUTE";
    case Command::kGraphRecompute:
      return "GRAPH_RECOMPUTE";
    case Command::kSynchronize:
      return "SYNCHRONIZE";
    case Command::kHandoffTicket:
      return "HANDOFF_TICKET";
    case Command::kHandoffConnect:
      return "HANDOFF_CONNECT";
    case Command::kHandoffAttach:
      return "HANDOFF_ATTACH";
    case Command::kHandoffData:
      return "HANDOFF_DATA";
    case Command::kHandoffCompute:
      return "HANDOFF_COMPUTE";
  }
  return "UNKNOWN";
}

bool command_known(uint8_t c) { return c >= kCommandFirst && c <= kCommandLast; }

uint64_t command_capability(Command c) {
  switch (c) {
    case Command::kSetTensors:
    case Command::kGetTensors:
      return kCapBatched;
    case Command::kSetTensorHash:
      return kCapSetTensorHash;
    case Command::kCopyTensor:
      return kCapCopyTensor;
    case Command::kGraphRecompute:
      return kCapGraphRecompute;
    case Command::kHandoffTicket:
    case Command::kHandoffConnect:
    case Command::kHandoffAttach:
    case Command::kHandoffData:
    case Command::kHandoffCompute:
      return kCapHandoff;
    default:
      return 0;
  }
}

WireStatus wire_status_from(const Status& s) {
  switch (s.kind()) {
    case ErrorKind::kOk:
      return WireStatus::kOk;
    case ErrorKind::kInvalidArgument:
      return WireStatus::kInvalidArgument;
    case ErrorKind::kOutOfRange:
      return WireStatus::kOutOfRange;
    case ErrorKind::kUnsupported:
      return WireStatus::kUnsupported;
    case ErrorKind::kIo:
      return WireStatus::kIo;
    case ErrorKind::kUnavailable:
      return WireStatus::kUnavailable;
    case ErrorKind::kInternal:
      return WireStatus::kInternal;
  }
  return WireStatus::kInternal;
}

Status status_from_wire(uint16_t code, std::string_view text) {
  std::string msg(text.substr(0, kMaxErrorBytes));
  switch (static_cast<WireStatus>(code)) {
    case WireStatus::kOk:
      return Status::ok();
    case WireStatus::kInvalidArgument:
      return invalid_argument(msg);
    case WireStatus::kOutOfRange:
      return out_of_range(msg);
    case WireStatus::kUnsupported:
      return unsupported(msg);
    case WireStatus::kIo:
      return io_error(msg);
    case WireStatus::kUnavailable:
    case WireStatus::kVersionMismatch:
    case WireStatus::kAuthFailed:
      return unavailable(msg);
    case WireStatus::kInternal:
      return internal_error(msg);
  }
  return internal_error("status " + std::to_string(code) + ": " + msg);
}

std::string error_text(const Status& s) { return s.message().substr(0, kMaxErrorBytes); }

void header_encode(const Header& h, uint8_t out[kHeaderBytes]) {
  std::vector<uint8_t> v;
  v.reserve(kHeaderBytes);
  put_u32(&v, h.magic);
  put_u8(&v, static_cast<uint8_t>(h.command));
  put_u8(&v, h.flags);
  put_u16(&v, h.status);
  put_u32(&v, h.request_id);
  put_u32(&v, h.stream);
  put_u64(&v, h.payload_size);
  std::memcpy(out, v.data(), kHeaderBytes);
}

Result<Header> header_decode(std::span<const uint8_t> bytes, uint64_t max_payload) {
  if (bytes.size() != kHeaderBytes) {
    return invalid_argument("header: " + std::to_string(bytes.size()) + " bytes, expected " +
                            std::to_string(kHeaderBytes));
  }
  Reader r(bytes, "header");
  Header h;
  h.magic = r.u32("magic");
  const uint8_t command = r.u8("command");
  h.flags = r.u8("flags");
  h.status = r.u16("status");
  h.request_id = r.u32("request_id");
  h.stream = r.u32("stream");
  h.payload_size = r.u64("payload_size");
  STRATA_RETURN_IF_ERROR(r.finish());
  if (h.magic != kMagic) {
    return invalid_argument("header field 'magic': " + std::to_string(h.magic) +
                            " is not a strata rpc message (expected " + std::to_string(kMagic) +
                            ")");
  }
  if (!command_known(command)) {
    return invalid_argument("header field 'command': unknown command " + std::to_string(command));
  }
  h.command = static_cast<Command>(command);
  if ((h.flags & ~kFlagsKnown) != 0) {
    return invalid_argument("header field 'flags': unknown bits " + std::to_string(h.flags));
  }
  if (h.payload_size > max_payload) {
    return out_of_range("header field 'payload_size': " + std::to_string(h.payload_size) +
                        " bytes, limit " + std::to_string(max_payload));
  }
  return h;
}

void encode(const HelloRequest& m, std::vector<uint8_t>* out) {
  put_u16(out, m.major);
  put_u16(out, m.minor);
  put_u32(out, m.step);
  put_u64(out, m.caps);
  put_bytes(out, m.client_nonce.data(), m.client_nonce.size());
  put_bytes(out, m.mac.data(), m.mac.size());
}

void encode(const HelloResponse& m, std::vector<uint8_t>* out) {
  put_u16(out, m.major);
  put_u16(out, m.minor);
  put_u32(out, m.auth);
  put_u64(out, m.caps);
  put_bytes(out, m.server_nonce.data(), m.server_nonce.size());
  put_bytes(out, m.server_mac.data(), m.server_mac.size());
  put_u64(out, m.idle_timeout_ms);
  if ((m.caps & kCapOpCaps) != 0) {
    const std::vector<uint64_t> ops = bits_to_words(m.device_caps.ops);
    const std::vector<uint64_t> dtypes = bits_to_words(m.device_caps.weight_dtypes);
    put_u32(out, static_cast<uint32_t>(ops.size()));
    put_u32(out, static_cast<uint32_t>(dtypes.size()));
    for (uint64_t w : ops) put_u64(out, w);
    for (uint64_t w : dtypes) put_u64(out, w);
  }
}

void encode(const DeviceInfoResponse& m, std::vector<uint8_t>* out) {
  const std::string name = m.name.substr(0, kMaxNameBytes);
  const std::string desc = m.description.substr(0, kMaxDescriptionBytes);
  put_u64(out, m.memory_total);
  put_u64(out, m.memory_free);
  put_u64(out, m.alignment);
  put_u64(out, m.max_buffer_size);
  put_u32(out, static_cast<uint32_t>(name.size()));
  put_u32(out, static_cast<uint32_t>(desc.size()));
  put_bytes(out, reinterpret_cast<const uint8_t*>(name.data()), name.size());
  put_bytes(out, reinterpret_cast<const uint8_t*>(desc.data()), desc.size());
}

void encode(const AllocBufferRequest& m, std::vector<uint8_t>* out) { put_u64(out, m.size); }
void encode(const AllocBufferResponse& m, std::vector<uint8_t>* out) {
  put_u64(out, m.handle);
  put_u64(out, m.size);
}
void encode(const FreeBufferRequest& m, std::vector<uint8_t>* out) { put_u64(out, m.handle); }
void encode(const BufferClearRequest& m, std::vector<uint8_t>* out) {
  put_u64(out, m.handle);
  put_u8(out, m.value);
  for (int i = 0; i < 7; ++i) put_u8(out, 0);
}
void encode(const SetTensorRequest& m, std::vector<uint8_t>* out) {
  put_region(out, m.region);
  put_u32(out, m.flags);
  put_u32(out, 0);
}
void encode(const SetTensorsRequest& m, std::vector<uint8_t>* out) {
  put_u32(out, static_cast<uint32_t>(m.regions.size()));
  put_u32(out, m.flags);
  for (const Region& r : m.regions) put_region(out, r);
}
void encode(const SetTensorHashRequest& m, std::vector<uint8_t>* out) {
  put_region(out, m.region);
  put_bytes(out, m.hash.data(), m.hash.size());
}
void encode(const SetTensorHashResponse& m, std::vector<uint8_t>* out) {
  put_u8(out, m.found ? 1 : 0);
  for (int i = 0; i < 7; ++i) put_u8(out, 0);
}
void encode(const GetTensorRequest& m, std::vector<uint8_t>* out) { put_region(out, m.region); }
void encode(const GetTensorsRequest& m, std::vector<uint8_t>* out) {
  put_u32(out, static_cast<uint32_t>(m.regions.size()));
  put_u32(out, 0);
  for (const Region& r : m.regions) put_region(out, r);
}
void encode(const CopyTensorRequest& m, std::vector<uint8_t>* out) {
  put_region(out, m.src);
  put_region(out, m.dst);
}
void encode(const GraphComputeRequest& m, std::vector<uint8_t>* out) {
  put_u32(out, m.graph_id);
  put_u32(out, 0);
}
void encode(const GraphRecomputeRequest& m, std::vector<uint8_t>* out) {
  put_u32(out, m.graph_id);
  put_u32(out, 0);
}

void encode(const HandoffTicketResponse& m, std::vector<uint8_t>* out) {
  put_u64(out, m.session);
  put_bytes(out, m.ticket.data(), m.ticket.size());
}
void encode(const HandoffConnectRequest& m, std::vector<uint8_t>* out) {
  put_u32(out, m.link);
  put_u32(out, m.timeout_ms);
  put_u64(out, m.session);
  put_bytes(out, m.ticket.data(), m.ticket.size());
  put_u32(out, static_cast<uint32_t>(m.address.size()));
  put_u32(out, 0);
  put_bytes(out, reinterpret_cast<const uint8_t*>(m.address.data()), m.address.size());
}
void encode(const HandoffAttachRequest& m, std::vector<uint8_t>* out) {
  put_u64(out, m.session);
  put_bytes(out, m.ticket.data(), m.ticket.size());
}
void encode(const HandoffData& m, std::vector<uint8_t>* out) {
  put_u64(out, m.seq);
  put_u16(out, m.status);
  put_u16(out, 0);
  put_u32(out, 0);
  put_region(out, m.dst);
}
void encode(const HandoffComputeRequest& m, std::vector<uint8_t>* out) {
  put_u32(out, m.graph_id);
  put_u32(out, m.flags);
  put_u32(out, m.timeout_ms);
  put_u32(out, m.link);
  put_u64(out, m.wait_seq);
  put_region(out, m.wait_dst);
  put_u64(out, m.send_seq);
  put_region(out, m.send_src);
  put_region(out, m.send_dst);
}

Result<HelloRequest> decode_hello_request(std::span<const uint8_t> p) {
  Reader r(p, "HELLO request");
  HelloRequest m;
  m.major = r.u16("major");
  m.minor = r.u16("minor");
  m.step = r.u32("step");
  m.caps = r.u64("caps");
  r.bytes(&m.client_nonce, "client_nonce");
  r.bytes(&m.mac, "mac");
  STRATA_RETURN_IF_ERROR(r.finish(/*allow_trailing=*/true));
  if (m.step > 1) {
    return invalid_argument("HELLO request field 'step': " + std::to_string(m.step) +
                            ", expected 0 or 1");
  }
  return m;
}

Result<HelloResponse> decode_hello_response(std::span<const uint8_t> p) {
  Reader r(p, "HELLO response");
  HelloResponse m;
  m.major = r.u16("major");
  m.minor = r.u16("minor");
  m.auth = r.u32("auth");
  m.caps = r.u64("caps");
  r.bytes(&m.server_nonce, "server_nonce");
  r.bytes(&m.server_mac, "server_mac");
  // Added after the first release: an older worker's response ends before it. One that
  // advertises kCapOpCaps is newer: the field and the op lists after it must be there.
  const bool op_caps = (m.caps & kCapOpCaps) != 0;
  if (r.remaining() >= 8 || op_caps) m.idle_timeout_ms = r.u64("idle_timeout_ms");
  if (op_caps) {
    const uint32_t n_ops = r.u32("n_op_words");
    const uint32_t n_dtypes = r.u32("n_dtype_words");
    if (r.ok() && n_ops > kMaxCapWords) {
      r.fail("n_op_words", std::to_string(n_ops) + ", limit " + std::to_string(kMaxCapWords));
    }
    if (r.ok() && n_dtypes > kMaxCapWords) {
      r.fail("n_dtype_words", std::to_string(n_dtypes) + ", limit " + std::to_string(kMaxCapWords));
    }
    if (r.ok()) {
      words_to_bits(r, n_ops, "op_words", &m.device_caps.ops);
      words_to_bits(r, n_dtypes, "dtype_words", &m.device_caps.weight_dtypes);
    }
  }
  STRATA_RETURN_IF_ERROR(r.finish(/*allow_trailing=*/true));
  if (m.auth > kAuthAccepted) {
    return invalid_argument("HELLO response field 'auth': unknown value " + std::to_string(m.auth));
  }
  return m;
}

Result<DeviceInfoResponse> decode_device_info_response(std::span<const uint8_t> p) {
  Reader r(p, "DEVICE_INFO response");
  DeviceInfoResponse m;
  m.memory_total = r.u64("memory_total");
  m.memory_free = r.u64("memory_free");
  m.alignment = r.u64("alignment");
  m.max_buffer_size = r.u64("max_buffer_size");
  const uint32_t name_len = r.u32("name_len");
  const uint32_t desc_len = r.u32("description_len");
  if (r.ok() && name_len > kMaxNameBytes) {
    r.fail("name_len", std::to_string(name_len) + ", limit " + std::to_string(kMaxNameBytes));
  }
  if (r.ok() && desc_len > kMaxDescriptionBytes) {
    r.fail("description_len",
           std::to_string(desc_len) + ", limit " + std::to_string(kMaxDescriptionBytes));
  }
  std::span<const uint8_t> name = r.span("name", name_len);
  std::span<const uint8_t> desc = r.span("description", desc_len);
  STRATA_RETURN_IF_ERROR(r.finish());
  m.name.assign(name.begin(), name.end());
  m.description.assign(desc.begin(), desc.end());
  if (m.alignment == 0 || (m.alignment & (m.alignment - 1)) != 0) {
    return invalid_argument("DEVICE_INFO response field 'alignment': " +
                            std::to_string(m.alignment) + " is not a power of two");
  }
  return m;
}

Result<AllocBufferRequest> decode_alloc_buffer_request(std::span<const uint8_t> p) {
  Reader r(p, "ALLOC_BUFFER request");
  AllocBufferRequest m;
  m.size = r.u64("size");
  STRATA_RETURN_IF_ERROR(r.finish());
  return m;
}

Result<AllocBufferResponse> decode_alloc_buffer_response(std::span<const uint8_t> p) {
  Reader r(p, "ALLOC_BUFFER response");
  AllocBufferResponse m;
  m.handle = r.u64("handle");
  m.size = r.u64("size");
  STRATA_RETURN_IF_ERROR(r.finish());
  if (m.handle == 0) return invalid_argument("ALLOC_BUFFER response field 'handle': 0");
  return m;
}

Result<FreeBufferRequest> decode_free_buffer_request(std::span<const uint8_t> p) {
  Reader r(p, "FREE_BUFFER request");
  FreeBufferRequest m;
  m.handle = r.u64("handle");
  STRATA_RETURN_IF_ERROR(r.finish());
  return m;
}

Result<BufferClearRequest> decode_buffer_clear_request(std::span<const uint8_t> p) {
  Reader r(p, "BUFFER_CLEAR request");
  BufferClearRequest m;
  m.handle = r.u64("handle");
  m.value = r.u8("value");
  r.span("padding", 7);
  STRATA_RETURN_IF_ERROR(r.finish());
  return m;
}

Result<SetTensorRequest> decode_set_tensor_head(std::span<const uint8_t> lead,
                                                uint64_t payload_size) {
  Reader r(lead, "SET_TENSOR request");
  SetTensorRequest m;
  m.region = r.region("region");
  m.flags = r.u32("flags");
  const uint32_t reserved = r.u32("reserved");
  if (r.ok() && (m.flags & ~kSetCacheable) != 0) {
    r.fail("flags", "unknown bits " + std::to_string(m.flags));
  }
  if (r.ok() && reserved != 0) r.fail("reserved", std::to_string(reserved) + ", must be 0");
  const uint64_t data_bytes =
      payload_size - std::min<uint64_t>(payload_size, kSetTensorPrefixBytes);
  if (r.ok() && m.region.size != data_bytes) {
    r.fail("region.size", std::to_string(m.region.size) + " but " + std::to_string(data_bytes) +
                              " data bytes follow");
  }
  STRATA_RETURN_IF_ERROR(r.finish(/*allow_trailing=*/true));
  return m;
}

Result<SetTensorRequest> decode_set_tensor_request(std::span<const uint8_t> p) {
  STRATA_ASSIGN_OR_RETURN(SetTensorRequest m, decode_set_tensor_head(p, p.size()));
  m.data = p.subspan(kSetTensorPrefixBytes);
  return m;
}

Result<SetTensorsRequest> decode_set_tensors_head(std::span<const uint8_t> lead,
                                                  uint64_t payload_size) {
  Reader r(lead, "SET_TENSORS request");
  SetTensorsRequest m;
  const uint32_t n = r.u32("n");
  m.flags = r.u32("flags");
  STRATA_RETURN_IF_ERROR(r.finish(/*allow_trailing=*/true));
  if ((m.flags & ~kSetCacheable) != 0) {
    return invalid_argument("SET_TENSORS request field 'flags': unknown bits " +
                            std::to_string(m.flags));
  }
  uint64_t total = 0;
  STRATA_RETURN_IF_ERROR(read_regions(r, n, &m.regions, &total, kMaxMessageBytes, "SET_TENSORS"));
  const uint64_t data_bytes = payload_size - set_tensors_head_bytes(n);
  if (total != data_bytes) {
    return invalid_argument("SET_TENSORS request: regions total " + std::to_string(total) +
                            " bytes but " + std::to_string(data_bytes) + " data bytes follow");
  }
  return m;
}

Result<SetTensorsRequest> decode_set_tensors_request(std::span<const uint8_t> p) {
  STRATA_ASSIGN_OR_RETURN(SetTensorsRequest m, decode_set_tensors_head(p, p.size()));
  m.data = p.subspan(static_cast<size_t>(set_tensors_head_bytes(m.regions.size())));
  return m;
}

Result<SetTensorHashRequest> decode_set_tensor_hash_request(std::span<const uint8_t> p) {
  Reader r(p, "SET_TENSOR_HASH request");
  SetTensorHashRequest m;
  m.region = r.region("region");
  r.bytes(&m.hash, "hash");
  STRATA_RETURN_IF_ERROR(r.finish());
  return m;
}

Result<SetTensorHashResponse> decode_set_tensor_hash_response(std::span<const uint8_t> p) {
  Reader r(p, "SET_TENSOR_HASH response");
  SetTensorHashResponse m;
  const uint8_t found = r.u8("found");
  r.span("padding", 7);
  STRATA_RETURN_IF_ERROR(r.finish());
  if (found > 1) {
    return invalid_argument("SET_TENSOR_HASH response field 'found': " + std::to_string(found));
  }
  m.found = found == 1;
  return m;
}

Result<GetTensorRequest> decode_get_tensor_request(std::span<const uint8_t> p) {
  Reader r(p, "GET_TENSOR request");
  GetTensorRequest m;
  m.region = r.region("region");
  STRATA_RETURN_IF_ERROR(r.finish());
  return m;
}

Result<GetTensorsRequest> decode_get_tensors_request(std::span<const uint8_t> p,
                                                     uint64_t max_total) {
  Reader r(p, "GET_TENSORS request");
  GetTensorsRequest m;
  const uint32_t n = r.u32("n");
  const uint32_t reserved = r.u32("reserved");
  STRATA_RETURN_IF_ERROR(r.finish(/*allow_trailing=*/true));
  if (reserved != 0) {
    return invalid_argument("GET_TENSORS request field 'reserved': " + std::to_string(reserved));
  }
  uint64_t total = 0;
  STRATA_RETURN_IF_ERROR(read_regions(r, n, &m.regions, &total, max_total, "GET_TENSORS"));
  STRATA_RETURN_IF_ERROR(r.finish());
  return m;
}

Result<CopyTensorRequest> decode_copy_tensor_request(std::span<const uint8_t> p) {
  Reader r(p, "COPY_TENSOR request");
  CopyTensorRequest m;
  m.src = r.region("src");
  m.dst = r.region("dst");
  STRATA_RETURN_IF_ERROR(r.finish());
  if (m.src.size != m.dst.size) {
    return invalid_argument("COPY_TENSOR request: src size " + std::to_string(m.src.size) +
                            " != dst size " + std::to_string(m.dst.size));
  }
  return m;
}

Result<GraphComputeRequest> decode_graph_compute_request(std::span<const uint8_t> p) {
  Reader r(p, "GRAPH_COMPUTE request");
  GraphComputeRequest m;
  m.graph_id = r.u32("graph_id");
  const uint32_t reserved = r.u32("reserved");
  if (r.ok() && reserved != 0) r.fail("reserved", std::to_string(reserved) + ", must be 0");
  m.graph = r.span("graph", r.remaining());
  STRATA_RETURN_IF_ERROR(r.finish());
  return m;
}

Result<GraphRecomputeRequest> decode_graph_recompute_request(std::span<const uint8_t> p) {
  Reader r(p, "GRAPH_RECOMPUTE request");
  GraphRecomputeRequest m;
  m.graph_id = r.u32("graph_id");
  const uint32_t reserved = r.u32("reserved");
  if (r.ok() && reserved != 0) r.fail("reserved", std::to_string(reserved) + ", must be 0");
  STRATA_RETURN_IF_ERROR(r.finish());
  return m;
}

Result<HandoffTicketResponse> decode_handoff_ticket_response(std::span<const uint8_t> p) {
  Reader r(p, "HANDOFF_TICKET response");
  HandoffTicketResponse m;
  m.session = r.u64("session");
  r.bytes(&m.ticket, "ticket");
  STRATA_RETURN_IF_ERROR(r.finish());
  if (m.session == 0) return invalid_argument("HANDOFF_TICKET response field 'session': 0");
  return m;
}

namespace {

// A timeout of a hand-off: 1..kMaxHandoffTimeoutMs.
void check_handoff_timeout(Reader& r, uint32_t timeout_ms) {
  if (r.ok() && (timeout_ms == 0 || timeout_ms > kMaxHandoffTimeoutMs)) {
    r.fail("timeout_ms", std::to_string(timeout_ms) + " outside [1, " +
                             std::to_string(kMaxHandoffTimeoutMs) + "]");
  }
}

}  // namespace

Result<HandoffConnectRequest> decode_handoff_connect_request(std::span<const uint8_t> p) {
  Reader r(p, "HANDOFF_CONNECT request");
  HandoffConnectRequest m;
  m.link = r.u32("link");
  m.timeout_ms = r.u32("timeout_ms");
  m.session = r.u64("session");
  r.bytes(&m.ticket, "ticket");
  const uint32_t len = r.u32("address_len");
  const uint32_t reserved = r.u32("reserved");
  if (r.ok() && m.link == 0) r.fail("link", "0 is not a link id");
  check_handoff_timeout(r, m.timeout_ms);
  if (r.ok() && (len == 0 || len > kMaxAddressBytes)) {
    r.fail("address_len",
           std::to_string(len) + " outside [1, " + std::to_string(kMaxAddressBytes) + "]");
  }
  if (r.ok() && reserved != 0) r.fail("reserved", std::to_string(reserved) + ", must be 0");
  std::span<const uint8_t> address = r.span("address", len);
  STRATA_RETURN_IF_ERROR(r.finish());
  for (uint8_t c : address) {
    if (c <= 0x20 || c >= 0x7f) {
      return invalid_argument("HANDOFF_CONNECT request field 'address': byte " + std::to_string(c) +
                              " is not printable ASCII");
    }
  }
  m.address.assign(address.begin(), address.end());
  return m;
}

Result<HandoffAttachRequest> decode_handoff_attach_request(std::span<const uint8_t> p) {
  Reader r(p, "HANDOFF_ATTACH request");
  HandoffAttachRequest m;
  m.session = r.u64("session");
  r.bytes(&m.ticket, "ticket");
  STRATA_RETURN_IF_ERROR(r.finish());
  return m;
}

Result<HandoffData> decode_handoff_data(std::span<const uint8_t> p) {
  Reader r(p, "HANDOFF_DATA");
  HandoffData m;
  m.seq = r.u64("seq");
  m.status = r.u16("status");
  const uint16_t pad = r.u16("reserved");
  const uint32_t reserved = r.u32("reserved");
  m.dst = r.region("dst");
  if (r.ok() && (pad != 0 || reserved != 0)) r.fail("reserved", "must be 0");
  if (r.ok() && m.status == 0 && m.dst.size != r.remaining()) {
    r.fail("dst.size", std::to_string(m.dst.size) + " but " + std::to_string(r.remaining()) +
                           " data bytes follow");
  }
  if (r.ok() && m.status != 0 && r.remaining() > kMaxErrorBytes) {
    r.fail("error text",
           std::to_string(r.remaining()) + " bytes, limit " + std::to_string(kMaxErrorBytes));
  }
  m.bytes = r.span("bytes", r.remaining());
  STRATA_RETURN_IF_ERROR(r.finish());
  return m;
}

Result<HandoffComputeRequest> decode_handoff_compute_request(std::span<const uint8_t> p) {
  Reader r(p, "HANDOFF_COMPUTE request");
  HandoffComputeRequest m;
  m.graph_id = r.u32("graph_id");
  m.flags = r.u32("flags");
  m.timeout_ms = r.u32("timeout_ms");
  m.link = r.u32("link");
  m.wait_seq = r.u64("wait_seq");
  m.wait_dst = r.region("wait_dst");
  m.send_seq = r.u64("send_seq");
  m.send_src = r.region("send_src");
  m.send_dst = r.region("send_dst");
  constexpr uint32_t kKnown = kHandoffWait | kHandoffSend | kHandoffRecompute | kHandoffGraph;
  if (r.ok() && (m.flags & ~kKnown) != 0)
    r.fail("flags", "unknown bits " + std::to_string(m.flags));
  if (r.ok() && (m.flags & kHandoffRecompute) != 0 && (m.flags & kHandoffGraph) != 0) {
    r.fail("flags", "both a cached graph and a graph to run");
  }
  const bool wait = (m.flags & kHandoffWait) != 0;
  const bool send = (m.flags & kHandoffSend) != 0;
  const bool graph = (m.flags & (kHandoffRecompute | kHandoffGraph)) != 0;
  if (wait || send) {
    check_handoff_timeout(r, m.timeout_ms);
  } else if (r.ok() && m.timeout_ms != 0) {
    r.fail("timeout_ms", std::to_string(m.timeout_ms) + " without a wait or a send, must be 0");
  }
  const Region none;
  if (r.ok() && !wait && (m.wait_seq != 0 || m.wait_dst != none)) {
    r.fail("wait_seq", "a wait without kHandoffWait");
  }
  if (r.ok() && !send &&
      (m.link != 0 || m.send_seq != 0 || m.send_src != none || m.send_dst != none)) {
    r.fail("link", "a send without kHandoffSend");
  }
  if (r.ok() && send && m.send_src.size != m.send_dst.size) {
    r.fail("send_dst.size", std::to_string(m.send_dst.size) + " != send_src.size " +
                                std::to_string(m.send_src.size));
  }
  if (r.ok() && !graph && m.graph_id != 0) r.fail("graph_id", "a graph id without a graph");
  if (r.ok() && (m.flags & kHandoffGraph) == 0 && r.remaining() != 0) {
    r.fail("graph", std::to_string(r.remaining()) + " bytes without kHandoffGraph");
  }
  m.graph = r.span("graph", r.remaining());
  STRATA_RETURN_IF_ERROR(r.finish());
  return m;
}

Hash128 hash128(std::span<const uint8_t> data) {
  const XXH128_hash_t h = XXH3_128bits(data.data(), data.size());
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  Hash128 out;
  static_assert(sizeof(c.digest) == 16);
  std::memcpy(out.data(), c.digest, 16);
  return out;
}

std::string hash128_hex(const Hash128& h) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (uint8_t b : h) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

}  // namespace strata::rpc
