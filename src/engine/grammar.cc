#include "engine/grammar.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <utility>

namespace strata {
namespace {

// Limits on what a request's grammar may cost. Each bounds memory or time that a hostile
// grammar could otherwise make unbounded; none is reached by the grammars people write (the
// JSON grammar uses 1 KB of text, 40 rules and a handful of stacks).

// The text itself: larger than any hand-written or schema-generated grammar.
constexpr size_t kMaxGrammarBytes = 1 << 20;
// Rules and elements after repetitions are expanded: x{1000} copies x a thousand times, and
// nesting such items multiplies, so the compiled size is capped, not just the text. 2^20
// elements of 8 bytes is 8 MiB per grammar.
constexpr size_t kMaxGrammarRules = 1 << 16;
constexpr size_t kMaxGrammarElements = 1 << 20;
// Groups nested inside groups: the parser recurses once per level, so the depth must be small
// enough for any thread's stack.
constexpr int kMaxGroupNesting = 100;
// The counts in {m,n}: each optional occurrence past m is a rule of its own.
constexpr uint32_t kMaxRepetition = 1000;
// Parse stacks alive at once: every code point of every token is tested against each, so this
// bounds the cost of one allowed() call by a constant times the vocabulary. A grammar that keeps
// more alive (heavy ambiguity, or an alternation of thousands of literals) is refused.
constexpr size_t kMaxParseStacks = 2048;
// Elements in one stack: a rule that nests itself (arrays in arrays) pushes one per level;
// 4096 levels is deeper than any legitimate document and bounds each stack's memory.
constexpr uint32_t kMaxStackDepth = 4096;
// Stack nodes in a matcher's arena (20 bytes each and 8 of table: 28 MiB at most), whatever the
// above allow. Every generating slot of the server holds a matcher, so this is per request.
constexpr size_t kMaxStackNodes = 1 << 20;
// Nodes one expansion pass may visit (a pass follows the rules a code point leads into):
// nullable rules can reach many stacks before any is deduplicated.
constexpr size_t kMaxPassWork = 32 * kMaxParseStacks;
// Stack tests and node visits in one allowed() or accept() call: about 0.1 s of work, against
// about 10^5 for the JSON grammar over a 32K vocabulary. The server's decode loop waits for the
// call, so this bounds the stall one request can cause every other request of its group.
constexpr size_t kMaxCallWork = size_t{1} << 24;

constexpr uint32_t kNoPos = UINT32_MAX;
constexpr uint32_t kFailed = UINT32_MAX;
constexpr uint32_t kEmptySlot = UINT32_MAX;
constexpr uint32_t kUnbounded = UINT32_MAX;
constexpr uint32_t kMemoUnknown = UINT32_MAX;
constexpr uint32_t kMemoNone = UINT32_MAX - 1;

bool grammar_is_end(const GrammarElement& e) {
  return e.type == GrammarElementType::kEnd || e.type == GrammarElementType::kAlt;
}

bool grammar_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

// Feeds one byte to an incomplete UTF-8 sequence: -1 when the byte cannot come here, 0 when
// more are due, 1 when `cp` is complete. Strict: no overlong forms, surrogates or values past
// U+10FFFF, as the tokenizer's utf8_decode.
int grammar_utf8_feed(GrammarUtf8Partial& p, uint8_t b, uint32_t& cp) {
  if (p.remain == 0) {
    if (b < 0x80) {
      cp = b;
      return 1;
    }
    p.next_low = 0x80;
    p.next_high = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      p.value = b & 0x1F;
      p.remain = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
      p.value = b & 0x0F;
      p.remain = 2;
      if (b == 0xE0) p.next_low = 0xA0;
      if (b == 0xED) p.next_high = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      p.value = b & 0x07;
      p.remain = 3;
      if (b == 0xF0) p.next_low = 0x90;
      if (b == 0xF4) p.next_high = 0x8F;
    } else {
      return -1;
    }
    return 0;
  }
  if (b < p.next_low || b > p.next_high) return -1;
  p.value = (p.value << 6) | (b & 0x3F);
  p.next_low = 0x80;
  p.next_high = 0xBF;
  if (--p.remain > 0) return 0;
  cp = p.value;
  p.value = 0;
  return 1;
}

// The code points an incomplete sequence can still become: exact, because only the next byte
// is restricted beyond 80..BF.
void grammar_utf8_range(const GrammarUtf8Partial& p, uint32_t& low, uint32_t& high) {
  const int rest = 6 * (p.remain - 1);
  low = ((p.value << 6) | (p.next_low & 0x3F)) << rest;
  high = (((p.value << 6) | (p.next_high & 0x3F)) << rest) | ((1u << rest) - 1);
}

std::string grammar_quote(std::string_view s) {
  std::string out = "\"";
  const size_t n = std::min<size_t>(s.size(), 40);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (n < s.size()) out += "...";
  return out + "\"";
}

}  // namespace

// ---- Parsing ---------------------------------------------------------------------------------

// Builds a Grammar from text: a recursive-descent parser over llama.cpp's GBNF (the recursion
// is bounded by kMaxGroupNesting), then the checks that need every rule.
class GrammarBuilder {
 public:
  explicit GrammarBuilder(std::string_view text) : text_(text) {}

  Result<std::shared_ptr<const Grammar>> build(std::string_view root) {
    if (text_.size() > kMaxGrammarBytes) {
      return out_of_range("grammar text is " + std::to_string(text_.size()) +
                          " bytes, more than the limit of " + std::to_string(kMaxGrammarBytes));
    }
    skip_space(true);
    while (pos_ < text_.size()) {
      STRATA_RETURN_IF_ERROR(parse_rule());
    }
    if (n_elements_ > kMaxGrammarElements) return too_many_elements();
    return finish(root);
  }

 private:
  struct Rule {
    std::string name;
    std::string owner;  // the user's rule it belongs to (itself, unless generated)
    std::vector<GrammarElement> elements;
    bool defined = false;
    size_t first_use = 0;  // text offset of the first reference, for "undefined rule"
  };

  std::string where(size_t at) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    return "line " + std::to_string(line) + " column " + std::to_string(column);
  }
  Status error_at(size_t at, const std::string& what, const std::string& hint = "") const {
    return invalid_argument("grammar: " + what + " at " + where(at) + hint);
  }
  Status too_many_elements() const {
    return out_of_range("grammar: more than " + std::to_string(kMaxGrammarElements) +
                        " elements after expanding repetitions");
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }

  // Spaces, tabs and comments; newlines too where a rule may continue on the next line.
  void skip_space(bool newline_ok) {
    while (!at_end()) {
      const char c = text_[pos_];
      if (c == ' ' || c == '\t') {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && text_[pos_] != '\n' && text_[pos_] != '\r') ++pos_;
      } else if (newline_ok && (c == '\n' || c == '\r')) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  // Whether the text here begins a rule definition (`name ::=`): a line that ends in '|' or
  // '::=' continues on the next, and this keeps an empty last alternative from swallowing the
  // next rule's name.
  bool at_rule_start() const {
    size_t i = pos_;
    while (i < text_.size() && grammar_name_char(text_[i])) ++i;
    if (i == pos_) return false;
    while (i < text_.size() && (text_[i] == ' ' || text_[i] == '\t')) ++i;
    return text_.substr(i, 3) == "::=";
  }

  Result<uint32_t> add_rule(std::string name, std::string owner) {
    if (rules_.size() >= kMaxGrammarRules) {
      return out_of_range("grammar: more than " + std::to_string(kMaxGrammarRules) +
                          " rules after expanding groups and repetitions, at " + where(pos_));
    }
    Rule r;
    r.name = std::move(name);
    r.owner = std::move(owner);
    rules_.push_back(std::move(r));
    return static_cast<uint32_t>(rules_.size() - 1);
  }

  Result<uint32_t> symbol(std::string_view name, size_t at) {
    auto it = ids_.find(std::string(name));
    if (it != ids_.end()) return it->second;
    STRATA_ASSIGN_OR_RETURN(uint32_t id, add_rule(std::string(name), std::string(name)));
    rules_[id].first_use = at;
    ids_.emplace(std::string(name), id);
    return id;
  }

  Result<uint32_t> generated_rule(uint32_t parent) {
    std::string name = rules_[parent].owner + "_" + std::to_string(rules_.size());
    return add_rule(std::move(name), rules_[parent].owner);
  }

  void emit(std::vector<GrammarElement>& out, GrammarElementType type, uint32_t value) {
    out.push_back({type, value});
    ++n_elements_;
  }

  Status parse_rule() {
    const size_t name_at = pos_;
    while (!at_end() && grammar_name_char(text_[pos_])) ++pos_;
    if (pos_ == name_at) return error_at(pos_, "expected a rule name");
    const std::string_view name = text_.substr(name_at, pos_ - name_at);
    skip_space(false);
    if (text_.substr(pos_, 3) != "::=") {
      return error_at(pos_, "expected '::=' after rule name '" + std::string(name) + "'");
    }
    pos_ += 3;
    skip_space(true);
    STRATA_ASSIGN_OR_RETURN(uint32_t id, symbol(name, name_at));
    if (rules_[id].defined) {
      return error_at(name_at, "rule '" + std::string(name) + "' is defined twice");
    }
    rules_[id].defined = true;
    STRATA_RETURN_IF_ERROR(parse_alternates(id, false));
    if (peek() == '\r') {
      pos_ += peek(1) == '\n' ? 2 : 1;
    } else if (peek() == '\n') {
      ++pos_;
    } else if (!at_end() && !at_rule_start()) {
      return error_at(pos_, "unexpected '" + std::string(1, peek()) + "' in rule '" +
                                std::string(name) + "' (expected an item, '|' or a newline)");
    }
    skip_space(true);
    return Status::ok();
  }

  Status parse_alternates(uint32_t rule, bool nested) {
    std::vector<GrammarElement> out;
    STRATA_RETURN_IF_ERROR(parse_sequence(rule, out, nested));
    while (peek() == '|') {
      emit(out, GrammarElementType::kAlt, 0);
      ++pos_;
      skip_space(true);
      STRATA_RETURN_IF_ERROR(parse_sequence(rule, out, nested));
    }
    emit(out, GrammarElementType::kEnd, 0);
    rules_[rule].elements = std::move(out);
    return Status::ok();
  }

  Status parse_hex(int digits, uint32_t& cp) {
    const size_t at = pos_;
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char c = peek();
      uint32_t d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        d = c - 'A' + 10;
      } else {
        return error_at(at, "escape needs " + std::to_string(digits) + " hex digits");
      }
      v = (v << 4) | d;
      ++pos_;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
      return error_at(at, "escape is not a Unicode scalar value (a surrogate or past U+10FFFF)");
    }
    cp = v;
    return Status::ok();
  }

  // One character of a literal or class: an escape, or one UTF-8 code point of the text.
  Status parse_char(uint32_t& cp) {
    const size_t at = pos_;
    if (peek() == '\\') {
      ++pos_;
      const char c = peek();
      ++pos_;
      switch (c) {
        case 'x':
          return parse_hex(2, cp);
        case 'u':
          return parse_hex(4, cp);
        case 'U':
          return parse_hex(8, cp);
        case 't':
          cp = '\t';
          return Status::ok();
        case 'r':
          cp = '\r';
          return Status::ok();
        case 'n':
          cp = '\n';
          return Status::ok();
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
          cp = static_cast<unsigned char>(c);
          return Status::ok();
        default:
          return error_at(at, "unknown escape '\\" + std::string(1, c) + "'",
                          " (known: \\n \\r \\t \\\\ \\\" \\[ \\] \\- \\^ \\xHH \\uHHHH "
                          "\\UHHHHHHHH)");
      }
    }
    GrammarUtf8Partial p;
    while (!at_end()) {
      const int r = grammar_utf8_feed(p, static_cast<uint8_t>(text_[pos_++]), cp);
      if (r == 1) return Status::ok();
      if (r < 0) break;
    }
    return error_at(at, "invalid UTF-8 in the grammar text");
  }

  Status parse_class(std::vector<GrammarElement>& out) {
    const size_t at = pos_;
    ++pos_;  // '['
    bool negated = false;
    if (peek() == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    while (at_end() || peek() != ']') {
      if (at_end()) return error_at(at, "unterminated character class");
      uint32_t low, high;
      STRATA_RETURN_IF_ERROR(parse_char(low));
      high = low;
      if (peek() == '-' && peek(1) != ']' && pos_ + 1 < text_.size()) {
        ++pos_;
        const size_t high_at = pos_;
        STRATA_RETURN_IF_ERROR(parse_char(high));
        if (high < low) return error_at(high_at, "character range ends before it starts");
      }
      ranges.emplace_back(low, high);
    }
    ++pos_;  // ']'
    // Sorted and merged, so that a class is tested in one pass and the partial-UTF-8 test of
    // a negated class can sweep its gaps.
    std::sort(ranges.begin(), ranges.end());
    std::vector<std::pair<uint32_t, uint32_t>> merged;
    for (const auto& r : ranges) {
      if (!merged.empty() && r.first <= merged.back().second + 1) {
        merged.back().second = std::max(merged.back().second, r.second);
      } else {
        merged.push_back(r);
      }
    }
    if (merged.empty()) {
      // [] matches nothing (a code point past U+10FFFF), [^] anything.
      if (negated) {
        emit(out, GrammarElementType::kCharAny, 0);
      } else {
        emit(out, GrammarElementType::kChar, 0x110000);
      }
      return Status::ok();
    }
    for (size_t i = 0; i < merged.size(); ++i) {
      const GrammarElementType first =
          negated ? GrammarElementType::kCharNot : GrammarElementType::kChar;
      emit(out, i == 0 ? first : GrammarElementType::kCharAlt, merged[i].first);
      if (merged[i].second != merged[i].first) {
        emit(out, GrammarElementType::kCharRangeUpper, merged[i].second);
      }
    }
    return Status::ok();
  }

  Status parse_count(uint32_t& n) {
    const size_t at = pos_;
    if (!(peek() >= '0' && peek() <= '9')) return error_at(at, "expected a repetition count");
    uint64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = std::min<uint64_t>(v * 10 + (peek() - '0'), uint64_t{kMaxRepetition} + 1);
      ++pos_;
    }
    if (v > kMaxRepetition) {
      return Status(ErrorKind::kOutOfRange,
                    "grammar: repetition count " + std::string(text_.substr(at, pos_ - at)) +
                        " is more than the limit of " + std::to_string(kMaxRepetition) + " at " +
                        where(at));
    }
    n = static_cast<uint32_t>(v);
    return Status::ok();
  }

  // Rewrites the item out[item:] repeated min to max times (kUnbounded: no maximum) as
  // llama.cpp does: min copies, then for no maximum `R ::= item R |` (tail recursion, so a
  // stack does not grow with the count), else max-min nested optionals
  // `R_k ::= item R_(k-1) |`.
  Status repeat(uint32_t rule, std::vector<GrammarElement>& out, size_t item, uint32_t min,
                uint32_t max) {
    const std::vector<GrammarElement> body(out.begin() + item, out.end());
    out.resize(item);
    n_elements_ -= body.size();
    if (body.empty()) return Status::ok();  // "" repeated is still ""
    const uint64_t optional = max == kUnbounded ? 1 : max - min;
    const uint64_t added = uint64_t{min} * body.size() + optional * (body.size() + 4);
    if (n_elements_ + added > kMaxGrammarElements) return too_many_elements();
    for (uint32_t i = 0; i < min; ++i) {
      out.insert(out.end(), body.begin(), body.end());
      n_elements_ += body.size();
    }
    if (max == kUnbounded) {
      STRATA_ASSIGN_OR_RETURN(uint32_t r, generated_rule(rule));
      std::vector<GrammarElement> elements = body;
      n_elements_ += body.size();
      emit(elements, GrammarElementType::kRuleRef, r);
      emit(elements, GrammarElementType::kAlt, 0);
      emit(elements, GrammarElementType::kEnd, 0);
      rules_[r].elements = std::move(elements);
      rules_[r].defined = true;
      emit(out, GrammarElementType::kRuleRef, r);
      return Status::ok();
    }
    uint32_t inner = kNoPos;
    for (uint32_t k = min; k < max; ++k) {
      STRATA_ASSIGN_OR_RETURN(uint32_t r, generated_rule(rule));
      std::vector<GrammarElement> elements = body;
      n_elements_ += body.size();
      if (inner != kNoPos) emit(elements, GrammarElementType::kRuleRef, inner);
      emit(elements, GrammarElementType::kAlt, 0);
      emit(elements, GrammarElementType::kEnd, 0);
      rules_[r].elements = std::move(elements);
      rules_[r].defined = true;
      inner = r;
    }
    if (inner != kNoPos) emit(out, GrammarElementType::kRuleRef, inner);
    return Status::ok();
  }

  Status parse_sequence(uint32_t rule, std::vector<GrammarElement>& out, bool nested) {
    size_t item = out.size();
    bool have_item = false;
    while (!at_end()) {
      const char c = peek();
      const size_t at = pos_;
      if (c == '"') {
        item = out.size();
        ++pos_;
        while (at_end() || peek() != '"') {
          if (at_end()) return error_at(at, "unterminated literal");
          uint32_t cp;
          STRATA_RETURN_IF_ERROR(parse_char(cp));
          emit(out, GrammarElementType::kChar, cp);
        }
        ++pos_;
      } else if (c == '[') {
        item = out.size();
        STRATA_RETURN_IF_ERROR(parse_class(out));
      } else if (grammar_name_char(c)) {
        if (at_rule_start()) break;
        item = out.size();
        while (!at_end() && grammar_name_char(text_[pos_])) ++pos_;
        STRATA_ASSIGN_OR_RETURN(uint32_t id, symbol(text_.substr(at, pos_ - at), at));
        emit(out, GrammarElementType::kRuleRef, id);
      } else if (c == '(') {
        if (depth_ >= kMaxGroupNesting) {
          return Status(ErrorKind::kOutOfRange, "grammar: groups nested more than " +
                                                    std::to_string(kMaxGroupNesting) + " deep at " +
                                                    where(at));
        }
        ++pos_;
        skip_space(true);
        STRATA_ASSIGN_OR_RETURN(uint32_t sub, generated_rule(rule));
        ++depth_;
        STRATA_RETURN_IF_ERROR(parse_alternates(sub, true));
        --depth_;
        rules_[sub].defined = true;
        if (peek() != ')') return error_at(pos_, "expected ')' to close the group opened");
        ++pos_;
        item = out.size();
        emit(out, GrammarElementType::kRuleRef, sub);
      } else if (c == '.') {
        item = out.size();
        ++pos_;
        emit(out, GrammarElementType::kCharAny, 0);
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_item) {
          return error_at(at, "'" + std::string(1, c) + "' with no item before it to repeat");
        }
        uint32_t min = 0, max = kUnbounded;
        ++pos_;
        if (c == '+') min = 1;
        if (c == '?') max = 1;
        if (c == '{') {
          skip_space(nested);
          STRATA_RETURN_IF_ERROR(parse_count(min));
          skip_space(nested);
          max = min;
          if (peek() == ',') {
            ++pos_;
            skip_space(nested);
            max = kUnbounded;
            if (peek() >= '0' && peek() <= '9') {
              STRATA_RETURN_IF_ERROR(parse_count(max));
              skip_space(nested);
            }
          }
          if (peek() != '}') return error_at(pos_, "expected '}' to close the repetition");
          ++pos_;
          if (min > max) {
            return error_at(at, "repetition {" + std::to_string(min) + "," + std::to_string(max) +
                                    "} has its minimum above its maximum");
          }
        }
        STRATA_RETURN_IF_ERROR(repeat(rule, out, item, min, max));
        skip_space(nested);
        continue;
      } else {
        break;
      }
      have_item = true;
      skip_space(nested);
    }
    return Status::ok();
  }

  // ---- Checks over the whole grammar -------------------------------------------------------

  // Rules that can match the empty text, by propagation: an alternative is nullable when all
  // its items are nullable rule references, counted down as those rules turn out nullable.
  std::vector<bool> nullable_rules() const {
    const size_t n = rules_.size();
    std::vector<bool> nullable(n, false);
    std::vector<uint32_t> alt_rule, alt_pending;
    std::vector<std::vector<uint32_t>> users(n);  // rule -> alternatives that reference it
    std::vector<uint32_t> queue;
    for (uint32_t r = 0; r < n; ++r) {
      const auto& el = rules_[r].elements;
      size_t i = 0;
      while (i < el.size()) {
        const uint32_t alt = static_cast<uint32_t>(alt_rule.size());
        bool has_char = false;
        uint32_t refs = 0;
        size_t j = i;
        for (; j < el.size() && !grammar_is_end(el[j]); ++j) {
          if (el[j].type == GrammarElementType::kRuleRef) {
            ++refs;
          } else {
            has_char = true;
          }
        }
        alt_rule.push_back(r);
        alt_pending.push_back(has_char ? UINT32_MAX : refs);
        if (!has_char) {
          for (size_t k = i; k < j; ++k) users[el[k].value].push_back(alt);
          if (refs == 0 && !nullable[r]) {
            nullable[r] = true;
            queue.push_back(r);
          }
        }
        i = j + 1;
      }
    }
    while (!queue.empty()) {
      const uint32_t r = queue.back();
      queue.pop_back();
      for (uint32_t alt : users[r]) {
        if (--alt_pending[alt] == 0 && !nullable[alt_rule[alt]]) {
          nullable[alt_rule[alt]] = true;
          queue.push_back(alt_rule[alt]);
        }
      }
    }
    return nullable;
  }

  // A rule that reaches itself before matching any character would expand forever. Edges go
  // from a rule to each rule it references with only nullable items before; a cycle among
  // them is left recursion. Iterative depth-first search, so a long chain cannot overflow.
  Status check_left_recursion() const {
    const size_t n = rules_.size();
    const std::vector<bool> nullable = nullable_rules();
    std::vector<std::vector<uint32_t>> edges(n);
    for (uint32_t r = 0; r < n; ++r) {
      const auto& el = rules_[r].elements;
      bool blocked = false;
      for (const GrammarElement& e : el) {
        if (grammar_is_end(e)) {
          blocked = false;
        } else if (!blocked && e.type == GrammarElementType::kRuleRef) {
          edges[r].push_back(e.value);
          if (!nullable[e.value]) blocked = true;
        } else if (e.type != GrammarElementType::kRuleRef) {
          blocked = true;
        }
      }
    }
    enum : uint8_t { kWhite, kGray, kBlack };
    std::vector<uint8_t> color(n, kWhite);
    std::vector<std::pair<uint32_t, size_t>> path;  // rule, next edge to follow
    for (uint32_t start = 0; start < n; ++start) {
      if (color[start] != kWhite) continue;
      color[start] = kGray;
      path.emplace_back(start, 0);
      while (!path.empty()) {
        auto& [r, next] = path.back();
        if (next == edges[r].size()) {
          color[r] = kBlack;
          path.pop_back();
          continue;
        }
        const uint32_t to = edges[r][next++];
        if (color[to] == kWhite) {
          color[to] = kGray;
          path.emplace_back(to, 0);
        } else if (color[to] == kGray) {
          // The cycle is the search path from `to` on; generated rules show as their owner.
          size_t i = path.size();
          while (path[i - 1].first != to) --i;
          std::string cycle, last;
          for (--i; i < path.size(); ++i) {
            const std::string& owner = rules_[path[i].first].owner;
            if (owner == last) continue;
            cycle += owner + " -> ";
            last = owner;
          }
          cycle += rules_[to].owner;
          return invalid_argument("grammar: rule '" + rules_[to].owner + "' is left-recursive (" +
                                  cycle +
                                  "): it reaches itself before matching any character, "
                                  "directly, through rules that can match empty text, or by "
                                  "repeating an item that can match empty text");
        }
      }
    }
    return Status::ok();
  }

  Result<std::shared_ptr<const Grammar>> finish(std::string_view root) {
    const Rule* undefined = nullptr;
    for (const Rule& r : rules_) {
      if (!r.defined && (undefined == nullptr || r.first_use < undefined->first_use)) {
        undefined = &r;
      }
    }
    if (undefined != nullptr) {
      return error_at(undefined->first_use, "undefined rule '" + undefined->name + "' used");
    }
    auto root_it = ids_.find(std::string(root));
    if (root_it == ids_.end()) {
      return invalid_argument("grammar: no rule '" + std::string(root) +
                              "' (the start rule) is defined");
    }
    STRATA_RETURN_IF_ERROR(check_left_recursion());

    auto g = std::make_shared<Grammar>();
    g->root_ = root_it->second;
    g->elements_.reserve(n_elements_);
    g->alt_ranges_.push_back(0);
    for (Rule& r : rules_) {
      const uint32_t begin = static_cast<uint32_t>(g->elements_.size());
      g->rule_begin_.push_back(begin);
      g->alt_starts_.push_back(begin);
      for (size_t i = 0; i + 1 < r.elements.size(); ++i) {
        if (r.elements[i].type == GrammarElementType::kAlt) {
          g->alt_starts_.push_back(begin + static_cast<uint32_t>(i) + 1);
        }
      }
      g->alt_ranges_.push_back(static_cast<uint32_t>(g->alt_starts_.size()));
      g->elements_.insert(g->elements_.end(), r.elements.begin(), r.elements.end());
      g->rule_names_.push_back(std::move(r.name));
    }
    std::shared_ptr<const Grammar> shared = std::move(g);
    // The start must fit the matcher's limits; better refused here than on the first token.
    GrammarMatcher probe(shared);
    STRATA_RETURN_IF_ERROR(probe.status());
    return shared;
  }

  std::string_view text_;
  size_t pos_ = 0;
  int depth_ = 0;
  size_t n_elements_ = 0;
  std::vector<Rule> rules_;
  std::unordered_map<std::string, uint32_t> ids_;  // the user's rules; generated ones have none
};

Result<std::shared_ptr<const Grammar>> Grammar::parse(std::string_view text,
                                                      std::string_view root) {
  return GrammarBuilder(text).build(root);
}

// ---- Vocabulary ------------------------------------------------------------------------------

GrammarVocab::GrammarVocab(std::vector<std::string> pieces, std::vector<bool> never)
    : pieces_(std::move(pieces)) {
  // Each token that is UTF-8 from its first byte: its code points, and the range of a code
  // point its last bytes begin.
  struct Entry {
    int32_t token;
    uint32_t cp_begin, cp_end;
    bool partial;
    uint32_t low, high;
  };
  std::vector<uint32_t> cps;
  std::vector<Entry> entries;
  for (size_t t = 0; t < pieces_.size(); ++t) {
    const std::string& s = pieces_[t];
    if (s.empty() || (t < never.size() && never[t])) continue;
    const uint8_t first = static_cast<uint8_t>(s[0]);
    if (first >= 0x80 && first <= 0xBF) {
      continuation_tokens_.push_back(static_cast<int32_t>(t));
      continue;
    }
    const size_t begin = cps.size();
    GrammarUtf8Partial p;
    bool valid = true;
    for (char c : s) {
      uint32_t cp;
      const int r = grammar_utf8_feed(p, static_cast<uint8_t>(c), cp);
      if (r < 0) {
        valid = false;
        break;
      }
      if (r == 1) cps.push_back(cp);
    }
    if (!valid) {
      cps.resize(begin);
      continue;
    }
    Entry e{static_cast<int32_t>(t),
            static_cast<uint32_t>(begin),
            static_cast<uint32_t>(cps.size()),
            p.remain > 0,
            0,
            0};
    if (e.partial) grammar_utf8_range(p, e.low, e.high);
    entries.push_back(e);
  }
  // Sorted by code points, every trie node's tokens are a contiguous run, those ending there
  // first (a prefix sorts before its extensions).
  std::sort(entries.begin(), entries.end(), [&cps](const Entry& a, const Entry& b) {
    return std::lexicographical_compare(cps.begin() + a.cp_begin, cps.begin() + a.cp_end,
                                        cps.begin() + b.cp_begin, cps.begin() + b.cp_end);
  });
  // Breadth first, so that each node's children are allocated together.
  struct Pending {
    uint32_t node;
    size_t lo, hi, depth;
  };
  std::vector<Pending> queue;
  trie_.push_back({0, 0, 0, 0, 0, 0, 0});
  queue.push_back({0, 0, entries.size(), 0});
  for (size_t q = 0; q < queue.size(); ++q) {
    const Pending cur = queue[q];
    size_t i = cur.lo;
    TrieNode& node = trie_[cur.node];
    node.token_begin = static_cast<uint32_t>(trie_tokens_.size());
    node.partial_begin = static_cast<uint32_t>(partial_tails_.size());
    for (; i < cur.hi && entries[i].cp_end - entries[i].cp_begin == cur.depth; ++i) {
      if (entries[i].partial) {
        partial_tails_.push_back({entries[i].token, entries[i].low, entries[i].high});
      } else {
        trie_tokens_.push_back(entries[i].token);
      }
    }
    node.token_end = static_cast<uint32_t>(trie_tokens_.size());
    node.partial_end = static_cast<uint32_t>(partial_tails_.size());
    node.child_begin = static_cast<uint32_t>(trie_.size());
    while (i < cur.hi) {
      const uint32_t cp = cps[entries[i].cp_begin + cur.depth];
      size_t j = i;
      while (j < cur.hi && cps[entries[j].cp_begin + cur.depth] == cp) ++j;
      queue.push_back({static_cast<uint32_t>(trie_.size()), i, j, cur.depth + 1});
      trie_.push_back({cp, 0, 0, 0, 0, 0, 0});
      i = j;
    }
    trie_[cur.node].child_end = static_cast<uint32_t>(trie_.size());
  }
}

// ---- Matching --------------------------------------------------------------------------------

namespace {

uint64_t grammar_node_hash(uint32_t pos, uint32_t parent) {
  uint64_t h = (uint64_t{pos} << 32 | parent) * 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 29);
}

// Whether the character element group at `e` matches `cp`; `next` is the element after it.
bool grammar_match_char(const GrammarElement* e, uint32_t cp, const GrammarElement*& next) {
  if (e->type == GrammarElementType::kCharAny) {
    next = e + 1;
    return true;
  }
  const bool positive = e->type == GrammarElementType::kChar;
  bool found = false;
  do {
    uint32_t low = e->value, high = low;
    if (e[1].type == GrammarElementType::kCharRangeUpper) {
      high = e[1].value;
      e += 2;
    } else {
      e += 1;
    }
    found = found || (low <= cp && cp <= high);
  } while (e->type == GrammarElementType::kCharAlt);
  next = e;
  return found == positive;
}

// Whether the group at `e` matches some code point in [low, high]. A class's ranges are
// sorted and disjoint, so a negated class is swept once for a gap inside [low, high].
bool grammar_match_range(const GrammarElement* e, uint32_t low, uint32_t high) {
  if (e->type == GrammarElementType::kCharAny) return true;
  const bool positive = e->type == GrammarElementType::kChar;
  uint32_t free_from = low;
  do {
    uint32_t a = e->value, b = a;
    if (e[1].type == GrammarElementType::kCharRangeUpper) {
      b = e[1].value;
      e += 2;
    } else {
      e += 1;
    }
    if (positive) {
      if (a <= high && low <= b) return true;
    } else if (a <= free_from && free_from <= b) {
      free_from = b + 1;
    }
  } while (e->type == GrammarElementType::kCharAlt);
  return positive ? false : free_from <= high;
}

}  // namespace

void GrammarMatcher::Arena::reset() {
  nodes.assign(1, Node{kNoPos, 0, 0, kEmptySlot, 0});
  table.assign(1024, kEmptySlot);
}

void GrammarMatcher::Arena::truncate(size_t size) {
  for (size_t id = nodes.size(); id-- > size;) table[nodes[id].slot] = kEmptySlot;
  nodes.resize(size);
}

void GrammarMatcher::Arena::rehash(size_t capacity) {
  // Reinserting in id order gives the table that inserting one by one would have, so that
  // truncate() can still undo the newest insertions.
  table.assign(capacity, kEmptySlot);
  const size_t mask = capacity - 1;
  for (size_t id = 1; id < nodes.size(); ++id) {
    size_t h = grammar_node_hash(nodes[id].pos, nodes[id].parent) & mask;
    while (table[h] != kEmptySlot) h = (h + 1) & mask;
    table[h] = static_cast<uint32_t>(id);
    nodes[id].slot = static_cast<uint32_t>(h);
  }
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar)
    : grammar_(std::move(grammar)) {
  arena_.reset();
  if (grammar_ == nullptr || grammar_->n_rules() == 0) {
    init_status_ = invalid_argument("grammar: no rules");
    return;
  }
  begin_pass();
  const auto& el = grammar_->elements();
  const uint32_t root = grammar_->root_rule();
  for (const uint32_t* a = grammar_->alternatives_begin(root);
       a != grammar_->alternatives_end(root); ++a) {
    const uint32_t top = grammar_is_end(el[*a]) ? 0 : intern(*a, 0);
    if (top == kFailed || !expand(top, stacks_)) {
      init_status_ = error_.with_context("grammar start");
      stacks_.clear();
      return;
    }
  }
  std::sort(stacks_.begin(), stacks_.end());
}

void GrammarMatcher::begin_pass() const {
  if (++pass_ == 0) {
    for (Node& n : arena_.nodes) n.mark = 0;
    pass_ = 1;
  }
}

uint32_t GrammarMatcher::intern(uint32_t pos, uint32_t parent) const {
  size_t mask = arena_.table.size() - 1;
  size_t h = grammar_node_hash(pos, parent) & mask;
  while (arena_.table[h] != kEmptySlot) {
    const Node& n = arena_.nodes[arena_.table[h]];
    if (n.pos == pos && n.parent == parent) return arena_.table[h];
    h = (h + 1) & mask;
  }
  const uint32_t depth = arena_.nodes[parent].depth + 1;
  if (depth > kMaxStackDepth) {
    error_ = out_of_range("grammar: a parse stack is deeper than " +
                          std::to_string(kMaxStackDepth) + " elements (nesting too deep)");
    return kFailed;
  }
  if (arena_.nodes.size() >= kMaxStackNodes) {
    error_ = out_of_range("grammar: parse stacks need more than " + std::to_string(kMaxStackNodes) +
                          " nodes (grammar too ambiguous)");
    return kFailed;
  }
  const uint32_t id = static_cast<uint32_t>(arena_.nodes.size());
  arena_.nodes.push_back(Node{pos, parent, depth, static_cast<uint32_t>(h), 0});
  arena_.table[h] = id;
  if (arena_.nodes.size() * 2 > arena_.table.size()) arena_.rehash(arena_.table.size() * 2);
  return id;
}

bool GrammarMatcher::expand(uint32_t id, std::vector<uint32_t>& out) const {
  const GrammarElement* el = grammar_->elements().data();
  work_.clear();
  work_.push_back(id);
  while (!work_.empty()) {
    const uint32_t n = work_.back();
    work_.pop_back();
    if (arena_.nodes[n].mark == pass_) continue;
    arena_.nodes[n].mark = pass_;
    if (++pass_work_ > kMaxPassWork || ++call_work_ > kMaxCallWork) {
      error_ = out_of_range(
          "grammar too ambiguous: expanding its rules took more than " +
          std::to_string(pass_work_ > kMaxPassWork ? kMaxPassWork : kMaxCallWork) + " steps");
      return false;
    }
    const uint32_t pos = arena_.nodes[n].pos;
    if (n == 0 || el[pos].type != GrammarElementType::kRuleRef) {
      // Marks make each node visit once per pass, and equal stacks are equal nodes: no
      // duplicates reach `out`.
      out.push_back(n);
      if (out.size() > kMaxParseStacks) {
        error_ = out_of_range("grammar too ambiguous: more than " +
                              std::to_string(kMaxParseStacks) + " parse stacks at once");
        return false;
      }
      continue;
    }
    const uint32_t parent = arena_.nodes[n].parent;
    const uint32_t rule = el[pos].value;
    uint32_t base = parent;
    if (!grammar_is_end(el[pos + 1])) {
      base = intern(pos + 1, parent);
      if (base == kFailed) return false;
    }
    for (const uint32_t* a = grammar_->alternatives_begin(rule);
         a != grammar_->alternatives_end(rule); ++a) {
      if (grammar_is_end(el[*a])) {
        work_.push_back(base);
      } else {
        const uint32_t top = intern(*a, base);
        if (top == kFailed) return false;
        work_.push_back(top);
      }
    }
  }
  return true;
}

bool GrammarMatcher::step(const uint32_t* in, size_t n_in, uint32_t cp,
                          std::vector<uint32_t>& out) const {
  out.clear();
  call_work_ += n_in;
  const GrammarElement* el = grammar_->elements().data();
  size_t contributors = 0;
  for (size_t i = 0; i < n_in; ++i) {
    if (in[i] == 0) continue;
    const Node node = arena_.nodes[in[i]];
    const GrammarElement* next;
    if (!grammar_match_char(el + node.pos, cp, next)) continue;
    uint32_t base = node.parent;
    if (!grammar_is_end(*next)) {
      base = intern(static_cast<uint32_t>(next - el), node.parent);
      if (base == kFailed) return false;
    }
    ++contributors;
    // A node's expansion depends on nothing else, so allowed() remembers those of the nodes
    // that outlive its search (the ones it started with) when their results do too: inside a
    // string, every code point leads back to the same few nodes.
    const bool memoizable = base < memo_begin_.size();
    if (memoizable && memo_begin_[base] < kMemoNone) {
      const uint32_t* ids = memo_ids_.data() + memo_begin_[base];
      out.insert(out.end(), ids, ids + memo_size_[base]);
      call_work_ += memo_size_[base];
      continue;
    }
    begin_pass();
    pass_work_ = 0;
    expand_out_.clear();
    if (!expand(base, expand_out_)) return false;
    out.insert(out.end(), expand_out_.begin(), expand_out_.end());
    if (memoizable && memo_begin_[base] == kMemoUnknown) {
      const bool lasting = std::all_of(expand_out_.begin(), expand_out_.end(),
                                       [this](uint32_t id) { return id < memo_begin_.size(); });
      memo_begin_[base] = lasting ? static_cast<uint32_t>(memo_ids_.size()) : kMemoNone;
      if (lasting) {
        memo_size_[base] = static_cast<uint32_t>(expand_out_.size());
        memo_ids_.insert(memo_ids_.end(), expand_out_.begin(), expand_out_.end());
      }
    }
  }
  if (contributors > 1) {
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  }
  if (out.size() > kMaxParseStacks) {
    error_ = out_of_range("grammar too ambiguous: more than " + std::to_string(kMaxParseStacks) +
                          " parse stacks at once");
    return false;
  }
  return true;
}

bool GrammarMatcher::any_takes_range(const uint32_t* in, size_t n_in, uint32_t low,
                                     uint32_t high) const {
  const GrammarElement* el = grammar_->elements().data();
  for (size_t i = 0; i < n_in; ++i) {
    if (in[i] != 0 && grammar_match_range(el + arena_.nodes[in[i]].pos, low, high)) return true;
  }
  return false;
}

bool GrammarMatcher::run_bytes(std::string_view bytes, std::vector<uint32_t>& out_stacks,
                               GrammarUtf8Partial& out_partial, size_t& fail_at) const {
  std::vector<uint32_t>& cur = run_a_;
  std::vector<uint32_t>& next = run_b_;
  cur.assign(stacks_.begin(), stacks_.end());
  GrammarUtf8Partial p = partial_;
  size_t cp_start = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (p.remain == 0) cp_start = i;
    uint32_t cp;
    const int r = grammar_utf8_feed(p, static_cast<uint8_t>(bytes[i]), cp);
    if (r < 0) {
      fail_at = i;
      return false;
    }
    if (r == 0) continue;
    if (!step(cur.data(), cur.size(), cp, next)) return false;
    if (next.empty()) {
      fail_at = cp_start;
      return false;
    }
    cur.swap(next);
  }
  out_stacks.clear();
  if (p.remain > 0) {
    // Keep only the stacks that the rest of this code point can still satisfy.
    uint32_t low, high;
    grammar_utf8_range(p, low, high);
    for (uint32_t s : cur) {
      if (any_takes_range(&s, 1, low, high)) out_stacks.push_back(s);
    }
    if (out_stacks.empty()) {
      fail_at = cp_start;
      return false;
    }
  } else {
    out_stacks.assign(cur.begin(), cur.end());
  }
  out_partial = p;
  return true;
}

bool GrammarMatcher::complete() const {
  return init_status_.is_ok() && partial_.remain == 0 && !stacks_.empty() && stacks_[0] == 0;
}

bool GrammarMatcher::exhausted() const { return complete() && stacks_.size() == 1; }

Status GrammarMatcher::accept(std::string_view bytes) {
  STRATA_RETURN_IF_ERROR(init_status_);
  const size_t mark = arena_.nodes.size();
  error_ = Status::ok();
  call_work_ = 0;
  std::vector<uint32_t> stacks;
  GrammarUtf8Partial partial;
  size_t fail_at = 0;
  if (!run_bytes(bytes, stacks, partial, fail_at)) {
    arena_.truncate(mark);
    if (!error_.is_ok()) return error_;
    return invalid_argument("grammar does not accept byte " + std::to_string(fail_at) + " of " +
                            grammar_quote(bytes));
  }
  std::sort(stacks.begin(), stacks.end());
  stacks_ = std::move(stacks);
  partial_ = partial;
  compact();
  return Status::ok();
}

// Copies the nodes the live stacks use into a fresh arena: what a step replaced is garbage, and
// without this the arena would grow with the length of the text.
void GrammarMatcher::compact() {
  Arena fresh;
  fresh.reset();
  remap_.assign(arena_.nodes.size(), kNoPos);
  remap_[0] = 0;
  for (uint32_t& top : stacks_) {
    work_.clear();
    for (uint32_t n = top; remap_[n] == kNoPos; n = arena_.nodes[n].parent) work_.push_back(n);
    for (size_t i = work_.size(); i-- > 0;) {
      const Node& old = arena_.nodes[work_[i]];
      const uint32_t parent = remap_[old.parent];
      const uint32_t id = static_cast<uint32_t>(fresh.nodes.size());
      fresh.nodes.push_back(Node{old.pos, parent, old.depth, 0, 0});
      remap_[work_[i]] = id;
    }
    top = remap_[top];
  }
  size_t capacity = 1024;
  while (fresh.nodes.size() * 2 > capacity) capacity *= 2;
  fresh.rehash(capacity);
  arena_ = std::move(fresh);
  std::sort(stacks_.begin(), stacks_.end());
}

bool GrammarMatcher::mask_key(std::vector<uint32_t>& key) const {
  // Past this many words a state is rare enough, and its key costly enough, not to keep.
  constexpr size_t kMaxKeyWords = 1024;
  key.clear();
  key.push_back(partial_.value);
  key.push_back(partial_.remain | (uint32_t{partial_.next_low} << 8) |
                (uint32_t{partial_.next_high} << 16));
  for (uint32_t top : stacks_) {
    for (uint32_t n = top; n != 0; n = arena_.nodes[n].parent) {
      if (key.size() >= kMaxKeyWords) return false;
      key.push_back(arena_.nodes[n].pos);
    }
    key.push_back(kNoPos);
  }
  return true;
}

Status GrammarMatcher::allowed(const GrammarVocab& vocab, std::vector<uint8_t>& allowed) const {
  // Four states cover a string's or a number's repetition beside the structure around it.
  constexpr size_t kMaskCacheEntries = 4;
  if (!init_status_.is_ok()) {
    allowed.assign(vocab.size(), 0);
    return init_status_;
  }
  const bool keyed = mask_key(mask_key_);
  if (keyed) {
    for (MaskEntry& e : mask_cache_) {
      if (e.vocab == &vocab && e.mask.size() == static_cast<size_t>(vocab.size()) &&
          e.key == mask_key_) {
        e.used = ++mask_clock_;
        ++mask_hits_;
        allowed = e.mask;
        return Status::ok();
      }
    }
  }
  STRATA_RETURN_IF_ERROR(allowed_uncached(vocab, allowed));
  if (keyed) {
    MaskEntry* slot = nullptr;
    if (mask_cache_.size() < kMaskCacheEntries) {
      slot = &mask_cache_.emplace_back();
    } else {
      slot = &*std::min_element(
          mask_cache_.begin(), mask_cache_.end(),
          [](const MaskEntry& a, const MaskEntry& b) { return a.used < b.used; });
    }
    slot->vocab = &vocab;
    slot->key = mask_key_;
    slot->mask = allowed;
    slot->used = ++mask_clock_;
  }
  return Status::ok();
}

Status GrammarMatcher::allowed_uncached(const GrammarVocab& vocab,
                                        std::vector<uint8_t>& allowed) const {
  allowed.assign(vocab.size(), 0);
  const size_t mark = arena_.nodes.size();
  error_ = Status::ok();
  call_work_ = 0;
  memo_begin_.assign(mark, kMemoUnknown);
  memo_size_.resize(mark);
  memo_ids_.clear();
  Status status;
  if (partial_.remain == 0) {
    status = allowed_from_trie(vocab, allowed);
  } else {
    // Only a token that starts by finishing the pending code point can follow; those are few
    // (pieces that begin with a continuation byte), so each is run on its own.
    GrammarUtf8Partial partial;
    size_t fail_at;
    for (int32_t t : vocab.continuation_tokens()) {
      const size_t before = arena_.nodes.size();
      const bool ok = run_bytes(vocab.piece(t), step_out_, partial, fail_at);
      arena_.truncate(before);
      if (ok) {
        allowed[t] = 1;
      } else if (!error_.is_ok()) {
        status = error_;
        break;
      }
    }
  }
  arena_.truncate(mark);
  memo_begin_.clear();
  if (!status.is_ok()) std::fill(allowed.begin(), allowed.end(), 0);
  return status;
}

// Depth-first over the vocabulary's trie, carrying the stacks after each prefix: a prefix the
// grammar refuses drops every token under it at once, and tokens that share a prefix share its
// work. Each level's stacks and nodes are dropped when the search leaves it.
Status GrammarMatcher::allowed_from_trie(const GrammarVocab& vocab,
                                         std::vector<uint8_t>& allowed) const {
  const auto& trie = vocab.trie();
  const auto& tokens = vocab.trie_tokens();
  const auto& tails = vocab.partial_tails();
  sets_.assign(stacks_.begin(), stacks_.end());
  for (uint32_t i = trie[0].partial_begin; i < trie[0].partial_end; ++i) {
    if (any_takes_range(sets_.data(), sets_.size(), tails[i].low, tails[i].high)) {
      allowed[tails[i].token] = 1;
    }
  }
  frames_.clear();
  frames_.push_back(Frame{0, 0, static_cast<uint32_t>(sets_.size()), trie[0].child_begin,
                          static_cast<uint32_t>(arena_.nodes.size())});
  while (!frames_.empty()) {
    Frame& f = frames_.back();
    if (f.next_child == trie[f.trie_node].child_end) {
      arena_.truncate(f.arena_mark);
      sets_.resize(f.set_begin);
      frames_.pop_back();
      continue;
    }
    const uint32_t c = f.next_child++;
    const GrammarVocab::TrieNode& child = trie[c];
    const uint32_t mark = static_cast<uint32_t>(arena_.nodes.size());
    if (!step(sets_.data() + f.set_begin, f.set_end - f.set_begin, child.code_point, step_out_)) {
      return error_;
    }
    if (step_out_.empty()) {
      arena_.truncate(mark);
      continue;
    }
    for (uint32_t i = child.token_begin; i < child.token_end; ++i) allowed[tokens[i]] = 1;
    for (uint32_t i = child.partial_begin; i < child.partial_end; ++i) {
      if (any_takes_range(step_out_.data(), step_out_.size(), tails[i].low, tails[i].high)) {
        allowed[tails[i].token] = 1;
      }
    }
    if (child.child_begin == child.child_end) {
      arena_.truncate(mark);
      continue;
    }
    const uint32_t begin = static_cast<uint32_t>(sets_.size());
    sets_.insert(sets_.end(), step_out_.begin(), step_out_.end());
    frames_.push_back(
        Frame{c, begin, static_cast<uint32_t>(sets_.size()), child.child_begin, mark});
  }
  return Status::ok();
}

// ---- JSON ------------------------------------------------------------------------------------

namespace {

// llama.cpp's grammars/json.gbnf with two fixes: an exponent's digits are [0-9]{1,16} (the
// original's `[0-9] [1-9]{0,15}` refuses 1e10) and "\/" is a valid escape, as in JSON. Its
// deliberate limits are kept: whitespace is at most one space, or a newline and up to 20 spaces
// or tabs, between tokens (so a model cannot pad forever) and none before the first; integers
// have at most 16 digits and no leading zeros; strings refuse DEL (0x7F).
constexpr std::string_view kJsonGrammarRules = R"gbnf(
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9]{1,16})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
)gbnf";

}  // namespace

std::string json_object_grammar() { return "root ::= object\n" + std::string(kJsonGrammarRules); }

std::string json_value_grammar() { return "root ::= value\n" + std::string(kJsonGrammarRules); }

TriggerScan scan_trigger(const GrammarTrigger& t, std::string_view text, size_t& scanned) {
  constexpr std::string_view kOpen = "<think>", kClose = "</think>";
  using State = TriggerScan::State;
  const auto first_text = [&](size_t from) {
    while (from < text.size() &&
           (text[from] == ' ' || text[from] == '\n' || text[from] == '\t' || text[from] == '\r')) {
      ++from;
    }
    return from;
  };
  // Where words may start: after the reasoning block, if there is one.
  size_t from = 0;
  if (t.thinking_forced_open) {
    const size_t c = text.find(kClose);
    if (c == std::string_view::npos) return {};
    from = c + kClose.size();
  } else if (t.may_think) {
    const size_t b = first_text(0);
    if (b == text.size()) return {};
    if (text.substr(b, kOpen.size()) == kOpen) {
      const size_t c = text.find(kClose, b + kOpen.size());
      if (c == std::string_view::npos) return {};
      from = c + kClose.size();
    } else if (kOpen.starts_with(text.substr(b))) {
      return {};  // "<thi" may still become "<think>"
    }
  }
  if (t.at_start) {
    const size_t b = first_text(from);
    if (b == text.size()) return {};
    const std::string_view rest = text.substr(b);
    bool may_become = false;
    for (const std::string& w : t.words) {
      if (rest.starts_with(w)) return {State::kStart, b};
      may_become = may_become || std::string_view(w).starts_with(rest);
    }
    return {may_become ? State::kWait : State::kNever, 0};
  }
  size_t longest = 1;
  for (const std::string& w : t.words) longest = std::max(longest, w.size());
  // A word that ends in the new text may start up to longest - 1 bytes before it.
  const size_t begin = std::max(from, scanned > longest - 1 ? scanned - (longest - 1) : 0);
  size_t best = std::string_view::npos;
  for (const std::string& w : t.words) {
    if (!w.empty()) best = std::min(best, text.find(w, begin));
  }
  scanned = text.size();
  if (best == std::string_view::npos) return {};
  return {State::kStart, best};
}

}  // namespace strata
