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
#include "server/chat_request.h"
#include "server/reply_parse.h"
#include "server/task.h"

namespace strata::server {

using Json = nlohmann::ordered_json;

// Limits of a request, each against a cheap denial of service: stops are matched against the
// text at every token, and every reported alternative costs work per token.
inline constexpr size_t kMaxStops = 16;
inline constexpr size_t kMaxStopBytes = 1024;
inline constexpr int32_t kMaxCompletionLogprobs = 5;  // OpenAI's limit for completions

struct ApiError {
  int status = 400;
  std::string message;
  int retry_after_s = 0;  // > 0: a Retry-After header (a 503 while a worker is reconnected)
};

// {"error": {"message", "type", "code"}} as OpenAI shapes it.
std::string error_body(const ApiError& e);

// Dumps JSON with invalid UTF-8 replaced rather than thrown on.
std::string dump(const Json& j);

// kNative is llama-server's /completion; kInfill its /infill (answered in the native shape).
enum class Endpoint { kCompletions, kChat, kNative, kInfill };

inline bool native_shape(Endpoint e) { return e == Endpoint::kNative || e == Endpoint::kInfill; }

// logit_bias entries a request may carry: a whole vocabulary's worth, and no more (each costs
// work on every generated token).
inline constexpr size_t kMaxLogitBias = 1 << 18;
// Extra files of an /infill request (input_extra), each against the prompt's size anyway.
inline constexpr size_t kMaxInfillExtra = 256;

struct InfillChunk {
  std::string filename;
  std::string text;
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::optional<std::string> model;
  std::string prompt_text;          // when the prompt is text
  std::vector<int32_t> prompt_ids;  // when the prompt is token ids
  bool prompt_is_ids = false;
  ChatRequest chat;  // chat: the conversation, tools and template options
  GenParams params;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool seeded = false;         // the request chose its seed
  // Chat: how the reply is split into content, reasoning and tool calls (reply_parse.h); the
  // dispatcher completes it from the rendered prompt and the template.
  ReplyParseOptions reply;
  bool return_tokens = false;  // native: the generated ids in `tokens`
  // native, collected: only these fields of the response ("a/b": field b of a, at the top)
  std::vector<std::string> response_fields;
  // /infill
  std::string input_prefix;
  std::string input_suffix;
  std::vector<InfillChunk> input_extra;
};

// What a request gets for the fields it leaves out (the server's sampling flags).
struct RequestDefaults {
  GenParams params;
  bool seeded = false;  // params.sampling.seed is the server's --seed; else a fresh one
  ReasoningFormat reasoning = ReasoningFormat::kAuto;  // --reasoning-format
};

// Parses and validates a request body; `random_seed` is used when neither the request nor the
// defaults fix the seed. `tok` checks logit_bias ids and tokenizes its string forms; without
// it, only ids are accepted and they are checked later with the prompt.
std::optional<ApiError> parse_completion(const Json& body, Endpoint endpoint,
                                         const RequestDefaults& defaults, uint64_t random_seed,
                                         const Tokenizer* tok, CompletionRequest& out);
inline std::optional<ApiError> parse_completion(const Json& body, Endpoint endpoint,
                                                uint64_t random_seed, CompletionRequest& out) {
  return parse_completion(body, endpoint, RequestDefaults{}, random_seed, nullptr, out);
}

// logit_bias in every form clients send: OpenAI's {"15043": -100}, llama-server's
// [[15043, 1.0]], [[15043, false]] (false bans the token), [["Hello", -1]] and {"Hello": -1}
// (a string stands for each of its tokens). Appends to `out`.
std::optional<ApiError> parse_logit_bias(const Json& value, const Tokenizer* tok,
                                         std::vector<TokenBias>& out);

// The request's settings as llama-server reports them (generation_settings, /props).
Json generation_settings_json(const GenParams& p, bool stream, int32_t n_ctx,
                              const std::string& model);

// What one choice produced, gathered from its events.
struct ChoiceResult {
  std::string text;
  std::vector<TokenOut> tokens;
  std::vector<int32_t> ids;
  std::string finish_reason;
  std::string stop_type;
  std::string stopping_word;
  bool truncated = false;
  int32_t n_generated = 0;
  double prompt_ms = 0;
  double predicted_ms = 0;
};

struct ResponseMeta {
  std::string id;  // "cmpl-7"
  int64_t created = 0;
  std::string model;
  int32_t n_prompt = 0;
  int32_t n_cached = 0;
  int32_t n_ctx = 0;        // of a slot
  std::string prompt_text;  // the prompt as evaluated (native responses)
};

// What every response carries as system_fingerprint: the build, so a client can tell when
// the server's code changed.
inline constexpr const char* kSystemFingerprint = "strata-b1";

// llama-server's timings object.
Json timings_json(int32_t n_prompt, double prompt_ms, int32_t n_predicted, double predicted_ms);

Json usage_json(const ResponseMeta& meta, int32_t n_generated);
// The full (non-streamed) response body.
Json response_json(const CompletionRequest& req, const ResponseMeta& meta,
                   const std::vector<ChoiceResult>& choices, const Tokenizer& tok);
// A chat reply split as req.reply says: the assistant message ({role, content,
// reasoning_content, tool_calls}) and the finish reason ("tool_calls" when it called tools).
// `call_id_prefix` names calls that their format gives no id.
std::pair<Json, std::string> chat_message_json(const CompletionRequest& req,
                                               const std::string& text,
                                               const std::string& finish_reason,
                                               const std::string& call_id_prefix);
// One streamed chat chunk made of a reply delta (reply_parse.h).
Json chat_delta_chunk(const CompletionRequest& req, const ResponseMeta& meta, int32_t index,
                      const ReplyDelta& delta, const std::vector<TokenOut>& tokens,
                      const std::string& finish_reason, bool first, const Tokenizer& tok);

// One streamed chunk: text and tokens of choice `index`, and its finish_reason when it is done.
Json chunk_json(const CompletionRequest& req, const ResponseMeta& meta, int32_t index,
                const std::string& text, const std::vector<TokenOut>& tokens,
                const std::vector<int32_t>& ids, const std::string& finish_reason, bool first,
                const Tokenizer& tok);

}  // namespace strata::server
