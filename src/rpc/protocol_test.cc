#include "rpc/protocol.h"

#include <gtest/gtest.h>

#include <cstring>

namespace strata::rpc {
namespace {

void put64(std::vector<uint8_t>& b, size_t at, uint64_t v) { std::memcpy(&b[at], &v, 8); }
void put32(std::vector<uint8_t>& b, size_t at, uint32_t v) { std::memcpy(&b[at], &v, 4); }
uint64_t get64(const std::vector<uint8_t>& b, size_t at) {
  uint64_t v = 0;
  std::memcpy(&v, &b[at], 8);
  return v;
}
uint32_t get32(const std::vector<uint8_t>& b, size_t at) {
  uint32_t v = 0;
  std::memcpy(&v, &b[at], 4);
  return v;
}

TEST(RpcProtocol, HeaderLayout) {
  Header h;
  h.command = Command::kGetTensors;
  h.flags = kFlagOneWay;
  h.status = 0x0102;
  h.request_id = 0x0a0b0c0d;
  h.stream = 0x04030201;
  h.payload_size = 0x1122334455667788ull;
  uint8_t b[kHeaderBytes];
  header_encode(h, b);
  // Byte by byte, as the layout comment in protocol.h states.
  const uint8_t expect[kHeaderBytes] = {'S',  'R',  'P',  'C',  10,   2,    0x02, 0x01,
                                        0x0d, 0x0c, 0x0b, 0x0a, 1,    2,    3,    4,
                                        0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11};
  EXPECT_EQ(std::memcmp(b, expect, kHeaderBytes), 0);
  Result<Header> back = header_decode(b, ~uint64_t{0});
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_EQ(back->command, Command::kGetTensors);
  EXPECT_EQ(back->request_id, 0x0a0b0c0du);
  EXPECT_EQ(back->stream, 0x04030201u);
  EXPECT_EQ(back->payload_size, h.payload_size);
}

TEST(RpcProtocol, HeaderRejects) {
  Header h;
  uint8_t b[kHeaderBytes];
  auto with = [&](size_t at, uint8_t v) {
    header_encode(h, b);
    b[at] = v;
    return header_decode(b, kMaxMessageBytes);
  };
  EXPECT_FALSE(with(0, 'X'));               // magic
  EXPECT_FALSE(with(4, 0));                 // command 0
  EXPECT_FALSE(with(4, kCommandLast + 1));  // command past the last
  EXPECT_FALSE(with(5, 4));                 // unknown flag
  // The stream id is carried, whatever its value: the session decides whether it is allowed.
  Result<Header> stream = with(15, 0x80);
  ASSERT_TRUE(stream) << stream.status().message();
  EXPECT_EQ(stream->stream, 0x80000000u);
  h.payload_size = kMaxMessageBytes + 1;
  header_encode(h, b);
  Result<Header> big = header_decode(b, kMaxMessageBytes);
  ASSERT_FALSE(big);
  EXPECT_NE(big.status().message().find("payload_size"), std::string::npos);
  EXPECT_FALSE(header_decode({b, 23}, kMaxMessageBytes));
}

TEST(RpcProtocol, HelloRoundTripAndGrowth) {
  HelloRequest m;
  m.major = 1;
  m.minor = 7;
  m.step = 1;
  m.caps = kCapBatched | kCapCopyTensor;
  m.client_nonce[0] = 9;
  m.mac[31] = 4;
  std::vector<uint8_t> b;
  encode(m, &b);
  ASSERT_EQ(b.size(), kHelloBytes);
  b.push_back(0xee);  // a later minor version's extra field is ignored
  Result<HelloRequest> back = decode_hello_request(b);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->minor, 7);
  EXPECT_EQ(back->caps, m.caps);
  EXPECT_EQ(back->client_nonce, m.client_nonce);
  EXPECT_EQ(back->mac, m.mac);
  b.resize(kHelloBytes - 1);
  EXPECT_FALSE(decode_hello_request(b));
  HelloResponse r;
  r.auth = kAuthChallenge;
  r.caps = kCapAll & ~kCapOpCaps;
  std::vector<uint8_t> rb;
  encode(r, &rb);
  ASSERT_EQ(rb.size(), kHelloResponseBytes);
  Result<HelloResponse> rback = decode_hello_response(rb);
  ASSERT_TRUE(rback);
  EXPECT_EQ(rback->auth, kAuthChallenge);
  // The idle timeout at offset 80; an older worker's 80-byte response reads as none.
  put64(rb, 80, 600000);
  EXPECT_EQ(decode_hello_response(rb)->idle_timeout_ms, 600000u);
  EXPECT_EQ(decode_hello_response({rb.data(), 80})->idle_timeout_ms, 0u);
  put32(rb, 4, 3);
  EXPECT_FALSE(decode_hello_response(rb));
}

// The op and dtype lists after offset 88, present exactly when the caps say so.
TEST(RpcProtocol, HelloOpCapabilities) {
  HelloResponse r;
  r.caps = kCapAll;
  r.device_caps.ops.set(3).set(70);
  r.device_caps.weight_dtypes.set(0).set(30);
  std::vector<uint8_t> b;
  encode(r, &b);
  // Two op words (bit 70 is in the second), one dtype word.
  ASSERT_EQ(b.size(), kHelloResponseBytes + 8 + 3 * 8);
  EXPECT_EQ(get32(b, 88), 2u);
  EXPECT_EQ(get32(b, 92), 1u);
  EXPECT_EQ(get64(b, 96), uint64_t{1} << 3);
  EXPECT_EQ(get64(b, 104), uint64_t{1} << 6);
  EXPECT_EQ(get64(b, 112), (uint64_t{1} << 0) | (uint64_t{1} << 30));
  Result<HelloResponse> back = decode_hello_response(b);
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_EQ(back->device_caps.ops, r.device_caps.ops);
  EXPECT_EQ(back->device_caps.weight_dtypes, r.device_caps.weight_dtypes);

  // The bit without the lists (a broken worker): the error names the missing field.
  Result<HelloResponse> cut = decode_hello_response({b.data(), kHelloResponseBytes});
  ASSERT_FALSE(cut);
  EXPECT_NE(cut.status().message().find("n_op_words"), std::string::npos);
  cut = decode_hello_response({b.data(), b.size() - 1});
  ASSERT_FALSE(cut);
  EXPECT_NE(cut.status().message().find("dtype_words"), std::string::npos);
  // A count past the limit is refused before any word is read.
  std::vector<uint8_t> big = b;
  put32(big, 88, kMaxCapWords + 1);
  cut = decode_hello_response(big);
  ASSERT_FALSE(cut);
  EXPECT_NE(cut.status().message().find("limit 16"), std::string::npos) << cut.status().message();
  // A newer worker's longer lists: ids past this build's sets are ignored.
  std::vector<uint8_t> wide(b.begin(), b.begin() + 88);
  for (uint32_t v : {kMaxCapWords, 0u}) {
    for (int i = 0; i < 4; ++i) wide.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  for (uint32_t w = 0; w < kMaxCapWords; ++w) {
    for (int i = 0; i < 8; ++i) wide.push_back(w == 0 || w == kMaxCapWords - 1 ? 0x11 : 0);
  }
  back = decode_hello_response(wide);
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_TRUE(back->device_caps.ops.test(0));
  EXPECT_TRUE(back->device_caps.ops.test(4));
  EXPECT_EQ(back->device_caps.ops.count(), 16u);
  EXPECT_EQ(back->device_caps.weight_dtypes.count(), 0u);
  // Without the bit, bytes after offset 88 are a later field, not lists.
  r.caps = kCapAll & ~kCapOpCaps;
  b.clear();
  encode(r, &b);
  ASSERT_EQ(b.size(), kHelloResponseBytes);
  b.resize(b.size() + 12, 0xff);
  back = decode_hello_response(b);
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_TRUE(back->device_caps.ops.none());
}

TEST(RpcProtocol, DeviceInfo) {
  DeviceInfo info;
  info.name = "CPU";
  info.description = "test";
  info.memory_total = 1 << 20;
  info.alignment = 64;
  std::vector<uint8_t> b;
  encode(info, &b);
  Result<DeviceInfo> back = decode_device_info_response(b);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->name, "CPU");
  EXPECT_EQ(back->description, "test");
  EXPECT_EQ(back->memory_total, 1u << 20);
  std::vector<uint8_t> lying = b;
  put32(lying, 32, 100);  // name_len past the end
  EXPECT_FALSE(decode_device_info_response(lying));
  put32(lying, 32, kMaxNameBytes + 1);
  EXPECT_FALSE(decode_device_info_response(lying));
}

TEST(RpcProtocol, SetTensor) {
  const uint8_t data[5] = {1, 2, 3, 4, 5};
  SetTensorRequest m;
  m.region = {3, 8, 5};
  m.flags = kSetCacheable;
  std::vector<uint8_t> b;
  encode(m, &b);
  ASSERT_EQ(b.size(), kSetTensorPrefixBytes);
  b.insert(b.end(), data, data + 5);
  Result<SetTensorRequest> back = decode_set_tensor_request(b);
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_EQ(back->region.offset, 8u);
  EXPECT_EQ(back->flags, kSetCacheable);
  ASSERT_EQ(back->data.size(), 5u);
  EXPECT_EQ(back->data[4], 5);
  b.pop_back();  // size says 5, 4 follow
  EXPECT_FALSE(decode_set_tensor_request(b));
  b.push_back(5);
  put32(b, 24, 2);  // unknown flag
  EXPECT_FALSE(decode_set_tensor_request(b));
}

TEST(RpcProtocol, SetTensorsChecksSums) {
  SetTensorsRequest m;
  m.regions = {{1, 0, 3}, {1, 16, 2}};
  std::vector<uint8_t> b;
  encode(m, &b);
  for (int i = 0; i < 5; ++i) b.push_back(static_cast<uint8_t>(i));
  Result<SetTensorsRequest> back = decode_set_tensors_request(b);
  ASSERT_TRUE(back) << back.status().message();
  ASSERT_EQ(back->regions.size(), 2u);
  EXPECT_EQ(back->data.size(), 5u);
  // Sizes that wrap to the 5 bytes present: 2^64 - 1 + 6 = 5 (mod 2^64).
  std::vector<uint8_t> wrap = b;
  put64(wrap, 8 + 16, ~uint64_t{0});
  put64(wrap, 8 + 24 + 16, 6);
  Result<SetTensorsRequest> w = decode_set_tensors_request(wrap);
  ASSERT_FALSE(w);
  EXPECT_NE(w.status().message().find("limit"), std::string::npos) << w.status().message();
  // A count that the bytes cannot hold, before anything is sized by it.
  std::vector<uint8_t> count = b;
  put32(count, 0, 1000);
  EXPECT_FALSE(decode_set_tensors_request(count));
  put32(count, 0, kMaxBatchRegions + 1);
  EXPECT_FALSE(decode_set_tensors_request(count));
}

TEST(RpcProtocol, GetTensorsTotalUnderCeiling) {
  GetTensorsRequest m;
  m.regions = {{1, 0, 600}, {2, 0, 500}};
  std::vector<uint8_t> b;
  encode(m, &b);
  EXPECT_TRUE(decode_get_tensors_request(b, 1100));
  Result<GetTensorsRequest> over = decode_get_tensors_request(b, 1099);
  ASSERT_FALSE(over);
  EXPECT_EQ(over.status().kind(), ErrorKind::kOutOfRange);
  put64(b, 8 + 16, ~uint64_t{0} - 100);
  EXPECT_FALSE(decode_get_tensors_request(b, ~uint64_t{0}));  // wraps
}

TEST(RpcProtocol, FixedSizeRequests) {
  std::vector<uint8_t> b;
  encode(CopyTensorRequest{{1, 0, 4}, {2, 8, 4}}, &b);
  EXPECT_TRUE(decode_copy_tensor_request(b));
  b.clear();
  encode(CopyTensorRequest{{1, 0, 4}, {2, 8, 5}}, &b);
  EXPECT_FALSE(decode_copy_tensor_request(b));  // sizes differ
  b.clear();
  encode(BufferClearRequest{5, 0xab}, &b);
  Result<BufferClearRequest> c = decode_buffer_clear_request(b);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->value, 0xab);
  b.clear();
  encode(AllocBufferRequest{77}, &b);
  b.push_back(0);
  EXPECT_FALSE(decode_alloc_buffer_request(b));  // trailing byte
  b.clear();
  encode(GraphRecomputeRequest{3}, &b);
  EXPECT_EQ(decode_graph_recompute_request(b)->graph_id, 3u);
  b.clear();
  encode(SetTensorHashResponse{true}, &b);
  EXPECT_TRUE(decode_set_tensor_hash_response(b)->found);
  b[0] = 2;
  EXPECT_FALSE(decode_set_tensor_hash_response(b));
}

TEST(RpcProtocol, CapabilitiesAndStatus) {
  EXPECT_EQ(command_capability(Command::kSetTensors), kCapBatched);
  EXPECT_EQ(command_capability(Command::kGetTensors), kCapBatched);
  EXPECT_EQ(command_capability(Command::kSetTensorHash), kCapSetTensorHash);
  EXPECT_EQ(command_capability(Command::kGraphRecompute), kCapGraphRecompute);
  EXPECT_EQ(command_capability(Command::kCopyTensor), kCapCopyTensor);
  EXPECT_EQ(command_capability(Command::kSetTensor), 0u);
  const Status s = out_of_range("x");
  EXPECT_EQ(status_from_wire(static_cast<uint16_t>(wire_status_from(s)), "x").kind(),
            ErrorKind::kOutOfRange);
  EXPECT_FALSE(status_from_wire(999, "y").is_ok());
}

TEST(RpcProtocol, Hash128MatchesKnownVector) {
  // XXH3-128 of the empty input, from the xxHash reference test vectors:
  // 99aa06d3014798d86001c324468d497f.
  EXPECT_EQ(hash128_hex(hash128({})), "99aa06d3014798d86001c324468d497f");
}

}  // namespace
}  // namespace strata::rpc
