#include "server/json_schema_grammar.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/check.h"

namespace strata::server {
// A named namespace, not an anonymous one: the unity build puts several .cc files in one unit.
namespace json_schema_gbnf {

using Json = nlohmann::ordered_json;

// Nesting of schemas (properties, items, anyOf branches and $ref hops all count). Each level is a
// few stack frames; pydantic and zod models seldom pass 10.
constexpr int kMaxDepth = 64;
// The grammar engine keeps state per rule and per alternative: both bound its parse and its
// per-token work.
constexpr size_t kMaxRules = 10000;
constexpr size_t kMaxGrammarBytes = size_t{1} << 20;
constexpr size_t kMaxEnumValues = 1024;
// minItems, maxItems, minLength, maxLength and the number of prefixItems: a count {m,n}
// expands into that many copies of its item inside the grammar engine.
constexpr int64_t kMaxRepeat = 1000;
// Property names become rule names and trie paths (of extra-key rules): one stack frame a byte.
constexpr size_t kMaxPropertyNameBytes = 1024;
constexpr size_t kMaxRuleNameChars = 48;
// Schemas visited in all. Each $ref text is converted once, but different texts may reach the
// same subschema; this bounds the work such aliases can multiply, with room for schemas a
// hundred times the size of any real model's.
constexpr size_t kMaxVisits = 100000;
// The primitive `integer` has at most 16 digits, so a bound past it is no bound.
constexpr int64_t kMaxIntegerMagnitude = 9999999999999999;  // 10^16 - 1

// ---- The keyword table: what each schema keyword is to the converter.

enum class KeywordRole {
  kAnnotation,  // no effect on which instances are valid
  kCore,        // handled before the type: type, enum, const, anyOf, oneOf, allOf, $ref
  kObject,      // applies only to object instances
  kArray,
  kString,
  kInteger,  // numeric bounds: honoured on integers, refused on other numbers
  kRefused,
};

struct KeywordRow {
  const char* name;
  KeywordRole role;
  const char* why_refused;  // for kRefused: what to say beyond "is not supported"
};

constexpr KeywordRow kKeywordRows[] = {
    {"$schema", KeywordRole::kAnnotation, nullptr},
    {"$id", KeywordRole::kAnnotation, nullptr},
    {"$comment", KeywordRole::kAnnotation, nullptr},
    {"$defs", KeywordRole::kAnnotation, nullptr},  // read only through a $ref
    {"definitions", KeywordRole::kAnnotation, nullptr},
    {"title", KeywordRole::kAnnotation, nullptr},
    {"description", KeywordRole::kAnnotation, nullptr},
    {"default", KeywordRole::kAnnotation, nullptr},
    {"examples", KeywordRole::kAnnotation, nullptr},
    {"deprecated", KeywordRole::kAnnotation, nullptr},
    {"readOnly", KeywordRole::kAnnotation, nullptr},
    {"writeOnly", KeywordRole::kAnnotation, nullptr},
    {"strict", KeywordRole::kAnnotation, nullptr},  // OpenAI's wrapper fields, when inlined
    {"name", KeywordRole::kAnnotation, nullptr},
    {"type", KeywordRole::kCore, nullptr},
    {"enum", KeywordRole::kCore, nullptr},
    {"const", KeywordRole::kCore, nullptr},
    {"anyOf", KeywordRole::kCore, nullptr},
    {"oneOf", KeywordRole::kCore, nullptr},
    {"allOf", KeywordRole::kCore, nullptr},
    {"$ref", KeywordRole::kCore, nullptr},
    {"properties", KeywordRole::kObject, nullptr},
    {"required", KeywordRole::kObject, nullptr},
    {"additionalProperties", KeywordRole::kObject, nullptr},
    {"items", KeywordRole::kArray, nullptr},
    {"prefixItems", KeywordRole::kArray, nullptr},
    {"minItems", KeywordRole::kArray, nullptr},
    {"maxItems", KeywordRole::kArray, nullptr},
    {"uniqueItems", KeywordRole::kArray, nullptr},  // false only: checked where read
    {"minLength", KeywordRole::kString, nullptr},
    {"maxLength", KeywordRole::kString, nullptr},
    {"format", KeywordRole::kString, nullptr},
    {"minimum", KeywordRole::kInteger, nullptr},
    {"maximum", KeywordRole::kInteger, nullptr},
    {"exclusiveMinimum", KeywordRole::kInteger, nullptr},
    {"exclusiveMaximum", KeywordRole::kInteger, nullptr},
    {"pattern", KeywordRole::kString, nullptr},
    {"patternProperties", KeywordRole::kRefused,
     "regular expressions are not translated to grammars"},
    {"multipleOf", KeywordRole::kRefused, nullptr},
    {"not", KeywordRole::kRefused, nullptr},
    {"if", KeywordRole::kRefused, nullptr},
    {"then", KeywordRole::kRefused, nullptr},
    {"else", KeywordRole::kRefused, nullptr},
    {"additionalItems", KeywordRole::kRefused, "use 'items' with 'prefixItems'"},
};

const KeywordRow* keyword_row(std::string_view name) {
  for (const KeywordRow& row : kKeywordRows) {
    if (name == row.name) return &row;
  }
  return nullptr;
}

// ---- Instance types, as a bit set.

using TypeSet = unsigned;
struct TypeRow {
  const char* name;
  TypeSet bit;
};
constexpr TypeRow kTypeRows[] = {
    {"object", 1u << 0}, {"array", 1u << 1},   {"string", 1u << 2}, {"integer", 1u << 3},
    {"number", 1u << 4}, {"boolean", 1u << 5}, {"null", 1u << 6},
};
constexpr TypeSet kObjectType = 1u << 0, kArrayType = 1u << 1, kStringType = 1u << 2,
                  kIntegerType = 1u << 3, kNumberType = 1u << 4, kBooleanType = 1u << 5,
                  kNullType = 1u << 6;

TypeSet keyword_types(KeywordRole role) {
  switch (role) {
    case KeywordRole::kObject:
      return kObjectType;
    case KeywordRole::kArray:
      return kArrayType;
    case KeywordRole::kString:
      return kStringType;
    case KeywordRole::kInteger:
      return kIntegerType | kNumberType;
    default:
      return 0;
  }
}

// The JSON Schema type of an instance value ("integer" for 2.0 as well, as JSON Schema says).
TypeSet value_type(const Json& v) {
  if (v.is_object()) return kObjectType;
  if (v.is_array()) return kArrayType;
  if (v.is_string()) return kStringType;
  if (v.is_boolean()) return kBooleanType;
  if (v.is_null()) return kNullType;
  if (v.is_number_integer()) return kIntegerType | kNumberType;
  const double d = v.get<double>();
  return std::floor(d) == d ? (kIntegerType | kNumberType) : kNumberType;
}

// ---- Built-in rules. Every value rule ends with `space`, so callers never add it.

struct PrimitiveRow {
  const char* name;
  const char* body;
  std::vector<const char*> deps;
};

// `char` is one character of string content: a raw code point other than `"`, `\` and control
// characters (DEL too: a model never needs it raw), or an escape. A surrogate pair is one escape
// and a lone surrogate none, so that minLength/maxLength count what JSON Schema counts.
const PrimitiveRow kPrimitiveRows[] = {
    {"space", R"(( " " | "\n"{1,2} [ \t]{0,20} )?)", {}},
    {"char",
     R"([^"\\\x00-\x1F\x7F] | "\\" ( ["\\/bfnrt] | "u" ( [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} | [dD] [89abAB] [0-9a-fA-F]{2} "\\u" [dD] [c-fC-F] [0-9a-fA-F]{2} ) ))",
     {}},
    {"string", R"("\"" char* "\"" space)", {"char", "space"}},
    // 16 digits: more than a double holds exactly, few enough that a model cannot ramble.
    {"integral-part", R"("0" | [1-9] [0-9]{0,15})", {}},
    {"decimal-part", R"([0-9]{1,16})", {}},
    // Three exponent digits: doubles end at 1e308.
    {"number",
     R"("-"? integral-part ( "." decimal-part )? ( [eE] [-+]? [0-9]{1,3} )? space)",
     {"integral-part", "decimal-part", "space"}},
    {"integer", R"("-"? integral-part space)", {"integral-part", "space"}},
    {"boolean", R"(( "true" | "false" ) space)", {"space"}},
    {"null", R"("null" space)", {"space"}},
    {"value",
     "object | array | string | number | boolean | null",
     {"object", "array", "string", "number", "boolean", "null"}},
    {"object",
     R"("{" space ( string ":" space value ( "," space string ":" space value )* )? "}" space)",
     {"string", "value", "space"}},
    {"array", R"("[" space ( value ( "," space value )* )? "]" space)", {"value", "space"}},
    {"uuid",
     R"("\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\"" space)",
     {"space"}},
    // Days per month; 29 February is allowed in every year (the grammar does not count leap
    // years), the one date the grammar lets through that a date parser would refuse.
    {"date",
     R"([0-9]{4} "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) | ( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) | "02-" ( "0" [1-9] | [12] [0-9] ) ))",
     {}},
    {"time",
     R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? ( "Z" | [-+] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))",
     {}},
    {"date-time", R"(date "T" time)", {"date", "time"}},
    {"date-string", R"("\"" date "\"" space)", {"date", "space"}},
    {"time-string", R"("\"" time "\"" space)", {"time", "space"}},
    {"date-time-string", R"("\"" date-time "\"" space)", {"date-time", "space"}},
};

const PrimitiveRow* primitive_row(std::string_view name) {
  for (const PrimitiveRow& row : kPrimitiveRows) {
    if (name == row.name) return &row;
  }
  return nullptr;
}

// The string formats: the `format` value and the primitive that matches the quoted string.
struct FormatRow {
  const char* format;
  const char* rule;
};
constexpr FormatRow kFormatRows[] = {
    {"date", "date-string"},
    {"time", "time-string"},
    {"date-time", "date-time-string"},
    {"uuid", "uuid"},
};

// ---- Text helpers.

std::string shown(const Json& v) {
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > 64) s = s.substr(0, 61) + "...";
  return s;
}

// A JSON pointer token (RFC 6901), shortened so that an error message stays readable.
std::string pointer_token(std::string_view key) {
  std::string out;
  for (char c : key.substr(0, 64)) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  if (key.size() > 64) out += "...";
  return out;
}

std::string hex_byte(unsigned char c) {
  static const char kDigits[] = "0123456789ABCDEF";
  return std::string("\\x") + kDigits[c >> 4] + kDigits[c & 15];
}

// A GBNF literal matching exactly the bytes of `text`.
std::string gbnf_literal(std::string_view text) {
  std::string out = "\"";
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"') {
      out += "\\\"";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      out += hex_byte(c);
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// The compact JSON text of a value; invalid UTF-8 (possible only in a programmatically built
// value) becomes U+FFFD instead of throwing.
std::string json_text(const Json& v) {
  return v.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// `item` (one atom: a rule name, a class or a group) repeated min..max times (no max: nullopt).
std::string repeat(const std::string& item, int64_t min, std::optional<int64_t> max) {
  if (max && *max == 0) return "";
  if (min == 0 && max && *max == 1) return item + "?";
  if (!max) {
    if (min == 0) return item + "*";
    if (min == 1) return item + "+";
    return item + "{" + std::to_string(min) + ",}";
  }
  if (min == *max) return item + "{" + std::to_string(min) + "}";
  return item + "{" + std::to_string(min) + "," + std::to_string(*max) + "}";
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += sep;
    out += parts[i];
  }
  return out;
}

// Digit strings of one length, lo <= hi: an expression matching every decimal text between them.
std::string digits_between(std::string_view lo, std::string_view hi) {
  if (lo.empty()) return "";
  if (lo[0] == hi[0]) {
    std::string rest = digits_between(lo.substr(1), hi.substr(1));
    return std::string("\"") + lo[0] + "\"" + (rest.empty() ? "" : " " + rest);
  }
  const size_t n = lo.size() - 1;
  const std::string_view lo_rest = lo.substr(1), hi_rest = hi.substr(1);
  const bool lo_rest_zero = lo_rest.find_first_not_of('0') == std::string_view::npos;
  const bool hi_rest_nine = hi_rest.find_first_not_of('9') == std::string_view::npos;
  std::vector<std::string> alts;
  char first = lo[0], last = hi[0];
  if (!lo_rest_zero) {
    alts.push_back(std::string("\"") + lo[0] + "\" " +
                   digits_between(lo_rest, std::string(n, '9')));
    ++first;
  }
  if (!hi_rest_nine) --last;
  if (first <= last) {
    std::string cls = first == last ? std::string("[") + first + "]"
                                    : std::string("[") + first + "-" + last + "]";
    alts.push_back(n == 0 ? cls : cls + " [0-9]{" + std::to_string(n) + "}");
  }
  if (!hi_rest_nine) {
    alts.push_back(std::string("\"") + hi[0] + "\" " +
                   digits_between(std::string(n, '0'), hi_rest));
  }
  return "( " + join(alts, " | ") + " )";
}

// Every decimal text (no sign, no leading zero) of the integers lo..hi, 0 <= lo <= hi.
std::string nonnegative_between(int64_t lo, int64_t hi) {
  const std::string lo_s = std::to_string(lo), hi_s = std::to_string(hi);
  std::vector<std::string> alts;
  for (size_t digits = lo_s.size(); digits <= hi_s.size(); ++digits) {
    std::string from = digits == lo_s.size() ? lo_s : "1" + std::string(digits - 1, '0');
    std::string to = digits == hi_s.size() ? hi_s : std::string(digits, '9');
    alts.push_back(digits_between(from, to));
  }
  return join(alts, " | ");
}

// ---- The converter.

struct Property {
  std::string key;
  const Json* schema;
  std::string pointer;
};

// ---- Patterns: ECMA-262 regular expressions as GBNF over a string's JSON text.

// Code point ranges, sorted and disjoint once normalised.
using CodeRanges = std::vector<std::pair<uint32_t, uint32_t>>;

void normalise(CodeRanges& r) {
  std::sort(r.begin(), r.end());
  CodeRanges out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  r = std::move(out);
}

CodeRanges complement(const CodeRanges& r) {
  CodeRanges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : r) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= 0x10FFFF) out.emplace_back(next, 0x10FFFF);
  return out;
}

bool holds(const CodeRanges& r, uint32_t cp) {
  for (const auto& [lo, hi] : r) {
    if (cp >= lo && cp <= hi) return true;
  }
  return false;
}

// A code point as a member of a GBNF character class.
std::string class_code_point(uint32_t cp) {
  static const char kDigits[] = "0123456789ABCDEF";
  if (cp < 0x80) {
    const auto c = static_cast<unsigned char>(cp);
    if (std::isalnum(c)) return std::string(1, static_cast<char>(c));
    return hex_byte(c);
  }
  if (cp <= 0xFFFF) {
    std::string out = "\\u";
    for (int shift = 12; shift >= 0; shift -= 4) out += kDigits[(cp >> shift) & 15];
    return out;
  }
  std::string out;  // no \U escape in GBNF: the raw UTF-8 bytes, which the parser reads as one
  out += static_cast<char>(0xF0 | (cp >> 18));
  out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
  out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
  out += static_cast<char>(0x80 | (cp & 0x3F));
  return out;
}

// One character of a string's JSON text whose value is in `set`: raw where JSON allows it raw,
// escaped for `"`, `\` and the control characters JSON names (\b \f \n \r \t). The other
// control characters and DEL are left out: stricter than the pattern, never looser.
std::string json_char_of(const CodeRanges& set) {
  // What JSON writes raw: all but the control characters, `"`, `\\` and DEL.
  static const CodeRanges kRaw = complement({{0x00, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0x7F, 0x7F}});
  CodeRanges both;
  for (const auto& [a, b] : set) {
    for (const auto& [c, d] : kRaw) {
      const uint32_t lo = std::max(a, c), hi = std::min(b, d);
      if (lo <= hi) both.emplace_back(lo, hi);
    }
  }
  std::vector<std::string> alts;
  if (!both.empty()) {
    std::string cls = "[";
    for (const auto& [lo, hi] : both) {
      cls += class_code_point(lo);
      if (hi != lo) cls += "-" + class_code_point(hi);
    }
    alts.push_back(cls + "]");
  }
  const std::pair<uint32_t, const char*> kEscapes[] = {
      {'"', "\"\\\\\\\"\""}, {'\\', "\"\\\\\\\\\""}, {0x08, "\"\\\\b\""}, {0x0C, "\"\\\\f\""},
      {0x0A, "\"\\\\n\""},   {0x0D, "\"\\\\r\""},    {0x09, "\"\\\\t\""}};
  for (const auto& [cp, lit] : kEscapes) {
    if (holds(set, cp)) alts.push_back(lit);
  }
  if (alts.empty()) return "";
  if (alts.size() == 1) return alts[0];
  return "( " + join(alts, " | ") + " )";
}

// A JSON Schema `pattern` (ECMA-262 syntax, the subset below) as a GBNF expression over the JSON
// text of a string's content, with the schema's search semantics: a pattern not anchored by ^
// (at its start) or $ (at its end) may match anywhere, so any characters may come before or
// after. Supported: literals and escapes (\xHH, \uHHHH, \t \n \r \f \v \0, escaped
// punctuation), . (any character but line terminators), classes with ranges and negation, \d \w
// \s and their negations (ASCII, as ECMA-262 without the u flag; \s with its Unicode spaces),
// groups (also (?:...)), alternation, and the quantifiers * + ? {n} {n,} {n,m} (lazy forms
// alike: the same strings). Refused by name: lookaround, backreferences, word boundaries, ^ or $
// anywhere else, Unicode property escapes, named groups, counts above 1000.
class PatternConverter {
 public:
  PatternConverter(std::string_view re, std::string ptr) : re_(re), ptr_(std::move(ptr)) {}

  // `any` is the rule of one JSON string character (the `char` primitive).
  Result<std::string> run(const std::string& any) {
    bool start = false, end = false;
    std::string_view body = re_;
    if (!body.empty() && body.front() == '^') {
      start = true;
      body.remove_prefix(1);
    }
    if (!body.empty() && body.back() == '$') {
      size_t slashes = 0;
      for (size_t i = body.size() - 1; i-- > 0 && body[i] == '\\';) ++slashes;
      if (slashes % 2 == 0) {
        end = true;
        body.remove_suffix(1);
      }
    }
    re_ = body;
    pos_ = 0;
    STRATA_ASSIGN_OR_RETURN(std::string expr, alternation(0));
    if (pos_ != re_.size()) return refuse("an unmatched ')'");
    std::string out = start ? "" : any + "* ";
    out += "( " + expr + " )";
    if (!end) out += " " + any + "*";
    return out;
  }

 private:
  static constexpr int kMaxDepth = 24;
  static constexpr int64_t kMaxCount = 1000;

  Status refuse(const std::string& what) const {
    return unsupported(ptr_ + "/pattern: " + what + " (at character " + std::to_string(pos_) +
                       " of " + shown(Json(std::string(re_))) + ") is not supported");
  }
  Status invalid(const std::string& what) const {
    return invalid_argument(ptr_ + "/pattern: " + what + " at character " + std::to_string(pos_) +
                            " of " + shown(Json(std::string(re_))));
  }
  bool at_end() const { return pos_ >= re_.size(); }
  char peek() const { return re_[pos_]; }

  Result<std::string> alternation(int depth) {
    if (depth > kMaxDepth) return refuse("groups nested deeper than " + std::to_string(kMaxDepth));
    std::vector<std::string> alts;
    while (true) {
      STRATA_ASSIGN_OR_RETURN(std::string seq, sequence(depth));
      alts.push_back(seq.empty() ? "\"\"" : seq);
      if (at_end() || peek() != '|') break;
      ++pos_;
    }
    return alts.size() == 1 ? alts[0] : "( " + join(alts, " | ") + " )";
  }

  Result<std::string> sequence(int depth) {
    std::vector<std::string> items;
    while (!at_end() && peek() != '|' && peek() != ')') {
      STRATA_ASSIGN_OR_RETURN(std::string a, atom(depth));
      STRATA_ASSIGN_OR_RETURN(std::string q, quantified(a));
      if (!q.empty()) items.push_back(q);  // empty only for {0}: the empty string, exactly
    }
    return join(items, " ");
  }

  Result<std::string> quantified(const std::string& a) {
    if (at_end()) return a;
    int64_t lo = 1;
    std::optional<int64_t> hi = 1;
    const char c = peek();
    if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      lo = c == '+' ? 1 : 0;
      hi = c == '?' ? std::optional<int64_t>(1) : std::nullopt;
    } else if (c == '{') {
      const size_t save = pos_;
      ++pos_;
      auto number = [&]() -> std::optional<int64_t> {
        int64_t v = 0;
        size_t digits = 0;
        while (!at_end() && std::isdigit(static_cast<unsigned char>(peek())) && digits < 9) {
          v = v * 10 + (peek() - '0');
          ++pos_;
          ++digits;
        }
        return digits == 0 ? std::nullopt : std::optional<int64_t>(v);
      };
      std::optional<int64_t> m = number();
      std::optional<int64_t> n = m;
      bool ok = m.has_value();
      if (ok && !at_end() && peek() == ',') {
        ++pos_;
        n = number();  // none: no upper bound
      }
      ok = ok && !at_end() && peek() == '}';
      if (!ok) {  // not a quantifier: ECMA-262 (annex B) reads the brace as a literal
        pos_ = save;
        return a;
      }
      ++pos_;
      lo = *m;
      hi = n;
      if ((hi && *hi > kMaxCount) || lo > kMaxCount) {
        return refuse("a count above " + std::to_string(kMaxCount));
      }
      if (hi && *hi < lo) return invalid("a count {m,n} with n < m");
    } else {
      return a;
    }
    if (!at_end() && peek() == '?') ++pos_;  // lazy: the same strings
    if (!at_end() && (peek() == '*' || peek() == '+' || peek() == '?')) {
      return invalid("a quantifier after a quantifier");
    }
    return repeat(a, lo, hi);
  }

  // One atom: a GBNF atom (a literal, a class, a group) or "" for an empty group.
  Result<std::string> atom(int depth) {
    const char c = peek();
    if (c == '(') {
      ++pos_;
      if (!at_end() && peek() == '?') {
        if (pos_ + 1 < re_.size() && re_[pos_ + 1] == ':') {
          pos_ += 2;
        } else {
          return refuse("lookaround or a named group");
        }
      }
      STRATA_ASSIGN_OR_RETURN(std::string inner, alternation(depth + 1));
      if (at_end() || peek() != ')') return invalid("an unclosed '('");
      ++pos_;
      return "( " + inner + " )";
    }
    if (c == '[') return char_class();
    if (c == '.') {
      ++pos_;
      return json_char_of(complement({{0x0A, 0x0A}, {0x0D, 0x0D}, {0x2028, 0x2029}}));
    }
    if (c == '^' || c == '$') return refuse("'" + std::string(1, c) + "' inside the pattern");
    if (c == '*' || c == '+' || c == '?') return invalid("a quantifier with nothing before it");
    if (c == ')') return invalid("an unmatched ')'");
    CodeRanges set;
    if (c == '\\') {
      ++pos_;
      STRATA_ASSIGN_OR_RETURN(set, escape(false));
    } else {
      STRATA_ASSIGN_OR_RETURN(uint32_t cp, code_point());
      set = {{cp, cp}};
    }
    // Dropping it would make the grammar looser than the pattern.
    std::string expr = json_char_of(set);
    if (expr.empty()) return refuse("a control character the grammar does not write");
    return expr;
  }

  // The UTF-8 code point at pos_ (the schema's text came from JSON: valid UTF-8 unless built by
  // hand, and then refused).
  Result<uint32_t> code_point() {
    const auto b0 = static_cast<unsigned char>(re_[pos_]);
    const size_t len = b0 < 0x80 ? 1 : b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : b0 >= 0xC0 ? 2 : 0;
    if (len == 0 || pos_ + len > re_.size()) return invalid("invalid UTF-8");
    uint32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (size_t i = 1; i < len; ++i) {
      const auto b = static_cast<unsigned char>(re_[pos_ + i]);
      if ((b & 0xC0) != 0x80) return invalid("invalid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    pos_ += len;
    return cp;
  }

  Result<uint32_t> hex(size_t digits) {
    if (pos_ + digits > re_.size()) return invalid("a short hexadecimal escape");
    uint32_t v = 0;
    for (size_t i = 0; i < digits; ++i) {
      const char h = re_[pos_ + i];
      if (!std::isxdigit(static_cast<unsigned char>(h))) {
        return invalid("a bad hexadecimal escape");
      }
      v = v * 16 +
          static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                    ? h - '0'
                                    : std::tolower(static_cast<unsigned char>(h)) - 'a' + 10);
    }
    pos_ += digits;
    return v;
  }

  // After a backslash: the set it stands for (one code point, or a class escape).
  Result<CodeRanges> escape(bool in_class) {
    if (at_end()) return invalid("a '\\' at the end");
    const char c = peek();
    static const CodeRanges kDigit = {{'0', '9'}};
    static const CodeRanges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    static const CodeRanges kSpace = {
        {0x09, 0x0D},     {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
        {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
    // The escapes of a set, and of one control character.
    static const struct {
      char letter;
      const CodeRanges* set;
      bool negated;
    } kSetEscapes[] = {{'d', &kDigit, false}, {'D', &kDigit, true},  {'w', &kWord, false},
                       {'W', &kWord, true},   {'s', &kSpace, false}, {'S', &kSpace, true}};
    static const std::pair<char, uint32_t> kControlEscapes[] = {
        {'t', 0x09}, {'n', 0x0A}, {'r', 0x0D}, {'f', 0x0C}, {'v', 0x0B}};
    const auto one = [](uint32_t cp) { return CodeRanges{{cp, cp}}; };
    for (const auto& e : kSetEscapes) {
      if (c != e.letter) continue;
      ++pos_;
      return e.negated ? complement(*e.set) : *e.set;
    }
    for (const auto& [letter, cp] : kControlEscapes) {
      if (c != letter) continue;
      ++pos_;
      return one(cp);
    }
    if (c == 'x' || c == 'u') {
      ++pos_;
      if (c == 'u' && !at_end() && peek() == '{') return refuse("'\\u{...}' (the u flag's escape)");
      STRATA_ASSIGN_OR_RETURN(uint32_t v, hex(c == 'x' ? 2 : 4));
      return one(v);
    }
    if (c == '0') {
      ++pos_;
      if (!at_end() && std::isdigit(static_cast<unsigned char>(peek()))) {
        return refuse("an octal escape");
      }
      return one(0);
    }
    if (c == 'b') {
      if (!in_class) return refuse("a word boundary '\\b'");
      ++pos_;
      return one(0x08);
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return refuse("a backreference");
    if (std::isalnum(static_cast<unsigned char>(c))) {
      return refuse("the escape '\\" + std::string(1, c) + "'");
    }
    STRATA_ASSIGN_OR_RETURN(uint32_t cp, code_point());  // escaped punctuation: itself
    return one(cp);
  }

  Result<std::string> char_class() {
    ++pos_;  // '['
    bool negate = false;
    if (!at_end() && peek() == '^') {
      negate = true;
      ++pos_;
    }
    CodeRanges set;
    while (true) {
      if (at_end()) return invalid("an unclosed '['");
      if (peek() == ']') {  // also first: ECMA-262's [] matches nothing, [^] anything
        ++pos_;
        break;
      }
      STRATA_ASSIGN_OR_RETURN(CodeRanges lo, class_atom());
      if (!at_end() && peek() == '-' && pos_ + 1 < re_.size() && re_[pos_ + 1] != ']') {
        ++pos_;
        STRATA_ASSIGN_OR_RETURN(CodeRanges hi, class_atom());
        if (lo.size() != 1 || hi.size() != 1 || lo[0].first != lo[0].second ||
            hi[0].first != hi[0].second) {
          return invalid("a range with a class escape at an end");
        }
        if (hi[0].first < lo[0].first) return invalid("a range out of order");
        set.emplace_back(lo[0].first, hi[0].first);
      } else {
        set.insert(set.end(), lo.begin(), lo.end());
      }
    }
    normalise(set);
    if (negate) set = complement(set);
    const std::string expr = json_char_of(set);
    if (expr.empty()) return refuse("a class that matches no character a JSON string may hold");
    return expr;
  }

  Result<CodeRanges> class_atom() {
    if (peek() == '\\') {
      ++pos_;
      return escape(true);
    }
    STRATA_ASSIGN_OR_RETURN(uint32_t cp, code_point());
    return CodeRanges{{cp, cp}};
  }

  std::string_view re_;
  std::string ptr_;
  size_t pos_ = 0;
};

struct ObjectShape {
  std::vector<Property> properties;
  std::vector<std::string> required;
  // Extra keys: none, any value (additional == nullptr), or values under *additional.
  bool extras = false;
  const Json* additional = nullptr;
  std::string additional_pointer;
};

class Converter {
 public:
  explicit Converter(const Json& root) : root_(&root) {}

  Result<std::string> run() {
    // Reserved first, so that no schema rule takes the name; schema rules are named "schema-..."
    // after their place (or "ref-..." after their $defs name), which no primitive name starts with.
    STRATA_ASSIGN_OR_RETURN(std::string root, reserve("root"));
    STRATA_RETURN_IF_ERROR(primitive("space").status());
    STRATA_ASSIGN_OR_RETURN(std::string top, visit(*root_, "schema", "schema", 0));
    STRATA_RETURN_IF_ERROR(define(root, top));
    return rules_text();
  }

  // Several documents in one grammar (their $refs each resolved in its own document): document
  // i's sentences are rule names[i]'s, named after wanted[i] (which must not start like a
  // primitive's name); no `root` rule.
  Result<std::string> run_many(const std::vector<const Json*>& docs,
                               const std::vector<std::string>& wanted,
                               std::vector<std::string>& names) {
    STRATA_RETURN_IF_ERROR(primitive("space").status());
    names.clear();
    for (size_t i = 0; i < docs.size(); ++i) {
      root_ = docs[i];
      ref_rules_.clear();  // "#/$defs/X" means another schema in each document
      STRATA_ASSIGN_OR_RETURN(std::string name, reserve(wanted[i]));
      STRATA_ASSIGN_OR_RETURN(std::string top, visit(*root_, "schema", name + "-schema", 0));
      STRATA_RETURN_IF_ERROR(define(name, top));
      names.push_back(std::move(name));
    }
    return rules_text();
  }

 private:
  std::string rules_text() const {
    std::string out;
    out.reserve(bytes_);
    // root first, for a reader; the engine does not care about order.
    for (const auto& [name, body] : rules_) {
      if (name == "root") out += name + " ::= " + body + "\n";
    }
    for (const auto& [name, body] : rules_) {
      if (name != "root") out += name + " ::= " + body + "\n";
    }
    return out;
  }

  // ---- Rules.

  static std::string rule_name(std::string_view wanted) {
    std::string out;
    for (char c : wanted) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
      if (ok) {
        out += c;
      } else if (out.empty() || out.back() != '-') {
        out += '-';
      }
      if (out.size() >= kMaxRuleNameChars) break;
    }
    while (!out.empty() && out.back() == '-') out.pop_back();
    return out.empty() ? "r" : out;
  }

  // A name that starts like its parent's, so that it never becomes a primitive's name.
  static std::string child_name(const std::string& parent, std::string_view part) {
    std::string tail = rule_name(part.substr(0, kMaxRuleNameChars));
    return rule_name(parent + "-" + tail);
  }

  Status check_budget(size_t more_bytes) {
    if (rules_.size() + 1 > kMaxRules) {
      return out_of_range("the schema needs more than " + std::to_string(kMaxRules) +
                          " grammar rules (the limit)");
    }
    if (bytes_ + more_bytes > kMaxGrammarBytes) {
      return out_of_range("the schema's grammar is larger than " +
                          std::to_string(kMaxGrammarBytes) + " bytes (the limit)");
    }
    return Status::ok();
  }

  // A free rule name derived from `wanted`, reserved with an empty body.
  Result<std::string> reserve(const std::string& wanted) {
    std::string base = rule_name(wanted), name = base;
    for (int i = 1; index_.count(name) > 0; ++i) name = base + "-" + std::to_string(i);
    STRATA_RETURN_IF_ERROR(check_budget(name.size() + 6));
    bytes_ += name.size() + 6;
    index_[name] = rules_.size();
    rules_.emplace_back(name, "");
    return name;
  }

  Status define(const std::string& name, const std::string& body) {
    STRATA_RETURN_IF_ERROR(check_budget(body.size()));
    bytes_ += body.size();
    rules_[index_.at(name)].second = body;
    return Status::ok();
  }

  // A rule with this body, named after `wanted`; an identical body already emitted is reused.
  Result<std::string> add_rule(const std::string& wanted, const std::string& body) {
    if (auto it = by_body_.find(body); it != by_body_.end()) return it->second;
    STRATA_ASSIGN_OR_RETURN(std::string name, reserve(wanted));
    STRATA_RETURN_IF_ERROR(define(name, body));
    by_body_[body] = name;
    return name;
  }

  Result<std::string> primitive(const char* name) {
    if (index_.count(name) > 0) return std::string(name);
    const PrimitiveRow* row = primitive_row(name);
    if (row == nullptr) return internal_error(std::string("no primitive rule ") + name);
    STRATA_ASSIGN_OR_RETURN(std::string got, reserve(name));
    STRATA_RETURN_IF_ERROR(define(got, row->body));
    for (const char* dep : row->deps) STRATA_RETURN_IF_ERROR(primitive(dep).status());
    return got;
  }

  // ---- Schemas.

  Result<std::string> visit(const Json& s, const std::string& ptr, const std::string& name,
                            int depth) {
    if (depth > kMaxDepth) {
      return out_of_range(ptr + ": schemas nested deeper than " + std::to_string(kMaxDepth) +
                          " levels (the limit)");
    }
    if (++visits_ > kMaxVisits) {
      return out_of_range(ptr + ": the schema has more than " + std::to_string(kMaxVisits) +
                          " subschemas to convert, counting each $ref's target (the limit)");
    }
    if (s.is_boolean()) {
      if (s.get<bool>()) return primitive("value");
      return unsupported(ptr + ": the schema false matches nothing");
    }
    if (!s.is_object()) {
      return invalid_argument(ptr + ": a schema must be an object or a boolean, not " + shown(s));
    }
    // Every keyword is known, or the schema is refused: an ignored keyword would let through
    // instances that the client's validator rejects.
    std::vector<std::string> assertions;  // keywords other than annotations
    TypeSet typed_keywords = 0;
    for (const auto& [key, value] : s.items()) {
      const KeywordRow* row = keyword_row(key);
      if (row == nullptr || row->role == KeywordRole::kRefused) {
        std::string why =
            row != nullptr && row->why_refused ? std::string(" (") + row->why_refused + ")" : "";
        return unsupported(ptr + ": '" + key + "' is not supported" + why);
      }
      if (row->role == KeywordRole::kAnnotation) continue;
      assertions.push_back(key);
      typed_keywords |= keyword_types(row->role);
    }
    auto only = [&](const char* keyword, std::initializer_list<const char*> allowed) -> Status {
      for (const std::string& key : assertions) {
        if (key == keyword) continue;
        bool ok = false;
        for (const char* a : allowed) ok = ok || key == a;
        if (!ok) {
          return unsupported(ptr + ": '" + key + "' next to '" + keyword + "' is not supported");
        }
      }
      return Status::ok();
    };

    if (s.contains("$ref")) {
      STRATA_RETURN_IF_ERROR(only("$ref", {}));
      return visit_ref(s["$ref"], ptr + "/$ref", depth);
    }
    if (s.contains("anyOf") || s.contains("oneOf")) {
      // oneOf becomes an alternation too: exclusivity is not checked, so branches that overlap
      // let through an instance matching two of them.
      const char* keyword = s.contains("anyOf") ? "anyOf" : "oneOf";
      STRATA_RETURN_IF_ERROR(only(keyword, {}));
      return visit_any_of(s[keyword], ptr + "/" + keyword, name, depth);
    }
    if (s.contains("allOf")) {
      STRATA_RETURN_IF_ERROR(only("allOf", {}));
      return visit_all_of(s["allOf"], ptr + "/allOf", name, depth);
    }

    TypeSet types = 0;
    if (auto it = s.find("type"); it != s.end()) {
      STRATA_ASSIGN_OR_RETURN(types, read_types(*it, ptr + "/type"));
    }
    if (s.contains("enum") || s.contains("const")) {
      if (s.contains("enum") && s.contains("const")) {
        return unsupported(ptr + ": 'enum' next to 'const' is not supported");
      }
      const char* keyword = s.contains("enum") ? "enum" : "const";
      STRATA_RETURN_IF_ERROR(only(keyword, {"type"}));
      return visit_enum(s[keyword], keyword, types, ptr, name);
    }
    if (types == 0) {
      // No type: a schema of string keywords only constrains strings and lets every other value
      // through. The grammar keeps to the types its keywords name (stricter, never looser).
      types = typed_keywords;
      if (types == 0) return primitive("value");
    }
    std::vector<std::string> alts;
    for (const TypeRow& t : kTypeRows) {
      if ((types & t.bit) == 0) continue;
      // An integer is a number: with both types, the number rule covers both.
      if (t.bit == kIntegerType && (types & kNumberType) && !has_integer_bounds(s)) continue;
      STRATA_ASSIGN_OR_RETURN(std::string alt, visit_typed(s, t.bit, ptr, name, depth));
      alts.push_back(alt);
    }
    if (alts.size() == 1) return alts[0];
    return add_rule(name, join(alts, " | "));
  }

  Result<TypeSet> read_types(const Json& v, const std::string& ptr) {
    std::vector<const Json*> names;
    if (v.is_string()) {
      names.push_back(&v);
    } else if (v.is_array() && !v.empty()) {
      for (const Json& n : v) names.push_back(&n);
    } else {
      return invalid_argument(ptr + ": must be a type name or a non-empty list of them, not " +
                              shown(v));
    }
    TypeSet types = 0;
    for (const Json* n : names) {
      bool found = false;
      for (const TypeRow& t : kTypeRows) {
        if (n->is_string() && n->get<std::string>() == t.name) {
          types |= t.bit;
          found = true;
        }
      }
      if (!found) {
        return invalid_argument(ptr + ": " + shown(*n) +
                                " is not a type (object, array, string, integer, number, "
                                "boolean, null)");
      }
    }
    return types;
  }

  static bool has_integer_bounds(const Json& s) {
    return s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
           s.contains("exclusiveMaximum");
  }

  Result<std::string> visit_typed(const Json& s, TypeSet type, const std::string& ptr,
                                  const std::string& name, int depth) {
    switch (type) {
      case kNullType:
        return primitive("null");
      case kBooleanType:
        return primitive("boolean");
      case kIntegerType:
        return visit_integer(s, ptr, name);
      case kNumberType:
        for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
          if (s.contains(k)) {
            return unsupported(ptr + ": '" + k +
                               "' is supported only on \"type\": \"integer\", not on numbers");
          }
        }
        return primitive("number");
      case kStringType:
        return visit_string(s, ptr, name);
      case kArrayType:
        return visit_array(s, ptr, name, depth);
      default:
        return visit_object(s, ptr, name, depth);
    }
  }

  // Visits a schema at a place after a bracket (a property value, an array item): recursion
  // through it consumes input, so refs met before it may recur.
  Result<std::string> visit_guarded(const Json& s, const std::string& ptr, const std::string& name,
                                    int depth) {
    std::vector<std::string> saved = std::exchange(unguarded_refs_, {});
    auto result = visit(s, ptr, name, depth);
    unguarded_refs_ = std::move(saved);
    return result;
  }

  // "#", "#/$defs/Name", "#/definitions/Name" or any other local JSON pointer.
  Result<std::pair<const Json*, std::string>> resolve(const Json& ref, const std::string& ptr) {
    if (!ref.is_string()) {
      return invalid_argument(ptr + ": must be a string, not " + shown(ref));
    }
    const std::string text = ref.get<std::string>();
    if (text.empty() || text[0] != '#') {
      return unsupported(ptr + ": remote '$ref' " + shown(ref) +
                         " is not supported; only local ones such as \"#/$defs/Name\"");
    }
    if (text.size() > 1 && text[1] != '/') {
      return unsupported(ptr + ": '$ref' " + shown(ref) +
                         " is not supported; only JSON pointers such as \"#/$defs/Name\"");
    }
    const Json* at = root_;
    std::string at_ptr = "schema";
    size_t pos = 1;
    while (pos < text.size()) {
      size_t end = text.find('/', pos + 1);
      if (end == std::string::npos) end = text.size();
      std::string token;
      for (size_t i = pos + 1; i < end; ++i) {
        if (text[i] == '~' && i + 1 < end && (text[i + 1] == '0' || text[i + 1] == '1')) {
          token += text[i + 1] == '0' ? '~' : '/';
          ++i;
        } else {
          token += text[i];
        }
      }
      pos = end;
      const Json* next = nullptr;
      if (at->is_object()) {
        if (auto it = at->find(token); it != at->end()) next = &*it;
      } else if (at->is_array() && !token.empty() && (token == "0" || token[0] != '0') &&
                 token.find_first_not_of("0123456789") == std::string::npos && token.size() < 10) {
        const size_t i = std::stoul(token);
        if (i < at->size()) next = &(*at)[i];
      }
      if (next == nullptr) {
        return invalid_argument(ptr + ": '$ref' " + shown(ref) + " names nothing in the schema");
      }
      at = next;
      at_ptr += "/" + pointer_token(token);
    }
    return std::make_pair(at, at_ptr);
  }

  Result<std::string> visit_ref(const Json& ref, const std::string& ptr, int depth) {
    STRATA_ASSIGN_OR_RETURN(auto target, resolve(ref, ptr));
    const std::string key = ref.get<std::string>();
    // Recursion must pass through an object or an array, whose bracket consumes input: a ref
    // that reaches itself without one is a rule that expands forever without reading anything.
    if (std::find(unguarded_refs_.begin(), unguarded_refs_.end(), key) != unguarded_refs_.end()) {
      return invalid_argument(ptr + ": '$ref' " + shown(ref) +
                              " refers back to itself with no object or array in between, so "
                              "it never ends");
    }
    if (auto it = ref_rules_.find(key); it != ref_rules_.end()) return it->second;
    std::string last = target.second.substr(target.second.rfind('/') + 1);
    STRATA_ASSIGN_OR_RETURN(std::string rule, reserve("ref-" + last));
    ref_rules_[key] = rule;
    unguarded_refs_.push_back(key);
    auto body = visit(*target.first, target.second, rule + "-x", depth + 1);
    unguarded_refs_.pop_back();
    if (!body.is_ok()) return body.status();
    STRATA_RETURN_IF_ERROR(define(rule, *body));
    return rule;
  }

  Result<std::string> visit_any_of(const Json& branches, const std::string& ptr,
                                   const std::string& name, int depth) {
    if (!branches.is_array() || branches.empty()) {
      return invalid_argument(ptr + ": must be a non-empty list of schemas, not " +
                              shown(branches));
    }
    std::vector<std::string> alts;
    for (size_t i = 0; i < branches.size(); ++i) {
      STRATA_ASSIGN_OR_RETURN(std::string alt,
                              visit(branches[i], ptr + "/" + std::to_string(i),
                                    child_name(name, std::to_string(i)), depth + 1));
      alts.push_back(alt);
    }
    if (alts.size() == 1) return alts[0];
    return add_rule(name, join(alts, " | "));
  }

  // allOf of one schema is that schema; allOf of several is merged when each is an object
  // schema of `properties` and `required` only (pydantic's inheritance). Anything else would
  // need an intersection of grammars.
  Result<std::string> visit_all_of(const Json& parts, const std::string& ptr,
                                   const std::string& name, int depth) {
    if (!parts.is_array() || parts.empty()) {
      return invalid_argument(ptr + ": must be a non-empty list of schemas, not " + shown(parts));
    }
    if (parts.size() == 1) return visit(parts[0], ptr + "/0", name, depth + 1);
    ObjectShape shape;
    for (size_t i = 0; i < parts.size(); ++i) {
      const Json* part = &parts[i];
      std::string part_ptr = ptr + "/" + std::to_string(i);
      for (int hops = 0; part->is_object() && part->contains("$ref"); ++hops) {
        if (hops >= kMaxDepth) {
          return out_of_range(part_ptr + ": more than " + std::to_string(kMaxDepth) +
                              " '$ref' hops (the limit)");
        }
        STRATA_ASSIGN_OR_RETURN(auto target, resolve((*part)["$ref"], part_ptr + "/$ref"));
        part = target.first;
        part_ptr = target.second;
      }
      if (!part->is_object()) {
        return unsupported(part_ptr + ": 'allOf' merges only object schemas");
      }
      for (const auto& [key, value] : part->items()) {
        const KeywordRow* row = keyword_row(key);
        if (row != nullptr && row->role == KeywordRole::kAnnotation) continue;
        if (key == "type" && value == "object") continue;
        if (key != "properties" && key != "required") {
          return unsupported(part_ptr + ": '" + key +
                             "' in an 'allOf' of several schemas is not supported (only "
                             "'properties' and 'required' are merged)");
        }
      }
      STRATA_RETURN_IF_ERROR(read_properties(*part, part_ptr, shape));
    }
    STRATA_RETURN_IF_ERROR(check_required(shape, ptr));
    return object_rule(shape, ptr, name, depth);
  }

  Result<std::string> visit_enum(const Json& v, const char* keyword, TypeSet types,
                                 const std::string& ptr, const std::string& name) {
    const std::string at = ptr + "/" + keyword;
    std::vector<const Json*> values;
    if (std::string_view(keyword) == "const") {
      values.push_back(&v);
    } else {
      if (!v.is_array() || v.empty()) {
        return invalid_argument(at + ": must be a non-empty list, not " + shown(v));
      }
      if (v.size() > kMaxEnumValues) {
        return out_of_range(at + ": " + std::to_string(v.size()) + " values, more than " +
                            std::to_string(kMaxEnumValues) + " (the limit)");
      }
      for (const Json& x : v) values.push_back(&x);
    }
    std::vector<std::string> alts;
    for (const Json* x : values) {
      if (types != 0 && (value_type(*x) & types) == 0) continue;
      alts.push_back(gbnf_literal(json_text(*x)));
    }
    if (alts.empty()) return invalid_argument(at + ": no value has the schema's 'type'");
    return add_rule(name, "( " + join(alts, " | ") + " ) space");
  }

  // A count keyword: a non-negative integer no larger than kMaxRepeat.
  Result<std::optional<int64_t>> read_count(const Json& s, const char* key,
                                            const std::string& ptr) {
    auto it = s.find(key);
    if (it == s.end()) return std::optional<int64_t>();
    const Json& v = *it;
    const bool integral = v.is_number_integer() ||
                          (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    if (!integral || (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0) ||
        (v.is_number_float() && v.get<double>() < 0)) {
      return invalid_argument(ptr + "/" + key + ": must be a non-negative integer, not " +
                              shown(v));
    }
    const double d = v.get<double>();
    if (d > static_cast<double>(kMaxRepeat)) {
      return out_of_range(ptr + "/" + key + ": " + shown(v) + " is more than " +
                          std::to_string(kMaxRepeat) +
                          " (the limit: counts expand in the grammar)");
    }
    return std::optional<int64_t>(static_cast<int64_t>(d));
  }

  // A bound rounded inwards to an integer and clamped to what `integer` can spell.
  static int64_t integer_bound(const Json& v, bool lower) {
    if (v.is_number_unsigned()) {
      return v.get<uint64_t>() > static_cast<uint64_t>(kMaxIntegerMagnitude)
                 ? kMaxIntegerMagnitude + 1
                 : static_cast<int64_t>(v.get<uint64_t>());
    }
    if (v.is_number_integer()) {
      return std::clamp<int64_t>(v.get<int64_t>(), -kMaxIntegerMagnitude - 1,
                                 kMaxIntegerMagnitude + 1);
    }
    const double d = lower ? std::ceil(v.get<double>()) : std::floor(v.get<double>());
    if (d > 1e16) return kMaxIntegerMagnitude + 1;
    if (d < -1e16) return -kMaxIntegerMagnitude - 1;
    return static_cast<int64_t>(d);
  }

  Result<std::string> visit_integer(const Json& s, const std::string& ptr,
                                    const std::string& name) {
    if (!has_integer_bounds(s)) return primitive("integer");
    int64_t lo = -kMaxIntegerMagnitude, hi = kMaxIntegerMagnitude;
    struct BoundRow {
      const char* key;
      bool lower;
      int64_t step;  // exclusive bounds move one inwards
    };
    for (const BoundRow& b :
         {BoundRow{"minimum", true, 0}, BoundRow{"exclusiveMinimum", true, 1},
          BoundRow{"maximum", false, 0}, BoundRow{"exclusiveMaximum", false, -1}}) {
      auto it = s.find(b.key);
      if (it == s.end()) continue;
      if (!it->is_number()) {
        return invalid_argument(ptr + "/" + b.key + ": must be a number, not " + shown(*it));
      }
      int64_t v = integer_bound(*it, b.lower);
      // An exclusive bound that is not an integer already excludes itself by rounding.
      if (b.step != 0 &&
          (it->is_number_integer() || std::floor(it->get<double>()) == it->get<double>())) {
        v += b.step;
      }
      if (b.lower) {
        lo = std::max(lo, v);
      } else {
        hi = std::min(hi, v);
      }
    }
    if (lo > hi) {
      return invalid_argument(ptr + ": no integer of at most 16 digits lies within the bounds");
    }
    std::vector<std::string> alts;
    if (lo < 0) {
      alts.push_back("\"-\" ( " + nonnegative_between(std::max<int64_t>(1, -hi), -lo) + " )");
    }
    if (hi >= 0) alts.push_back(nonnegative_between(std::max<int64_t>(0, lo), hi));
    return add_rule(name, "( " + join(alts, " | ") + " ) space");
  }

  Result<std::string> visit_string(const Json& s, const std::string& ptr, const std::string& name) {
    STRATA_ASSIGN_OR_RETURN(auto min_length, read_count(s, "minLength", ptr));
    STRATA_ASSIGN_OR_RETURN(auto max_length, read_count(s, "maxLength", ptr));
    if (auto it = s.find("pattern"); it != s.end()) {
      if (min_length || max_length || s.contains("format")) {
        return unsupported(ptr +
                           ": 'pattern' next to 'minLength', 'maxLength' or 'format' is not "
                           "supported");
      }
      if (!it->is_string()) return invalid_argument(ptr + "/pattern: must be a string");
      STRATA_ASSIGN_OR_RETURN(std::string ch, primitive("char"));
      STRATA_RETURN_IF_ERROR(primitive("space").status());
      const std::string text = it->get<std::string>();
      STRATA_ASSIGN_OR_RETURN(std::string expr, PatternConverter(text, ptr).run(ch));
      return add_rule(name, "\"\\\"\" " + expr + " \"\\\"\" space");
    }
    if (auto it = s.find("format"); it != s.end()) {
      if (min_length || max_length) {
        return unsupported(ptr + ": 'format' next to 'minLength' or 'maxLength' is not supported");
      }
      for (const FormatRow& f : kFormatRows) {
        if (*it == f.format) return primitive(f.rule);
      }
      return unsupported(ptr + "/format: " + shown(*it) +
                         " is not supported (only date, time, date-time and uuid)");
    }
    if (!min_length && !max_length) return primitive("string");
    const int64_t lo = min_length.value_or(0);
    if (max_length && *max_length < lo) {
      return invalid_argument(ptr + ": 'maxLength' " + std::to_string(*max_length) +
                              " is less than 'minLength' " + std::to_string(lo));
    }
    STRATA_ASSIGN_OR_RETURN(std::string ch, primitive("char"));
    STRATA_RETURN_IF_ERROR(primitive("space").status());
    std::string chars = repeat(ch, lo, max_length);
    return add_rule(name, "\"\\\"\" " + (chars.empty() ? "" : chars + " ") + "\"\\\"\" space");
  }

  Result<std::string> visit_array(const Json& s, const std::string& ptr, const std::string& name,
                                  int depth) {
    if (auto it = s.find("uniqueItems"); it != s.end() && *it != false) {
      return unsupported(ptr + ": 'uniqueItems' other than false is not supported");
    }
    STRATA_ASSIGN_OR_RETURN(auto min_items, read_count(s, "minItems", ptr));
    STRATA_ASSIGN_OR_RETURN(auto max_items, read_count(s, "maxItems", ptr));
    const int64_t lo = min_items.value_or(0);
    std::optional<int64_t> hi = max_items;

    std::vector<std::string> prefix;
    if (auto it = s.find("prefixItems"); it != s.end()) {
      if (!it->is_array()) {
        return invalid_argument(ptr + "/prefixItems: must be a list of schemas, not " + shown(*it));
      }
      if (static_cast<int64_t>(it->size()) > kMaxRepeat) {
        return out_of_range(ptr + "/prefixItems: " + std::to_string(it->size()) +
                            " schemas, more than " + std::to_string(kMaxRepeat) + " (the limit)");
      }
      for (size_t i = 0; i < it->size(); ++i) {
        STRATA_ASSIGN_OR_RETURN(std::string rule,
                                visit_guarded((*it)[i], ptr + "/prefixItems/" + std::to_string(i),
                                              child_name(name, std::to_string(i)), depth + 1));
        prefix.push_back(rule);
      }
    }
    const auto k = static_cast<int64_t>(prefix.size());
    std::string rest;  // the rule of items after the prefix; empty: none allowed
    if (auto it = s.find("items"); it != s.end()) {
      if (it->is_array()) {
        return unsupported(ptr +
                           "/items: a list of schemas (drafts before 2020-12) is not "
                           "supported; use 'prefixItems'");
      }
      if (*it != false) {
        STRATA_ASSIGN_OR_RETURN(
            rest, visit_guarded(*it, ptr + "/items", child_name(name, "item"), depth + 1));
      }
    } else {
      STRATA_ASSIGN_OR_RETURN(rest, primitive("value"));
    }
    if (rest.empty()) hi = std::min(hi.value_or(k), k);
    if (hi && *hi < lo) {
      return invalid_argument(ptr + ": no array has at least " + std::to_string(lo) +
                              " and at most " + std::to_string(*hi) + " items");
    }
    STRATA_RETURN_IF_ERROR(primitive("space").status());

    // Items after the prefix: between max(0, lo - k) and hi - k of them.
    std::string text;
    if (!rest.empty() && (!hi || *hi > k)) {
      const std::string more = "( \",\" space " + rest + " )";
      const std::optional<int64_t> more_max =
          hi ? std::optional<int64_t>(*hi - std::max<int64_t>(k, 1)) : std::nullopt;
      if (k == 0) {
        std::string tail = repeat(more, std::max<int64_t>(lo - 1, 0), more_max);
        text = rest + (tail.empty() ? "" : " " + tail);
        if (lo == 0) text = "( " + text + " )?";
      } else {
        text = repeat(more, std::max<int64_t>(lo - k, 0), more_max);
      }
    }
    // Prefix items from the last to the first; the ones past minItems are optional.
    for (int64_t i = std::min<int64_t>(k, hi.value_or(k)) - 1; i >= 0; --i) {
      std::string item = (i > 0 ? "\",\" space " : "") + prefix[i] + (text.empty() ? "" : " ");
      text = item + text;
      if (i >= lo) text = "( " + text + " )?";
      // The grammar engine bounds group nesting (100): a long optional tail becomes rules.
      if ((k - i) % 32 == 0 && i > 0) {
        STRATA_ASSIGN_OR_RETURN(text, add_rule(child_name(name, "tail"), text));
      }
    }
    return add_rule(name, "\"[\" space " + (text.empty() ? "" : text + " ") + "\"]\" space");
  }

  // Adds the properties and required names of one object schema to `shape`.
  Status read_properties(const Json& s, const std::string& ptr, ObjectShape& shape) {
    if (auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) {
        return invalid_argument(ptr + "/properties: must be an object, not " + shown(*it));
      }
      for (const auto& [key, value] : it->items()) {
        const std::string at = ptr + "/properties/" + pointer_token(key);
        if (key.size() > kMaxPropertyNameBytes) {
          return out_of_range(at + ": a property name of " + std::to_string(key.size()) +
                              " bytes, more than " + std::to_string(kMaxPropertyNameBytes) +
                              " (the limit)");
        }
        for (const Property& p : shape.properties) {
          if (p.key == key) return unsupported(at + ": the property is defined twice");
        }
        shape.properties.push_back(Property{key, &value, at});
      }
    }
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) {
        return invalid_argument(ptr + "/required: must be a list of names, not " + shown(*it));
      }
      for (const Json& n : *it) {
        if (!n.is_string()) {
          return invalid_argument(ptr + "/required: " + shown(n) + " is not a property name");
        }
        shape.required.push_back(n.get<std::string>());
      }
    }
    return Status::ok();
  }

  static Status check_required(const ObjectShape& shape, const std::string& ptr) {
    for (const std::string& r : shape.required) {
      bool found = false;
      for (const Property& p : shape.properties) found = found || p.key == r;
      if (!found) {
        return unsupported(ptr + "/required: " + shown(Json(r)) +
                           " is not in 'properties', which is not supported");
      }
    }
    return Status::ok();
  }

  Result<std::string> visit_object(const Json& s, const std::string& ptr, const std::string& name,
                                   int depth) {
    ObjectShape shape;
    STRATA_RETURN_IF_ERROR(read_properties(s, ptr, shape));
    STRATA_RETURN_IF_ERROR(check_required(shape, ptr));
    auto additional = s.find("additionalProperties");
    if (additional != s.end()) {
      if (!additional->is_boolean() && !additional->is_object()) {
        return invalid_argument(ptr + "/additionalProperties: must be a schema, not " +
                                shown(*additional));
      }
      if (*additional != false) {
        shape.extras = true;
        if (additional->is_object()) {
          shape.additional = &*additional;
          shape.additional_pointer = ptr + "/additionalProperties";
        }
      }
    } else if (!s.contains("properties")) {
      // {"type": "object"}: any object.
      return primitive("object");
    }
    return object_rule(shape, ptr, name, depth);
  }

  Result<std::string> object_rule(const ObjectShape& shape, const std::string& ptr,
                                  const std::string& name, int depth) {
    STRATA_RETURN_IF_ERROR(primitive("space").status());
    std::vector<std::string> required_kvs, optional_kvs;
    for (const Property& p : shape.properties) {
      const std::string prop_name = child_name(name, p.key);
      STRATA_ASSIGN_OR_RETURN(std::string value,
                              visit_guarded(*p.schema, p.pointer, prop_name, depth + 1));
      STRATA_ASSIGN_OR_RETURN(std::string kv,
                              add_rule(prop_name + "-kv", gbnf_literal(json_text(Json(p.key))) +
                                                              " space \":\" space " + value));
      const bool required =
          std::find(shape.required.begin(), shape.required.end(), p.key) != shape.required.end();
      (required ? required_kvs : optional_kvs).push_back(kv);
    }
    std::string extra_kv;
    if (shape.extras) {
      std::string value;
      if (shape.additional != nullptr) {
        STRATA_ASSIGN_OR_RETURN(value, visit_guarded(*shape.additional, shape.additional_pointer,
                                                     child_name(name, "additional"), depth + 1));
      } else {
        STRATA_ASSIGN_OR_RETURN(value, primitive("value"));
      }
      STRATA_ASSIGN_OR_RETURN(std::string key, extra_key_rule(shape, name));
      STRATA_ASSIGN_OR_RETURN(
          extra_kv, add_rule(child_name(name, "extra-kv"), key + " \":\" space " + value));
    }

    // rests[j]: the optional properties from j on, each with its comma, then the extra keys.
    const size_t m = optional_kvs.size();
    std::vector<std::string> rests(m + 1);
    if (!extra_kv.empty()) {
      STRATA_ASSIGN_OR_RETURN(
          rests[m], add_rule(child_name(name, "extra-rest"), "( \",\" space " + extra_kv + " )*"));
    }
    for (size_t j = m; j-- > 0;) {
      std::string body = "( \",\" space " + optional_kvs[j] + " )?";
      if (!rests[j + 1].empty()) body += " " + rests[j + 1];
      STRATA_ASSIGN_OR_RETURN(rests[j],
                              add_rule(child_name(name, "rest-" + std::to_string(j)), body));
    }

    std::string body = "\"{\" space ";
    if (!required_kvs.empty()) {
      body += join(required_kvs, " \",\" space ");
      if (!rests[0].empty()) body += " " + rests[0];
      body += " ";
    } else {
      // The first member present has no comma before it: one alternative per possible first.
      std::vector<std::string> firsts;
      for (size_t j = 0; j < m; ++j) {
        firsts.push_back(optional_kvs[j] + (rests[j + 1].empty() ? "" : " " + rests[j + 1]));
      }
      if (!extra_kv.empty()) firsts.push_back(extra_kv + " " + rests[m]);
      if (!firsts.empty()) body += "( " + join(firsts, " | ") + " )? ";
    }
    body += "\"}\" space";
    return add_rule(name, body);
  }

  // ---- Extra keys: any string except the declared property names (a declared name in the
  // extras' place would escape its own schema). A trie of the names' JSON-escaped units: while
  // a key follows a name, it may leave it by a raw character no name continues with; escapes
  // are refused there (an escape could spell a name's next character), allowed once it has left.

  struct TrieNode {
    std::vector<std::pair<std::string, size_t>> children;  // unit -> node index
    bool ends_name = false;
  };

  // Splits the content of a JSON string text (between its quotes) into units: an escape
  // sequence or one UTF-8 code point.
  static std::vector<std::string> escaped_units(const std::string& quoted) {
    std::vector<std::string> units;
    const std::string body = quoted.substr(1, quoted.size() - 2);
    for (size_t i = 0; i < body.size();) {
      size_t len = 1;
      const auto c = static_cast<unsigned char>(body[i]);
      if (c == '\\') {
        len = i + 1 < body.size() && body[i + 1] == 'u' ? 6 : 2;
      } else if (c >= 0xF0) {
        len = 4;
      } else if (c >= 0xE0) {
        len = 3;
      } else if (c >= 0xC0) {
        len = 2;
      }
      len = std::min(len, body.size() - i);
      units.push_back(body.substr(i, len));
      i += len;
    }
    return units;
  }

  // A character-class member for one raw UTF-8 code point.
  static std::string class_member(const std::string& unit) {
    if (unit.size() == 1) return hex_byte(static_cast<unsigned char>(unit[0]));
    uint32_t cp = 0;
    const auto b0 = static_cast<unsigned char>(unit[0]);
    cp = unit.size() == 2 ? (b0 & 0x1F) : unit.size() == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (size_t i = 1; i < unit.size(); ++i) cp = (cp << 6) | (unit[i] & 0x3F);
    if (cp > 0xFFFF) return unit;  // no \U escape in GBNF: the raw bytes
    static const char kDigits[] = "0123456789ABCDEF";
    std::string out = "\\u";
    for (int shift = 12; shift >= 0; shift -= 4) out += kDigits[(cp >> shift) & 15];
    return out;
  }

  // The grammar engine bounds group nesting (100): every kTrieLevelsPerRule levels of the trie
  // start a rule of their own.
  static constexpr size_t kTrieLevelsPerRule = 32;

  Result<std::string> trie_expr(const std::vector<TrieNode>& nodes, size_t at, size_t level,
                                const std::string& ch, const std::string& name) {
    const TrieNode& node = nodes[at];
    if (node.children.empty()) return ch + "+";  // past a whole name: any non-empty rest
    std::vector<std::string> alts;
    std::string excluded;
    for (const auto& [unit, child] : node.children) {
      STRATA_ASSIGN_OR_RETURN(std::string rest, trie_expr(nodes, child, level + 1, ch, name));
      alts.push_back(gbnf_literal(unit) + " " + rest);
      if (unit[0] != '\\') excluded += class_member(unit);
    }
    alts.push_back("[^\"\\\\\\x00-\\x1F\\x7F" + excluded + "] " + ch + "*");
    std::string expr = "( " + join(alts, " | ") + " )" + (node.ends_name ? "" : "?");
    if (level > 0 && level % kTrieLevelsPerRule == 0) return add_rule(name + "-part", expr);
    return expr;
  }

  Result<std::string> extra_key_rule(const ObjectShape& shape, const std::string& name) {
    if (shape.properties.empty()) return primitive("string");
    std::vector<TrieNode> nodes(1);
    for (const Property& p : shape.properties) {
      size_t at = 0;
      for (const std::string& unit : escaped_units(json_text(Json(p.key)))) {
        size_t next = 0;
        for (const auto& [u, child] : nodes[at].children) {
          if (u == unit) next = child;
        }
        if (next == 0) {
          next = nodes.size();
          nodes[at].children.emplace_back(unit, next);
          nodes.emplace_back();
        }
        at = next;
      }
      nodes[at].ends_name = true;
    }
    STRATA_ASSIGN_OR_RETURN(std::string ch, primitive("char"));
    const std::string key_name = child_name(name, "extra-key");
    STRATA_ASSIGN_OR_RETURN(std::string expr, trie_expr(nodes, 0, 0, ch, key_name));
    return add_rule(key_name, "\"\\\"\" " + expr + " \"\\\"\" space");
  }

  const Json* root_;  // the document whose $refs are being resolved
  std::vector<std::pair<std::string, std::string>> rules_;  // name, body; in creation order
  std::unordered_map<std::string, size_t> index_;           // name -> position in rules_
  std::unordered_map<std::string, std::string> by_body_;    // body -> name
  std::unordered_map<std::string, std::string> ref_rules_;  // $ref text -> rule name
  std::vector<std::string> unguarded_refs_;                 // refs entered since the last bracket
  size_t bytes_ = 0;
  size_t visits_ = 0;
};

}  // namespace json_schema_gbnf

Result<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema) {
  return json_schema_gbnf::Converter(schema).run();
}

Result<std::string> json_schemas_to_gbnf(const std::vector<const nlohmann::ordered_json*>& schemas,
                                         const std::vector<std::string>& wanted,
                                         std::vector<std::string>& names) {
  STRATA_CHECK(!schemas.empty() && schemas.size() == wanted.size(),
               "json_schemas_to_gbnf: one wanted name per schema");
  return json_schema_gbnf::Converter(*schemas[0]).run_many(schemas, wanted, names);
}

std::string gbnf_quoted(std::string_view text) { return json_schema_gbnf::gbnf_literal(text); }

std::string gbnf_hex_byte(unsigned char c) { return json_schema_gbnf::hex_byte(c); }

}  // namespace strata::server
