#include "model/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/utf8.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/unicode.h"

namespace strata {
namespace {

const std::string kShared = STRATA_SHARED_DIR;

// ---------------------------------------------------------------- UTF-8 stream

TEST(Utf8Stream, HoldsAFourByteEmojiUntilItsLastByte) {
  const std::string llama = "\xF0\x9F\xA6\x99";  // U+1F999
  Utf8Stream s;
  EXPECT_EQ(s.push("a"), "a");
  EXPECT_EQ(s.push(llama.substr(0, 1)), "");
  EXPECT_EQ(s.push(llama.substr(1, 1)), "");
  EXPECT_EQ(s.pending(), 2u);
  EXPECT_EQ(s.push(llama.substr(2, 1)), "");
  EXPECT_EQ(s.push(llama.substr(3, 1) + "b"), llama + "b");
  EXPECT_EQ(s.pending(), 0u);
  EXPECT_EQ(s.flush(), "");
}

TEST(Utf8Stream, ReplacesInvalidBytes) {
  const std::string fffd = "\xEF\xBF\xBD";
  Utf8Stream s;
  EXPECT_EQ(s.push("\xFF"), fffd);
  EXPECT_EQ(s.push("\xE2\x28"), fffd + "(");              // a lead byte whose sequence breaks
  EXPECT_EQ(s.push("\xC0\xAF"), fffd + fffd);             // overlong lead bytes are never valid
  EXPECT_EQ(s.push("\xED\xA0\x80"), fffd + fffd + fffd);  // a surrogate
  EXPECT_EQ(s.push("\xE2\x82"), "");                      // cut short at the end...
  EXPECT_EQ(s.flush(), fffd);                             // ...is flushed as one U+FFFD
  EXPECT_EQ(s.push("\xE2\x82\xAC"), "\xE2\x82\xAC");      // the stream is usable again
}

TEST(Utf8, DecodeAndValidate) {
  EXPECT_TRUE(utf8_valid("h\xC3\xA9llo \xF0\x9F\x98\x81"));
  EXPECT_FALSE(utf8_valid("\xF4\x90\x80\x80"));  // past U+10FFFF
  size_t i = 0;
  uint32_t cp = 0;
  ASSERT_TRUE(utf8_decode("\xE2\x96\x81", i, cp));
  EXPECT_EQ(cp, 0x2581u);
  EXPECT_EQ(i, 3u);
  std::string out;
  utf8_append(out, 0x1F999);
  EXPECT_EQ(out, "\xF0\x9F\xA6\x99");
}

// ---------------------------------------------------------------- byte-level map

TEST(ByteLevelMap, RoundTripsEveryByte) {
  ByteLevelMap map;
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  std::string encoded, decoded;
  map.encode(all, encoded);
  EXPECT_TRUE(utf8_valid(encoded));
  map.decode(encoded, decoded);
  EXPECT_EQ(decoded, all);
  std::string space;
  map.encode(" \n", space);
  EXPECT_EQ(space, "\xC4\xA0\xC4\x8A");  // GPT-2's "Ġ" and "Ċ"
}

// ---------------------------------------------------------------- SPM, hand-built vocabulary

const std::string kSp = "\xE2\x96\x81";  // U+2581

VocabSpec small_spm() {
  VocabSpec v;
  v.model = "llama";
  //            0        1      2       3    4    5    6     7     8     9           10
  v.tokens = {"<unk>", "<s>", "</s>", kSp, "a", "b", "c", "ab", "bc", kSp + "ab", "<0xC3>",
              //  11       12        13
              "<0xA9>", "<0x21>", "<my>"};
  v.scores = {0, 0, 0, -1, -2, -2, -2, -0.5f, -1, -0.1f, 0, 0, 0, 0};
  v.token_types = {2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 6, 6, 6, 4};
  return v;
}

TEST(TokenizerSpm, MergesByScoreWithSpacePrefix) {
  auto tok = Tokenizer::from_spec(small_spm());
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(tok->bos(), 1);
  EXPECT_EQ(tok->eos(), 2);
  EXPECT_EQ(tok->encode("ab", false, false), (std::vector<int32_t>{9}));
  EXPECT_EQ(tok->encode("ab", true, false), (std::vector<int32_t>{1, 9}));
  // "abc": "ab" (-0.5) outscores "bc" (-1), then "▁ab" (-0.1) forms.
  EXPECT_EQ(tok->encode("abc", false, false), (std::vector<int32_t>{9, 6}));
  // "ba": no pair is a token.
  EXPECT_EQ(tok->encode("ba", false, false), (std::vector<int32_t>{3, 5, 4}));
  EXPECT_EQ(tok->encode("", false, false), (std::vector<int32_t>{}));
}

TEST(TokenizerSpm, HighestScoreWinsOverLeftmost) {
  VocabSpec v = small_spm();
  v.scores[8] = -0.2f;  // now "bc" beats "ab"
  auto tok = Tokenizer::from_spec(v);
  ASSERT_TRUE(tok.is_ok());
  EXPECT_EQ(tok->encode("abc", false, false), (std::vector<int32_t>{3, 4, 8}));
}

TEST(TokenizerSpm, LeftmostWinsOnEqualScores) {
  VocabSpec v = small_spm();
  v.tokens[7] = "aa";  // "aaa": both pairs score the same, the left one merges
  v.tokens[9] = kSp + "x";
  auto tok = Tokenizer::from_spec(v);
  ASSERT_TRUE(tok.is_ok());
  EXPECT_EQ(tok->encode("aaa", false, false), (std::vector<int32_t>{3, 7, 4}));
}

TEST(TokenizerSpm, ByteFallbackAndDecode) {
  auto tok = Tokenizer::from_spec(small_spm());
  ASSERT_TRUE(tok.is_ok());
  // "é" = C3 A9 has no token: its bytes; "!" likewise; "?" has no byte token either: UNK.
  const std::vector<int32_t> ids = tok->encode("\xC3\xA9!?", false, false);
  EXPECT_EQ(ids, (std::vector<int32_t>{3, 10, 11, 12, 0}));
  EXPECT_EQ(tok->token_to_piece(10), "\xC3");
  EXPECT_EQ(tok->token_to_piece(0), "");
  EXPECT_EQ(tok->token_to_piece(0, true), "<unk>");
  EXPECT_EQ(tok->decode(std::vector<int32_t>{3, 10, 11, 12}), "\xC3\xA9!");
  EXPECT_EQ(tok->decode(std::vector<int32_t>{1, 9, 3, 4}), "ab a");
  DecodeOptions keep;
  keep.strip_space_prefix = false;
  keep.render_special = true;
  EXPECT_EQ(tok->decode(std::vector<int32_t>{1, 9, 3, 4}, keep), "<s> ab a");
}

TEST(TokenizerSpm, SpecialTokens) {
  auto tok = Tokenizer::from_spec(small_spm());
  ASSERT_TRUE(tok.is_ok());
  // Control tokens only with parse_special; each text fragment gets its space prefix.
  EXPECT_EQ(tok->encode("ab</s>ab", false, true), (std::vector<int32_t>{9, 2, 9}));
  // User-defined tokens are always matched.
  EXPECT_EQ(tok->encode("<my>ab", false, false), (std::vector<int32_t>{13, 9}));
  // Decoding strips the prefix space after a special token too, so the text round-trips.
  DecodeOptions render;
  render.render_special = true;
  EXPECT_EQ(tok->decode(std::vector<int32_t>{9, 2, 9}, render), "ab</s>ab");
  EXPECT_TRUE(tok->is_eog(2));
  EXPECT_FALSE(tok->is_eog(1));
}

TEST(TokenizerSpm, AddSpacePrefixOff) {
  VocabSpec v = small_spm();
  v.add_space_prefix = false;
  auto tok = Tokenizer::from_spec(v);
  ASSERT_TRUE(tok.is_ok());
  EXPECT_EQ(tok->encode("ab", false, false), (std::vector<int32_t>{7}));
  EXPECT_EQ(tok->encode(" ab", false, false), (std::vector<int32_t>{9}));
  EXPECT_EQ(tok->decode(std::vector<int32_t>{9}), " ab");
}

// ---------------------------------------------------------------- BPE, hand-built vocabulary

const std::string kG = "\xC4\xA0";  // "Ġ", the byte-level space

VocabSpec small_bpe() {
  VocabSpec v;
  v.model = "gpt2";
  v.pre = "gpt-2";
  //            0    1    2   3     4        5             6                  7
  v.tokens = {"a", "b", kG, "ab", kG + "a", kG + "ab", "<|endoftext|>", "\xC4\x8A"};
  v.token_types = {1, 1, 1, 1, 1, 1, 3, 1};
  v.merges = {"a b", kG + " a", kG + "a b"};
  v.eos = 6;
  v.bos = 6;
  return v;
}

TEST(TokenizerBpe, MergesByRank) {
  auto tok = Tokenizer::from_spec(small_bpe());
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  EXPECT_FALSE(tok->add_bos());
  // " ab": "a b" (rank 0) merges before "Ġ a" (rank 1), and "Ġ ab" is no merge.
  EXPECT_EQ(tok->encode(" ab", false, false), (std::vector<int32_t>{2, 3}));
  // " a b": pieces " a" and " b"; " b" has no merge and no token for "Ġb".
  EXPECT_EQ(tok->encode("ab a", false, false), (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(tok->encode("a\n", false, false), (std::vector<int32_t>{0, 7}));
  EXPECT_EQ(tok->decode(std::vector<int32_t>{3, 2, 3, 7}), "ab ab\n");
}

TEST(TokenizerBpe, SpecialTokensAndEog) {
  auto tok = Tokenizer::from_spec(small_bpe());
  ASSERT_TRUE(tok.is_ok());
  EXPECT_EQ(tok->encode("ab<|endoftext|>", false, true), (std::vector<int32_t>{3, 6}));
  EXPECT_EQ(tok->eot(), 6);  // found by its text
  EXPECT_TRUE(tok->is_eog(6));
  EXPECT_EQ(tok->decode(std::vector<int32_t>{3, 6}), "ab");
  DecodeOptions render;
  render.render_special = true;
  EXPECT_EQ(tok->decode(std::vector<int32_t>{3, 6}, render), "ab<|endoftext|>");
  EXPECT_EQ(tok->decode(std::vector<int32_t>{3, 99, -1}), "ab");  // out of range: skipped
  EXPECT_FALSE(tok->check_ids(std::vector<int32_t>{3, 99}).is_ok());
}

// gpt-oss's harmony tokens, as llama.cpp takes them: <|return|> and <|call|> end generation,
// <|end|> (which closes the analysis message before the final one) does not, and it and the
// markers a reply's parser reads are rendered in the output.
TEST(TokenizerBpe, HarmonyEndsOnReturnAndCallAndRendersItsMarkers) {
  VocabSpec v = small_bpe();
  v.pre = "gpt-4o";
  for (const char* t :
       {"<|return|>", "<|channel|>", "<|start|>", "<|end|>", "<|message|>", "<|call|>"}) {  // 8..13
    v.tokens.push_back(t);
    v.token_types.push_back(3);
  }
  v.eos = 8;
  auto tok = Tokenizer::from_spec(v);
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  EXPECT_TRUE(tok->is_eog(8));
  EXPECT_TRUE(tok->is_eog(13));
  EXPECT_TRUE(tok->is_eog(6));  // <|endoftext|>
  EXPECT_FALSE(tok->is_eog(11));
  const std::vector<int32_t> reply = {9, 3, 12, 2, 3, 11, 10, 9, 3, 12, 0, 8};
  EXPECT_EQ(tok->decode(reply),
            "<|channel|>ab<|message|> ab<|end|><|start|><|channel|>ab<|message|>a");
  // Without <|call|> it is another vocabulary, whose <|end|> ends a turn as usual.
  v.tokens.resize(13);
  v.token_types.resize(13);
  auto other = Tokenizer::from_spec(v);
  ASSERT_TRUE(other.is_ok()) << other.status().message();
  EXPECT_TRUE(other->is_eog(11));
  EXPECT_EQ(other->decode(std::vector<int32_t>{3, 11}), "ab");
}

TEST(TokenizerBpe, Llama3IgnoresMergesForWholeTokensAndAddsBos) {
  VocabSpec v = small_bpe();
  v.pre = "llama-bpe";
  v.tokens.push_back(kG + "b");  // 8, reachable by no merge
  v.token_types.push_back(1);
  auto tok = Tokenizer::from_spec(v);
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(tok->encode(" b", true, false), (std::vector<int32_t>{6, 8}));
}

// The flags llama.cpp's vocabulary loader sets for each tokenizer.ggml.pre value.
struct PreFlags {
  const char* pre;
  bool ignore_merges;
  bool add_bos;
  bool clean_spaces;
};

const PreFlags kPreFlags[] = {
    {"gpt-2", false, false, true},         {"mpt", false, false, true},
    {"olmo", false, false, true},          {"jais", false, false, true},
    {"llama-bpe", true, true, true},       {"llama3", true, true, true},
    {"falcon3", true, true, true},         {"dbrx", false, false, true},
    {"smaug-bpe", false, false, true},     {"chatglm-bpe", false, false, true},
    {"qwen2", false, false, false},        {"deepseek-r1-qwen", false, false, false},
    {"stablelm2", false, false, true},     {"megrez", false, false, true},
    {"deepseek-llm", false, false, false}, {"deepseek-coder", false, false, false},
    {"deepseek-v3", false, false, false},  {"falcon", false, false, true},
    {"starcoder", false, false, true},     {"refact", false, false, true},
    {"exaone", false, false, true},        {"minerva-7b", false, false, true},
    {"command-r", false, false, false},    {"smollm", false, false, false},
    {"tekken", true, true, false},         {"gpt-4o", false, false, false},
    {"bloom", false, false, true},         {"poro-chat", false, false, false},
    {"viking", false, false, false},       {"default", false, false, true},
};

TEST(TokenizerBpe, PreTokenizerFlagsAsLlamaCpp) {
  for (const PreFlags& f : kPreFlags) {
    VocabSpec v = small_bpe();
    v.pre = f.pre;
    v.tokens.push_back(kG + "b");  // 8, reachable by no merge
    v.token_types.push_back(1);
    auto tok = Tokenizer::from_spec(v);
    ASSERT_TRUE(tok.is_ok()) << f.pre << ": " << tok.status().message();
    // Every row splits " b" into one piece; only ignore_merges finds it whole.
    const std::vector<int32_t> ids = tok->encode(" b", false, false);
    const std::vector<int32_t> expected =
        f.ignore_merges ? std::vector<int32_t>{8} : std::vector<int32_t>{2, 1};
    EXPECT_EQ(ids, expected) << f.pre;
    EXPECT_EQ(tok->add_bos(), f.add_bos) << f.pre;
    EXPECT_EQ(tok->clean_spaces(), f.clean_spaces) << f.pre;
  }
  // A missing or empty name is "default", as in llama.cpp.
  for (const std::optional<std::string>& pre :
       {std::optional<std::string>(), std::optional<std::string>("")}) {
    VocabSpec v = small_bpe();
    v.pre = pre;
    auto tok = Tokenizer::from_spec(v);
    ASSERT_TRUE(tok.is_ok()) << tok.status().message();
    EXPECT_TRUE(tok->clean_spaces());
  }
}

// A byte-level vocabulary with one token per character of `chars` (and no useful merges), so
// that any text of those characters is spelled one token per byte.
VocabSpec char_bpe(std::string_view pre, std::string_view chars) {
  VocabSpec v;
  v.model = "gpt2";
  v.pre = std::string(pre);
  ByteLevelMap map;
  for (char c : chars) {
    std::string t;
    map.encode(std::string_view(&c, 1), t);
    v.tokens.push_back(t);
  }
  v.merges = {v.tokens[0] + " " + v.tokens[1]};
  return v;
}

std::vector<int32_t> spell(const VocabSpec& v, std::string_view text) {
  ByteLevelMap map;
  std::vector<int32_t> ids;
  for (char c : text) {
    std::string t;
    map.encode(std::string_view(&c, 1), t);
    const auto it = std::find(v.tokens.begin(), v.tokens.end(), t);
    EXPECT_NE(it, v.tokens.end()) << "no token for '" << c << "'";
    ids.push_back(static_cast<int32_t>(it - v.tokens.begin()));
  }
  return ids;
}

TEST(TokenizerBpe, CleanSpacesAsLlamaDetokenize) {
  const std::string chars = " '?!.,abdelmrstvx";
  const VocabSpec v = char_bpe("gpt-2", chars);
  auto tok = Tokenizer::from_spec(v);
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  EXPECT_TRUE(tok->clean_spaces());
  DecodeOptions clean;
  clean.clean_spaces = true;
  const std::pair<std::string, std::string> cases[] = {
      {"a ? b ! a . b ,", "a? b! a. b,"},
      {" ?a", "?a"},
      {"a  .", "a ."},  // one space per mark
      {"x ' x", "x'x"},
      {"x ' ' x", "x'' x"},  // the space between went with the first apostrophe
      {"x 's x 'm x 're x 've", "x's x'm x're x've"},
      {"x 't x 'd x 'll x 'a", "x 't x 'd x 'll x 'a"},
      {"", ""},
  };
  for (const auto& [text, cleaned] : cases) {
    const std::vector<int32_t> ids = spell(v, text);
    EXPECT_EQ(tok->decode(ids), text);  // off by default
    EXPECT_EQ(tok->decode(ids, clean), cleaned) << "'" << text << "'";
  }
  // A pre-tokenizer without the flag leaves the text alone.
  const VocabSpec q = char_bpe("qwen2", chars);
  auto qwen = Tokenizer::from_spec(q);
  ASSERT_TRUE(qwen.is_ok()) << qwen.status().message();
  EXPECT_FALSE(qwen->clean_spaces());
  EXPECT_EQ(qwen->decode(spell(q, "a ? x 's"), clean), "a ? x 's");
}

// ---------------------------------------------------------------- malformed vocabularies

void expect_error(const VocabSpec& v, const std::string& needle) {
  auto tok = Tokenizer::from_spec(v);
  ASSERT_FALSE(tok.is_ok()) << "expected an error naming " << needle;
  EXPECT_NE(tok.status().message().find(needle), std::string::npos) << tok.status().message();
}

TEST(TokenizerMalformed, ArrayLengthsMustMatchTheTokens) {
  VocabSpec v = small_spm();
  v.scores.pop_back();
  expect_error(v, "tokenizer.ggml.scores");
  v = small_spm();
  v.token_types.push_back(1);
  expect_error(v, "tokenizer.ggml.token_type");
}

TEST(TokenizerMalformed, IdsMustBeInTheVocabulary) {
  VocabSpec v = small_spm();
  v.bos = 14;
  expect_error(v, "tokenizer.ggml.bos_token_id: 14");
  v = small_spm();
  v.eos = uint64_t{1} << 40;
  expect_error(v, "tokenizer.ggml.eos_token_id");
  v = small_bpe();
  v.pad = 8;
  expect_error(v, "tokenizer.ggml.padding_token_id");
  v = small_spm();
  v.unk = UINT32_MAX;  // "none", as converters write -1
  auto none = Tokenizer::from_spec(v);
  ASSERT_TRUE(none.is_ok()) << none.status().message();
  EXPECT_EQ(none->unk(), -1);
  v = small_bpe();
  v.bos.reset();
  v.add_bos = true;
  expect_error(v, "tokenizer.ggml.add_bos_token");
}

TEST(TokenizerMalformed, BadValues) {
  VocabSpec v = small_spm();
  v.token_types[4] = 9;
  expect_error(v, "tokenizer.ggml.token_type[4]");
  v = small_spm();
  v.tokens[10] = "<0xZZ>";
  expect_error(v, "tokenizer.ggml.tokens[10]");
  v = small_spm();
  v.tokens[5] = "a";
  expect_error(v, "tokenizer.ggml.tokens[5]");
  v = small_spm();
  v.model = "bert";
  expect_error(v, "bert");
  v = small_spm();
  v.tokens.clear();
  v.scores.clear();
  v.token_types.clear();
  expect_error(v, "tokenizer.ggml.tokens");
  v = small_bpe();
  v.merges.push_back("ab");
  expect_error(v, "tokenizer.ggml.merges[3]");
  v = small_bpe();
  v.merges.clear();
  expect_error(v, "tokenizer.ggml.merges");
  v = small_bpe();
  v.pre = "mystery-pre";
  expect_error(v, "mystery-pre");
}

// ---------------------------------------------------------------- from GGUF metadata

GgufWriter spm_writer() {
  const VocabSpec v = small_spm();
  GgufWriter w;
  w.set_string("tokenizer.ggml.model", v.model);
  w.set_strings("tokenizer.ggml.tokens", v.tokens);
  w.set_f32_array("tokenizer.ggml.scores", v.scores);
  w.set_i32_array("tokenizer.ggml.token_type", v.token_types);
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
  return w;
}

Result<Tokenizer> load(const GgufWriter& w) {
  auto bytes = w.serialize();
  if (!bytes.is_ok()) return bytes.status();
  auto file = GgufFile::parse(std::make_shared<const std::vector<uint8_t>>(std::move(*bytes)));
  if (!file.is_ok()) return file.status();
  return Tokenizer::from_gguf(*file);
}

void expect_gguf_error(const GgufWriter& w, const std::string& needle) {
  auto tok = load(w);
  ASSERT_FALSE(tok.is_ok()) << "expected an error naming " << needle;
  EXPECT_NE(tok.status().message().find(needle), std::string::npos) << tok.status().message();
}

TEST(TokenizerGguf, LoadsKeysAndFlags) {
  GgufWriter w = spm_writer();
  w.set_bool("tokenizer.ggml.add_bos_token", false);
  w.set_bool("tokenizer.ggml.add_eos_token", true);
  w.set_i32("tokenizer.ggml.padding_token_id", -1);  // "none"
  auto tok = load(w);
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  EXPECT_FALSE(tok->add_bos());
  EXPECT_TRUE(tok->add_eos());
  EXPECT_EQ(tok->pad(), -1);
  EXPECT_EQ(tok->encode("ab", true, false), (std::vector<int32_t>{9, 2}));
}

TEST(TokenizerGguf, ErrorsNameTheKey) {
  GgufWriter w = spm_writer();
  w.set_u32("tokenizer.ggml.eos_token_id", 500);
  expect_gguf_error(w, "tokenizer.ggml.eos_token_id");
  w = spm_writer();
  w.set_string("tokenizer.ggml.bos_token_id", "1");
  expect_gguf_error(w, "tokenizer.ggml.bos_token_id");
  w = spm_writer();
  w.set_f32_array("tokenizer.ggml.scores", {1.0f, 2.0f});
  expect_gguf_error(w, "tokenizer.ggml.scores");
  w = spm_writer();
  w.set_u32("tokenizer.ggml.tokens", 3);
  expect_gguf_error(w, "tokenizer.ggml.tokens");
  w = spm_writer();
  w.set_i32("tokenizer.ggml.unknown_token_id", -7);
  expect_gguf_error(w, "tokenizer.ggml.unknown_token_id");
  w = spm_writer();
  w.set_u32("tokenizer.ggml.add_bos_token", 1);
  expect_gguf_error(w, "tokenizer.ggml.add_bos_token");
  GgufWriter empty;
  empty.set_strings("tokenizer.ggml.tokens", {"a"});
  expect_gguf_error(empty, "tokenizer.ggml.model");
}

// ---------------------------------------------------------------- Gemma's SentencePiece variant

// A vocabulary shaped like a Gemma GGUF: tokenizer.ggml.model "llama" with
// add_space_prefix false and add_bos true, BOS <bos> = 2, EOS <eos> = 1, the turn markers as
// control tokens, and the newline and the run of spaces as user-defined tokens (the converter
// writes the latter's U+2581 as spaces).
GgufWriter gemma_writer() {
  GgufWriter w;
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string("tokenizer.ggml.pre", "default");
  w.set_strings("tokenizer.ggml.tokens", {
                                             "<pad>",
                                             "<eos>",
                                             "<bos>",
                                             "<unk>",  // 0-3
                                             "<start_of_turn>",
                                             "<end_of_turn>",
                                             "\n",
                                             "  ",  // 4-7
                                             kSp,
                                             "H",
                                             "i",
                                             "Hi",
                                             kSp + "Hi",  // 8-12
                                             "u",
                                             "s",
                                             "e",
                                             "r",
                                             "us",
                                             "er",
                                             "user",  // 13-19
                                             "<0xC3>",
                                             "<0xA9>",
                                             "<unused0>",  // 20-22
                                         });
  w.set_f32_array("tokenizer.ggml.scores", {0,     0,  0,  0,  0,  0,  0,  0,     -5, -5, -5, -1,
                                            -0.5f, -5, -5, -5, -5, -1, -1, -0.5f, 0,  0,  0});
  w.set_i32_array("tokenizer.ggml.token_type",
                  {3, 3, 3, 2, 3, 3, 4, 4, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 6, 6, 5});
  w.set_u32("tokenizer.ggml.bos_token_id", 2);
  w.set_u32("tokenizer.ggml.eos_token_id", 1);
  w.set_u32("tokenizer.ggml.unknown_token_id", 3);
  w.set_u32("tokenizer.ggml.padding_token_id", 0);
  w.set_u32("tokenizer.ggml.eot_token_id", 5);
  w.set_bool("tokenizer.ggml.add_bos_token", true);
  w.set_bool("tokenizer.ggml.add_eos_token", false);
  w.set_bool("tokenizer.ggml.add_space_prefix", false);
  return w;
}

TEST(TokenizerGemma, NoSpacePrefixButBos) {
  auto tok = load(gemma_writer());
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  EXPECT_EQ(tok->kind(), VocabKind::kSpm);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_FALSE(tok->add_space_prefix());
  EXPECT_EQ(tok->bos(), 2);
  // No dummy prefix: "Hi" is "Hi", not "\u2581Hi"; a space the text has becomes U+2581.
  EXPECT_EQ(tok->encode("Hi", true, false), (std::vector<int32_t>{2, 11}));
  EXPECT_EQ(tok->encode(" Hi", false, false), (std::vector<int32_t>{12}));
  EXPECT_EQ(tok->encode("Hi Hi", false, false), (std::vector<int32_t>{11, 12}));
  // Decoding keeps a leading space: nothing was added that it should take away.
  EXPECT_EQ(tok->decode(std::vector<int32_t>{12}), " Hi");
  EXPECT_EQ(tok->decode(std::vector<int32_t>{2, 11, 12}), "Hi Hi");
  // Byte fallback for a character without a token.
  EXPECT_EQ(tok->encode("\xC3\xA9", false, false), (std::vector<int32_t>{20, 21}));
  EXPECT_EQ(tok->decode(std::vector<int32_t>{20, 21}), "\xC3\xA9");
}

TEST(TokenizerGemma, TurnMarkersAndUserDefinedWhitespace) {
  auto tok = load(gemma_writer());
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  // A chat turn: control tokens only with parse_special, the user-defined newline always,
  // and no space prefix after any of them.
  const std::string turn = "<start_of_turn>user\nHi<end_of_turn>\n";
  const std::vector<int32_t> ids = tok->encode(turn, true, true);
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 4, 19, 6, 11, 5, 6}));
  DecodeOptions render;
  render.render_special = true;
  EXPECT_EQ(tok->decode(ids, render), "<bos>" + turn);
  EXPECT_EQ(tok->decode(ids), "user\nHi\n");
  const std::vector<int32_t> plain = tok->encode(turn, false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 4), 0);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 6), 2);
  // A run of spaces with a token of its own is matched before SentencePiece sees the text.
  EXPECT_EQ(tok->encode("Hi  Hi", false, false), (std::vector<int32_t>{11, 7, 11}));
  EXPECT_EQ(tok->decode(std::vector<int32_t>{11, 7, 11}), "Hi  Hi");
  // <end_of_turn> ends generation, as the EOT key says; <eos> too.
  EXPECT_EQ(tok->eot(), 5);
  EXPECT_TRUE(tok->is_eog(5));
  EXPECT_TRUE(tok->is_eog(1));
  EXPECT_FALSE(tok->is_eog(4));
  // An unused token is never produced from text and renders as nothing.
  const std::vector<int32_t> unused = tok->encode("<unused0>", false, true);
  EXPECT_EQ(std::count(unused.begin(), unused.end(), 22), 0);
  EXPECT_EQ(tok->token_to_piece(22), "");
}

// ---------------------------------------------------------------- llama.cpp conformance files

struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<VocabCase> read_cases(const std::string& base) {
  std::ifstream inp(base + ".inp", std::ios::binary), out(base + ".out", std::ios::binary);
  std::stringstream ss;
  ss << inp.rdbuf();
  const std::string all = ss.str();
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<VocabCase> cases;
  size_t pos = 0;
  while (true) {
    const size_t hit = all.find(sep, pos);
    if (hit == std::string::npos) break;
    cases.push_back({all.substr(pos, hit - pos), {}});
    pos = hit + sep.size();
  }
  std::string line;
  size_t lines = 0;
  for (; std::getline(out, line); ++lines) {
    if (lines >= cases.size()) continue;
    std::istringstream ls(line);
    int32_t id = 0;
    while (ls >> id) cases[lines].ids.push_back(id);
  }
  EXPECT_EQ(lines, cases.size()) << base << ".out: one line of ids per input text";
  return cases;
}

void run_conformance(const std::string& name) {
  const std::string base = kShared + "/tokenizer/ggml-vocab-" + name + ".gguf";
  if (!std::filesystem::exists(base) || !std::filesystem::exists(base + ".inp")) {
    GTEST_SKIP() << base << " is absent";
  }
  auto file = GgufFile::open(base);
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  auto tok = Tokenizer::from_gguf(*file);
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  const std::vector<VocabCase> cases = read_cases(base);
  ASSERT_GE(cases.size(), 40u);
  for (const VocabCase& c : cases) {
    EXPECT_EQ(tok->encode(c.text, false, false), c.ids) << "text: '" << c.text << "'";
    EXPECT_EQ(tok->decode(c.ids), c.text);
  }
}

class TokenizerConformanceVocab : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerConformanceVocab, TokenizesAndRoundTripsEveryCase) { run_conformance(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Shared, TokenizerConformanceVocab,
                         ::testing::Values("llama-spm", "gpt-2", "deepseek-llm", "falcon", "mpt",
                                           "refact", "starcoder"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           std::erase(name, '-');
                           return name;
                         });

TEST(TokenizerConformance, Gpt2SpecialTokenOnlyWhenParsed) {
  const std::string path = kShared + "/tokenizer/ggml-vocab-gpt-2.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  auto tok = Tokenizer::from_gguf(*file);
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  EXPECT_FALSE(tok->add_bos());
  // GPT-2's <|endoftext|> is 50256, its last token.
  EXPECT_EQ(tok->n_vocab(), 50257);
  EXPECT_EQ(tok->encode("<|endoftext|>", true, true), (std::vector<int32_t>{50256}));
  const std::vector<int32_t> plain = tok->encode("<|endoftext|>", false, false);
  EXPECT_GT(plain.size(), 1u);
  EXPECT_EQ(tok->decode(plain), "<|endoftext|>");
  EXPECT_TRUE(tok->is_eog(50256));
}

TEST(TokenizerConformance, Gpt2RoundTripsArbitraryBytes) {
  const std::string path = kShared + "/tokenizer/ggml-vocab-gpt-2.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  auto tok = Tokenizer::from_gguf(*file);
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  // Byte-level BPE maps every byte, so any byte string (invalid UTF-8 included) survives.
  uint32_t seed = 12345;
  const auto next = [&] { return seed = seed * 1664525u + 1013904223u; };
  for (int round = 0; round < 200; ++round) {
    std::string text(next() % 40, '\0');
    for (char& c : text) {
      const uint32_t r = next() >> 8;
      c = static_cast<char>(r % 4 == 0 ? r >> 8 : " a1'\n\xC3\xA9!"[(r >> 8) % 9]);
    }
    EXPECT_EQ(tok->decode(tok->encode(text, false, false)), text);
  }
}

TEST(TokenizerConformance, SpmWithBosRoundTrips) {
  const std::string path = kShared + "/tokenizer/ggml-vocab-llama-spm.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  auto tok = Tokenizer::from_gguf(*file);
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  // Llama 2: BOS is <s> = 1, "Hello world" is "▁Hello" 15043 "▁world" 3186.
  const std::vector<int32_t> ids = tok->encode("Hello world", true, false);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 15043, 3186}));
  EXPECT_EQ(tok->decode(ids), "Hello world");
  EXPECT_EQ(tok->encode("<s>Hi</s>", false, true)[0], 1);
  // A token stream decoded piece by piece through Utf8Stream gives the same text.
  const std::string text = "\xF0\x9F\xA6\x99 llama \xC3\xA9t\xC3\xA9";
  Utf8Stream stream;
  std::string streamed;
  bool first = true;
  for (int32_t id : tok->encode(text, false, false)) {
    std::string piece = tok->token_to_piece(id);
    if (first && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    first = false;
    streamed += stream.push(piece);
    EXPECT_TRUE(utf8_valid(streamed));
  }
  streamed += stream.flush();
  EXPECT_EQ(streamed, text);
}

TEST(TokenizerConformance, Stories260K) {
  const std::string path = kShared + "/models/stories260K.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  auto tok = Tokenizer::from_gguf(*file);
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  const std::vector<int32_t> ids = tok->encode("Once upon a time", true, false);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 403, 407, 261, 378}));
  EXPECT_EQ(tok->decode(ids), "Once upon a time");
}

TEST(TokenizeCommand, PrintsIds) {
  const std::string path = kShared + "/models/stories260K.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
  const std::string cmd =
      std::string(STRATA_BINARY) + " tokenize -m '" + path + "' -p 'Once upon a time'";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[256] = {};
  const size_t n = fread(buf, 1, sizeof(buf) - 1, p);
  EXPECT_EQ(pclose(p), 0);
  EXPECT_EQ(std::string(buf, n), "1 403 407 261 378\n");

  p = popen((cmd + " --no-bos").c_str(), "r");
  ASSERT_NE(p, nullptr);
  const size_t m = fread(buf, 1, sizeof(buf) - 1, p);
  EXPECT_EQ(pclose(p), 0);
  EXPECT_EQ(std::string(buf, m), "403 407 261 378\n");

  p = popen((std::string(STRATA_BINARY) + " tokenize -m /nonexistent.gguf -p x 2>&1").c_str(), "r");
  ASSERT_NE(p, nullptr);
  const size_t e = fread(buf, 1, sizeof(buf) - 1, p);
  EXPECT_NE(pclose(p), 0);
  EXPECT_NE(std::string(buf, e).find("/nonexistent.gguf"), std::string::npos);
}

}  // namespace
}  // namespace strata
