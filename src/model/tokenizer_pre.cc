#include "model/tokenizer_pre.h"

#include <string>

namespace strata {
namespace {

// Regexes are PCRE2 with Unicode properties. The contraction alternatives are spelled with
// explicit case classes instead of (?i:...): under Unicode case folding 's' would also match
// U+017F and 'k' the Kelvin sign, which llama.cpp's splitter does not.
constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|)"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|)"
    R"(\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

constexpr std::string_view kGpt2[] = {kGpt2Regex};
constexpr std::string_view kLlama3[] = {kLlama3Regex};
constexpr std::string_view kQwen2[] = {kQwen2Regex};
// What llama.cpp applies when a BPE vocabulary names no pre-tokenizer.
constexpr std::string_view kDefault[] = {
    R"([\p{P}\$\+<=>\^~\|]+)",
    kGpt2Regex,
    R"(\p{N}+)",
    R"([0-9][0-9][0-9])",
};

constexpr PreTokenizer kTable[] = {
    {.names = "gpt-2 phi-2 roberta-bpe mpt olmo jais", .regexes = kGpt2},
    {.names = "llama-bpe llama3 llama-v3 falcon3",
     .regexes = kLlama3,
     .ignore_merges = true,
     .add_bos = true},
    {.names = "dbrx smaug-bpe", .regexes = kLlama3},
    {.names = "qwen2 deepseek-r1-qwen", .regexes = kQwen2, .clean_spaces = false},
    {.names = "stablelm2 megrez", .regexes = kQwen2},
    {.names = "default", .regexes = kDefault},
};

bool names_contain(std::string_view names, std::string_view name) {
  while (!names.empty()) {
    const size_t space = names.find(' ');
    if (names.substr(0, space) == name) return true;
    if (space == std::string_view::npos) break;
    names.remove_prefix(space + 1);
  }
  return false;
}

}  // namespace

std::span<const PreTokenizer> pretokenizer_table() { return kTable; }

Result<const PreTokenizer*> pretokenizer_find(std::string_view name) {
  for (const PreTokenizer& row : kTable) {
    if (names_contain(row.names, name)) return &row;
  }
  std::string known;
  for (const PreTokenizer& row : kTable)
    known += (known.empty() ? "" : ", ") + std::string(row.name());
  return unsupported("tokenizer.ggml.pre: unknown pre-tokenizer '" + std::string(name) +
                     "' (known: " + known + " and their aliases)");
}

}  // namespace strata
