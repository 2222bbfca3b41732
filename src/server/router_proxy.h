// Forwarding one HTTP request to a child server on 127.0.0.1 and its answer back.
//
// A streamed answer (text/event-stream) is relayed chunk by chunk as the child writes it, never
// buffered whole. A client that goes away cancels the upstream request: its connection to the
// child is closed, which the child takes as a cancel and frees the slot.
#pragma once

#include <memory>
#include <string>

namespace httplib {
class Request;
class Response;
}  // namespace httplib

namespace strata::server {

struct Upstream {
  std::string model;  // for error messages
  int port = 0;
  std::string key;     // the child's private API key
  std::string target;  // path and query string as the child serves them
  int timeout_s = 3600;
};

// Forwards `req` (its method, body and content type; never its credentials) to the child and
// writes the answer into `res`. `hold` is released once the exchange is over, streams included
// (the router counts requests in flight with it).
void proxy_request(const httplib::Request& req, httplib::Response& res, const Upstream& up,
                   std::shared_ptr<void> hold);

}  // namespace strata::server
