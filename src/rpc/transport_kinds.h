// The transports behind the address schemes of transport.h, one file each. Internal to
// src/rpc: callers use transport_connect / transport_listen.
//
// `address` is the whole address as the user gave it (for messages); `where` is what follows
// the scheme ("127.0.0.1:50052", "/tmp/w.sock").
#pragma once

#include <sys/uio.h>

#include <memory>
#include <string>

#include "rpc/transport.h"

namespace strata::rpc {

struct TransportKind {
  const char* scheme;  // "tcp": addresses "tcp:..." and "tcp://..."
  Result<std::unique_ptr<Transport>> (*connect)(const std::string& address,
                                                const std::string& where, int timeout_ms);
  Result<std::unique_ptr<Listener>> (*listen)(const std::string& address, const std::string& where);
};

// Where a transport writes the payload of one message as it arrives. Started once the header
// and the lead are read: into the Placer's spans when it places the message, else into the
// Message's own vector, grown only as bytes arrive, so that a header announcing a large payload
// costs the memory of the bytes actually sent.
class PayloadWriter {
 public:
  // Asks `place` (may be empty) and fills in m->payload and m->placed; the lead's bytes past
  // what the message keeps are written to the destination at once.
  static Result<PayloadWriter> start(const Header& h, std::span<const uint8_t> lead,
                                     const Placer& place, Message* m);
  // Payload bytes still to come.
  uint64_t remaining() const { return remaining_; }
  // Up to max_iov iovecs for up to max_bytes of the bytes still to come, in order (never none
  // while some remain); returns their total. Unplaced, they cover min(max_bytes, what
  // remains, kGrowBytes) at least: the vector grows by at most kGrowBytes per call, unless
  // whole_rest asks room for everything that remains at once (a transport that receives the
  // rest in one operation: the header's size was checked against max_payload already).
  // Placed, max_iov may cut them short of max_bytes.
  size_t fill(iovec* iov, size_t max_iov, uint64_t max_bytes, size_t* n_iov,
              bool whole_rest = false);
  void advance(size_t n);
  // Copies bytes that arrived together with the lead.
  void write(std::span<const uint8_t> bytes);

  static constexpr uint64_t kGrowBytes = uint64_t{16} << 20;

 private:
  Message* m_ = nullptr;
  std::vector<std::span<uint8_t>> into_;  // placed: the destinations
  size_t part_ = 0;                       // placed: the current destination
  size_t offset_ = 0;                     // in into_[part_], or in m_->payload
  uint64_t remaining_ = 0;
};

// transport_tcp.cc; also the transport of an address without a scheme.
Result<std::unique_ptr<Transport>> tcp_connect(const std::string& address, const std::string& where,
                                               int timeout_ms);
Result<std::unique_ptr<Listener>> tcp_listen(const std::string& address, const std::string& where);

// transport_seqpacket.cc
Result<std::unique_ptr<Transport>> seqpacket_connect(const std::string& address,
                                                     const std::string& where, int timeout_ms);
Result<std::unique_ptr<Listener>> seqpacket_listen(const std::string& address,
                                                   const std::string& where);

// transport_ucx.cc: the active-message id of strata messages ("SR"), and an error naming the
// missing library when UCX was absent at configure time.
constexpr unsigned kUcxAmId = 0x5352;
Result<std::unique_ptr<Transport>> ucx_connect(const std::string& address, const std::string& where,
                                               int timeout_ms);
Result<std::unique_ptr<Listener>> ucx_listen(const std::string& address, const std::string& where);

}  // namespace strata::rpc
