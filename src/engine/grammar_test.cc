#include "engine/grammar.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace strata {
namespace grammar_test {

std::shared_ptr<const Grammar> must_parse(const std::string& text) {
  auto g = Grammar::parse(text);
  EXPECT_TRUE(g.is_ok()) << text << "\n" << g.status().message();
  return g.is_ok() ? *g : nullptr;
}

// The whole of `s` is a sentence of the grammar.
bool grammar_matches(const std::shared_ptr<const Grammar>& g, std::string_view s) {
  GrammarMatcher m(g);
  return m.accept(s).is_ok() && m.complete();
}

// How many bytes of `s` the grammar takes when fed one byte at a time (s.size() when all).
size_t grammar_prefix_bytes(const std::shared_ptr<const Grammar>& g, std::string_view s) {
  GrammarMatcher m(g);
  for (size_t i = 0; i < s.size(); ++i) {
    if (!m.accept(s.substr(i, 1)).is_ok()) return i;
  }
  return s.size();
}

struct GrammarErrorCase {
  std::string text;
  std::string expected;  // a part of the message
};

TEST(GrammarParse, ErrorsNameTheProblemAndWhere) {
  const std::vector<GrammarErrorCase> cases = {
      {"root ::= \"abc", "unterminated literal at line 1 column 10"},
      {"root ::= \"a\"\nx ::= \"\\q\"", "unknown escape '\\q' at line 2 column 8"},
      {"root ::= \"\\x4\"", "2 hex digits"},
      {"root ::= \"\\uD800\"", "not a Unicode scalar value"},
      {"root ::= [a-", "unterminated character class"},
      {"root ::= [z-a]", "character range ends before it starts"},
      {"root ::= foo \"x\"", "undefined rule 'foo' used at line 1 column 10"},
      {"start ::= \"a\"", "no rule 'root'"},
      {"root ::= \"a\"\nroot ::= \"b\"", "rule 'root' is defined twice at line 2"},
      {"root ::= *\"a\"", "'*' with no item before it"},
      {"root ::= \"a\" )", "unexpected ')' in rule 'root'"},
      {"root ::= (\"a\"", "expected ')'"},
      {"root \"a\"", "expected '::='"},
      {"root ::= \"a\"{3,1}", "repetition {3,1} has its minimum above its maximum"},
      {"root ::= \"a\"{1001}", "repetition count 1001 is more than the limit of 1000"},
      {"root ::= \"a\"{2,99999999999999999999}", "is more than the limit of 1000"},
      {"root ::= \"\xff\"", "invalid UTF-8"},
      // Left recursion: direct, indirect, through a nullable prefix, and by repeating
      // something nullable; each would make the matcher expand forever.
      {"root ::= root \"a\" | \"b\"", "rule 'root' is left-recursive (root -> root)"},
      {"root ::= a\na ::= b \"x\"\nb ::= c\nc ::= a \"y\" | \"z\"", "is left-recursive"},
      {"root ::= a\na ::= b a \"x\" | \"q\"\nb ::= \"\" | \"y\"",
       "rule 'a' is left-recursive (a -> a)"},
      {"root ::= a\na ::= b? c? a | \"q\"\nb ::= \"y\"\nc ::= \"z\"", "rule 'a' is left-recursive"},
      {"root ::= (\"a\"?)*", "rule 'root' is left-recursive"},
      {"root ::= (root) \"a\" | \"b\"", "rule 'root' is left-recursive"},
  };
  for (const GrammarErrorCase& c : cases) {
    auto g = Grammar::parse(c.text);
    ASSERT_FALSE(g.is_ok()) << c.text;
    EXPECT_NE(g.status().message().find(c.expected), std::string::npos)
        << c.text << "\n  got: " << g.status().message() << "\n  expected: " << c.expected;
  }
}

TEST(GrammarParse, RecursionThatIsNotLeftRecursion) {
  // Each reaches itself only after a character, so it terminates.
  must_parse("root ::= a\na ::= b \"x\" a | \"q\"\nb ::= \"\" | \"y\"");
  must_parse("root ::= a\na ::= b a | \"q\"\nb ::= \"y\"");
  must_parse("root ::= \"(\" root \")\" | \"\"");
  must_parse("root ::= (\"a\" | \"\")? \"b\" root?");
}

TEST(GrammarParse, Limits) {
  // 100000 nested groups: refused at the nesting limit, without recursing that deep.
  const std::string deep =
      "root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')');
  auto g = Grammar::parse(deep);
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.status().message().find("nested more than 100 deep"), std::string::npos)
      << g.status().message();

  const std::string big = "root ::= \"a\"\n# " + std::string(1 << 20, 'x') + "\n";
  g = Grammar::parse(big);
  ASSERT_FALSE(g.is_ok());
  EXPECT_EQ(g.status().kind(), ErrorKind::kOutOfRange);
  EXPECT_NE(g.status().message().find("more than the limit of 1048576"), std::string::npos);

  // A 1100-character literal repeated 1000 times: 1.1M elements, past the cap.
  g = Grammar::parse("root ::= \"" + std::string(1100, 'a') + "\"{1000}");
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.status().message().find("elements after expanding repetitions"), std::string::npos)
      << g.status().message();

  // An alternation of 3000 literals keeps 3000 stacks alive at the start.
  std::string many = "root ::= \"w0\"";
  for (int i = 1; i < 3000; ++i) many += " | \"w" + std::to_string(i) + "\"";
  g = Grammar::parse(many);
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.status().message().find("too ambiguous"), std::string::npos) << g.status().message();
}

TEST(GrammarParse, FormatDetails) {
  // Comments, a rule continued after '|' and inside parentheses, an empty last alternative
  // before the next rule, CRLF line ends, '_' in names.
  auto g = must_parse(
      "# a comment\r\n"
      "root ::= item_list # trailing comment\r\n"
      "item_list ::= (\n"
      "    \"a\"\n"
      "  | \"b\" ) more\n"
      "more ::= \"!\" |\n"
      "  \"?\" |\n"
      "other ::= \"unused\"\n");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(grammar_matches(g, "a"));
  EXPECT_TRUE(grammar_matches(g, "b!"));
  EXPECT_TRUE(grammar_matches(g, "a?"));
  EXPECT_FALSE(grammar_matches(g, "ab"));
  EXPECT_FALSE(grammar_matches(g, "aunused"));

  EXPECT_TRUE(Grammar::parse("start ::= \"s\"", "start").is_ok());
  // A repetition of the empty literal is the empty literal, not a loop.
  g = must_parse("root ::= \"\"* \"x\"");
  EXPECT_TRUE(grammar_matches(g, "x"));
}

struct GrammarAcceptCase {
  std::string grammar;
  std::vector<std::string> accepted;
  // A text refused, and how many bytes of it are taken before the refusal (its size when
  // every byte is taken but the text is not a whole sentence).
  std::vector<std::pair<std::string, size_t>> rejected;
};

TEST(GrammarMatcher, AcceptsAndRejects) {
  const std::vector<GrammarAcceptCase> cases = {
      {"root ::= \"abc\"", {"abc"}, {{"ab", 2}, {"abd", 2}, {"abcd", 3}, {"x", 0}}},
      {"root ::= [a-c0-9_]+", {"a", "abc012_", "9"}, {{"", 0}, {"abd", 2}, {"A", 0}}},
      {"root ::= \"\\\"\" [^\"\\\\]* \"\\\"\"",
       {"\"\"", "\"hello world\"", "\"αβ\""},
       {{"\"a\\b\"", 2}, {"\"a\"b", 3}, {"\"abc", 4}}},
      {"root ::= . . .", {"abc", "aαb", "\xf0\x9f\x98\x80xy", "\n\t "}, {{"ab", 2}, {"abcd", 3}}},
      {"root ::= \"cat\" | \"car\" | \"dog\"", {"cat", "car", "dog"}, {{"cow", 1}, {"ca", 2}}},
      {"root ::= \"a\" \"b\"? \"c\"*", {"a", "ab", "abc", "acc", "abccc"}, {{"abb", 2}, {"b", 0}}},
      {"root ::= \"a\"{2,4}", {"aa", "aaa", "aaaa"}, {{"a", 1}, {"aaaaa", 4}}},
      {"root ::= \"x\"{3}", {"xxx"}, {{"xx", 2}, {"xxxx", 3}}},
      {"root ::= \"x\"{2,} \"y\"", {"xxy", "xxxxxxxy"}, {{"xy", 1}}},
      {"root ::= \"ab\"{0,2} \"c\"", {"c", "abc", "ababc"}, {{"abababc", 4}, {"ac", 1}}},
      {"root ::= (\"a\" (\"b\" | \"c\")+)* \"d\"", {"d", "abd", "abcbd", "acabd"}, {{"ad", 1}}},
      {"root ::= greeting \" \" name\ngreeting ::= \"hi\" | \"hello\"\nname ::= [A-Z] [a-z]*",
       {"hi Bob", "hello X"},
       {{"hi bob", 3}, {"hey", 2}}},
      {"root ::= [α-ω]+ \"→\" \"\\u00e9\" \"\\U0001F600\"",
       {"αβγ→é😀", "ω→é😀"},
       // Α (U+0391) shares α's first byte, which is taken: it could still become α.
       {{"αΑ", 3}, {"α→e", 5}}},
      {"root ::= [^α-γ]", {"δ", "a", "\xf4\x8f\xbf\xbf"}, {{"β", 1}}},
      {"root ::= [] | \"z\"", {"z"}, {{"a", 0}}},
      {"root ::= [^] [^a]", {"ab", "αβ"}, {{"ba", 1}}},
  };
  for (const GrammarAcceptCase& c : cases) {
    auto g = must_parse(c.grammar);
    ASSERT_NE(g, nullptr);
    for (const std::string& s : c.accepted) {
      EXPECT_TRUE(grammar_matches(g, s)) << c.grammar << "\n  should accept: " << s;
      EXPECT_EQ(grammar_prefix_bytes(g, s), s.size()) << c.grammar << "\n  byte by byte: " << s;
    }
    for (const auto& [s, taken] : c.rejected) {
      EXPECT_FALSE(grammar_matches(g, s)) << c.grammar << "\n  should reject: " << s;
      EXPECT_EQ(grammar_prefix_bytes(g, s), taken) << c.grammar << "\n  prefix of: " << s;
    }
  }
}

TEST(GrammarMatcher, CompleteAndExhausted) {
  auto g = must_parse("root ::= \"a\" \"b\"?");
  GrammarMatcher m(g);
  EXPECT_FALSE(m.complete());
  EXPECT_FALSE(m.exhausted());
  ASSERT_TRUE(m.accept("a").is_ok());
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(m.exhausted());
  ASSERT_TRUE(m.accept("b").is_ok());
  EXPECT_TRUE(m.complete());
  EXPECT_TRUE(m.exhausted());
  const Status s = m.accept("b");
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("does not accept byte 0"), std::string::npos) << s.message();
  EXPECT_TRUE(m.exhausted());  // unchanged by the refused text

  // The empty sentence; a half-written code point is never complete.
  g = must_parse("root ::= \"α\" |");
  GrammarMatcher e(g);
  EXPECT_TRUE(e.complete());
  EXPECT_FALSE(e.exhausted());
  ASSERT_TRUE(e.accept("\xce").is_ok());
  EXPECT_FALSE(e.complete());
  EXPECT_FALSE(e.accept("\x80").is_ok());  // U+0380, not α
  ASSERT_TRUE(e.accept("\xb1").is_ok());
  EXPECT_TRUE(e.exhausted());
}

TEST(GrammarMatcher, ErrorNamesTheByte) {
  auto g = must_parse("root ::= \"abc\"");
  GrammarMatcher m(g);
  Status s = m.accept("abx");
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("byte 2 of \"abx\""), std::string::npos) << s.message();
  s = m.accept("a\xff");
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("byte 1"), std::string::npos) << s.message();
  EXPECT_TRUE(m.accept("abc").is_ok());  // the failures left it at the start
}

TEST(GrammarJson, ValidObjectsAreAccepted) {
  auto g = must_parse(json_object_grammar());
  ASSERT_NE(g, nullptr);
  const std::vector<std::string> valid = {
      "{}",
      "{ }",
      "{\"a\":1}",
      "{\"a\" : 1}",
      "{\"a\": [1, 2.5, -3e10, 1E-2, 0.0, -0, 12e+05, true, false, null]}",
      "{\"nested\": {\"x\": {\"y\": [[], {}, [[1]]]}}}",
      "{\"s\": \"tab\\t quote\\\" slash\\/ back\\\\ \\u00e9\\uD83D\\ude00 \\b\\f\\n\\r\"}",
      "{\"text\": \"héllo wörld 日本語 😀\"}",
      "{\n  \"a\": 1,\n  \"b\": \"c\"\n}",
      "{\"a\":1} ",
      "{\"\": \"\"}",
  };
  for (const std::string& s : valid) EXPECT_TRUE(grammar_matches(g, s)) << s;
}

TEST(GrammarJson, InvalidObjectsAreRejected) {
  auto g = must_parse(json_object_grammar());
  ASSERT_NE(g, nullptr);
  const std::vector<std::string> invalid = {
      "{\"a\":1,}",
      "{'a':1}",
      "{\"a\":01}",
      "{\"a\":1",
      "[1]",
      "{\"a\":tru}",
      "{\"a\":\"\x01\"}",
      "{\"a\":\"\\q\"}",
      "{\"a\":-}",
      "{\"a\":1.}",
      "{\"a\":\"\\u12\"}",
      "{a:1}",
      "{\"a\" 1}",
      "{\"a\":1}}",
      "",
      // The grammar's deliberate limits, stricter than JSON: no space before the object,
      // at most one space between tokens, at most 16 integer digits, no DEL in strings.
      " {}",
      "{\"a\":  1}",
      "{\"a\":12345678901234567}",
      "{\"a\":\"\x7f\"}",
  };
  for (const std::string& s : invalid) EXPECT_FALSE(grammar_matches(g, s)) << s;

  auto v = must_parse(json_value_grammar());
  EXPECT_TRUE(grammar_matches(v, "[1, \"a\", {\"b\": null}]"));
  EXPECT_TRUE(grammar_matches(v, "\"just a string\""));
  EXPECT_TRUE(grammar_matches(v, "-12.5e3"));
  EXPECT_FALSE(grammar_matches(v, "[1 2]"));
}

// ---- allowed() -------------------------------------------------------------------------------

struct GrammarTestVocab {
  std::vector<std::string> pieces;
  std::vector<bool> never;
  int32_t add(std::string piece, bool is_never = false) {
    pieces.push_back(std::move(piece));
    never.push_back(is_never);
    return static_cast<int32_t>(pieces.size() - 1);
  }
  int32_t id(const std::string& piece) const {
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (pieces[i] == piece && !never[i]) return static_cast<int32_t>(i);
    }
    return -1;
  }
};

std::vector<int32_t> grammar_allowed_ids(const GrammarMatcher& m, const GrammarVocab& vocab) {
  std::vector<uint8_t> allowed;
  EXPECT_TRUE(m.allowed(vocab, allowed).is_ok());
  EXPECT_EQ(allowed.size(), static_cast<size_t>(vocab.size()));
  std::vector<int32_t> ids;
  for (size_t i = 0; i < allowed.size(); ++i) {
    if (allowed[i]) ids.push_back(static_cast<int32_t>(i));
  }
  return ids;
}

TEST(GrammarAllowed, SmallVocabulary) {
  GrammarTestVocab tv;
  const int32_t open = tv.add("{");             // 0
  const int32_t quote = tv.add("\"");           // 1
  const int32_t a = tv.add("a");                // 2
  const int32_t ab = tv.add("ab");              // 3
  const int32_t quote_close = tv.add("\"}");    // 4
  const int32_t close = tv.add("}");            // 5
  const int32_t space = tv.add(" ");            // 6
  const int32_t alpha_lead = tv.add("\xce");    // 7: first byte of α
  const int32_t alpha_tail = tv.add("\xb1");    // 8: its second byte
  tv.add("");                                   // 9: empty, never allowed
  tv.add("{", true);                            // 10: a control token printing "{"
  const int32_t alpha = tv.add("α");            // 11
  const int32_t alpha_more = tv.add("α\xce");   // 12: α and half of another
  tv.add("\xff");                               // 13: never valid UTF-8
  const int32_t quoted_a = tv.add("\"a\"");     // 14
  const int32_t tail_quote = tv.add("\xb1\"");  // 15: finishes α, closes the string
  const int32_t cjk_lead = tv.add("\xe6");      // 16: first byte of a 3-byte character
  const int32_t cont80 = tv.add("\x80");        // 17: with \xce, U+0380
  tv.add("\xb1\xb1");                           // 18: one continuation too many
  const GrammarVocab vocab(tv.pieces, tv.never);

  auto g = must_parse(json_object_grammar());
  GrammarMatcher m(g);
  EXPECT_EQ(grammar_allowed_ids(m, vocab), (std::vector<int32_t>{open}));
  ASSERT_TRUE(m.accept("{").is_ok());
  // After "{": a key may start (even `"}`, a key beginning with '}'), the object may close,
  // or a space may come.
  EXPECT_EQ(grammar_allowed_ids(m, vocab),
            (std::vector<int32_t>{quote, quote_close, close, space, quoted_a}));
  ASSERT_TRUE(m.accept("\"").is_ok());
  // Inside a string anything printable, including partial code points that can complete.
  EXPECT_EQ(grammar_allowed_ids(m, vocab),
            (std::vector<int32_t>{open, quote, a, ab, close, space, alpha_lead, alpha, alpha_more,
                                  cjk_lead}));
  ASSERT_TRUE(m.accept("\xce").is_ok());
  // Half of a code point written: only tokens that finish it.
  EXPECT_EQ(grammar_allowed_ids(m, vocab), (std::vector<int32_t>{alpha_tail, tail_quote, cont80}));
  ASSERT_TRUE(m.accept("\xb1").is_ok());
  EXPECT_EQ(grammar_allowed_ids(m, vocab),
            (std::vector<int32_t>{open, quote, a, ab, close, space, alpha_lead, alpha, alpha_more,
                                  cjk_lead}));

  // A grammar of exactly "α": the lead byte only where it can become α.
  auto ga = must_parse("root ::= \"α\" \"a\"");
  GrammarMatcher ma(ga);
  EXPECT_EQ(grammar_allowed_ids(ma, vocab), (std::vector<int32_t>{alpha_lead, alpha}));
  ASSERT_TRUE(ma.accept("\xce").is_ok());
  EXPECT_EQ(grammar_allowed_ids(ma, vocab), (std::vector<int32_t>{alpha_tail}));
  ASSERT_TRUE(ma.accept("\xb1").is_ok());
  EXPECT_EQ(grammar_allowed_ids(ma, vocab), (std::vector<int32_t>{a}));
  ASSERT_TRUE(ma.accept("a").is_ok());
  EXPECT_TRUE(ma.exhausted());
  EXPECT_TRUE(grammar_allowed_ids(ma, vocab).empty());
}

// allowed() must agree with "accept() on a copy succeeds" for every token at every step.
void grammar_cross_check(const std::string& grammar, const GrammarTestVocab& tv,
                         const std::vector<std::string>& sentence) {
  auto g = must_parse(grammar);
  ASSERT_NE(g, nullptr);
  const GrammarVocab vocab(tv.pieces, tv.never);
  GrammarMatcher m(g);
  for (size_t step = 0; step <= sentence.size(); ++step) {
    std::vector<uint8_t> allowed;
    ASSERT_TRUE(m.allowed(vocab, allowed).is_ok());
    for (int32_t t = 0; t < vocab.size(); ++t) {
      GrammarMatcher copy = m;
      const bool accepts =
          !tv.pieces[t].empty() && !tv.never[t] && copy.accept(tv.pieces[t]).is_ok();
      EXPECT_EQ(allowed[t] != 0, accepts)
          << grammar << "\n  step " << step << ", token " << t << " '" << tv.pieces[t] << "'";
    }
    if (step == sentence.size()) break;
    ASSERT_TRUE(m.accept(sentence[step]).is_ok())
        << "step " << step << " '" << sentence[step] << "'";
  }
  EXPECT_TRUE(m.complete());
}

GrammarTestVocab grammar_cross_vocab() {
  GrammarTestVocab tv;
  for (int c = 0x20; c < 0x7F; ++c) tv.add(std::string(1, static_cast<char>(c)));
  for (const char* p :
       {"\n",           "\n  ",     "\t",       "{\"",  "\":",      "\": ", ", \"",     "true",
        "null",         "fal",      "se",       "\\u",  "00e9",     "1.5e", "-1",       "0.",
        "\"}",          "}}",       "]}",       "[[",   "α",        "\xce", "\xb1",     "\xb1\"",
        "\xce\xb1\xce", "日本",     "\xe6\x97", "\xa5", "\x97\xa5", "😀",    "\xf0\x9f", "\x98\x80",
        "\xff",         "\xc0\x80", "",         "ab",   "αβ",       "βγ",   "→",        "\x80",
        "\xbf\xbf"}) {
    tv.add(p);
  }
  tv.add("\"", true);
  return tv;
}

TEST(GrammarAllowed, AgreesWithAcceptJson) {
  const GrammarTestVocab tv = grammar_cross_vocab();
  grammar_cross_check(
      json_object_grammar(), tv,
      {"{\"",      "a",    "\":",  " ",    "[",    "1.5e",     "3",    ",",
       " ",        "true", ",",    "\n  ", "\"",   "\xce",     "\xb1", "\xce\xb1\xce",
       "\xb1\"",   "]",    ", \"", "\\u",  "00e9", "\xe6\x97", "\xa5", "\xf0\x9f",
       "\x98\x80", "\":",  "null", "}"});
}

TEST(GrammarAllowed, AgreesWithAcceptUnicodeClasses) {
  const GrammarTestVocab tv = grammar_cross_vocab();
  const std::string grammar =
      "root ::= [α-γ]+ \"→\" [^α\\u05D0-\\u05EA]* \"!\" | \"日\" [^本]? [\\u0080-\\u07FF]{0,2}";
  grammar_cross_check(grammar, tv, {"α", "\xce", "\xb1", "βγ", "→", "\xce", "\xb2", "ab", "!"});
  grammar_cross_check(grammar, tv, {"\xe6\x97", "\xa5", "\xce\xb1\xce", "\xb1"});
}

// allowed() answers a state it has seen from its cache: every answer equals that of a fresh
// matcher given the same text, and a string's repetition is answered from the cache.
TEST(GrammarAllowed, CachedMasksEqualFreshOnes) {
  const GrammarTestVocab tv = grammar_cross_vocab();
  const GrammarVocab vocab(tv.pieces, tv.never);
  auto g = must_parse(json_object_grammar());
  ASSERT_NE(g, nullptr);
  const std::vector<std::string> text = {
      "{\"", "a",    "b", "c",  "αβ", "ab",   "\xce", "\xb1", "ab", "\":",  " ",   "1.5e",
      "3",   ",",    " ", "\"", "x",  "y",    "\\u",  "00e9", "ab", "ab",   "\":", " ",
      "[",   "1.5e", "3", ",",  " ",  "1.5e", "3",    ",",    " ",  "null", "]",   "}"};
  GrammarMatcher m(g);
  std::string so_far;
  for (size_t step = 0; step <= text.size(); ++step) {
    std::vector<uint8_t> got, want;
    ASSERT_TRUE(m.allowed(vocab, got).is_ok());
    GrammarMatcher fresh(g);
    ASSERT_TRUE(fresh.accept(so_far).is_ok());
    ASSERT_TRUE(fresh.allowed(vocab, want).is_ok());
    EXPECT_EQ(fresh.mask_cache_hits(), 0u);
    EXPECT_EQ(got, want) << "after '" << so_far << "'";
    if (step == text.size()) break;
    ASSERT_TRUE(m.accept(text[step]).is_ok()) << text[step];
    so_far += text[step];
  }
  EXPECT_TRUE(m.complete());
  EXPECT_GE(m.mask_cache_hits(), 8u);
}

// ---- Limits ----------------------------------------------------------------------------------

TEST(GrammarLimits, AmbiguityHitsTheStackLimit) {
  // After n a's, x may be open at any depth up to n: n stacks, until the limit refuses one.
  auto g = must_parse("root ::= x*\nx ::= \"a\" | \"a\" x \"b\"");
  GrammarMatcher m(g);
  Status s;
  int n = 0;
  for (; n < 5000 && s.is_ok(); ++n) s = m.accept("a");
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.kind(), ErrorKind::kOutOfRange);
  EXPECT_NE(s.message().find("too ambiguous"), std::string::npos) << s.message();
  EXPECT_LT(n, 2100);
  // allowed() reports it too, rather than growing.
  GrammarTestVocab tv;
  tv.add("a");
  tv.add("b");
  const GrammarVocab vocab(tv.pieces, tv.never);
  std::vector<uint8_t> allowed;
  EXPECT_FALSE(m.allowed(vocab, allowed).is_ok());
  EXPECT_TRUE(m.accept("b").is_ok());  // the matcher still works below the limit
}

TEST(GrammarLimits, DeepJsonArraysHitTheDepthLimit) {
  auto g = must_parse(json_value_grammar());
  GrammarMatcher m(g);
  Status s;
  int n = 0;
  for (; n < 5000 && s.is_ok(); ++n) s = m.accept("[");
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("deeper than 4096"), std::string::npos) << s.message();
  EXPECT_GT(n, 500);  // real documents nest far less, but this much must work
  EXPECT_TRUE(m.accept("1]").is_ok());
}

}  // namespace grammar_test
}  // namespace strata
