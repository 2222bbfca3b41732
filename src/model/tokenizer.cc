#include "model/tokenizer.h"

#include <algorithm>

#include "model/gguf.h"
#include "model/tokenizer_pre.h"

namespace strata {
namespace {

// Ids are int32 on every interface; real vocabularies stay under 300k tokens. Bounding the
// count keeps a hostile file from making us build multi-gigabyte lookup tables.
constexpr size_t kMaxVocab = size_t{1} << 24;
constexpr size_t kMaxMerges = size_t{1} << 24;

// End-of-turn tokens that llama.cpp recognises by their text (older GGUFs lack the ids).
constexpr std::string_view kEotTexts[] = {"<|eot_id|>",    "<|im_end|>",    "<|end|>",
                                          "<end_of_turn>", "<|endoftext|>", "<EOT>"};
constexpr std::string_view kEomText = "<|eom_id|>";
// gpt-oss (harmony): a reply ends with <|return|>, a tool call with <|call|>.
constexpr std::string_view kEogTexts[] = {"<|return|>", "<|call|>"};
// Harmony's markers, which a reply's parser reads in the output (llama.cpp renders them).
constexpr std::string_view kRenderedTexts[] = {"<|channel|>", "<|message|>", "<|start|>",
                                               "<|constrain|>"};

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's space

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (true) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(s.substr(pos));
  return out;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// "<0xAB>" -> 0xAB, or -1.
int parse_byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  const int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// llama_detokenize's clean-up: three passes, each compacting the text in place. A pass only
// writes at or before the byte it reads, so text[i - 1] and text[i + 1] still hold what the
// pass started with.
void clean_up_spaces(std::string& text) {
  if (text.empty()) return;
  // " ?", " !", " .", " ,": the space goes.
  size_t out = 1;
  for (size_t i = 1; i < text.size(); ++i) {
    const char x = text[i];
    if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) --out;
    text[out++] = x;
  }
  text.resize(out);
  // " ' ": both spaces go. The dropped space no longer counts as the space before the next
  // byte.
  out = 1;
  for (size_t i = 1; i < text.size(); ++i) {
    const char x = text[i];
    if (x == '\'' && i + 1 < text.size() && text[i - 1] == ' ' && text[i + 1] == ' ') {
      --out;
      text[++i] = '\0';
    }
    text[out++] = x;
  }
  text.resize(out);
  // " 's", " 'm", " 're", " 've": the space goes (" 't", " 'd", " 'll" keep theirs).
  out = 1;
  for (size_t i = 1; i < text.size(); ++i) {
    const char x = text[i];
    if (text[i - 1] == ' ' && x == '\'' && i + 1 < text.size()) {
      const char x1 = text[i + 1];
      const char x2 = i + 2 < text.size() ? text[i + 2] : '\0';
      if (x1 == 's' || x1 == 'm' || ((x1 == 'r' || x1 == 'v') && x2 == 'e')) --out;
    }
    text[out++] = x;
  }
  text.resize(out);
}

}  // namespace

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<Tokenizer> Tokenizer::from_gguf(const GgufFile& file) {
  VocabSpec spec;
  STRATA_ASSIGN_OR_RETURN(spec.model, file.get_string("tokenizer.ggml.model"));
  if (file.find("tokenizer.ggml.pre") != nullptr) {
    STRATA_ASSIGN_OR_RETURN(spec.pre, file.get_string("tokenizer.ggml.pre"));
  }
  STRATA_ASSIGN_OR_RETURN(spec.tokens, file.get_strings("tokenizer.ggml.tokens"));
  if (file.find("tokenizer.ggml.scores") != nullptr) {
    STRATA_ASSIGN_OR_RETURN(spec.scores, file.get_f32_array("tokenizer.ggml.scores"));
  }
  if (file.find("tokenizer.ggml.token_type") != nullptr) {
    STRATA_ASSIGN_OR_RETURN(spec.token_types, file.get_i32_array("tokenizer.ggml.token_type"));
  }
  if (file.find("tokenizer.ggml.merges") != nullptr) {
    STRATA_ASSIGN_OR_RETURN(spec.merges, file.get_strings("tokenizer.ggml.merges"));
  }
  const std::pair<const char*, std::optional<uint64_t>*> ids[] = {
      {"tokenizer.ggml.bos_token_id", &spec.bos},
      {"tokenizer.ggml.eos_token_id", &spec.eos},
      {"tokenizer.ggml.unknown_token_id", &spec.unk},
      {"tokenizer.ggml.padding_token_id", &spec.pad},
      {"tokenizer.ggml.eot_token_id", &spec.eot},
      {"tokenizer.ggml.eom_token_id", &spec.eom},
      {"tokenizer.ggml.seperator_token_id", &spec.sep},  // sic: the GGUF key is misspelt
      {"tokenizer.ggml.fim_pre_token_id", &spec.fim_pre},
      {"tokenizer.ggml.fim_suf_token_id", &spec.fim_suf},
      {"tokenizer.ggml.fim_mid_token_id", &spec.fim_mid},
      {"tokenizer.ggml.fim_pad_token_id", &spec.fim_pad},
      {"tokenizer.ggml.fim_rep_token_id", &spec.fim_rep},
      {"tokenizer.ggml.fim_sep_token_id", &spec.fim_sep},
  };
  for (const auto& [key, dst] : ids) {
    const GgufKv* kv = file.find(key);
    if (kv == nullptr) continue;
    const bool is_signed = kv->type == GgufType::kInt8 || kv->type == GgufType::kInt16 ||
                           kv->type == GgufType::kInt32 || kv->type == GgufType::kInt64;
    if (is_signed && kv->i64 == -1) {
      *dst = UINT32_MAX;  // "no such token", as build() reads it
      continue;
    }
    STRATA_ASSIGN_OR_RETURN(*dst, file.get_uint(key));
  }
  const std::pair<const char*, std::optional<bool>*> flags[] = {
      {"tokenizer.ggml.add_bos_token", &spec.add_bos},
      {"tokenizer.ggml.add_eos_token", &spec.add_eos},
      {"tokenizer.ggml.add_space_prefix", &spec.add_space_prefix},
  };
  for (const auto& [key, dst] : flags) {
    if (file.find(key) == nullptr) continue;
    STRATA_ASSIGN_OR_RETURN(*dst, file.get_bool(key));
  }
  return from_spec(std::move(spec));
}

Result<Tokenizer> Tokenizer::from_spec(VocabSpec spec) {
  Tokenizer t;
  STRATA_RETURN_IF_ERROR(t.build(std::move(spec)));
  return t;
}

Status Tokenizer::build(VocabSpec spec) {
  if (spec.model == "llama") {
    kind_ = VocabKind::kSpm;
  } else if (spec.model == "gpt2") {
    kind_ = VocabKind::kBpe;
  } else {
    return unsupported("tokenizer.ggml.model: '" + spec.model +
                       "' is not supported (supported: llama, gpt2)");
  }
  const size_t n = spec.tokens.size();
  if (n == 0) return invalid_argument("tokenizer.ggml.tokens: the vocabulary is empty");
  if (n > kMaxVocab) {
    return out_of_range("tokenizer.ggml.tokens: " + std::to_string(n) + " tokens, limit " +
                        std::to_string(kMaxVocab));
  }
  if (!spec.scores.empty() && spec.scores.size() != n) {
    return invalid_argument("tokenizer.ggml.scores: " + std::to_string(spec.scores.size()) +
                            " entries but tokenizer.ggml.tokens has " + std::to_string(n));
  }
  if (!spec.token_types.empty() && spec.token_types.size() != n) {
    return invalid_argument(
        "tokenizer.ggml.token_type: " + std::to_string(spec.token_types.size()) +
        " entries but tokenizer.ggml.tokens has " + std::to_string(n));
  }

  tokens_ = std::move(spec.tokens);
  scores_ = spec.scores.empty() ? std::vector<float>(n, 0.0f) : std::move(spec.scores);
  types_.assign(n, TokenType::kNormal);
  for (size_t i = 0; i < spec.token_types.size(); ++i) {
    const int32_t v = spec.token_types[i];
    if (v < 0 || v > static_cast<int32_t>(TokenType::kByte)) {
      return invalid_argument("tokenizer.ggml.token_type[" + std::to_string(i) +
                              "]: " + std::to_string(v) + " is not a token type (0..6)");
    }
    types_[i] = static_cast<TokenType>(v);
  }

  token_ids_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (tokens_[i].empty()) continue;  // an empty token can never be produced by encoding
    auto [it, inserted] = token_ids_.emplace(tokens_[i], static_cast<int32_t>(i));
    if (!inserted) {
      return invalid_argument("tokenizer.ggml.tokens[" + std::to_string(i) + "]: '" + tokens_[i] +
                              "' repeats token " + std::to_string(it->second));
    }
  }

  // Special ids: llama.cpp's defaults for SPM; none for BPE (its default of 11 is arbitrary).
  const auto default_id = [&](int32_t id) {
    return kind_ == VocabKind::kSpm && static_cast<size_t>(id) < n ? id : -1;
  };
  bos_ = default_id(1);
  eos_ = default_id(2);
  unk_ = default_id(0);
  const std::tuple<const char*, const std::optional<uint64_t>&, int32_t*> ids[] = {
      {"tokenizer.ggml.bos_token_id", spec.bos, &bos_},
      {"tokenizer.ggml.eos_token_id", spec.eos, &eos_},
      {"tokenizer.ggml.unknown_token_id", spec.unk, &unk_},
      {"tokenizer.ggml.padding_token_id", spec.pad, &pad_},
      {"tokenizer.ggml.eot_token_id", spec.eot, &eot_},
      {"tokenizer.ggml.eom_token_id", spec.eom, &eom_},
      {"tokenizer.ggml.seperator_token_id", spec.sep, &sep_},
      {"tokenizer.ggml.fim_pre_token_id", spec.fim_pre, &fim_pre_},
      {"tokenizer.ggml.fim_suf_token_id", spec.fim_suf, &fim_suf_},
      {"tokenizer.ggml.fim_mid_token_id", spec.fim_mid, &fim_mid_},
      {"tokenizer.ggml.fim_pad_token_id", spec.fim_pad, &fim_pad_},
      {"tokenizer.ggml.fim_rep_token_id", spec.fim_rep, &fim_rep_},
      {"tokenizer.ggml.fim_sep_token_id", spec.fim_sep, &fim_sep_},
  };
  for (const auto& [key, value, dst] : ids) {
    if (!value) continue;
    // -1 stored as an unsigned integer is how converters write "no such token".
    if (*value == UINT32_MAX || *value == UINT64_MAX) {
      *dst = -1;
      continue;
    }
    if (*value >= n) {
      return out_of_range(std::string(key) + ": " + std::to_string(*value) +
                          " is not below the vocabulary size " + std::to_string(n));
    }
    *dst = static_cast<int32_t>(*value);
  }

  add_bos_ = kind_ == VocabKind::kSpm;
  add_eos_ = false;
  add_space_prefix_ = kind_ == VocabKind::kSpm;
  if (kind_ == VocabKind::kBpe) {
    // llama.cpp uses "default" when the key is missing or empty (and warns that quality
    // suffers).
    const std::string_view pre_name =
        spec.pre && !spec.pre->empty() ? std::string_view(*spec.pre) : std::string_view("default");
    STRATA_ASSIGN_OR_RETURN(const PreTokenizer* pre, pretokenizer_find(pre_name));
    STRATA_ASSIGN_OR_RETURN(RegexSplitter splitter, RegexSplitter::create(pre->regexes));
    splitter_.emplace(std::move(splitter));
    ignore_merges_ = pre->ignore_merges;
    add_bos_ = pre->add_bos;
    clean_spaces_ = pre->clean_spaces;
    if (spec.merges.empty()) return invalid_argument("tokenizer.ggml.merges: missing or empty");
    if (spec.merges.size() > kMaxMerges) {
      return out_of_range("tokenizer.ggml.merges: " + std::to_string(spec.merges.size()) +
                          " merges, limit " + std::to_string(kMaxMerges));
    }
    merge_ranks_.reserve(spec.merges.size());
    for (size_t i = 0; i < spec.merges.size(); ++i) {
      const std::string& m = spec.merges[i];
      const size_t space = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
      if (space == std::string::npos || space + 1 >= m.size()) {
        return invalid_argument("tokenizer.ggml.merges[" + std::to_string(i) + "]: '" + m +
                                "' is not two pieces separated by a space");
      }
      std::string key = m.substr(0, space) + '\xFF' + m.substr(space + 1);
      merge_ranks_.emplace(std::move(key), static_cast<int32_t>(i));  // first rank wins
    }
  }
  if (spec.add_bos) add_bos_ = *spec.add_bos;
  if (spec.add_eos) add_eos_ = *spec.add_eos;
  if (spec.add_space_prefix) add_space_prefix_ = *spec.add_space_prefix;
  if (add_bos_ && bos_ < 0) {
    return invalid_argument(
        "tokenizer.ggml.add_bos_token: BOS is to be added but the "
        "vocabulary has no tokenizer.ggml.bos_token_id");
  }
  if (add_eos_ && eos_ < 0) {
    return invalid_argument(
        "tokenizer.ggml.add_eos_token: EOS is to be added but the "
        "vocabulary has no tokenizer.ggml.eos_token_id");
  }

  // Byte fallback table, and the check that every byte token says which byte it is.
  byte_tokens_.fill(-1);
  for (size_t i = 0; i < n; ++i) {
    if (types_[i] != TokenType::kByte) continue;
    if (kind_ == VocabKind::kSpm && parse_byte_token(tokens_[i]) < 0) {
      return invalid_argument("tokenizer.ggml.tokens[" + std::to_string(i) + "]: byte token '" +
                              tokens_[i] + "' is not of the form <0xXX>");
    }
  }
  if (kind_ == VocabKind::kSpm) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      const std::string text = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
      byte_tokens_[b] = lookup(text);
      if (byte_tokens_[b] < 0) byte_tokens_[b] = lookup(std::string(1, static_cast<char>(b)));
    }
  }

  // Fill-in-the-middle tokens by their usual texts when their keys are absent (older GGUFs).
  const std::pair<int32_t*, std::vector<std::string_view>> fim_texts[] = {
      {&fim_pre_, {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "\xe2\x96\x81<PRE>"}},
      {&fim_suf_, {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "\xe2\x96\x81<SUF>"}},
      {&fim_mid_, {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "\xe2\x96\x81<MID>"}},
      {&fim_pad_, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"}},
      {&fim_rep_, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
      {&fim_sep_, {"<|file_sep|>", "<file_sep>", "<fim-sep>", "<filename>"}},
  };
  for (const auto& [dst, texts] : fim_texts) {
    for (std::string_view text : texts) {
      if (*dst >= 0) break;
      *dst = lookup(text);
    }
  }

  // End of turn, found by text when the key is absent; like llama.cpp, such a token is
  // treated as a control token whatever its recorded type.
  for (std::string_view text : kEotTexts) {
    const int32_t id = lookup(text);
    if (id < 0) continue;
    if (eot_ < 0) eot_ = id;
    types_[id] = TokenType::kControl;
    eog_.push_back(id);
  }
  if (const int32_t id = lookup(kEomText); id >= 0) {
    if (eom_ < 0) eom_ = id;
    types_[id] = TokenType::kControl;
    eog_.push_back(id);
  }
  for (std::string_view text : kEogTexts) {
    const int32_t id = lookup(text);
    if (id < 0) continue;
    types_[id] = TokenType::kControl;
    eog_.push_back(id);
  }
  for (int32_t id : {eos_, eot_, eom_}) {
    if (id >= 0) eog_.push_back(id);
  }
  std::sort(eog_.begin(), eog_.end());
  eog_.erase(std::unique(eog_.begin(), eog_.end()), eog_.end());
  // In harmony, <|end|> closes one message of a reply (its analysis) and another follows: with
  // <|return|> and <|call|> there, it does not end generation and is rendered, as llama.cpp
  // does for gpt-oss.
  const int32_t harmony_end = lookup("<|end|>");
  if (harmony_end >= 0 && lookup("<|return|>") >= 0 && lookup("<|call|>") >= 0) {
    eog_.erase(std::remove(eog_.begin(), eog_.end(), harmony_end), eog_.end());
    types_[harmony_end] = TokenType::kUserDefined;
  }
  for (std::string_view text : kRenderedTexts) {
    if (const int32_t id = lookup(text); id >= 0) types_[id] = TokenType::kUserDefined;
  }

  for (size_t i = 0; i < n; ++i) {
    if (is_special_type(static_cast<int32_t>(i)) && !tokens_[i].empty()) {
      specials_.push_back(static_cast<int32_t>(i));
    }
  }
  std::stable_sort(specials_.begin(), specials_.end(),
                   [&](int32_t a, int32_t b) { return tokens_[a].size() > tokens_[b].size(); });

  // What each token decodes to, with special tokens rendered as their text.
  pieces_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& text = tokens_[i];
    switch (types_[i]) {
      case TokenType::kControl:
      case TokenType::kUnknown:
      case TokenType::kUserDefined:
        pieces_[i] = text;
        break;
      case TokenType::kNormal:
        if (kind_ == VocabKind::kSpm) {
          pieces_[i] = replace_all(text, kSpaceMark, " ");
        } else {
          byte_map_.decode(text, pieces_[i]);
        }
        break;
      case TokenType::kByte:
        if (kind_ == VocabKind::kSpm) pieces_[i] = std::string(1, parse_byte_token(text));
        break;
      case TokenType::kUnused:
      case TokenType::kUndefined:
        break;  // never produced by encoding; llama.cpp renders them as nothing
    }
  }
  return Status::ok();
}

bool Tokenizer::is_special_type(int32_t id) const {
  const TokenType t = types_[id];
  return t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown;
}

int32_t Tokenizer::lookup(std::string_view text) const {
  const auto it = token_ids_.find(text);
  return it == token_ids_.end() ? -1 : it->second;
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  const int32_t id = lookup(text);
  if (id < 0) return std::nullopt;
  return id;
}

bool Tokenizer::is_eog(int32_t id) const {
  return std::binary_search(eog_.begin(), eog_.end(), id);
}

std::vector<Tokenizer::Fragment> Tokenizer::partition_special(std::string_view text,
                                                              bool parse_special) const {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({-1, 0, text.size()});
  // Longest special token first over the whole text, as llama.cpp does, so that a token that
  // contains a shorter one wins.
  for (int32_t id : specials_) {
    const TokenType t = types_[id];
    if (!parse_special && (t == TokenType::kControl || t == TokenType::kUnknown)) continue;
    const std::string& s = tokens_[id];
    if (text.find(s) == std::string_view::npos) continue;
    std::vector<Fragment> next;
    next.reserve(frags.size() + 2);
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t pos = f.begin;
      const size_t end = f.begin + f.size;
      while (pos < end) {
        const size_t hit = text.substr(0, end).find(s, pos);
        if (hit == std::string_view::npos) break;
        if (hit > pos) next.push_back({-1, pos, hit - pos});
        next.push_back({id, hit, s.size()});
        pos = hit + s.size();
      }
      if (pos < end) next.push_back({-1, pos, end - pos});
    }
    frags = std::move(next);
  }
  return frags;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  std::vector<int32_t> out;
  if (add_special && add_bos_) out.push_back(bos_);
  const std::vector<Fragment> frags = partition_special(text, parse_special);
  bool after_special = true;  // SPM: the start of the text counts as following a special
  for (const Fragment& f : frags) {
    if (f.token >= 0) {
      out.push_back(f.token);
      after_special = true;
      continue;
    }
    const std::string_view raw = text.substr(f.begin, f.size);
    if (kind_ == VocabKind::kSpm) {
      std::string spaced;
      if (add_space_prefix_ && after_special) spaced = " ";
      spaced.append(raw);
      encode_spm(replace_all(spaced, " ", kSpaceMark), out);
    } else {
      encode_bpe(raw, out);
    }
    after_special = false;
  }
  if (add_special && add_eos_) out.push_back(eos_);
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
  if (id < 0 || id >= n_vocab()) return {};
  const TokenType t = types_[id];
  if (!render_special && (t == TokenType::kControl || t == TokenType::kUnknown)) return {};
  return pieces_[id];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, DecodeOptions options) const {
  std::string out;
  bool at_fragment_start = true;
  for (int32_t id : ids) {
    if (id < 0 || id >= n_vocab()) continue;
    if (is_special_type(id)) {
      out += token_to_piece(id, options.render_special);
      at_fragment_start = true;
      continue;
    }
    std::string_view piece = pieces_[id];
    if (options.strip_space_prefix && add_space_prefix_ && at_fragment_start && !piece.empty() &&
        piece[0] == ' ') {
      piece.remove_prefix(1);
    }
    if (!pieces_[id].empty()) at_fragment_start = false;
    out.append(piece);
  }
  if (options.clean_spaces && clean_spaces_) clean_up_spaces(out);
  return out;
}

Status Tokenizer::check_ids(std::span<const int32_t> ids) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= n_vocab()) {
      return out_of_range("token id [" + std::to_string(i) + "] = " + std::to_string(ids[i]) +
                          " is outside the vocabulary [0, " + std::to_string(n_vocab()) + ")");
    }
  }
  return Status::ok();
}

}  // namespace strata
