// libFuzzer target: a GBNF grammar from a request body (untrusted) through the parser, then a
// matcher driven over a small vocabulary by the rest of the input. The input is the grammar
// text, a 0 byte, and sample bytes: each picks the next token (among those allowed() allows
// when any are, so that runs go deep into the grammar) and what is left after 200 steps is
// fed to accept() whole. Build and run with scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "engine/grammar.h"

namespace {

// Short pieces, among them every kind of UTF-8 trouble: multi-byte characters, a lead byte
// alone, continuation bytes alone and in pairs, invalid bytes, an empty piece and a control
// token.
strata::GrammarVocab grammar_fuzz_vocab() {
  // clang-format off
  std::vector<std::string> pieces = {
      "{", "}", "[", "]", "\"", ":", ",", " ", "\n", "\t", "a", "b", "x", "0", "1", "9", "-", "+",
      ".", "e", "E", "\\", "u", "n", "t", "true", "false", "null", "{\"", "\":", "\"}", ", \"",
      "ab", "abc", "aa", "1.5e3", "\\u00", "e9", "α", "β", "日本", "😀", "→",
      "\xce", "\xb1", "\xb2", "\xe6", "\x97", "\xa5", "\xe6\x97", "\x97\xa5", "\xf0\x9f", "\x98\x80",
      "\xbf", "\xff", "\x80", "\x7f", "\xc0\x80", "", "\xce\xb1\xce", "\xed\xa0\x80", "\xf4\x8f\xbf"};
  // clang-format on
  pieces.push_back(std::string(1, '\0'));
  pieces.push_back("<ctrl>");
  std::vector<bool> never(pieces.size(), false);
  never.back() = true;
  return strata::GrammarVocab(std::move(pieces), std::move(never));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* bytes = reinterpret_cast<const char*>(data);
  const void* zero = std::memchr(data, 0, size);
  const size_t split = zero ? static_cast<const uint8_t*>(zero) - data : size;
  const std::string_view text(bytes, split);
  std::string_view sample =
      split < size ? std::string_view(bytes + split + 1, size - split - 1) : std::string_view();
  auto grammar = strata::Grammar::parse(text);
  if (!grammar.is_ok()) return 0;
  const strata::GrammarVocab vocab = grammar_fuzz_vocab();
  strata::GrammarMatcher matcher(*grammar);
  std::vector<uint8_t> allowed;
  std::vector<int32_t> choices;
  for (int step = 0; step < 200 && !sample.empty(); ++step) {
    const uint8_t pick = static_cast<uint8_t>(sample[0]);
    sample.remove_prefix(1);
    choices.clear();
    if (matcher.allowed(vocab, allowed).is_ok()) {
      for (int32_t t = 0; t < vocab.size(); ++t) {
        if (allowed[t]) choices.push_back(t);
      }
    }
    // The top bit chooses among the allowed tokens, else among all (most then fail, which
    // must leave the matcher unchanged).
    const int32_t token = (pick & 0x80) && !choices.empty()
                              ? choices[pick % choices.size()]
                              : static_cast<int32_t>(pick % vocab.size());
    const strata::Status s = matcher.accept(vocab.piece(token));
    if ((pick & 0x80) && !choices.empty() && !s.is_ok() &&
        s.kind() == strata::ErrorKind::kInvalidArgument) {
      __builtin_trap();  // allowed() allowed a token that accept() refuses
    }
    (void)matcher.complete();
    (void)matcher.exhausted();
  }
  (void)matcher.accept(sample);
  return 0;
}
