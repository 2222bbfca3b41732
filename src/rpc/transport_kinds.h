// The transports behind the address schemes of transport.h, one file each. Internal to
// src/rpc: callers use transport_connect / transport_listen.
//
// `address` is the whole address as the user gave it (for messages); `where` is what follows
// the scheme ("127.0.0.1:50052", "/tmp/w.sock").
#pragma once

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

// transport_tcp.cc; also the transport of an address without a scheme.
Result<std::unique_ptr<Transport>> tcp_connect(const std::string& address, const std::string& where,
                                               int timeout_ms);
Result<std::unique_ptr<Listener>> tcp_listen(const std::string& address, const std::string& where);

// transport_seqpacket.cc
Result<std::unique_ptr<Transport>> seqpacket_connect(const std::string& address,
                                                     const std::string& where, int timeout_ms);
Result<std::unique_ptr<Listener>> seqpacket_listen(const std::string& address,
                                                   const std::string& where);

}  // namespace strata::rpc
