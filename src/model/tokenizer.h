// The tokenizer of a GGUF model: SentencePiece-style BPE with byte fallback
// (tokenizer.ggml.model = "llama") and GPT-2-style byte-level BPE ("gpt2"), with the special
// token handling and defaults that llama.cpp applies, so ids match its output exactly.
//
// Goal: load a vocabulary from untrusted metadata (every id and array length checked, errors
// name the key), encode text to ids and decode ids back to bytes.
// Non-goals: WordPiece, Unigram (T5) and RWKV vocabularies; chat templates (see chat_template.h).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/check.h"
#include "core/status.h"
#include "model/unicode.h"

namespace strata {

class GgufFile;

// tokenizer.ggml.token_type values.
enum class TokenType : uint8_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

enum class VocabKind : uint8_t { kSpm, kBpe };

// A vocabulary as the tokenizer.ggml.* keys hold it; unset optionals take llama.cpp's
// defaults. Filled from a GGUF file by Tokenizer::from_gguf, or by hand in tests.
struct VocabSpec {
  std::string model;                 // tokenizer.ggml.model: "llama" or "gpt2"
  std::optional<std::string> pre;    // tokenizer.ggml.pre (BPE only; absent means "default")
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens
  std::vector<float> scores;         // tokenizer.ggml.scores: empty or one per token
  std::vector<int32_t> token_types;  // tokenizer.ggml.token_type: empty or one per token
  std::vector<std::string> merges;   // tokenizer.ggml.merges: "left right", by rank (BPE)
  std::optional<uint64_t> bos, eos, unk, pad, eot, eom, sep;  // tokenizer.ggml.*_token_id
  // Fill-in-the-middle: tokenizer.ggml.fim_{pre,suf,mid,pad,rep,sep}_token_id.
  std::optional<uint64_t> fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
};

struct DecodeOptions {
  // Control and unknown tokens are rendered as their text instead of nothing.
  bool render_special = false;
  // SPM vocabularies that add a space prefix when encoding drop the leading space of the text
  // that starts the output or follows a special token, so decode(encode(x)) == x.
  bool strip_space_prefix = true;
  // For vocabularies whose pre-tokenizer asks for it (clean_spaces()), tidy the text as
  // llama_detokenize does: drop the space before '?', '!', '.', ',' and before the
  // contractions 's 'm 're 've, and the spaces around a lone apostrophe. Off by default:
  // the text loses spaces the tokens carry, and llama-server's output, built piece by piece,
  // never has it.
  bool clean_spaces = false;
};

class Tokenizer {
 public:
  static Result<Tokenizer> from_gguf(const GgufFile& file);
  static Result<Tokenizer> from_spec(VocabSpec spec);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Text to ids. add_special adds BOS (and EOS) where the vocabulary asks for them
  // (add_bos() / add_eos()); parse_special lets control tokens written in the text (such as
  // "<|im_start|>") become their ids. User-defined tokens are always matched, as in
  // Hugging Face tokenizers. Never fails: bytes with no token become byte tokens, or UNK.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  // The bytes of one token (not necessarily complete UTF-8: see Utf8Stream). Control,
  // unknown, unused tokens and ids out of range give "" unless render_special says otherwise
  // (ids out of range always give "").
  std::string token_to_piece(int32_t id, bool render_special = false) const;
  // The bytes of a sequence; ids out of range are skipped (see check_ids).
  std::string decode(std::span<const int32_t> ids, DecodeOptions options = {}) const;
  // An error naming the first id outside [0, n_vocab), for ids that came from a request.
  Status check_ids(std::span<const int32_t> ids) const;

  VocabKind kind() const { return kind_; }
  int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t bos() const { return bos_; }  // -1 when the vocabulary has none
  int32_t eos() const { return eos_; }
  int32_t eot() const { return eot_; }
  int32_t unk() const { return unk_; }
  int32_t pad() const { return pad_; }
  // Fill-in-the-middle tokens (-1: none): from their GGUF keys, else found by their usual
  // texts (<|fim_prefix|>, <PRE>...), as llama.cpp does.
  int32_t fim_pre() const { return fim_pre_; }
  int32_t fim_suf() const { return fim_suf_; }
  int32_t fim_mid() const { return fim_mid_; }
  int32_t fim_pad() const { return fim_pad_; }
  int32_t fim_rep() const { return fim_rep_; }
  int32_t fim_sep() const { return fim_sep_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  bool clean_spaces() const { return clean_spaces_; }
  // End of generation: EOS, EOT, EOM and the end-of-turn tokens known by their text.
  bool is_eog(int32_t id) const;
  const std::vector<int32_t>& eog_ids() const { return eog_; }

  // `id` must be in [0, n_vocab()): check ids that came from outside with check_ids.
  TokenType token_type(int32_t id) const {
    STRATA_CHECK(id >= 0 && id < n_vocab());
    return types_[id];
  }
  const std::string& token_text(int32_t id) const {
    STRATA_CHECK(id >= 0 && id < n_vocab());
    return tokens_[id];
  }
  std::optional<int32_t> find_token(std::string_view text) const;

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using TextMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;
  // A stretch of the input: raw text, or a special token already recognised.
  struct Fragment {
    int32_t token = -1;  // >= 0: a special token
    size_t begin = 0;
    size_t size = 0;
  };

  Tokenizer() = default;
  Status build(VocabSpec spec);
  std::vector<Fragment> partition_special(std::string_view text, bool parse_special) const;
  void encode_spm(std::string_view text, std::vector<int32_t>& out) const;
  void encode_bpe(std::string_view text, std::vector<int32_t>& out) const;
  void bpe_word(std::string_view word, std::vector<int32_t>& out) const;
  int32_t lookup(std::string_view text) const;
  int bpe_rank(std::string_view left, std::string_view right) const;
  bool is_special_type(int32_t id) const;

  VocabKind kind_ = VocabKind::kSpm;
  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<TokenType> types_;
  std::vector<std::string> pieces_;  // decoded bytes of every token, specials as their text
  TextMap token_ids_;
  TextMap merge_ranks_;            // key: left + '\xFF' + right (0xFF never occurs in UTF-8)
  std::vector<int32_t> specials_;  // control, user-defined, unknown: longest text first
  std::array<int32_t, 256> byte_tokens_{};  // SPM byte fallback: <0xXX> ids, -1 if absent
  std::vector<int32_t> eog_;
  std::optional<RegexSplitter> splitter_;  // BPE pre-tokenizer
  ByteLevelMap byte_map_;
  bool ignore_merges_ = false;  // a whole pre-token found in the vocabulary wins
  int32_t bos_ = -1, eos_ = -1, eot_ = -1, eom_ = -1, unk_ = -1, pad_ = -1, sep_ = -1;
  int32_t fim_pre_ = -1, fim_suf_ = -1, fim_mid_ = -1, fim_pad_ = -1, fim_rep_ = -1, fim_sep_ = -1;
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = false, clean_spaces_ = false;
};

}  // namespace strata
