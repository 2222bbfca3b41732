// The wire protocol between a client (the remote backend) and `strata worker`.
//
// Goals: a fixed little-endian layout that a peer can check field by field before it allocates
// or touches anything; one request/response struct pair per command; optional commands behind
// capability bits so that old and new peers work together without a version bump.
// Non-goals: encryption (run over a trusted network or a tunnel), compression.
//
// Every message is a 24-byte header and a payload of header.payload_size bytes:
//
//   offset size field
//   0      4    magic        kMagic ("SRPC" in memory order)
//   4      1    command      Command
//   5      1    flags        bit0 kFlagResponse, bit1 kFlagOneWay (no response is sent)
//   6      2    status       responses: 0 ok, else a WireStatus; the payload is then the error text
//   8      4    request_id   chosen by the client, echoed by the response
//   12     4    stream       the client stream a command belongs to (kCapStreams), else 0;
//                            a response echoes it
//   16     8    payload_size <= kMaxMessageBytes (a receiver may use a lower ceiling)
//
// Handshake: the first message of a connection must be HELLO (else the worker closes it).
//   1. client -> HELLO{step 0, version, wanted caps, client nonce}
//   2. server -> HELLO response{version, caps, auth = kAuthNone} and the session starts, or,
//      when the worker has a token, {auth = kAuthChallenge, server nonce}: then
//   3. client -> HELLO{step 1, mac = HMAC-SHA256(token, "strata-rpc-client" || server nonce ||
//      client nonce)}
//   4. server -> HELLO response{auth = kAuthAccepted, server_mac = HMAC-SHA256(token,
//      "strata-rpc-server" || client nonce || server nonce)} (the client may check that the
//      server knows the token too), or an error kAuthFailed, and the server closes.
//   A major version mismatch is answered at step 2 by kVersionMismatch naming both versions,
//   and the server closes. HELLO payloads may grow in later minor versions: decoders read the
//   fields they know and ignore trailing bytes.
//
// Streams: one-way commands (flag bit1) are never answered. One that fails records a sticky
// error on its stream; the one-way commands of that stream behind it are skipped, and the
// stream's next SYNCHRONIZE, GET_TENSOR or GET_TENSORS answers with that error (and clears it).
// Two-way commands other than those run normally. Commands run in the order they arrive,
// whatever their stream. A stream is the header's `stream` id when both peers have
// kCapStreams (the client picks the ids; 0 is for commands of no stream); without the bit
// every header carries 0 and the whole connection is one stream, so that several contexts
// sharing it see each other's errors.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"

namespace strata::rpc {

constexpr uint32_t kMagic = 0x43505253;  // bytes 'S' 'R' 'P' 'C'
constexpr uint16_t kVersionMajor = 1;
constexpr uint16_t kVersionMinor = 0;
constexpr size_t kHeaderBytes = 24;

// The largest payload a peer may announce. A denial-of-service bound: the largest single
// message we send is one weight tensor (a few GiB at most for the models we run) or a batched
// read; a receiver grows its buffer only as bytes arrive, so a lying header costs the memory
// actually sent, and the worker lowers the ceiling to its --mem budget.
constexpr uint64_t kMaxMessageBytes = uint64_t{4} << 30;
// Regions in one SET_TENSORS / GET_TENSORS. Each costs 24 bytes of message, so the payload
// ceiling bounds it too; this keeps a vector of regions small whatever the ceiling.
constexpr uint32_t kMaxBatchRegions = 1 << 16;
// Device name and description lengths in DEVICE_INFO, and error texts.
constexpr uint32_t kMaxNameBytes = 256;
constexpr uint32_t kMaxDescriptionBytes = 4096;
constexpr uint32_t kMaxErrorBytes = 4096;

// Stored on the wire: never renumber.
enum class Command : uint8_t {
  kHello = 1,
  kDeviceInfo = 2,
  kAllocBuffer = 3,
  kFreeBuffer = 4,
  kBufferClear = 5,
  kSetTensor = 6,
  kSetTensors = 7,     // optional: kCapBatched
  kSetTensorHash = 8,  // optional: kCapSetTensorHash
  kGetTensor = 9,
  kGetTensors = 10,  // optional: kCapBatched
  kCopyTensor = 11,  // optional: kCapCopyTensor
  kGraphCompute = 12,
  kGraphRecompute = 13,  // optional: kCapGraphRecompute
  kSynchronize = 14,
  kHandoffTicket = 15,   // optional: kCapHandoff
  kHandoffConnect = 16,  // optional: kCapHandoff
  kHandoffAttach = 17,   // optional: kCapHandoff (worker to worker)
  kHandoffData = 18,     // optional: kCapHandoff (worker to worker)
  kHandoffCompute = 19,  // optional: kCapHandoff
};
constexpr uint8_t kCommandFirst = 1;
constexpr uint8_t kCommandLast = 19;
static_assert(static_cast<uint8_t>(Command::kHello) == kCommandFirst);
static_assert(static_cast<uint8_t>(Command::kHandoffCompute) == kCommandLast);
static_assert(static_cast<uint8_t>(Command::kGraphCompute) == 12);
const char* command_name(Command c);
bool command_known(uint8_t c);

constexpr uint8_t kFlagResponse = 1 << 0;
constexpr uint8_t kFlagOneWay = 1 << 1;
constexpr uint8_t kFlagsKnown = kFlagResponse | kFlagOneWay;

// Response status codes. Stored on the wire: never renumber.
enum class WireStatus : uint16_t {
  kOk = 0,
  kInvalidArgument = 1,
  kOutOfRange = 2,
  kUnsupported = 3,
  kIo = 4,
  kUnavailable = 5,
  kInternal = 6,
  kVersionMismatch = 7,
  kAuthFailed = 8,
};
WireStatus wire_status_from(const Status& s);
// The Status a client reports for an error response; unknown codes become kInternal.
Status status_from_wire(uint16_t code, std::string_view text);

// Capability bits: an optional command is sent only when the peer advertised its bit. Never
// renumber; never bump the version for an optional feature, add a bit.
constexpr uint64_t kCapSetTensorHash = 1 << 0;   // SET_TENSOR_HASH
constexpr uint64_t kCapBatched = 1 << 1;         // SET_TENSORS and GET_TENSORS
constexpr uint64_t kCapGraphRecompute = 1 << 2;  // GRAPH_RECOMPUTE
constexpr uint64_t kCapCopyTensor = 1 << 3;      // COPY_TENSOR
constexpr uint64_t kCapStreams = 1 << 4;         // header.stream: sticky errors per stream
constexpr uint64_t kCapOpCaps = 1 << 5;    // the HELLO response lists the worker's ops and dtypes
constexpr uint64_t kCapHandoff = 1 << 6;   // HANDOFF_*: a stage's output goes to the next worker
constexpr uint64_t kCapKvPlanes = 1 << 7;  // DeviceCaps::kv_planes: KV caches in planes
constexpr uint64_t kCapKvQ8_0 = 1 << 8;    // DeviceCaps::kv_q8_0: q8_0 KV caches
constexpr uint64_t kCapAll = kCapSetTensorHash | kCapBatched | kCapGraphRecompute | kCapCopyTensor |
                             kCapStreams | kCapOpCaps | kCapHandoff | kCapKvPlanes | kCapKvQ8_0;
// The bit a command needs, 0 for the commands every peer has.
uint64_t command_capability(Command c);

struct Header {
  uint32_t magic = kMagic;
  Command command = Command::kHello;
  uint8_t flags = 0;
  uint16_t status = 0;
  uint32_t request_id = 0;
  uint32_t stream = 0;
  uint64_t payload_size = 0;
};
void header_encode(const Header& h, uint8_t out[kHeaderBytes]);
// Checks magic, command, flags and payload_size <= max_payload. Whether a nonzero stream is
// allowed depends on the session (kCapStreams): the receiver checks it.
Result<Header> header_decode(std::span<const uint8_t> bytes, uint64_t max_payload);

using Nonce = std::array<uint8_t, 32>;
using Mac = std::array<uint8_t, 32>;
// XXH3-128 of a blob in its canonical (big-endian) byte order.
using Hash128 = std::array<uint8_t, 16>;

// A byte range of a buffer of this connection.
//   0 u64 buffer (handle), 8 u64 offset, 16 u64 size  (24 bytes)
struct Region {
  uint64_t buffer = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  friend bool operator==(const Region&, const Region&) = default;
};
constexpr size_t kRegionBytes = 24;

// --- HELLO -----------------------------------------------------------------------------------
//   0 u16 major, 2 u16 minor, 4 u32 step (0 first, 1 auth answer), 8 u64 caps wanted,
//   16 u8[32] client nonce, 48 u8[32] mac (step 1; zeros at step 0)  (80 bytes, may grow)
struct HelloRequest {
  uint16_t major = kVersionMajor;
  uint16_t minor = kVersionMinor;
  uint32_t step = 0;
  uint64_t caps = 0;
  Nonce client_nonce{};
  Mac mac{};
};
constexpr size_t kHelloBytes = 80;
enum : uint32_t { kAuthNone = 0, kAuthChallenge = 1, kAuthAccepted = 2 };
//   0 u16 major, 2 u16 minor, 4 u32 auth (kAuth*), 8 u64 caps offered,
//   16 u8[32] server nonce (challenge), 48 u8[32] server mac (accepted),
//   80 u64 idle_timeout_ms (0: none; absent from older workers, read as 0)  (88 bytes, may grow)
//   when caps has kCapOpCaps, then:
//   88 u32 n_op_words, 92 u32 n_dtype_words (each <= kMaxCapWords),
//   96 u64 op_words[n_op_words], then u64 dtype_words[n_dtype_words]
//   bit b of op word w: the worker runs the op of value 64 w + b; bit b of dtype word w: its
//   kernels take weights of the dtype of id 64 w + b (DeviceCaps). Bits past what this build
//   knows are ignored. A worker without the bit (older) is taken to run the baseline
//   (device_caps_baseline(), backend.h): the ops and dtypes of every worker before the bit.
// A worker closes a session that sends nothing for idle_timeout_ms; a client that wants to
// stay connected while idle sends a cheap request (DEVICE_INFO) well within it.
struct HelloResponse {
  uint16_t major = kVersionMajor;
  uint16_t minor = kVersionMinor;
  uint32_t auth = kAuthNone;
  uint64_t caps = 0;
  Nonce server_nonce{};
  Mac server_mac{};
  uint64_t idle_timeout_ms = 0;
  DeviceCaps device_caps;  // on the wire only with kCapOpCaps
};
constexpr size_t kHelloResponseBytes = 88;  // without the op and dtype words
// Words of op or dtype bits in a HELLO response: 1024 ids of each, four times the ids this
// build has room for, so that a newer worker's longer lists still decode (their tail ignored).
constexpr uint32_t kMaxCapWords = 16;

// --- DEVICE_INFO: empty request ---------------------------------------------------------------
//   0 u64 memory_total, 8 u64 memory_free, 16 u64 alignment, 24 u64 max_buffer_size,
//   32 u32 name_len (<= kMaxNameBytes), 36 u32 description_len (<= kMaxDescriptionBytes),
//   40 name bytes, description bytes
using DeviceInfoResponse = DeviceInfo;

// --- ALLOC_BUFFER ------------------------------------------------------------------------------
//   request: 0 u64 size                 response: 0 u64 handle (never 0), 8 u64 size
struct AllocBufferRequest {
  uint64_t size = 0;
};
struct AllocBufferResponse {
  uint64_t handle = 0;
  uint64_t size = 0;
};

// --- FREE_BUFFER: 0 u64 handle; empty response ------------------------------------------------
struct FreeBufferRequest {
  uint64_t handle = 0;
};

// --- BUFFER_CLEAR: 0 u64 handle, 8 u8 value, 9 u8[7] zero; empty response ---------------------
struct BufferClearRequest {
  uint64_t handle = 0;
  uint8_t value = 0;
};

// --- SET_TENSOR (usually one-way) --------------------------------------------------------------
//   0 Region, 24 u32 flags (kSetCacheable), 28 u32 reserved, 32 data[region.size]
// payload_size must equal 32 + region.size. The data is sent as its own piece (no copy).
constexpr uint32_t kSetCacheable = 1 << 0;  // a weight: a worker with --cache stores it by hash
struct SetTensorRequest {
  Region region;
  uint32_t flags = 0;
  std::span<const uint8_t> data;  // decode: points into the payload
};
constexpr size_t kSetTensorPrefixBytes = 32;

// --- SET_TENSORS (one-way; kCapBatched) --------------------------------------------------------
//   0 u32 n (<= kMaxBatchRegions), 4 u32 flags, 8 Region[n], then the n data blocks concatenated
// payload_size must equal 8 + 24 n + sum(size) (checked sums).
struct SetTensorsRequest {
  uint32_t flags = 0;
  std::vector<Region> regions;
  std::span<const uint8_t> data;  // all blocks, in region order
};
constexpr uint64_t set_tensors_head_bytes(uint64_t n) { return 8 + kRegionBytes * n; }

// --- SET_TENSOR_HASH (kCapSetTensorHash) ------------------------------------------------------
//   request: 0 Region, 24 u8[16] hash (XXH3-128 canonical)      response: 0 u8 found, 1 u8[7] 0
struct SetTensorHashRequest {
  Region region;
  Hash128 hash{};
};
struct SetTensorHashResponse {
  bool found = false;
};

// --- GET_TENSOR: 0 Region; response: region.size bytes ----------------------------------------
struct GetTensorRequest {
  Region region;
};

// --- GET_TENSORS (kCapBatched): 0 u32 n, 4 u32 reserved, 8 Region[n]; response: the n blocks
// concatenated, sum(size) <= the ceiling (checked sums) -----------------------------------------
struct GetTensorsRequest {
  std::vector<Region> regions;
};

// --- COPY_TENSOR (kCapCopyTensor): 0 Region src, 24 Region dst (equal sizes); empty response ---
struct CopyTensorRequest {
  Region src;
  Region dst;
};

// --- GRAPH_COMPUTE (one-way): 0 u32 graph_id, 4 u32 reserved, 8 graph (graph/serialize.h) ---
// The graph is cached on the connection under graph_id (replacing any graph of that id).
struct GraphComputeRequest {
  uint32_t graph_id = 0;
  std::span<const uint8_t> graph;
};
constexpr size_t kGraphComputePrefixBytes = 8;

// --- GRAPH_RECOMPUTE (one-way; kCapGraphRecompute): 0 u32 graph_id, 4 u32 reserved ------------
struct GraphRecomputeRequest {
  uint32_t graph_id = 0;
};

// --- SYNCHRONIZE: empty request; empty response, or the sticky error ---------------------------

// --- Hand-off (kCapHandoff) --------------------------------------------------------------------
// A stage's output goes from its worker (the sender) straight into the next stage's buffer on
// another worker (the receiver), instead of through the client. The client asks the receiver
// for a ticket of its session (HANDOFF_TICKET) and gives it, with the receiver's address, to the
// sender (HANDOFF_CONNECT). The sender opens a connection of its own to the receiver (HELLO with
// the sender's own token), attaches it to that session with the ticket (HANDOFF_ATTACH), and
// from then on that link carries HANDOFF_DATA only: writes into the session's buffers, numbered
// by a step sequence number that the client chose, checked as any SET_TENSOR when they are
// applied. HANDOFF_COMPUTE is a computation with hand-off parts: on the receiver it first waits
// for the HANDOFF_DATA of a sequence number (bounded by timeout_ms) and applies it; on the
// sender it sends a region after the graph ran. A part that fails (or is skipped behind a
// sticky error) is sent on as an error HANDOFF_DATA, so the receiver fails the step at once.
using Ticket = std::array<uint8_t, 32>;
// Addresses of peers in HANDOFF_CONNECT ("host:port", "unix:/path").
constexpr uint32_t kMaxAddressBytes = 256;
// The longest a hand-off may wait or a send may stall (timeout_ms): ten minutes, the default
// idle timeout of a session.
constexpr uint32_t kMaxHandoffTimeoutMs = 600 * 1000;

// --- HANDOFF_TICKET: empty request; response:
//   0 u64 session (this connection's id on the worker), 8 u8[32] ticket  (40 bytes)
// The same ticket for every request of a connection; it dies with the connection.
struct HandoffTicketResponse {
  uint64_t session = 0;
  Ticket ticket{};
};

// --- HANDOFF_CONNECT: empty response once the link is attached, or the error ---------------
//   0 u32 link (the client's id for the link, != 0), 4 u32 timeout_ms (1..kMaxHandoffTimeoutMs:
//   bounds the connect, the handshake and every send on the link), 8 u64 session, 16 u8[32]
//   ticket, 48 u32 address_len (1..kMaxAddressBytes), 52 u32 reserved (0), 56 address bytes
// A link id already open on the connection is replaced.
struct HandoffConnectRequest {
  uint32_t link = 0;
  uint32_t timeout_ms = 0;
  uint64_t session = 0;
  Ticket ticket{};
  std::string address;
};

// --- HANDOFF_ATTACH: the first command after HELLO on a worker's connection to a peer --------
//   0 u64 session, 8 u8[32] ticket (40 bytes); empty response, or kAuthFailed and the peer closes
struct HandoffAttachRequest {
  uint64_t session = 0;
  Ticket ticket{};
};

// --- HANDOFF_DATA (one-way; only on an attached connection) -----------------------------------
//   0 u64 seq, 8 u16 status (0, or the WireStatus of the error that stopped the sender),
//   10 u16 0, 12 u32 0, 16 Region dst, 40 bytes: dst.size bytes of data when status is 0, else
//   the error text (<= kMaxErrorBytes)
struct HandoffData {
  uint64_t seq = 0;
  uint16_t status = 0;
  Region dst;
  std::span<const uint8_t> bytes;  // decode: points into the payload
};
constexpr size_t kHandoffDataPrefixBytes = 40;

// --- HANDOFF_COMPUTE (one-way) -----------------------------------------------------------------
//   0 u32 graph_id, 4 u32 flags, 8 u32 timeout_ms (1..kMaxHandoffTimeoutMs with kHandoffWait or
//   kHandoffSend, else 0), 12 u32 link (kHandoffSend, else 0), 16 u64 wait_seq, 24 Region
//   wait_dst, 48 u64 send_seq, 56 Region send_src, 80 Region send_dst (104 bytes), then the
//   graph (kHandoffGraph). The fields of a part that the flags leave out must be 0.
// In order: wait for the HANDOFF_DATA of wait_seq, which must write exactly wait_dst, and apply
// it; run the graph; send send_src as the HANDOFF_DATA of send_seq into send_dst on `link`.
constexpr uint32_t kHandoffWait = 1 << 0;
constexpr uint32_t kHandoffSend = 1 << 1;
constexpr uint32_t kHandoffRecompute = 1 << 2;  // run the cached graph graph_id
constexpr uint32_t kHandoffGraph = 1 << 3;      // the graph follows: cache as graph_id and run
struct HandoffComputeRequest {
  uint32_t graph_id = 0;
  uint32_t flags = 0;
  uint32_t timeout_ms = 0;
  uint32_t link = 0;
  uint64_t wait_seq = 0;
  Region wait_dst;
  uint64_t send_seq = 0;
  Region send_src;
  Region send_dst;
  std::span<const uint8_t> graph;  // kHandoffGraph; decode: points into the payload
};
constexpr size_t kHandoffComputePrefixBytes = 104;

// Encoders append the fixed part of a payload to `out`; data spans (SET_TENSOR(S) data, the
// graph) are not appended: send them as further pieces after the fixed part.
void encode(const HelloRequest& m, std::vector<uint8_t>* out);
void encode(const HelloResponse& m, std::vector<uint8_t>* out);
void encode(const DeviceInfoResponse& m, std::vector<uint8_t>* out);
void encode(const AllocBufferRequest& m, std::vector<uint8_t>* out);
void encode(const AllocBufferResponse& m, std::vector<uint8_t>* out);
void encode(const FreeBufferRequest& m, std::vector<uint8_t>* out);
void encode(const BufferClearRequest& m, std::vector<uint8_t>* out);
void encode(const SetTensorRequest& m, std::vector<uint8_t>* out);   // without data
void encode(const SetTensorsRequest& m, std::vector<uint8_t>* out);  // without data
void encode(const SetTensorHashRequest& m, std::vector<uint8_t>* out);
void encode(const SetTensorHashResponse& m, std::vector<uint8_t>* out);
void encode(const GetTensorRequest& m, std::vector<uint8_t>* out);
void encode(const GetTensorsRequest& m, std::vector<uint8_t>* out);
void encode(const CopyTensorRequest& m, std::vector<uint8_t>* out);
void encode(const GraphComputeRequest& m, std::vector<uint8_t>* out);  // without the graph
void encode(const GraphRecomputeRequest& m, std::vector<uint8_t>* out);
void encode(const HandoffTicketResponse& m, std::vector<uint8_t>* out);
void encode(const HandoffConnectRequest& m, std::vector<uint8_t>* out);
void encode(const HandoffAttachRequest& m, std::vector<uint8_t>* out);
void encode(const HandoffData& m, std::vector<uint8_t>* out);            // without the bytes
void encode(const HandoffComputeRequest& m, std::vector<uint8_t>* out);  // without the graph

// Decoders check every length and count against the bytes present (checked sums) and return
// an error naming the field; spans in the result point into `p`.
Result<HelloRequest> decode_hello_request(std::span<const uint8_t> p);
Result<HelloResponse> decode_hello_response(std::span<const uint8_t> p);
Result<DeviceInfoResponse> decode_device_info_response(std::span<const uint8_t> p);
Result<AllocBufferRequest> decode_alloc_buffer_request(std::span<const uint8_t> p);
Result<AllocBufferResponse> decode_alloc_buffer_response(std::span<const uint8_t> p);
Result<FreeBufferRequest> decode_free_buffer_request(std::span<const uint8_t> p);
Result<BufferClearRequest> decode_buffer_clear_request(std::span<const uint8_t> p);
Result<SetTensorRequest> decode_set_tensor_request(std::span<const uint8_t> p);
Result<SetTensorsRequest> decode_set_tensors_request(std::span<const uint8_t> p);
// The fixed part of a SET_TENSOR(S) request from the first bytes of its payload (`lead`, at
// least the fixed part), for a receiver that receives the data straight into place: the checks
// of the decoders above, with payload_size standing for the whole payload. `data` stays empty;
// the data follows kSetTensorPrefixBytes, or set_tensors_head_bytes(n) for SET_TENSORS.
Result<SetTensorRequest> decode_set_tensor_head(std::span<const uint8_t> lead,
                                                uint64_t payload_size);
Result<SetTensorsRequest> decode_set_tensors_head(std::span<const uint8_t> lead,
                                                  uint64_t payload_size);
Result<SetTensorHashRequest> decode_set_tensor_hash_request(std::span<const uint8_t> p);
Result<SetTensorHashResponse> decode_set_tensor_hash_response(std::span<const uint8_t> p);
Result<GetTensorRequest> decode_get_tensor_request(std::span<const uint8_t> p);
// max_total: the ceiling on the sum of sizes (the response must fit in one message).
Result<GetTensorsRequest> decode_get_tensors_request(std::span<const uint8_t> p,
                                                     uint64_t max_total);
Result<CopyTensorRequest> decode_copy_tensor_request(std::span<const uint8_t> p);
Result<GraphComputeRequest> decode_graph_compute_request(std::span<const uint8_t> p);
Result<GraphRecomputeRequest> decode_graph_recompute_request(std::span<const uint8_t> p);
Result<HandoffTicketResponse> decode_handoff_ticket_response(std::span<const uint8_t> p);
Result<HandoffConnectRequest> decode_handoff_connect_request(std::span<const uint8_t> p);
Result<HandoffAttachRequest> decode_handoff_attach_request(std::span<const uint8_t> p);
Result<HandoffData> decode_handoff_data(std::span<const uint8_t> p);
Result<HandoffComputeRequest> decode_handoff_compute_request(std::span<const uint8_t> p);

// The error text of an error response, cut to kMaxErrorBytes.
std::string error_text(const Status& s);

// XXH3-128 of a blob, canonical byte order.
Hash128 hash128(std::span<const uint8_t> data);
std::string hash128_hex(const Hash128& h);

}  // namespace strata::rpc
