// The OpenAI-compatible request and response bodies (and llama-server's native /completion):
// parsing with a 400 that names the field for every wrong type or value, and formatting.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/tokenizer.h"
#include "server/chat_format.h"
#include "server/task.h"

namespace strata::server {

using Json = nlohmann::json;

// Limits of a request, each against a cheap denial of service: stops are matched against the
// text at every token, and every reported alternative costs work per token.
inline constexpr size_t kMaxStops = 16;
inline constexpr size_t kMaxStopBytes = 1024;
inline constexpr size_t kMaxMessages = 4096;
inline constexpr int32_t kMaxCompletionLogprobs = 5;  // OpenAI's limit for completions

struct ApiError {
  int status = 400;
  std::string message;
};

// {"error": {"message", "type", "code"}} as OpenAI shapes it.
std::string error_body(const ApiError& e);

// Dumps JSON with invalid UTF-8 replaced rather than thrown on.
std::string dump(const Json& j);

enum class Endpoint { kCompletions, kChat, kNative };

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::optional<std::string> model;
  std::string prompt_text;          // when the prompt is text
  std::vector<int32_t> prompt_ids;  // when the prompt is token ids
  bool prompt_is_ids = false;
  std::vector<ChatTurn> messages;
  GenParams params;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool seeded = false;         // the request chose its seed
};

// What a request gets for the fields it leaves out (the server's sampling flags).
struct RequestDefaults {
  GenParams params;
  bool seeded = false;  // params.sampling.seed is the server's --seed; else a fresh one
};

// Parses and validates a request body; `random_seed` is used when neither the request nor the
// defaults fix the seed.
std::optional<ApiError> parse_completion(const Json& body, Endpoint endpoint,
                                         const RequestDefaults& defaults, uint64_t random_seed,
                                         CompletionRequest& out);
inline std::optional<ApiError> parse_completion(const Json& body, Endpoint endpoint,
                                                uint64_t random_seed, CompletionRequest& out) {
  return parse_completion(body, endpoint, RequestDefaults{}, random_seed, out);
}

// What one choice produced, gathered from its events.
struct ChoiceResult {
  std::string text;
  std::vector<TokenOut> tokens;
  std::string finish_reason;
  int32_t n_generated = 0;
};

struct ResponseMeta {
  std::string id;  // "cmpl-7"
  int64_t created = 0;
  std::string model;
  int32_t n_prompt = 0;
  int32_t n_cached = 0;
};

Json usage_json(const ResponseMeta& meta, int32_t n_generated);
// The full (non-streamed) response body.
Json response_json(const CompletionRequest& req, const ResponseMeta& meta,
                   const std::vector<ChoiceResult>& choices, const Tokenizer& tok);
// One streamed chunk: text and tokens of choice `index`, and its finish_reason when it is done.
Json chunk_json(const CompletionRequest& req, const ResponseMeta& meta, int32_t index,
                const std::string& text, const std::vector<TokenOut>& tokens,
                const std::string& finish_reason, bool first, const Tokenizer& tok);

}  // namespace strata::server
