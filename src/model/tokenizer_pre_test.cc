#include "model/tokenizer_pre.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "model/unicode.h"

namespace strata {
namespace {

using Pieces = std::vector<std::string>;

Pieces split_with(std::string_view pre, std::string_view text) {
  auto row = pretokenizer_find(pre);
  EXPECT_TRUE(row.is_ok()) << row.status().message();
  if (!row.is_ok()) return {};
  auto splitter = RegexSplitter::create((*row)->regexes);
  EXPECT_TRUE(splitter.is_ok()) << splitter.status().message();
  if (!splitter.is_ok()) return {};
  Pieces out;
  for (const TextSpan& s : splitter->split(text)) out.emplace_back(text.substr(s.begin, s.size));
  return out;
}

// What llama.cpp's pre-tokenizer of that name makes of the text, worked out from its regexes
// by hand; each case shows what sets its row apart.
struct SplitCase {
  std::string_view pre;
  std::string_view text;
  Pieces pieces;
};

const SplitCase kSplitCases[] = {
    {"gpt-2", "Hello world's  123!!", {"Hello", " world", "'s", " ", " 123", "!!"}},
    {"gpt-2", "\xC3\x84pfel\n\n x", {"\xC3\x84pfel", "\n\n", " x"}},
    // Digits in groups of three; contractions in either case; a letter run takes one leading
    // non-letter; newlines end a run of spaces.
    {"llama-bpe", "12345 I'M ok\n\n", {"123", "45", " I", "'M", " ok", "\n\n"}},
    {"llama3", "(x)  \n y", {"(x", ")", "  \n", " y"}},
    {"qwen2", "x123", {"x", "1", "2", "3"}},
    // Punctuation runs first, then GPT-2, then digit runs cut in threes.
    {"default", "x=1234, y", {"x", "=", "123", "4", ",", " y"}},
    // U+180E is not whitespace to llama.cpp (Unicode 6.3 on), so it joins the run of marks.
    {"gpt-2", "a\xE1\xA0\x8E!", {"a", "\xE1\xA0\x8E!"}},
    // Cased letters only (not CJK); the punctuation class spans ASCII letters and symbols;
    // CJK runs; trailing whitespace whole; digit runs whole.
    {"deepseek-llm",
     "Hi $5, \xE4\xB8\x96\xE7\x95\x8C\xEF\xBC\x81\n\nok  ",
     {"Hi", " $", "5", ",", " ", "\xE4\xB8\x96\xE7\x95\x8C", "\xEF\xBC\x81", "\n", "\n", "ok",
      "  "}},
    {"deepseek-llm", "x 2024", {"x", " ", "2024"}},
    // Non-ASCII whitespace (U+3000, U+2000) is never punctuation or CJK, even where a range of
    // the class spans it.
    {"deepseek-llm", "!\xE3\x80\x80!", {"!", "\xE3\x80\x80!"}},
    {"deepseek-llm",
     "\xE4\xB8\x80\xE2\x80\x80\xE4\xBA\x8C",
     {"\xE4\xB8\x80", "\xE2\x80\x80", "\xE4\xBA\x8C"}},
    // Any letters with one leading space; punctuation (not symbols); CJK; single digits.
    {"deepseek-coder",
     "Hi, \xE4\xB8\x96\xE7\x95\x8C! x=12",
     {"Hi", ",", " ", "\xE4\xB8\x96\xE7\x95\x8C", "!", " x", "=", "1", "2"}},
    // Digits in threes first; kanji and kana runs; one ASCII mark joins the ASCII word after it.
    {"deepseek-v3",
     "Hello,world 12345 \xE6\x97\xA5\xE6\x9C\xAC\xE3\x81\xA7\xE3\x81\x99",
     {"Hello", ",world", " ", "123", "45", " ",
      "\xE6\x97\xA5\xE6\x9C\xAC\xE3\x81\xA7\xE3\x81\x99"}},
    // Runs of punctuation and of $+<=>^~|` first, GPT-2, then three ASCII digits at a time.
    {"falcon", "a+=b `c 12345", {"a", "+=", "b", " ", "`", "c", " ", "123", "45"}},
    // Every digit alone, before GPT-2 sees them (so no space joins a digit).
    {"starcoder", "x 123", {"x", " ", "1", "2", "3"}},
    {"command-r", "a12", {"a", "1", "2"}},
    // Camel case splits before a capital; a leading capital run keeps the lower-case run after
    // it; any non-ASCII letter counts as both cases.
    {"tekken",
     "HelloWorld iPhone ABCdef na\xC3\xAFveTest 123",
     {"Hello", "World", " i", "Phone", " ABCdef", " na\xC3\xAFve", "Test", " ", "1", "2", "3"}},
    {"gpt-4o", "I'M HelloWorld 12345", {"I'M", " Hello", "World", " ", "123", "45"}},
    // Words of anything but whitespace, parentheses, '|' and sentence marks.
    {"bloom", "Hello, world. (ok)a1", {"Hello", ",", " world", ". (", "ok", ")", "a1"}},
    {"viking", "ab12 c", {"ab", "1", "2", " c"}},
};

TEST(PreTokenizerTable, SplitsAsLlamaCpp) {
  for (const SplitCase& c : kSplitCases) {
    EXPECT_EQ(split_with(c.pre, c.text), c.pieces) << c.pre << ": '" << c.text << "'";
  }
}

TEST(PreTokenizerTable, EveryRowCompilesAndEveryNameIsUnique) {
  std::set<std::string_view> seen;
  for (const PreTokenizer& row : pretokenizer_table()) {
    EXPECT_FALSE(row.regexes.empty()) << row.name();
    auto splitter = RegexSplitter::create(row.regexes);
    EXPECT_TRUE(splitter.is_ok()) << row.name() << ": " << splitter.status().message();
    std::string_view names = row.names;
    while (!names.empty()) {
      const std::string_view name = names.substr(0, names.find(' '));
      EXPECT_FALSE(name.empty()) << "'" << row.names << "' has an empty name";
      EXPECT_TRUE(seen.insert(name).second) << name << " names two rows";
      auto found = pretokenizer_find(name);
      ASSERT_TRUE(found.is_ok()) << found.status().message();
      EXPECT_EQ(*found, &row) << name;
      names.remove_prefix(std::min(names.size(), name.size() + 1));
    }
  }
}

TEST(PreTokenizerTable, UnknownNameIsAnErrorNamingIt) {
  auto r = pretokenizer_find("no-such-pre");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("no-such-pre"), std::string::npos);
  EXPECT_FALSE(pretokenizer_find("gpt").is_ok());  // a prefix of a name is not a name
}

TEST(PreTokenizerTable, InvalidUtf8StaysInTheGaps) {
  const std::string text =
      "ab\xFF\xFE"
      "cd";
  for (const PreTokenizer& row : pretokenizer_table()) {
    std::string joined;
    for (const std::string& p : split_with(row.name(), text)) joined += p;
    EXPECT_EQ(joined, text) << row.name();
  }
}

}  // namespace
}  // namespace strata
