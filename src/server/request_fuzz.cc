// libFuzzer target: what the server parses from an HTTP client. Input: one selector byte, then
// the bytes a client sends.
//   0-5: a JSON request body, validated as the endpoint it names would: completions, chat
//        completions, llama-server's /completion and /infill, Anthropic's /v1/messages and
//        OpenAI's /v1/responses (converted to a chat body, then validated as one).
//        With the selector's high bit, against a small vocabulary (logit_bias as text, ids
//        checked), as the server validates.
//   6:   raw bytes of a connection read through ConnectionStream (the request's head and body
//        limits), in read sizes taken from the input.
// Any input must end in a result or a clear error, never in a crash, a sanitizer report or a
// hang; an accepted request stays within the documented limits. Build and run with
// scripts/fuzz.sh.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "engine/grammar.h"
#include "engine/sampler.h"
#include "model/tokenizer.h"
#include "server/api.h"
#include "server/compat_anthropic.h"
#include "server/compat_responses.h"
#include "server/http_stream.h"
#include "server/tool_grammar.h"

namespace {

using strata::server::ApiError;
using strata::server::CompletionRequest;
using strata::server::Endpoint;
using strata::server::Json;

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "request_fuzz: %s\n", what);
    std::abort();
  }
}

// A small SPM vocabulary (byte tokens, a user-defined token): logit_bias given as text is
// tokenized with it and token ids are checked against it.
const strata::Tokenizer& small_tokenizer() {
  static const strata::Tokenizer tok = [] {
    strata::VocabSpec v;
    v.model = "llama";
    const std::string sp = "\xe2\x96\x81";
    v.tokens = {"<unk>", "<s>",     "</s>",   sp,       "a",      "b",   "c",
                "ab",    sp + "ab", "<0xC3>", "<0xA9>", "<0x21>", "<my>"};
    v.scores = {0, 0, 0, -1, -2, -2, -2, -0.5f, -0.1f, 0, 0, 0, 0};
    v.token_types = {2, 3, 3, 1, 1, 1, 1, 1, 1, 6, 6, 6, 4};
    strata::Result<strata::Tokenizer> t = strata::Tokenizer::from_spec(v);
    require(t.is_ok(), "the fuzz vocabulary does not load");
    return std::move(*t);
  }();
  return tok;
}

// A validated request is one the server may queue: its numbers within their limits.
void check_accepted(const CompletionRequest& r, const strata::Tokenizer* tok) {
  require(r.params.n >= 1, "n below 1 accepted");
  require(r.params.logit_bias.size() <= strata::server::kMaxLogitBias, "logit_bias past limit");
  require(r.params.sampling.validate().is_ok(), "invalid sampling accepted");
  // The grammar a forced tool call would get: built, and parsed or refused within its limits.
  if (!r.chat.tools.empty()) {
    using strata::server::ToolCallFormat;
    for (ToolCallFormat f : {ToolCallFormat::kHermes, ToolCallFormat::kFunctionaryV31}) {
      strata::server::ToolGrammarOptions o;
      o.format = f;
      o.may_think = f == ToolCallFormat::kHermes;
      std::optional<std::string> text = strata::server::tool_call_grammar(r.chat.tools, o);
      require(text.has_value(), "no tool grammar for a format that has one");
      auto g = strata::Grammar::parse(*text);
      require(g.is_ok() || !g.status().message().empty(), "a tool grammar refused silently");
    }
  }
  if (tok == nullptr) return;
  for (const strata::server::TokenBias& b : r.params.logit_bias) {
    require(b.token >= 0 && b.token < tok->n_vocab(), "logit_bias token outside the vocabulary");
  }
  // The accepted sampler settings drive the whole chain (DRY's window, Mirostat's mu, the
  // stages in the request's order) over a few rows of varied logits.
  strata::Sampler sampler(r.params.sampling, tok->n_vocab());
  std::vector<float> logits(static_cast<size_t>(tok->n_vocab()));
  for (int step = 0; step < 6; ++step) {
    for (size_t i = 0; i < logits.size(); ++i) {
      logits[i] =
          static_cast<float>(static_cast<int>((i * 7 + static_cast<size_t>(step) * 3) % 11) - 5);
    }
    const int32_t t = sampler.sample(logits.data());
    require(t >= 0 && t < tok->n_vocab(), "a sampled token outside the vocabulary");
    sampler.accept(t);
    sampler.accept(t);  // repeats, so that DRY has runs to find
  }
}

void validate(const Json& body, Endpoint endpoint, const strata::Tokenizer* tok) {
  CompletionRequest req;
  std::optional<ApiError> e = strata::server::parse_completion(
      body, endpoint, strata::server::RequestDefaults{}, 42, tok, req);
  if (e) {
    require(e->status >= 400 && e->status < 600, "error status outside 4xx/5xx");
    require(!e->message.empty(), "error without a message");
    strata::server::error_body(*e);
    return;
  }
  check_accepted(req, tok);
}

using Convert = std::optional<std::string> (*)(const Json& body, Json& chat);

void convert_then_validate(const Json& body, Convert convert, const strata::Tokenizer* tok) {
  Json chat;
  if (std::optional<std::string> e = convert(body, chat)) {
    require(!e->empty(), "conversion error without a message");
    return;
  }
  validate(chat, Endpoint::kChat, tok);
}

std::optional<std::string> from_messages(const Json& body, Json& chat) {
  return strata::server::anthropic_to_chat(body, true, chat);
}

// The bytes through a socket pair into ConnectionStream, read as cpp-httplib reads: small reads
// through the head, larger ones after. Never more bytes out than went in; a refused request
// reads nothing more.
void read_stream(const uint8_t* data, size_t size) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return;
  const size_t n = std::min<size_t>(size, 64 << 10);  // within the pair's buffer: never blocks
  require(send(fds[1], data, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n), "socket pair send");
  shutdown(fds[1], SHUT_WR);
  strata::server::StreamLimits limits;
  limits.max_request_bytes = 4096;  // small, so that inputs reach the limit
  limits.read_timeout = std::chrono::milliseconds(100);
  limits.write_timeout = std::chrono::milliseconds(100);
  {
    strata::server::ConnectionStream strm(fds[0], nullptr, limits);
    strm.begin_request(strata::server::HttpClock::now() + std::chrono::seconds(1));
    size_t total = 0;
    char buf[512];
    for (size_t i = 0;; ++i) {
      const size_t want = 1 + (n > 0 ? data[i % n] % sizeof(buf) : 0);
      const ssize_t got = strm.read(buf, want);
      if (got <= 0) break;
      require(static_cast<size_t>(got) <= want, "read past the asked size");
      total += static_cast<size_t>(got);
      if (i % 7 == 6)
        strm.begin_request(strata::server::HttpClock::now() + std::chrono::seconds(1));
    }
    require(total <= n, "more bytes read than sent");
    if (strm.refused()) require(strm.read(buf, 1) == -1, "a refused stream reads on");
  }
  close(fds[0]);
  close(fds[1]);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  using Tok = const strata::Tokenizer*;
  // The endpoints, by selector; one past them is the raw stream.
  static const std::function<void(const Json&, Tok)> kEndpoints[] = {
      [](const Json& b, Tok t) { validate(b, Endpoint::kCompletions, t); },
      [](const Json& b, Tok t) { validate(b, Endpoint::kChat, t); },
      [](const Json& b, Tok t) { validate(b, Endpoint::kNative, t); },
      [](const Json& b, Tok t) { validate(b, Endpoint::kInfill, t); },
      [](const Json& b, Tok t) { convert_then_validate(b, from_messages, t); },
      [](const Json& b, Tok t) { convert_then_validate(b, strata::server::responses_to_chat, t); },
  };
  constexpr size_t kSelectors = std::size(kEndpoints) + 1;
  const size_t selector = (data[0] & 0x7f) % kSelectors;
  if (selector == kSelectors - 1) {
    read_stream(data + 1, size - 1);
    return 0;
  }
  const Json body = Json::parse(data + 1, data + size, nullptr, false);
  // The high bit of the selector: with a vocabulary (as the server validates), or without.
  if (!body.is_discarded())
    kEndpoints[selector](body, data[0] & 0x80 ? &small_tokenizer() : nullptr);
  return 0;
}
