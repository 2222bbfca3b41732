// Writing a JSON answer or an OpenAI-shaped error into a response.
#pragma once

#include "server/api.h"

namespace httplib {
class Response;
}  // namespace httplib

namespace strata::server {

void send_error(httplib::Response& res, const ApiError& e);
void send_json(httplib::Response& res, const Json& j);

}  // namespace strata::server
