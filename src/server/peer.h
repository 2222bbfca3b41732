// Noticing that an HTTP client went away while its non-streamed request is still generating.
//
// cpp-httplib 0.11 gives a handler no way to see its connection (Request::is_connection_closed
// came later), and a non-streamed response writes nothing until the end, so no failed write
// tells. The connection's socket is found instead by its two addresses, which Request does
// carry: while the handler runs, its connection is open, so the pair names exactly one socket.
#pragma once

#include <string>

namespace strata::server {

// The descriptor of this process's TCP socket whose local and remote ends are these (numeric
// addresses as getnameinfo prints them); -1 when there is none. Scans /proc/self/fd: call it
// once per request, not per poll.
int connection_socket(const std::string& local_addr, int local_port, const std::string& remote_addr,
                      int remote_port);

// True when the peer of `fd` has closed its end (or the socket failed). Never blocks, never
// consumes data: a pipelined next request stays in the socket for the HTTP server to read.
bool peer_closed(int fd);

}  // namespace strata::server
