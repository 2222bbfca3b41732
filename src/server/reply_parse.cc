#include "server/reply_parse.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <optional>

#include "core/utf8.h"

namespace strata::server {
namespace {

using nlohmann::json;

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

size_t skip_spaces(std::string_view s, size_t pos) {
  while (pos < s.size() && is_space(s[pos])) ++pos;
  return pos;
}

bool starts_with_at(std::string_view s, size_t pos, std::string_view lit) {
  return pos <= s.size() && s.substr(pos).substr(0, lit.size()) == lit;
}

// The length of the longest suffix of s that is a proper prefix of one of the markers: text
// that a marker may still turn out to start, held back while streaming.
size_t marker_tail(std::string_view s, std::initializer_list<std::string_view> markers) {
  size_t best = 0;
  for (std::string_view m : markers) {
    for (size_t n = std::min(s.size(), m.size() - 1); n > best; --n) {
      if (s.substr(s.size() - n) == m.substr(0, n)) {
        best = n;
        break;
      }
    }
  }
  return best;
}

// Where the JSON object or array starting at s[pos] ends (one past its closing bracket), or
// npos when the text ends first. Strings and escapes are skipped; the value is validated by the
// JSON parser afterwards, this only finds its extent.
size_t json_end(std::string_view s, size_t pos) {
  if (pos >= s.size() || (s[pos] != '{' && s[pos] != '[')) return std::string_view::npos;
  int depth = 0;
  bool in_string = false;
  for (size_t i = pos; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

std::optional<json> parse_json(std::string_view s) {
  json j = json::parse(s.begin(), s.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// Arguments as JSON text: an object is dumped compactly; a string that holds JSON (some models
// write the arguments stringified) is used as it is.
std::optional<std::string> arguments_text(const json& args) {
  if (args.is_object()) return args.dump();
  if (args.is_string()) {
    const std::string s = args.get<std::string>();
    if (std::optional<json> inner = parse_json(s); inner && inner->is_object()) return s;
  }
  return std::nullopt;
}

// {"name": ..., <args_key>: {...}} (and "id" when present) as a call.
std::optional<ToolCall> call_from_json(const json& j,
                                       std::initializer_list<const char*> args_keys) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  ToolCall call;
  call.name = j["name"].get<std::string>();
  bool found = false;
  for (const char* key : args_keys) {
    if (!j.contains(key)) continue;
    std::optional<std::string> args = arguments_text(j[key]);
    if (!args) return std::nullopt;
    call.arguments = *args;
    found = true;
    break;
  }
  if (!found) call.arguments = "{}";
  if (j.contains("id") && j["id"].is_string()) call.id = j["id"].get<std::string>();
  return call;
}

// How a format's parser leaves things: content and calls appended to `out`; `stop` at the
// point where, streaming, nothing more can be decided. `o`: the request's parse options.
struct Cursor {
  std::string_view s;
  bool partial;
  ParsedReply& out;
  const ReplyParseOptions& o;
};

// Text before the first marker as content; returns the marker's position or npos (the text,
// minus a held-back tail when streaming, went to the content).
size_t content_until(Cursor& c, size_t pos, std::string_view marker,
                     std::initializer_list<std::string_view> hold_markers) {
  const size_t at = c.s.find(marker, pos);
  if (at != std::string_view::npos) {
    c.out.content.append(c.s.substr(pos, at - pos));
    return at;
  }
  std::string_view rest = c.s.substr(pos);
  if (c.partial) rest.remove_suffix(marker_tail(rest, hold_markers));
  c.out.content.append(rest);
  return std::string_view::npos;
}

// Hermes / Qwen: <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, repeated.
void parse_hermes(Cursor c) {
  constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
  size_t pos = 0;
  while (true) {
    const size_t at = content_until(c, pos, kOpen, {kOpen});
    if (at == std::string_view::npos) return;
    const size_t j = skip_spaces(c.s, at + kOpen.size());
    if (j >= c.s.size()) {
      if (!c.partial) c.out.content.append(c.s.substr(at));
      return;
    }
    const size_t e = json_end(c.s, j);
    if (e == std::string_view::npos) {
      if (!c.partial) c.out.content.append(c.s.substr(at));
      return;
    }
    std::optional<json> j_call = parse_json(c.s.substr(j, e - j));
    std::optional<ToolCall> call =
        j_call ? call_from_json(*j_call, {"arguments", "parameters"}) : std::nullopt;
    if (!call) {  // not a call after all: the text is content
      c.out.content.append(c.s.substr(at, e - at));
      pos = e;
      continue;
    }
    size_t k = skip_spaces(c.s, e);
    if (starts_with_at(c.s, k, kClose)) {
      k += kClose.size();
    } else if (c.partial && kClose.substr(0, c.s.size() - k) == c.s.substr(k)) {
      return;  // the close tag may be arriving
    }
    c.out.tool_calls.push_back(std::move(*call));
    pos = skip_spaces(c.s, k);
    if (pos >= c.s.size()) return;
  }
}

// Functionary v3.1: <function=name>{...}</function>, repeated.
void parse_functionary_v31(Cursor c) {
  constexpr std::string_view kOpen = "<function=", kClose = "</function>";
  size_t pos = 0;
  while (true) {
    const size_t at = content_until(c, pos, kOpen, {kOpen});
    if (at == std::string_view::npos) return;
    const size_t name_end = c.s.find('>', at + kOpen.size());
    if (name_end == std::string_view::npos) {
      if (!c.partial) c.out.content.append(c.s.substr(at));
      return;
    }
    const size_t j = skip_spaces(c.s, name_end + 1);
    const size_t e = json_end(c.s, j);
    if (e == std::string_view::npos) {
      if (!c.partial) c.out.content.append(c.s.substr(at));
      return;
    }
    std::optional<json> args = parse_json(c.s.substr(j, e - j));
    std::optional<std::string> text = args ? arguments_text(*args) : std::nullopt;
    if (!text) {
      c.out.content.append(c.s.substr(at, e - at));
      pos = e;
      continue;
    }
    size_t k = skip_spaces(c.s, e);
    if (starts_with_at(c.s, k, kClose)) {
      k += kClose.size();
    } else if (c.partial && kClose.substr(0, c.s.size() - k) == c.s.substr(k)) {
      return;
    }
    c.out.tool_calls.push_back(
        {"", std::string(c.s.substr(at + kOpen.size(), name_end - at - kOpen.size())), *text});
    pos = skip_spaces(c.s, k);
    if (pos >= c.s.size()) return;
  }
}

// Mistral: [TOOL_CALLS][{"name": ..., "arguments": {...}, "id": ...}, ...], or the newer
// [TOOL_CALLS]name[ARGS]{...} once per call.
void parse_mistral(Cursor c) {
  constexpr std::string_view kOpen = "[TOOL_CALLS]", kArgs = "[ARGS]";
  size_t pos = 0;
  while (true) {
    const size_t at = content_until(c, pos, kOpen, {kOpen});
    if (at == std::string_view::npos) return;
    const size_t j = skip_spaces(c.s, at + kOpen.size());
    if (j >= c.s.size()) {
      if (!c.partial) c.out.content.append(c.s.substr(at));
      return;
    }
    if (c.s[j] == '[') {
      const size_t e = json_end(c.s, j);
      if (e == std::string_view::npos) {
        if (!c.partial) c.out.content.append(c.s.substr(at));
        return;
      }
      std::optional<json> arr = parse_json(c.s.substr(j, e - j));
      std::vector<ToolCall> calls;
      bool ok = arr && arr->is_array();
      if (ok) {
        for (const json& item : *arr) {
          std::optional<ToolCall> call = call_from_json(item, {"arguments", "parameters"});
          if (!call) {
            ok = false;
            break;
          }
          calls.push_back(std::move(*call));
        }
      }
      if (!ok) {
        c.out.content.append(c.s.substr(at, e - at));
      } else {
        for (ToolCall& call : calls) c.out.tool_calls.push_back(std::move(call));
      }
      pos = skip_spaces(c.s, e);
    } else {
      const size_t args = c.s.find(kArgs, j);
      if (args == std::string_view::npos) {
        if (!c.partial) c.out.content.append(c.s.substr(at));
        return;
      }
      const size_t k = skip_spaces(c.s, args + kArgs.size());
      const size_t e = json_end(c.s, k);
      if (e == std::string_view::npos) {
        if (!c.partial) c.out.content.append(c.s.substr(at));
        return;
      }
      std::optional<json> a = parse_json(c.s.substr(k, e - k));
      std::optional<std::string> text = a ? arguments_text(*a) : std::nullopt;
      if (!text) {
        c.out.content.append(c.s.substr(at, e - at));
      } else {
        c.out.tool_calls.push_back({"", std::string(c.s.substr(j, args - j)), *text});
      }
      pos = skip_spaces(c.s, e);
    }
    if (pos >= c.s.size()) return;
  }
}

// DeepSeek R1: <｜tool▁calls▁begin｜> then, per call,
// <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜>,
// then <｜tool▁calls▁end｜>.
void parse_deepseek_r1(Cursor c) {
  constexpr std::string_view kBegin = "<｜tool▁calls▁begin｜>";
  constexpr std::string_view kEnd = "<｜tool▁calls▁end｜>";
  constexpr std::string_view kCallBegin = "<｜tool▁call▁begin｜>";
  constexpr std::string_view kSep = "<｜tool▁sep｜>";
  constexpr std::string_view kCallEnd = "<｜tool▁call▁end｜>";
  const size_t at = content_until(c, 0, kBegin, {kBegin});
  if (at == std::string_view::npos) return;
  size_t pos = at + kBegin.size();
  // Where the text not yet taken as calls starts: a call that cannot be read leaves it, as
  // written, in the content (while partial, it may still be arriving: held back).
  size_t kept = at;
  const auto keep_rest = [&] {
    if (!c.partial) c.out.content.append(c.s.substr(kept));
  };
  while (true) {
    pos = skip_spaces(c.s, pos);
    if (starts_with_at(c.s, pos, kEnd)) {
      pos = skip_spaces(c.s, pos + kEnd.size());
      c.out.content.append(c.s.substr(pos));  // text after the block
      return;
    }
    if (starts_with_at(c.s, pos, kCallBegin)) pos += kCallBegin.size();
    const size_t sep = c.s.find(kSep, pos);
    const size_t nl = sep == std::string_view::npos ? sep : c.s.find('\n', sep);
    if (nl == std::string_view::npos) return keep_rest();
    std::string name(c.s.substr(sep + kSep.size(), nl - sep - kSep.size()));
    size_t j = nl + 1;
    if (starts_with_at(c.s, j, "```json")) j = skip_spaces(c.s, j + 7);
    const size_t e = json_end(c.s, j);
    if (e == std::string_view::npos) return keep_rest();
    std::optional<json> a = parse_json(c.s.substr(j, e - j));
    std::optional<std::string> text = a ? arguments_text(*a) : std::nullopt;
    if (!text) return keep_rest();
    size_t k = skip_spaces(c.s, e);
    if (starts_with_at(c.s, k, "```")) k = skip_spaces(c.s, k + 3);
    if (starts_with_at(c.s, k, kCallEnd)) {
      k += kCallEnd.size();
    } else if (c.partial) {
      return;  // the call's end may be arriving
    }
    c.out.tool_calls.push_back({"", std::move(name), *text});
    pos = k;
    kept = k;
    if (skip_spaces(c.s, pos) >= c.s.size()) return;
  }
}

// Functionary v3.2: the generation prompt ends with ">>>", so the reply is "name\n" + JSON
// arguments, or "all\n" + text, the next one after another ">>>".
void parse_functionary_v32(Cursor c) {
  size_t pos = 0;
  if (starts_with_at(c.s, 0, ">>>")) pos = 3;
  while (pos < c.s.size()) {
    const size_t nl = c.s.find('\n', pos);
    if (nl == std::string_view::npos) {
      if (!c.partial) c.out.content.append(c.s.substr(pos));
      return;
    }
    const std::string_view name = c.s.substr(pos, nl - pos);
    const bool word = !name.empty() && std::all_of(name.begin(), name.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.';
    });
    if (!word) {  // not the format: all of it is content
      c.out.content.append(c.s.substr(pos));
      return;
    }
    if (name == "all") {
      const size_t next = c.s.find(">>>", nl + 1);
      std::string_view text =
          c.s.substr(nl + 1, next == std::string_view::npos ? next : next - nl - 1);
      if (next == std::string_view::npos && c.partial)
        text.remove_suffix(marker_tail(text, {">>>"}));
      c.out.content.append(text);
      if (next == std::string_view::npos) return;
      pos = next + 3;
      continue;
    }
    const size_t j = skip_spaces(c.s, nl + 1);
    const size_t e = json_end(c.s, j);
    if (e == std::string_view::npos) {
      if (!c.partial) c.out.content.append(c.s.substr(pos));
      return;
    }
    std::optional<json> a = parse_json(c.s.substr(j, e - j));
    std::optional<std::string> text = a ? arguments_text(*a) : std::nullopt;
    if (!text) {
      c.out.content.append(c.s.substr(pos));
      return;
    }
    c.out.tool_calls.push_back({"", std::string(name), *text});
    pos = skip_spaces(c.s, e);
    if (starts_with_at(c.s, pos, ">>>")) pos += 3;
  }
}

// Llama 3.x: the reply is one or more {"name": ..., "parameters": {...}} objects (separated by
// ';' or spaces), or content.
void parse_llama3(Cursor c) {
  const size_t first = skip_spaces(c.s, 0);
  if (first >= c.s.size()) {
    if (!c.partial) c.out.content.append(c.s);
    return;  // may become a call
  }
  if (c.s[first] != '{') {
    c.out.content.append(c.s);
    return;
  }
  std::vector<ToolCall> calls;
  size_t pos = first;
  while (pos < c.s.size() && c.s[pos] == '{') {
    const size_t e = json_end(c.s, pos);
    if (e == std::string_view::npos) {
      if (!c.partial) c.out.content.append(c.s);
      return;
    }
    std::optional<json> j = parse_json(c.s.substr(pos, e - pos));
    std::optional<ToolCall> call =
        j ? call_from_json(*j, {"parameters", "arguments"}) : std::nullopt;
    if (!call || !(j->contains("parameters") || j->contains("arguments"))) {
      c.out.content.append(c.s);  // JSON, but not a call
      return;
    }
    calls.push_back(std::move(*call));
    pos = skip_spaces(c.s, e);
    if (pos < c.s.size() && c.s[pos] == ';') pos = skip_spaces(c.s, pos + 1);
  }
  if (pos < c.s.size()) {  // text after calls: the whole reply was content
    c.out.content.append(c.s);
    return;
  }
  // Until the reply ends, text may still follow the calls and make it all content: a call
  // sent while streaming could not be taken back.
  if (c.partial) return;
  for (ToolCall& call : calls) c.out.tool_calls.push_back(std::move(call));
}

// The first of the harmony markers (which all start with '<') at or after pos, or npos and an
// empty marker. One pass that stops there: searching for each marker in turn would read to the
// end of the text for every one that is absent, once per message and per streamed token.
struct MarkerAt {
  size_t at = std::string_view::npos;
  std::string_view marker;
};

MarkerAt harmony_marker_find(std::string_view s, size_t pos,
                             std::initializer_list<std::string_view> markers) {
  for (size_t i = s.find('<', pos); i != std::string_view::npos; i = s.find('<', i + 1)) {
    for (std::string_view m : markers) {
      if (starts_with_at(s, i, m)) return {i, m};
    }
  }
  return {};
}

// What a harmony header names: the channel after <|channel|> and the recipient after " to="
// (which comes after the role or after the channel).
struct HarmonyHeader {
  std::string_view channel;
  std::string_view recipient;
};

HarmonyHeader harmony_header(std::string_view h) {
  // A name runs to a space or the next special token (<|constrain|>, <|channel|>).
  auto word_at = [&](size_t b) {
    size_t e = b;
    while (e < h.size() && !is_space(h[e]) && h[e] != '<') ++e;
    return h.substr(b, e - b);
  };
  constexpr std::string_view kChannel = "<|channel|>", kTo = " to=";
  HarmonyHeader out;
  if (const size_t c = h.find(kChannel); c != std::string_view::npos) {
    out.channel = word_at(c + kChannel.size());
  }
  if (const size_t t = h.find(kTo); t != std::string_view::npos) {
    out.recipient = word_at(t + kTo.size());
  }
  return out;
}

// gpt-oss (OpenAI's harmony format): a run of messages, each
//   [<|start|>assistant[ to=R]]<|channel|>CHANNEL[ to=R][ <|constrain|>json]<|message|>BODY
// closed by <|end|>, <|return|> or <|call|>, or by the end of the text (the end-of-generation
// token is not always kept). analysis is reasoning; a message to functions.NAME is a call whose
// arguments are BODY as written; any other message's BODY is content. Text outside messages,
// and messages that cannot be read as the format says (built-in tools such as browser.search,
// calls not asked for, arguments that are not a JSON object), stay content as written.
void parse_gpt_oss(Cursor c) {
  const ReplyParseOptions& o = c.o;
  constexpr std::string_view kStart = "<|start|>", kChannel = "<|channel|>";
  constexpr std::string_view kMessage = "<|message|>", kEnd = "<|end|>", kReturn = "<|return|>",
                             kCall = "<|call|>", kFunctions = "functions.";
  size_t pos = 0;
  while (pos < c.s.size()) {
    const MarkerAt open = harmony_marker_find(c.s, pos, {kStart, kChannel});
    if (open.at == std::string_view::npos) {
      std::string_view rest = c.s.substr(pos);
      if (c.partial) rest.remove_suffix(marker_tail(rest, {kStart, kChannel}));
      c.out.content.append(rest);
      return;
    }
    const size_t at = open.at;
    c.out.content.append(c.s.substr(pos, at - pos));
    // A header holds no other message's start or end: text that does was not a header.
    const MarkerAt header_end =
        harmony_marker_find(c.s, at + open.marker.size(), {kMessage, kStart, kEnd, kReturn, kCall});
    if (header_end.at == std::string_view::npos) {
      if (!c.partial) c.out.content.append(c.s.substr(at));
      return;  // streaming: the header may still be arriving
    }
    if (header_end.marker != kMessage) {
      c.out.content.append(c.s.substr(at, header_end.at - at));
      pos = header_end.at;
      continue;
    }
    const size_t msg = header_end.at;
    const HarmonyHeader h = harmony_header(c.s.substr(at, msg - at));
    const size_t body_at = msg + kMessage.size();
    const MarkerAt close = harmony_marker_find(c.s, body_at, {kEnd, kReturn, kCall});
    const bool closed = close.at != std::string_view::npos;
    std::string_view body = c.s.substr(body_at, closed ? close.at - body_at : close.at);
    if (!closed && c.partial) body.remove_suffix(marker_tail(body, {kEnd, kReturn, kCall}));
    const size_t raw_end = closed ? close.at + close.marker.size() : body_at + body.size();
    const std::string_view raw = c.s.substr(at, raw_end - at);

    if (!h.recipient.empty()) {
      const bool call = o.parse_tool_calls && h.recipient.starts_with(kFunctions) &&
                        h.recipient.size() > kFunctions.size();
      if (call && !closed && c.partial) return;  // a call is sent whole, once it has ended
      std::optional<json> args = call ? parse_json(body) : std::nullopt;
      if (args && args->is_object()) {
        c.out.tool_calls.push_back(
            {"", std::string(h.recipient.substr(kFunctions.size())), std::string(body)});
      } else {
        c.out.content.append(raw);
      }
    } else if (h.channel == "analysis") {
      // As with <think>: reasoning, or the raw message kept in the content (none, legacy).
      if (o.reasoning != ReasoningFormat::kNone) c.out.reasoning.append(body);
      if (o.reasoning == ReasoningFormat::kNone ||
          o.reasoning == ReasoningFormat::kDeepseekLegacy) {
        c.out.content.append(raw);
      }
    } else {
      c.out.content.append(body);
    }
    if (!closed) return;
    pos = raw_end;
  }
}

// <think>...</think> at the start (or from the start when the prompt opened it). Returns the
// text after it; appends the reasoning (and, for deepseek-legacy, the raw block to the
// content). Streaming, a possible start of "<think>" or "</think>" and trailing spaces are held.
std::string_view split_reasoning(std::string_view text, const ReplyParseOptions& o, bool partial,
                                 ParsedReply& out, bool* held) {
  *held = false;
  if (o.reasoning == ReasoningFormat::kNone) return text;
  constexpr std::string_view kOpen = "<think>", kClose = "</think>";
  size_t start = 0;
  if (!o.thinking_forced_open) {
    const size_t ws = skip_spaces(text, 0);
    if (starts_with_at(text, ws, kOpen)) {
      start = ws + kOpen.size();
    } else {
      const std::string_view head = text.substr(ws);
      if (partial && kOpen.substr(0, head.size()) == head) {
        *held = true;  // "<thi" so far, or only spaces
        return {};
      }
      return text;
    }
  }
  const size_t close = text.find(kClose, start);
  std::string_view reasoning =
      text.substr(start, close == std::string_view::npos ? close : close - start);
  size_t lead = 0;
  while (lead < reasoning.size() && is_space(reasoning[lead])) ++lead;
  reasoning.remove_prefix(lead);
  std::string_view rest;
  if (close == std::string_view::npos) {
    if (partial) {
      reasoning.remove_suffix(marker_tail(reasoning, {kClose}));
      *held = true;
    }
  } else {
    rest = text.substr(skip_spaces(text, close + kClose.size()));
  }
  if (close != std::string_view::npos || partial) {
    // Trailing spaces: dropped at the end of the block, held while it may go on.
    while (!reasoning.empty() && is_space(reasoning.back())) reasoning.remove_suffix(1);
  }
  out.reasoning.append(reasoning);
  if (o.reasoning == ReasoningFormat::kDeepseekLegacy) {
    const size_t end = close == std::string_view::npos ? text.size() : close + kClose.size();
    std::string_view raw = text.substr(0, end);
    if (partial && close == std::string_view::npos) raw.remove_suffix(marker_tail(raw, {kClose}));
    out.content.append(raw);
  }
  return rest;
}

void parse_none(Cursor c) { c.out.content.append(c.s); }

// A format: its name, its parser, and what its syntax holds besides calls.
struct Format {
  ToolCallFormat format;
  std::string_view name;
  void (*parse)(Cursor c);
  // Its reasoning is part of its own syntax (gpt-oss's analysis channel), not a <think> block.
  bool own_reasoning = false;
  // Its syntax is more than calls (gpt-oss's channels): parsed even when calls are not read
  // (the parser then leaves them as text itself); otherwise such a reply is all content.
  bool beyond_calls = false;
};

constexpr Format kFormats[] = {
    {ToolCallFormat::kNone, "none", parse_none},
    {ToolCallFormat::kLlama3, "llama3", parse_llama3},
    {ToolCallFormat::kHermes, "hermes", parse_hermes},
    {ToolCallFormat::kMistral, "mistral", parse_mistral},
    {ToolCallFormat::kFunctionaryV32, "functionary-v3.2", parse_functionary_v32},
    {ToolCallFormat::kFunctionaryV31, "functionary-v3.1", parse_functionary_v31},
    {ToolCallFormat::kDeepSeekR1, "deepseek-r1", parse_deepseek_r1},
    {.format = ToolCallFormat::kGptOss,
     .name = "gpt-oss",
     .parse = parse_gpt_oss,
     .own_reasoning = true,
     .beyond_calls = true},
};

const Format& format_of(ToolCallFormat f) {
  for (const Format& row : kFormats) {
    if (row.format == f) return row;
  }
  return kFormats[0];
}

}  // namespace

std::string_view tool_call_format_name(ToolCallFormat f) {
  const Format& row = format_of(f);
  return row.format == f ? row.name : "?";
}

ToolCallFormat tool_call_format_detect(std::string_view t) {
  auto has = [&](std::string_view s) { return t.find(s) != std::string_view::npos; };
  struct Rule {
    std::string_view needle;
    ToolCallFormat format;
    std::string_view also = {};  // a second needle the template must hold too, if any
  };
  // First match wins: the more specific syntaxes before the general ones.
  constexpr Rule kRules[] = {
      {"<|channel|>", ToolCallFormat::kGptOss, "<|message|>"},
      {"<｜tool▁calls▁begin｜>", ToolCallFormat::kDeepSeekR1},
      {"[TOOL_CALLS]", ToolCallFormat::kMistral},
      {">>>all", ToolCallFormat::kFunctionaryV32},
      {"<function=", ToolCallFormat::kFunctionaryV31},
      {"<tool_call>", ToolCallFormat::kHermes},
      {"<|start_header_id|>ipython", ToolCallFormat::kLlama3},
      {"<|python_tag|>", ToolCallFormat::kLlama3},
      {"ipython", ToolCallFormat::kLlama3},
  };
  for (const Rule& r : kRules) {
    if (has(r.needle) && has(r.also)) return r.format;
  }
  return has("tools") ? ToolCallFormat::kHermes : ToolCallFormat::kNone;
}

Result<ReasoningFormat> reasoning_format_from_name(std::string_view name) {
  struct Row {
    std::string_view name;
    ReasoningFormat format;
  };
  constexpr Row kRows[] = {{"none", ReasoningFormat::kNone},
                           {"deepseek", ReasoningFormat::kDeepseek},
                           {"deepseek-legacy", ReasoningFormat::kDeepseekLegacy},
                           {"auto", ReasoningFormat::kAuto}};
  for (const Row& r : kRows) {
    if (r.name == name) return r.format;
  }
  return invalid_argument("reasoning format '" + std::string(name) +
                          "' is not one of none, deepseek, deepseek-legacy, auto");
}

ParsedReply parse_reply(std::string_view text, const ReplyParseOptions& o, bool partial) {
  ParsedReply out;
  const Format& f = format_of(o.tools);
  bool held = false;
  const std::string_view rest =
      f.own_reasoning ? text : split_reasoning(text, o, partial, out, &held);
  if (held) return out;
  const Format& parser =
      o.parse_tool_calls || f.beyond_calls ? f : format_of(ToolCallFormat::kNone);
  parser.parse(Cursor{rest, partial, out, o});
  if (!o.parallel_tool_calls && out.tool_calls.size() > 1) out.tool_calls.resize(1);
  return out;
}

void tool_call_ids_fill(std::vector<ToolCall>& calls, std::string_view prefix) {
  for (size_t i = 0; i < calls.size(); ++i) {
    if (calls[i].id.empty()) calls[i].id = std::string(prefix) + std::to_string(i);
  }
}

ReplyStream::ReplyStream(ReplyParseOptions o, std::string id_prefix)
    : o_(o), id_prefix_(std::move(id_prefix)) {}

namespace {

// The length of text without an incomplete UTF-8 sequence at its end: a delta never ends in
// the middle of a character (the JSON of an SSE event must be valid UTF-8).
size_t complete_utf8_prefix(std::string_view text) {
  for (size_t back = 1; back <= 4 && back <= text.size(); ++back) {
    const auto c = static_cast<uint8_t>(text[text.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t len = c < 0x80 ? 1 : utf8_seq_len(c);
    return len > back ? text.size() - back : text.size();
  }
  return text.size();
}

}  // namespace

ReplyDelta ReplyStream::update(std::string_view text, bool final) {
  if (!final) text = text.substr(0, complete_utf8_prefix(text));
  ParsedReply now = parse_reply(text, o_, !final);
  tool_call_ids_fill(now.tool_calls, id_prefix_);
  ReplyDelta d;
  // Partial parses only ever extend what was sent; should a model's text break that (it cannot
  // for the formats above), nothing already sent is taken back and the rest is not repeated.
  auto extend = [](std::string& sent, const std::string& now_text, std::string& delta) {
    if (now_text.size() > sent.size() && now_text.compare(0, sent.size(), sent) == 0) {
      delta = now_text.substr(sent.size());
      sent = now_text;
    }
  };
  extend(sent_.content, now.content, d.content);
  extend(sent_.reasoning, now.reasoning, d.reasoning);
  d.first_tool_index = sent_.tool_calls.size();
  for (size_t i = sent_.tool_calls.size(); i < now.tool_calls.size(); ++i) {
    d.tool_calls.push_back(now.tool_calls[i]);
    sent_.tool_calls.push_back(now.tool_calls[i]);
  }
  return d;
}

}  // namespace strata::server
