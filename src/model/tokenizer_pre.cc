#include "model/tokenizer_pre.h"

#include <string>

namespace strata {
namespace {

// Regexes are PCRE2 with Unicode properties, written to split as llama.cpp's splitter does
// (its own code for the GPT-2 and Llama 3 regexes, std::regex on a text whose characters it
// replaced by their Unicode category for the others). Where that differs from the
// tokenizer.json regex of the model, the regex here follows llama.cpp:
// - Contractions are spelled with explicit case classes instead of (?i:...): under Unicode
//   case folding 's' would also match U+017F and 'k' the Kelvin sign.
// - Case-aware letter classes (\p{Lu}, \p{Ll}, ...) are all \p{L} to llama.cpp; they are
//   written as "a letter other than a-z" / "other than A-Z", which is what it matches.
// - llama.cpp shows every non-ASCII whitespace character to std::regex as U+000B, so such a
//   character matches \s but never a literal or a range of a class: classes whose ranges
//   span whitespace are guarded with (?!\s).
// - \s is White_Space as llama.cpp's tables have it (RegexSplitter spells it out).
constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|)"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|)"
    R"(\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Tekken (Mistral Nemo) and GPT-4o: camel-case words split before each capital run.
constexpr std::string_view kTekkenRegex =
    R"([^\r\n\p{L}\p{N}]?(?:(?=\p{L})[^a-z])*(?:(?=\p{L})[^A-Z])+|)"
    R"([^\r\n\p{L}\p{N}]?(?:(?=\p{L})[^a-z])+(?:(?=\p{L})[^A-Z])*|)"
    R"(\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kGpt4oRegex =
    R"([^\r\n\p{L}\p{N}]?(?:(?=\p{L})[^a-z])*(?:(?=\p{L})[^A-Z])+)"
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|)"
    R"([^\r\n\p{L}\p{N}]?(?:(?=\p{L})[^a-z])+(?:(?=\p{L})[^A-Z])*)"
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|)"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// CJK ideographs (U+4E00..U+9FA5), everything from U+0800 up to them, and Hangul.
constexpr std::string_view kDeepseekCjkRegex =
    R"((?:(?!\s)[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}])+)";
// Everything but whitespace and sentence punctuation, in words with at most one leading space.
constexpr std::string_view kBloomRegex =
    R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+)";

constexpr std::string_view kGpt2[] = {kGpt2Regex};
constexpr std::string_view kLlama3[] = {kLlama3Regex};
constexpr std::string_view kQwen2[] = {kQwen2Regex};
constexpr std::string_view kTekken[] = {kTekkenRegex};
constexpr std::string_view kGpt4o[] = {kGpt4oRegex};
constexpr std::string_view kBloom[] = {kBloomRegex};
constexpr std::string_view kViking[] = {kBloomRegex, R"(\p{N})"};
// Every digit alone, then GPT-2.
constexpr std::string_view kStarcoder[] = {R"(\p{N})", kGpt2Regex};
// Punctuation runs, GPT-2, then digit runs cut in threes.
constexpr std::string_view kFalcon[] = {
    R"([\p{P}\$\+<=>\^~\|`]+)",
    kGpt2Regex,
    R"([0-9][0-9][0-9])",
};
// Newlines alone; words of cased letters (the letters of the deepseek-llm tokenizer.json
// regex, a fixed list); ASCII and full-width punctuation (U+3000 is whitespace to
// llama.cpp, so the class starts at U+3001); trailing whitespace; CJK; digit runs.
constexpr std::string_view kDeepseekLlm[] = {
    R"([\r\n])",
    R"(\s?[)"
    R"(\x{41}-\x{5A}\x{61}-\x{7A}\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA})"
    R"(\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377})"
    R"(\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5})"
    R"(\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5})"
    R"(\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77})"
    R"(\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D})"
    R"(\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4})"
    R"(\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3})"
    R"(\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})"
    R"(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D})"
    R"(\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184})"
    R"(\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D})"
    R"(\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF})"
    R"(\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A})"
    R"(\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2})"
    R"(\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943})"
    R"(]+)",
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3001}-\x{3002}]+)",
    R"(\s+$)",
    kDeepseekCjkRegex,
    R"(\p{N}+)",
};
constexpr std::string_view kDeepseekCoder[] = {
    R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kDeepseekCjkRegex, R"(\p{N})",
};
// Digits in threes; ideograph and kana runs; then an ASCII mark joins the ASCII word after
// it, letters keep their combining marks, and punctuation and symbols make runs.
constexpr std::string_view kDeepseekV3[] = {
    R"(\p{N}{1,3})",
    R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)",
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|)"
    R"( ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
// What llama.cpp applies when a BPE vocabulary names no pre-tokenizer.
constexpr std::string_view kDefault[] = {
    R"([\p{P}\$\+<=>\^~\|]+)",
    kGpt2Regex,
    R"(\p{N}+)",
    R"([0-9][0-9][0-9])",
};

// The names are llama.cpp's tokenizer.ggml.pre values; rows that split alike but differ in a
// flag are separate rows (qwen2 / stablelm2, starcoder / command-r, bloom / poro-chat).
constexpr PreTokenizer kTable[] = {
    {.names = "gpt-2 phi-2 roberta-bpe mpt olmo jais exaone4", .regexes = kGpt2},
    {.names = "llama-bpe llama3 llama-v3 falcon3 falcon-h1 pixtral",
     .regexes = kLlama3,
     .ignore_merges = true,
     .add_bos = true},
    // llama.cpp also drops the default BOS id for chatglm-bpe; strata assumes none for BPE.
    {.names = "dbrx smaug-bpe chatglm-bpe glm4", .regexes = kLlama3},
    {.names = "qwen2 deepseek-r1-qwen", .regexes = kQwen2, .clean_spaces = false},
    {.names = "stablelm2 megrez", .regexes = kQwen2},
    {.names = "deepseek-llm", .regexes = kDeepseekLlm, .clean_spaces = false},
    {.names = "deepseek-coder", .regexes = kDeepseekCoder, .clean_spaces = false},
    {.names = "deepseek-v3", .regexes = kDeepseekV3, .clean_spaces = false},
    {.names = "falcon", .regexes = kFalcon},
    {.names = "starcoder refact exaone minerva-7b codeshell", .regexes = kStarcoder},
    {.names = "command-r smollm", .regexes = kStarcoder, .clean_spaces = false},
    {.names = "tekken",
     .regexes = kTekken,
     .ignore_merges = true,
     .add_bos = true,
     .clean_spaces = false},
    {.names = "gpt-4o llama4", .regexes = kGpt4o, .clean_spaces = false},
    {.names = "bloom gpt3-finnish", .regexes = kBloom},
    {.names = "poro-chat", .regexes = kBloom, .clean_spaces = false},
    {.names = "viking", .regexes = kViking, .clean_spaces = false},
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
