// What the HTTP layer serves: a Dispatcher lists its endpoints and handles their requests.
//
// The HTTP layer (server/http.h) owns the listening socket, TLS, the API-key check, the path
// prefix, body limits and error pages; it knows nothing of models. A dispatcher knows nothing
// of sockets. One model served by this process is the ModelDispatcher; a router that forwards
// to several models is another dispatcher behind the same HTTP layer.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/status.h"

namespace httplib {
class Request;
class Response;
}  // namespace httplib

namespace strata::server {

using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

struct Route {
  enum class Method { kGet, kPost, kDelete };
  enum class Access {
    kPublic,  // served without the API key (/health, as load balancers probe it)
    kKeyed,   // needs the API key when one is set
  };
  Method method = Method::kGet;
  // A full path ("/v1/chat/completions"), or a regular expression where it has a group
  // ("/slots/(\\d+)"). Aliases (with and without /v1) are routes of their own.
  std::string path;
  Access access = Access::kKeyed;
  Handler handler;
};

class Dispatcher {
 public:
  virtual ~Dispatcher() = default;
  // Called once, before the server listens.
  virtual std::vector<Route> routes() = 0;
  // Stops work in progress (the server is going down); requests still running fail.
  virtual void stop() = 0;
};

}  // namespace strata::server
