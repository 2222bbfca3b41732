#include "server/api.h"

#include <algorithm>
#include <cmath>

#include "engine/grammar.h"
#include "engine/speculative.h"
#include "server/json_schema_grammar.h"

namespace strata::server {
namespace {

std::string error_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 501:
      return "not_supported_error";  // llama-server's type for an endpoint that is off
    case 503:
      return "unavailable_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

std::optional<ApiError> bad(const std::string& message) { return ApiError{400, message}; }

std::string shown(const Json& v) {
  std::string s = dump(v);
  if (s.size() > 64) s = s.substr(0, 61) + "...";
  return s;
}

// The readers leave `out` alone when the key is absent or null, and name the field otherwise.
std::optional<ApiError> read_float(const Json& b, const char* key, float& out) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return std::nullopt;
  if (!it->is_number())
    return bad(std::string("'") + key + "' must be a number, not " + shown(*it));
  const double v = it->get<double>();
  if (!std::isfinite(v) || std::fabs(v) > 1e30) {
    return bad(std::string("'") + key + "' must be a finite number, not " + shown(*it));
  }
  out = static_cast<float>(v);
  return std::nullopt;
}

std::optional<ApiError> read_int(const Json& b, const char* key, int64_t lo, int64_t hi,
                                 int64_t& out) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return std::nullopt;
  int64_t v = 0;
  if (it->is_number_integer()) {
    if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return bad(std::string("'") + key + "' = " + shown(*it) + " is out of range [" +
                 std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    v = it->get<int64_t>();
  } else if (it->is_number_float() && std::floor(it->get<double>()) == it->get<double>() &&
             std::fabs(it->get<double>()) < 9e18) {
    v = static_cast<int64_t>(it->get<double>());
  } else {
    return bad(std::string("'") + key + "' must be an integer, not " + shown(*it));
  }
  if (v < lo || v > hi) {
    return bad(std::string("'") + key + "' = " + std::to_string(v) + " is out of range [" +
               std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  out = v;
  return std::nullopt;
}

// read_int into an int32_t field (lo and hi within int32_t's range).
std::optional<ApiError> read_int32(const Json& b, const char* key, int64_t lo, int64_t hi,
                                   int32_t& out) {
  int64_t v = out;
  if (auto e = read_int(b, key, lo, hi, v)) return e;
  out = static_cast<int32_t>(v);
  return std::nullopt;
}

// llama-server's other samplers' fields, and `samplers`: names, or llama.cpp's letters.
std::optional<ApiError> read_sampler_chain(const Json& b, SamplerParams& s) {
  SampleChain& c = s.chain;
  if (auto e = read_float(b, "typical_p", c.typical_p)) return e;
  if (auto e = read_float(b, "top_n_sigma", c.top_n_sigma)) return e;
  if (auto e = read_float(b, "xtc_probability", c.xtc_probability)) return e;
  if (auto e = read_float(b, "xtc_threshold", c.xtc_threshold)) return e;
  if (auto e = read_float(b, "mirostat_tau", c.mirostat_tau)) return e;
  if (auto e = read_float(b, "mirostat_eta", c.mirostat_eta)) return e;
  if (auto e = read_float(b, "dynatemp_range", c.dynatemp_range)) return e;
  if (auto e = read_float(b, "dynatemp_exponent", c.dynatemp_exponent)) return e;
  if (auto e = read_float(b, "adaptive_target", c.adaptive_target)) return e;
  if (auto e = read_float(b, "adaptive_decay", c.adaptive_decay)) return e;
  if (auto e = read_int32(b, "min_keep", 0, 1 << 20, c.min_keep)) return e;
  if (auto e = read_int32(b, "mirostat", 0, 2, c.mirostat)) return e;
  if (auto e = read_float(b, "dry_multiplier", s.dry_multiplier)) return e;
  if (auto e = read_float(b, "dry_base", s.dry_base)) return e;
  if (auto e =
          read_int32(b, "dry_allowed_length", 0, kSamplerMaxRepeatLastN, s.dry_allowed_length)) {
    return e;
  }
  if (auto e =
          read_int32(b, "dry_penalty_last_n", -1, kSamplerMaxRepeatLastN, s.dry_penalty_last_n)) {
    return e;
  }
  if (auto it = b.find("dry_sequence_breakers"); it != b.end() && !it->is_null()) {
    if (!it->is_array()) return bad("'dry_sequence_breakers' must be an array of strings");
    if (it->size() > kDryMaxBreakers) {
      return bad("'dry_sequence_breakers' has " + std::to_string(it->size()) +
                 " entries; the limit is " + std::to_string(kDryMaxBreakers));
    }
    s.dry_sequence_breakers.clear();
    for (const Json& x : *it) {
      if (!x.is_string()) return bad("'dry_sequence_breakers' entries must be strings");
      s.dry_sequence_breakers.push_back(x.get<std::string>());
    }
    s.dry_breakers = nullptr;  // made again from these strings
  }
  if (auto it = b.find("samplers"); it != b.end() && !it->is_null()) {
    Status st;
    if (it->is_string()) {
      st = set_sampler_order_letters(s, it->get<std::string>());
    } else if (it->is_array()) {
      std::vector<std::string> names;
      for (const Json& x : *it) {
        if (!x.is_string()) return bad("'samplers' entries must be strings");
        names.push_back(x.get<std::string>());
      }
      st = set_sampler_order(s, names);
    } else {
      return bad("'samplers' must be an array of sampler names or a string of their letters");
    }
    if (!st) return bad(st.message());
  }
  return std::nullopt;
}

std::optional<ApiError> read_bool(const Json& b, const char* key, bool& out) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean())
    return bad(std::string("'") + key + "' must be a boolean, not " + shown(*it));
  out = it->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> read_stop(const Json& b, std::vector<std::string>& out) {
  auto it = b.find("stop");
  if (it == b.end() || it->is_null()) return std::nullopt;
  std::vector<Json> items;
  if (it->is_string()) {
    items.push_back(*it);
  } else if (it->is_array()) {
    if (it->size() > kMaxStops) {
      return bad("'stop' has " + std::to_string(it->size()) + " strings; the limit is " +
                 std::to_string(kMaxStops));
    }
    items.assign(it->begin(), it->end());
  } else {
    return bad("'stop' must be a string or an array of strings, not " + shown(*it));
  }
  for (const Json& s : items) {
    if (!s.is_string()) return bad("'stop' must hold strings, not " + shown(s));
    const std::string& text = s.get_ref<const std::string&>();
    if (text.size() > kMaxStopBytes) {
      return bad("a 'stop' string has " + std::to_string(text.size()) + " bytes; the limit is " +
                 std::to_string(kMaxStopBytes));
    }
    out.push_back(text);
  }
  return std::nullopt;
}

// The grammar of constrained output: a GBNF `grammar` (llama-server), llama-server's
// `json_schema`, or `response_format` (OpenAI's json_object and json_schema, and llama-server's
// json_object with a `schema`). At most one of them; the JSON ones become GBNF rules. It
// replaces the server's default grammar, which `p` holds on entry.
std::optional<ApiError> read_grammar(const Json& b, GenParams& p) {
  std::string text;
  std::string from;
  if (auto it = b.find("grammar"); it != b.end() && !it->is_null()) {
    if (!it->is_string()) return bad("'grammar' must be a string of GBNF rules, not " + shown(*it));
    text = it->get<std::string>();
    from = "'grammar'";
  }
  const Json* schema = nullptr;
  bool object = false;  // response_format json_object without a schema: any JSON object
  if (auto it = b.find("json_schema"); it != b.end() && !it->is_null()) {
    schema = &*it;
    from = from.empty() ? "'json_schema'" : from + " and 'json_schema'";
  }
  if (auto f = b.find("response_format"); f != b.end() && !f->is_null()) {
    const std::string type = f->is_object() && f->contains("type") && (*f)["type"].is_string()
                                 ? (*f)["type"].get<std::string>()
                                 : "";
    if (type != "text" && type != "json_object" && type != "json_schema") {
      return bad("'response_format': type '" + type + "' is not text, json_object or json_schema");
    }
    if (type == "json_object" || type == "json_schema") {
      from = from.empty() ? "'response_format'" : from + " and 'response_format'";
      const Json* js =
          type == "json_schema" && f->contains("json_schema") ? &(*f)["json_schema"] : &*f;
      if (!js->is_object()) return bad("'response_format.json_schema' must be an object");
      if (auto s = js->find("schema"); s != js->end() && !s->is_null()) {
        schema = &*s;
      } else if (type == "json_schema") {
        return bad("'response_format.json_schema' needs a 'schema'");
      } else {
        object = true;
      }
    }
  }
  if (from.find(" and ") != std::string::npos) {
    return bad(from + " both constrain the output: give one");
  }
  if (object) {
    text = json_object_grammar();
  } else if (schema != nullptr) {
    Result<std::string> g = json_schema_to_gbnf(*schema);
    if (!g.is_ok()) return bad(from + ": " + g.status().message());
    text = std::move(g).value();
  }
  if (from.empty()) return std::nullopt;  // the server's default (--grammar, -j), if any
  if (text.empty() && !object && schema == nullptr) {  // "grammar": "" lifts the default
    p.grammar = nullptr;
    return std::nullopt;
  }
  Result<std::shared_ptr<const Grammar>> g = Grammar::parse(text);
  if (!g.is_ok()) {
    std::string_view m = g.status().message();
    if (m.starts_with("grammar: ")) m.remove_prefix(9);
    return bad(from + ": " + std::string(m));
  }
  p.grammar = std::move(g).value();
  return std::nullopt;
}

std::optional<ApiError> read_prompt(const Json& b, CompletionRequest& out) {
  auto it = b.find("prompt");
  if (it == b.end() || it->is_null()) return bad("'prompt' is required");
  if (it->is_string()) {
    out.prompt_text = it->get<std::string>();
    return std::nullopt;
  }
  if (it->is_array()) {
    // One prompt given as a list of one string, or as token ids.
    if (it->size() == 1 && (*it)[0].is_string()) {
      out.prompt_text = (*it)[0].get<std::string>();
      return std::nullopt;
    }
    out.prompt_is_ids = true;
    for (const Json& t : *it) {
      if (!t.is_number_integer()) {
        return bad("'prompt' must be a string or an array of token ids; found " + shown(t));
      }
      const int64_t id = t.get<int64_t>();
      if (id < 0 || id > INT32_MAX)
        return bad("'prompt' token id " + shown(t) + " is out of range");
      out.prompt_ids.push_back(static_cast<int32_t>(id));
    }
    return std::nullopt;
  }
  return bad("'prompt' must be a string or an array of token ids, not " + shown(*it));
}

std::optional<ApiError> read_string(const Json& b, const char* key, std::string& out) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return std::nullopt;
  if (!it->is_string())
    return bad(std::string("'") + key + "' must be a string, not " + shown(*it));
  out = it->get<std::string>();
  return std::nullopt;
}

std::optional<ApiError> read_infill(const Json& b, CompletionRequest& out) {
  if (auto e = read_string(b, "input_prefix", out.input_prefix)) return e;
  if (auto e = read_string(b, "input_suffix", out.input_suffix)) return e;
  if (auto e = read_string(b, "prompt", out.prompt_text)) return e;
  auto it = b.find("input_extra");
  if (it == b.end() || it->is_null()) return std::nullopt;
  if (!it->is_array()) return bad("'input_extra' must be an array of {filename, text}");
  if (it->size() > kMaxInfillExtra) {
    return bad("'input_extra' has " + std::to_string(it->size()) + " chunks; the limit is " +
               std::to_string(kMaxInfillExtra));
  }
  for (const Json& c : *it) {
    if (!c.is_object()) return bad("'input_extra' entries must be {filename, text} objects");
    InfillChunk chunk;
    if (auto e = read_string(c, "filename", chunk.filename)) return e;
    if (auto e = read_string(c, "text", chunk.text)) return e;
    out.input_extra.push_back(std::move(chunk));
  }
  return std::nullopt;
}

// One bias value: a finite number, or false (the token is banned).
std::optional<ApiError> bias_value(const Json& v, float& out) {
  if (v.is_boolean()) {
    if (v.get<bool>()) return bad("'logit_bias': true is not a bias (false bans a token)");
    out = -INFINITY;
    return std::nullopt;
  }
  if (!v.is_number() || !std::isfinite(v.get<double>()) || std::fabs(v.get<double>()) > 1e30) {
    return bad("'logit_bias' values must be finite numbers or false, not " + shown(v));
  }
  out = static_cast<float>(v.get<double>());
  return std::nullopt;
}

// A key: a token id (a number, or a string of digits as JSON object keys are) or a text whose
// tokens all get the bias.
std::optional<ApiError> bias_targets(const Json& key, const Tokenizer* tok,
                                     std::vector<int32_t>& ids) {
  const int64_t n_vocab = tok ? tok->n_vocab() : INT32_MAX;
  auto id_ok = [&](int64_t id) -> std::optional<ApiError> {
    if (id < 0 || id >= n_vocab) {
      return bad("'logit_bias' token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                 std::to_string(n_vocab) + ")");
    }
    ids.push_back(static_cast<int32_t>(id));
    return std::nullopt;
  };
  if (key.is_number_integer()) return id_ok(key.get<int64_t>());
  if (!key.is_string())
    return bad("'logit_bias' keys must be token ids or strings, not " + shown(key));
  const std::string& text = key.get_ref<const std::string&>();
  const bool digits = !text.empty() && text.size() <= 10 &&
                      text.find_first_not_of("0123456789") == std::string::npos;
  if (digits) return id_ok(std::stoll(text));
  if (tok == nullptr) return bad("'logit_bias': string tokens need the model's tokenizer");
  for (int32_t id : tok->encode(text, false, false)) ids.push_back(id);
  return std::nullopt;
}

std::string piece_of(const Tokenizer& tok, int32_t id) { return tok.token_to_piece(id, true); }

Json bytes_of(const std::string& s) {
  Json a = Json::array();
  for (unsigned char c : s) a.push_back(c);
  return a;
}

Json logprobs_json(const CompletionRequest& req, const std::vector<TokenOut>& tokens,
                   const Tokenizer& tok) {
  if (!req.params.logprobs) return nullptr;
  if (req.endpoint == Endpoint::kChat) {
    Json content = Json::array();
    for (const TokenOut& t : tokens) {
      const std::string piece = piece_of(tok, t.id);
      Json top = Json::array();
      for (const TokenLogprob& alt : t.top) {
        const std::string p = piece_of(tok, alt.token);
        top.push_back({{"token", p}, {"logprob", alt.logprob}, {"bytes", bytes_of(p)}});
      }
      content.push_back({{"token", piece},
                         {"logprob", t.logprob},
                         {"bytes", bytes_of(piece)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  if (native_shape(req.endpoint)) {
    Json probs = Json::array();
    for (const TokenOut& t : tokens) {
      Json top = Json::array();
      for (const TokenLogprob& alt : t.top) {
        const std::string p = piece_of(tok, alt.token);
        top.push_back(
            {{"id", alt.token}, {"token", p}, {"bytes", bytes_of(p)}, {"logprob", alt.logprob}});
      }
      const std::string piece = piece_of(tok, t.id);
      probs.push_back({{"id", t.id},
                       {"token", piece},
                       {"bytes", bytes_of(piece)},
                       {"logprob", t.logprob},
                       {"top_logprobs", top}});
    }
    return probs;
  }
  Json pieces = Json::array(), lps = Json::array(), tops = Json::array();
  for (const TokenOut& t : tokens) {
    pieces.push_back(piece_of(tok, t.id));
    lps.push_back(t.logprob);
    Json top = Json::object();
    for (const TokenLogprob& alt : t.top) top[piece_of(tok, alt.token)] = alt.logprob;
    tops.push_back(top);
  }
  return {{"tokens", pieces}, {"token_logprobs", lps}, {"top_logprobs", tops}};
}

}  // namespace

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string error_body(const ApiError& e) {
  Json j = {
      {"error", {{"message", e.message}, {"type", error_type(e.status)}, {"code", e.status}}}};
  return dump(j);
}

std::optional<ApiError> parse_completion(const Json& b, Endpoint endpoint,
                                         const RequestDefaults& defaults, uint64_t random_seed,
                                         const Tokenizer* tok, CompletionRequest& out) {
  if (!b.is_object()) return bad("the request body must be a JSON object");
  out.endpoint = endpoint;
  out.params = defaults.params;
  if (auto it = b.find("model"); it != b.end() && !it->is_null()) {
    if (!it->is_string()) return bad("'model' must be a string, not " + shown(*it));
    out.model = it->get<std::string>();
  }
  if (endpoint == Endpoint::kChat) {
    if (std::optional<std::string> e = read_chat_request(b, out.chat)) return bad(*e);
    out.reply.reasoning = defaults.reasoning;
    if (auto it = b.find("reasoning_format"); it != b.end() && !it->is_null()) {
      if (!it->is_string()) return bad("'reasoning_format' must be a string");
      Result<ReasoningFormat> f = reasoning_format_from_name(it->get<std::string>());
      if (!f) return bad("'reasoning_format': " + f.status().message());
      out.reply.reasoning = *f;
    }
  } else if (endpoint == Endpoint::kInfill) {
    if (auto e = read_infill(b, out)) return e;
  } else {
    if (auto e = read_prompt(b, out)) return e;
  }

  GenParams& p = out.params;
  SamplerParams& s = p.sampling;
  if (auto e = read_float(b, "temperature", s.temperature)) return e;
  if (auto e = read_float(b, "top_p", s.top_p)) return e;
  if (auto e = read_float(b, "min_p", s.min_p)) return e;
  if (auto e = read_float(b, "repeat_penalty", s.repeat_penalty)) return e;
  if (auto e = read_float(b, "presence_penalty", s.presence_penalty)) return e;
  if (auto e = read_float(b, "frequency_penalty", s.frequency_penalty)) return e;
  if (auto e = read_int32(b, "top_k", -1, INT32_MAX, s.top_k)) return e;
  if (auto e = read_int32(b, "repeat_last_n", -1, kSamplerMaxRepeatLastN, s.repeat_last_n)) {
    return e;
  }
  // -1 (llama-server's "random") or no seed: the server's --seed, else a fresh seed per
  // request, as OpenAI clients expect.
  int64_t v = -1;
  if (auto e = read_int(b, "seed", -1, INT64_MAX, v)) return e;
  if (v >= 0) {
    out.seeded = true;
    s.seed = static_cast<uint64_t>(v);
  } else {
    out.seeded = defaults.seeded;
    s.seed = defaults.seeded ? defaults.params.sampling.seed : random_seed;
  }

  v = p.n_predict;
  const char* length_key = native_shape(endpoint) ? "n_predict" : "max_tokens";
  if (auto e = read_int(b, length_key, -1, INT32_MAX, v)) return e;
  if (endpoint == Endpoint::kChat && b.contains("max_completion_tokens")) {
    if (auto e = read_int(b, "max_completion_tokens", -1, INT32_MAX, v)) return e;
  }
  if (!native_shape(endpoint) && b.contains("n_predict")) {
    if (auto e = read_int(b, "n_predict", -1, INT32_MAX, v)) return e;
  }
  p.n_predict = static_cast<int32_t>(v);

  if (!native_shape(endpoint)) {
    p.n = 1;
    if (auto e = read_int32(b, "n", 1, 1024, p.n)) return e;
  }
  if (auto e = read_stop(b, p.stop)) return e;
  if (auto e = read_bool(b, "ignore_eos", p.ignore_eos)) return e;
  if (auto e = read_bool(b, "cache_prompt", p.cache_prompt)) return e;
  if (auto e = read_bool(b, "stream", out.stream)) return e;
  if (auto e = read_bool(b, "return_tokens", out.return_tokens)) return e;
  v = 0;
  if (auto e = read_int(b, "t_max_predict_ms", 0, INT32_MAX, v)) return e;
  p.t_max_predict_ms = v;
  // llama-server's per-request draft lengths (speculative decoding, where the server has it on).
  if (auto e = read_int32(b, "speculative.n_max", 0, kSpecMaxDraft, p.spec_n_max)) return e;
  if (auto e = read_int32(b, "speculative.n_min", 0, kSpecMaxDraft, p.spec_n_min)) return e;
  if (auto e = read_float(b, "speculative.p_min", p.spec_p_min)) return e;
  if (p.spec_p_min != -1.0f && !(p.spec_p_min >= 0.0f && p.spec_p_min <= 1.0f)) {
    return bad("'speculative.p_min' must be in [0, 1]");
  }
  if (auto it = b.find("response_fields"); it != b.end() && !it->is_null()) {
    if (!it->is_array() || it->size() > 256) {
      return bad("'response_fields' must be an array of at most 256 field names");
    }
    for (const Json& f : *it) {
      if (!f.is_string()) return bad("'response_fields' entries must be strings");
      out.response_fields.push_back(f.get<std::string>());
    }
  }
  if (auto it = b.find("logit_bias"); it != b.end() && !it->is_null()) {
    if (auto e = parse_logit_bias(*it, tok, p.logit_bias)) return e;
  }
  if (auto it = b.find("stream_options"); it != b.end() && !it->is_null()) {
    if (!it->is_object()) return bad("'stream_options' must be an object");
    if (auto e = read_bool(*it, "include_usage", out.include_usage)) return e;
  }

  v = 0;
  if (endpoint == Endpoint::kChat) {
    bool logprobs = false;
    if (auto e = read_bool(b, "logprobs", logprobs)) return e;
    if (auto e = read_int(b, "top_logprobs", 0, kSamplerMaxNProbs, v)) return e;
    if (v > 0 && !logprobs) return bad("'top_logprobs' needs 'logprobs': true");
    p.logprobs = logprobs;
  } else if (endpoint == Endpoint::kCompletions) {
    auto it = b.find("logprobs");
    if (it != b.end() && !it->is_null()) {
      if (auto e = read_int(b, "logprobs", 0, kMaxCompletionLogprobs, v)) return e;
      p.logprobs = true;
    }
  } else {
    if (auto e = read_int(b, "n_probs", 0, kSamplerMaxNProbs, v)) return e;
    p.logprobs = v > 0;
  }
  s.n_probs = static_cast<int32_t>(v);

  if (auto e = read_sampler_chain(b, s)) return e;
  if (Status st = s.validate(); !st) return bad(st.message());
  // DRY's breakers as tokens: a pass over the vocabulary per breaker, so made only where DRY
  // is on and its breakers are not the ones already made (the server's defaults).
  if (s.dry_active() && s.dry_breakers == nullptr && tok != nullptr) {
    Result<std::shared_ptr<const DryBreakers>> made = dry_breakers(s.dry_sequence_breakers, *tok);
    if (!made) return bad(made.status().message());
    s.dry_breakers = std::move(*made);
  }
  if (auto e = read_grammar(b, p)) return e;
  return std::nullopt;
}

std::optional<ApiError> parse_logit_bias(const Json& value, const Tokenizer* tok,
                                         std::vector<TokenBias>& out) {
  std::vector<std::pair<const Json*, const Json*>> entries;  // key, bias
  std::vector<Json> keys;  // object keys as JSON strings, kept alive for `entries`
  if (value.is_object()) {
    keys.reserve(value.size());
    for (auto it = value.begin(); it != value.end(); ++it) keys.emplace_back(it.key());
    size_t i = 0;
    for (auto it = value.begin(); it != value.end(); ++it, ++i) entries.push_back({&keys[i], &*it});
  } else if (value.is_array()) {
    for (const Json& pair : value) {
      if (!pair.is_array() || pair.size() != 2) {
        return bad("'logit_bias' array entries must be [token, bias] pairs, not " + shown(pair));
      }
      entries.push_back({&pair[0], &pair[1]});
    }
  } else {
    return bad("'logit_bias' must be an object or an array of [token, bias] pairs");
  }
  if (entries.size() > kMaxLogitBias) {
    return bad("'logit_bias' has " + std::to_string(entries.size()) + " entries; the limit is " +
               std::to_string(kMaxLogitBias));
  }
  for (const auto& [key, bias] : entries) {
    float b = 0;
    if (auto e = bias_value(*bias, b)) return e;
    std::vector<int32_t> ids;
    if (auto e = bias_targets(*key, tok, ids)) return e;
    for (int32_t id : ids) out.push_back({id, b});
    if (out.size() > kMaxLogitBias) {
      return bad("'logit_bias' names more than " + std::to_string(kMaxLogitBias) + " tokens");
    }
  }
  return std::nullopt;
}

Json generation_settings_json(const GenParams& p, bool stream, int32_t n_ctx,
                              const std::string& model) {
  const SamplerParams& s = p.sampling;
  Json bias = Json::array();
  for (const TokenBias& b : p.logit_bias) {
    bias.push_back({{"token", b.token}, {"bias", std::isinf(b.bias) ? Json(false) : Json(b.bias)}});
  }
  return {{"n_ctx", n_ctx},
          {"model", model},
          {"n_predict", p.n_predict},
          {"seed", s.seed},
          {"temperature", s.temperature},
          {"dynatemp_range", s.chain.dynatemp_range},
          {"dynatemp_exponent", s.chain.dynatemp_exponent},
          {"top_k", s.top_k},
          {"top_p", s.top_p},
          {"min_p", s.min_p},
          {"top_n_sigma", s.chain.top_n_sigma},
          {"xtc_probability", s.chain.xtc_probability},
          {"xtc_threshold", s.chain.xtc_threshold},
          {"typical_p", s.chain.typical_p},
          {"repeat_last_n", s.repeat_last_n},
          {"repeat_penalty", s.repeat_penalty},
          {"presence_penalty", s.presence_penalty},
          {"frequency_penalty", s.frequency_penalty},
          {"dry_multiplier", s.dry_multiplier},
          {"dry_base", s.dry_base},
          {"dry_allowed_length", s.dry_allowed_length},
          {"dry_penalty_last_n", s.dry_penalty_last_n},
          {"dry_sequence_breakers", s.dry_sequence_breakers},
          {"mirostat", s.chain.mirostat},
          {"mirostat_tau", s.chain.mirostat_tau},
          {"mirostat_eta", s.chain.mirostat_eta},
          {"min_keep", s.chain.min_keep},
          {"adaptive_target", s.chain.adaptive_target},
          {"adaptive_decay", s.chain.adaptive_decay},
          {"stop", p.stop},
          {"n_probs", s.n_probs},
          {"ignore_eos", p.ignore_eos},
          {"cache_prompt", p.cache_prompt},
          {"stream", stream},
          {"logit_bias", bias},
          {"samplers", sampler_order_names(s)}};
}

Json timings_json(int32_t n_prompt, double prompt_ms, int32_t n_predicted, double predicted_ms) {
  auto per_token = [](double ms, int32_t n) { return n > 0 ? ms / n : 0.0; };
  auto per_second = [](double ms, int32_t n) { return ms > 0 ? 1e3 * n / ms : 0.0; };
  return {{"prompt_n", n_prompt},
          {"prompt_ms", prompt_ms},
          {"prompt_per_token_ms", per_token(prompt_ms, n_prompt)},
          {"prompt_per_second", per_second(prompt_ms, n_prompt)},
          {"predicted_n", n_predicted},
          {"predicted_ms", predicted_ms},
          {"predicted_per_token_ms", per_token(predicted_ms, n_predicted)},
          {"predicted_per_second", per_second(predicted_ms, n_predicted)}};
}

Json usage_json(const ResponseMeta& meta, int32_t n_generated) {
  return {{"prompt_tokens", meta.n_prompt},
          {"completion_tokens", n_generated},
          {"total_tokens", meta.n_prompt + n_generated},
          {"prompt_tokens_details", {{"cached_tokens", meta.n_cached}}}};
}

namespace {

// llama-server's response_fields: only the named fields; "a/b" takes field b of object a and
// puts it at the top under the name "a/b". A missing field is left out.
Json select_fields(const Json& j, const std::vector<std::string>& fields) {
  Json out = Json::object();
  for (const std::string& path : fields) {
    const Json* at = &j;
    size_t start = 0;
    while (at != nullptr) {
      const size_t slash = path.find('/', start);
      const std::string key = path.substr(start, slash - start);
      auto it = at->is_object() ? at->find(key) : at->end();
      at = it == at->end() ? nullptr : &*it;
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
    if (at != nullptr) out[path] = *at;
  }
  return out;
}

}  // namespace

Json response_json(const CompletionRequest& req, const ResponseMeta& meta,
                   const std::vector<ChoiceResult>& choices, const Tokenizer& tok) {
  int32_t n_generated = 0;
  for (const ChoiceResult& c : choices) n_generated += c.n_generated;
  const int32_t n_prompt_evaluated = meta.n_prompt - meta.n_cached;
  double prompt_ms = 0, predicted_ms = 0;
  for (const ChoiceResult& c : choices) {
    prompt_ms = std::max(prompt_ms, c.prompt_ms);
    predicted_ms = std::max(predicted_ms, c.predicted_ms);
  }
  const Json timings = timings_json(n_prompt_evaluated, prompt_ms, n_generated, predicted_ms);
  if (native_shape(req.endpoint)) {
    const ChoiceResult& c = choices.at(0);
    Json j = {{"content", c.text},
              {"tokens", req.return_tokens ? Json(c.ids) : Json::array()},
              {"id_slot", -1},
              {"model", meta.model},
              {"stop", true},
              {"finish_reason", c.finish_reason},
              {"stop_type", c.stop_type},
              {"stopping_word", c.stopping_word},
              {"stopped_eos", c.stop_type == "eos"},
              {"stopped_word", c.stop_type == "word"},
              {"stopped_limit", c.stop_type == "limit"},
              {"tokens_predicted", c.n_generated},
              {"tokens_evaluated", meta.n_prompt},
              {"tokens_cached", meta.n_cached},
              {"truncated", c.truncated},
              {"has_new_line", c.text.find('\n') != std::string::npos},
              {"prompt", meta.prompt_text},
              {"generation_settings",
               generation_settings_json(req.params, req.stream, meta.n_ctx, meta.model)},
              {"timings", timings}};
    if (req.params.logprobs) j["completion_probabilities"] = logprobs_json(req, c.tokens, tok);
    return req.response_fields.empty() ? j : select_fields(j, req.response_fields);
  }
  Json out_choices = Json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    Json choice = {{"index", i},
                   {"logprobs", logprobs_json(req, c.tokens, tok)},
                   {"finish_reason", c.finish_reason}};
    if (req.endpoint == Endpoint::kChat) {
      auto [message, finish] =
          chat_message_json(req, c.text, c.finish_reason, meta.id + "-" + std::to_string(i) + "-");
      choice["message"] = std::move(message);
      choice["finish_reason"] = finish;
    } else {
      choice["text"] = c.text;
    }
    out_choices.push_back(std::move(choice));
  }
  return {{"id", meta.id},
          {"object", req.endpoint == Endpoint::kChat ? "chat.completion" : "text_completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", out_choices},
          {"system_fingerprint", kSystemFingerprint},
          {"usage", usage_json(meta, n_generated)},
          {"timings", timings}};
}

namespace {

Json tool_calls_json(const std::vector<ToolCall>& calls, size_t first_index, bool with_index) {
  Json out = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    Json call = {{"id", calls[i].id},
                 {"type", "function"},
                 {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (with_index) call["index"] = first_index + i;
    out.push_back(std::move(call));
  }
  return out;
}

}  // namespace

std::pair<Json, std::string> chat_message_json(const CompletionRequest& req,
                                               const std::string& text,
                                               const std::string& finish_reason,
                                               const std::string& call_id_prefix) {
  ParsedReply r = parse_reply(text, req.reply, false);
  tool_call_ids_fill(r.tool_calls, call_id_prefix);
  Json m = {{"role", "assistant"}};
  // An assistant message that only calls tools has a null content, as OpenAI sends it.
  m["content"] = r.content.empty() && !r.tool_calls.empty() ? Json(nullptr) : Json(r.content);
  if (!r.reasoning.empty()) m["reasoning_content"] = r.reasoning;
  std::string finish = finish_reason;
  if (!r.tool_calls.empty()) {
    m["tool_calls"] = tool_calls_json(r.tool_calls, 0, false);
    if (finish == "stop") finish = "tool_calls";
  }
  return {std::move(m), finish};
}

Json chat_delta_chunk(const CompletionRequest& req, const ResponseMeta& meta, int32_t index,
                      const ReplyDelta& d, const std::vector<TokenOut>& tokens,
                      const std::string& finish_reason, bool first, const Tokenizer& tok) {
  Json delta = Json::object();
  if (first) delta["role"] = "assistant";
  if (!d.content.empty() || (first && finish_reason.empty() && d.empty())) {
    delta["content"] = d.content;
  }
  if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
  if (!d.tool_calls.empty())
    delta["tool_calls"] = tool_calls_json(d.tool_calls, d.first_tool_index, true);
  Json choice = {{"index", index},
                 {"delta", std::move(delta)},
                 {"finish_reason", finish_reason.empty() ? Json(nullptr) : Json(finish_reason)},
                 {"logprobs", tokens.empty() ? Json(nullptr) : logprobs_json(req, tokens, tok)}};
  return {{"id", meta.id},
          {"object", "chat.completion.chunk"},
          {"created", meta.created},
          {"model", meta.model},
          {"system_fingerprint", kSystemFingerprint},
          {"choices", Json::array({std::move(choice)})}};
}

Json chunk_json(const CompletionRequest& req, const ResponseMeta& meta, int32_t index,
                const std::string& text, const std::vector<TokenOut>& tokens,
                const std::vector<int32_t>& ids, const std::string& finish_reason, bool first,
                const Tokenizer& tok) {
  const Json finish = finish_reason.empty() ? Json(nullptr) : Json(finish_reason);
  if (native_shape(req.endpoint)) {
    Json j = {{"content", text}, {"tokens", ids}, {"stop", false}};
    if (req.params.logprobs && !tokens.empty()) {
      j["completion_probabilities"] = logprobs_json(req, tokens, tok);
    }
    return j;
  }
  Json choice = {{"index", index}, {"finish_reason", finish}};
  if (req.endpoint == Endpoint::kChat) {
    Json delta = Json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && finish_reason.empty())) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = tokens.empty() ? Json(nullptr) : logprobs_json(req, tokens, tok);
  return {{"id", meta.id},
          {"object", req.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"system_fingerprint", kSystemFingerprint},
          {"choices", Json::array({choice})}};
}

}  // namespace strata::server
