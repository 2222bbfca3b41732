// Message transports: one `send` is received by exactly one `recv` of the same size.
//
// Read the whole message in one receive, then scatter it in memory: a message transport
// delivers exactly one send per completion, so no code above this interface may read a message
// in pieces.
//
// A transport is chosen once, by the scheme of its address, from one table (transport.cc; a
// transport is a row and a file):
//   "host:port", "tcp:host:port"  TCP (transport_tcp.cc): messages framed on the byte stream by
//                                 the header's payload_size, TCP_NODELAY.
//   "unix:/path"                  Unix SOCK_SEQPACKET (transport_seqpacket.cc).
// "scheme://rest" is read as "scheme:rest".
//
// SOCK_SEQPACKET carries datagrams of at most about the socket buffer size, so a message is
// cut below this interface into datagrams of at most kSeqpacketChunkBytes (the first holds the
// header) and joined again by recv; the socket keeps datagram order and boundaries, so the
// receiver knows from the header how many bytes to wait for. Callers never see the pieces.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "rpc/protocol.h"

namespace strata::rpc {

constexpr size_t kSeqpacketChunkBytes = 64 * 1024;

struct Message {
  Header header;
  // The whole payload; or, when `placed`, only its first Placement::keep bytes, the rest
  // having gone where the Placer said.
  std::vector<uint8_t> payload;
  bool placed = false;
};

using Piece = std::span<const uint8_t>;

// A receive reads the header and then this much of the payload (or all of it, if shorter), the
// lead, before it asks a Placer where the rest goes: enough for the fixed part of a
// SET_TENSORS of 170 regions (8 + 24 n bytes), and one page.
constexpr size_t kRecvLeadBytes = 4096;

// Where the payload of a message goes: its first `keep` bytes (at most the lead) stay in
// Message::payload, and the payload bytes after them are received straight into `into`, in
// order; the sizes of `into` add up to payload_size - keep.
struct Placement {
  size_t keep = 0;
  std::vector<std::span<uint8_t>> into;
};
// Called by try_recv_into on the receiving thread with the checked header and the lead.
// std::nullopt declines: the whole payload is then received into Message::payload.
using Placer =
    std::function<std::optional<Placement>(const Header& h, std::span<const uint8_t> lead)>;

class Transport {
 public:
  virtual ~Transport() = default;
  // Sends one message whose payload is the pieces concatenated; header.payload_size is set to
  // their total. Thread-safe: concurrent sends never interleave on the wire.
  virtual Status send(const Header& header, std::span<const Piece> pieces) = 0;
  // Receives one whole message, or std::nullopt when none started within start_timeout_ms:
  // the connection is then still in step, and the caller may simply call again. Once a
  // message has started, a stall of more than stall_timeout_ms between its bytes is an error
  // that poisons the transport: the byte stream is out of step, so it is shut down and every
  // later call fails. A payload_size above max_payload() is an error (the connection should
  // then be closed). Timeouts < 0 wait forever. One thread at a time.
  Result<std::optional<Message>> try_recv(int start_timeout_ms, int stall_timeout_ms) {
    return try_recv_into(start_timeout_ms, stall_timeout_ms, nullptr);
  }
  // try_recv, with the payload past the lead received where `place` says (when it places the
  // message): a large payload is copied once, from the network into its destination, on every
  // transport. The destination may be written before the message is complete: a message that
  // fails midway leaves it partly written, and the transport poisoned.
  virtual Result<std::optional<Message>> try_recv_into(int start_timeout_ms, int stall_timeout_ms,
                                                       const Placer& place) = 0;
  // try_recv(timeout_ms, timeout_ms), with no message started as a kUnavailable error.
  Result<Message> recv(int timeout_ms);
  // Wakes a blocked recv (it returns kUnavailable) and makes later calls fail. Thread-safe.
  virtual void shutdown() = 0;
  // "tcp:1.2.3.4:5678", "unix:/path": the scheme and the peer, for logs.
  virtual std::string peer() const = 0;

  void set_max_payload(uint64_t n) { max_payload_ = n; }
  uint64_t max_payload() const { return max_payload_; }

 protected:
  uint64_t max_payload_ = kMaxMessageBytes;
};

class Listener {
 public:
  virtual ~Listener() = default;
  // Waits for a connection; timeout_ms < 0 waits forever. kUnavailable after shutdown().
  virtual Result<std::unique_ptr<Transport>> accept(int timeout_ms) = 0;
  // The bound address with the real port ("127.0.0.1:40123", "unix:/tmp/w.sock").
  virtual std::string address() const = 0;
  // Wakes a blocked accept. Thread-safe.
  virtual void shutdown() = 0;
  // True for TCP listeners bound to an address other than loopback.
  virtual bool beyond_loopback() const = 0;
};

Result<std::unique_ptr<Transport>> transport_connect(const std::string& address, int timeout_ms);
// Port 0 picks an ephemeral port (see Listener::address()). A unix path that exists as a
// socket is replaced.
Result<std::unique_ptr<Listener>> transport_listen(const std::string& address);

// Sends a message with a single payload piece (or none).
Status send_message(Transport& t, const Header& header, std::span<const uint8_t> payload);

// For transports: sets h->payload_size to the pieces' total, which must not pass
// kMaxMessageBytes.
Status set_payload_size(Header* h, std::span<const Piece> pieces);

}  // namespace strata::rpc
