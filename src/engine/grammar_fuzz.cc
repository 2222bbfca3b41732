// libFuzzer target: a GBNF grammar from a request body (untrusted) through the parser, then a
// matcher driven over a small vocabulary by the rest of the input. The input is the grammar
// text, a 0 byte, and sample bytes: each picks the next token (among those allowed() allows
// when any are, so that runs go deep into the grammar) and what is left after 200 steps is
// fed to accept() whole. The whole input is also the generated text of a lazy grammar's trigger
// scan. Build and run with scripts/fuzz.sh.
#include <algorithm>
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

// A lazy grammar's trigger over the input as generated text, fed in pieces of 1 to 4 bytes:
// where the scan in pieces starts, a scan of the whole text at once starts too, on a word.
void fuzz_trigger(std::string_view text) {
  using strata::TriggerScan;
  static const strata::GrammarTrigger kTriggers[] = {{{"<tool_call>", "<function="}},
                                                     {{"{"}, true},
                                                     {{"ab", "aab"}, false, true},
                                                     {{"{"}, true, false, true},
                                                     {{"<tool_call>"}, false, false, true}};
  for (const strata::GrammarTrigger& t : kTriggers) {
    size_t scanned = 0, at = 0;
    TriggerScan step;
    while (at < text.size()) {
      at = std::min(text.size(), at + 1 + static_cast<unsigned char>(text[at]) % 4);
      step = strata::scan_trigger(t, text.substr(0, at), scanned);
      if (step.state != TriggerScan::State::kWait) break;
    }
    size_t fresh = 0;
    const TriggerScan whole = strata::scan_trigger(t, text.substr(0, at), fresh);
    if (whole.state != step.state) __builtin_trap();
    if (step.state != TriggerScan::State::kStart) continue;
    if (step.at != whole.at || step.at >= at) __builtin_trap();
    bool on_word = false;
    for (const std::string& w : t.words) on_word = on_word || text.substr(step.at).starts_with(w);
    if (!on_word) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* bytes = reinterpret_cast<const char*>(data);
  fuzz_trigger(std::string_view(bytes, size));
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
