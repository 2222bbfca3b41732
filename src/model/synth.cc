#include "model/synth.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "core/quant.h"
#include "core/rng.h"
#include "model/arch.h"
#include "model/hparams.h"
#include "model/tokenizer.h"

namespace strata {
namespace {

// Limits that keep a generated file's size and the generator's memory reasonable.
constexpr int64_t kGenMaxEmbd = 1 << 16;
constexpr int64_t kGenMaxLayers = 1024;
constexpr int64_t kGenMaxHeads = 1024;
constexpr int64_t kGenMaxHeadDim = 1024;
constexpr int64_t kGenMaxFf = 1 << 20;
constexpr int64_t kGenMaxVocab = 1 << 20;
constexpr int64_t kGenMaxCtx = 1 << 24;

// Frequent English words, most frequent first: the vocabulary's first pieces.
constexpr const char* kWords[] = {
    "the",    "of",     "and",  "to",    "a",      "in",     "is",      "it",     "you",   "that",
    "he",     "was",    "for",  "on",    "are",    "with",   "as",      "his",    "they",  "be",
    "at",     "one",    "have", "this",  "from",   "or",     "had",     "by",     "not",   "word",
    "but",    "what",   "some", "we",    "can",    "out",    "other",   "were",   "all",   "there",
    "when",   "up",     "use",  "your",  "how",    "said",   "an",      "each",   "she",   "which",
    "do",     "their",  "time", "if",    "will",   "way",    "about",   "many",   "then",  "them",
    "write",  "would",  "like", "so",    "these",  "her",    "long",    "make",   "thing", "see",
    "him",    "two",    "has",  "look",  "more",   "day",    "could",   "go",     "come",  "did",
    "number", "sound",  "no",   "most",  "people", "my",     "over",    "know",   "water", "than",
    "call",   "first",  "who",  "may",   "down",   "side",   "been",    "now",    "find",  "any",
    "new",    "work",   "part", "take",  "get",    "place",  "made",    "live",   "where", "after",
    "back",   "little", "only", "round", "man",    "year",   "came",    "show",   "every", "good",
    "me",     "give",   "our",  "under", "name",   "very",   "through", "just",   "form",  "great",
    "think",  "say",    "help", "low",   "line",   "before", "turn",    "cause",  "same",  "mean",
    "story",  "once",   "upon", "girl",  "boy",    "happy",  "play",    "friend", "big",   "sun",
};
// Words that often start a text, so also get pieces without a leading space.
constexpr const char* kCapitalWords[] = {"The", "It",   "He",  "She",   "They", "We",
                                         "I",   "Once", "One", "Hello", "What", "This"};

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

// xoshiro256**, with an approximately normal draw built from integer arithmetic and one
// multiply: no libm call, so every platform produces the same floats.
class NormalRng {
 public:
  explicit NormalRng(uint64_t seed) : rng_(seed) {}
  uint64_t next() { return rng_.next(); }
  // Sum of four uniforms (Irwin-Hall), centred and scaled to unit variance: close enough to
  // a normal for random weights, bounded by +-2*sqrt(3), and exact in any IEEE arithmetic.
  double normal() {
    const uint64_t a = next(), b = next();
    const double sum =
        static_cast<double>((a >> 32) + (a & 0xffffffffu) + (b >> 32) + (b & 0xffffffffu)) *
        (1.0 / 4294967296.0);
    return (sum - 2.0) * 1.7320508075688772;  // sqrt(3): the sum's variance is 4/12
  }

 private:
  Rng rng_;
};

// tokenizer.ggml.token_type values, as the file stores them.
int32_t type_id(TokenType t) { return static_cast<int32_t>(t); }

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;  // SPM only
  std::vector<int32_t> types;
  std::vector<std::string> merges;  // BPE only
};

// Appends `piece` once; returns false when it was already present.
bool add_unique(std::set<std::string>& seen, std::vector<std::string>& out, std::string piece) {
  if (!seen.insert(piece).second) return false;
  out.push_back(std::move(piece));
  return true;
}

// Candidate pieces, each one whose every shorter prefix (past `space`) comes earlier: words
// after the space marker, capitalised words without it, then all lowercase strings in
// shortlex order ("a".."z", "aa"...) after the marker until `count` are found. Prefix-closed
// chains let both SPM and BPE reach every piece by adding one character at a time.
std::vector<std::string> chained_pieces(const std::string& space, size_t count) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  auto add_chain = [&](const std::string& lead, std::string_view word) {
    for (size_t k = 1; k <= word.size() && out.size() < count; ++k) {
      add_unique(seen, out, lead + std::string(word.substr(0, k)));
    }
  };
  for (const char* w : kWords) add_chain(space, w);
  // Space-led before bare: in " The" the pair (space, T) must outrank (T, h).
  for (const char* w : kCapitalWords) add_chain(space, w);
  for (const char* w : kCapitalWords) {
    if (std::strlen(w) > 1) add_chain(std::string(1, w[0]), std::string_view(w).substr(1));
  }
  for (size_t len = 1; out.size() < count; ++len) {
    std::string s(len, 'a');
    while (out.size() < count) {
      add_unique(seen, out, space + s);
      size_t i = len;  // next string of this length, like an odometer
      while (i > 0 && s[i - 1] == 'z') s[--i] = 'a';
      if (i == 0) break;
      ++s[i - 1];
    }
  }
  if (out.size() > count) out.resize(count);
  return out;
}

// SentencePiece vocabulary as llama uses it: <unk>, <s>, </s>, byte fallback, then pieces.
Vocab spm_vocab(int64_t n_vocab) {
  Vocab v;
  auto add = [&](std::string t, float score, TokenType type) {
    v.tokens.push_back(std::move(t));
    v.scores.push_back(score);
    v.types.push_back(type_id(type));
  };
  add("<unk>", 0, TokenType::kUnknown);
  add("<s>", 0, TokenType::kControl);
  add("</s>", 0, TokenType::kControl);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    add(name, 0, TokenType::kByte);
  }
  const std::string space = "\xe2\x96\x81";  // U+2581, SentencePiece's space
  std::vector<std::string> pieces = {space};
  const char kSingles[] =
      "etaoinshrdlcumwfgypbvkjxqzETAOINSHRDLCUMWFGYPBVKJXQZ0123456789.,!?'\"-:;()";
  for (const char* c = kSingles; *c != '\0'; ++c) pieces.emplace_back(1, *c);
  const size_t want = static_cast<size_t>(n_vocab) - v.tokens.size();
  // Chains are at least two characters long, so they never repeat a single character.
  std::vector<std::string> chains = chained_pieces(space, want);
  pieces.insert(pieces.end(), chains.begin(), chains.end());
  pieces.resize(want);
  // Scores fall with the index: SPM merges the highest-scoring pair first.
  for (size_t i = 0; i < pieces.size(); ++i)
    add(pieces[i], -static_cast<float>(i), TokenType::kNormal);
  return v;
}

// GPT-2's byte-to-character map: printable bytes stand for themselves, the others are
// shifted to U+0100 and up, so every token is printable text.
std::vector<std::string> gpt2_byte_chars() {
  auto utf8 = [](uint32_t cp) {
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xc0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3f));
    }
    return s;
  };
  std::vector<std::string> by_byte(256);
  std::vector<int> order;  // token order: the printable ranges first, then the rest
  auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  };
  for (int b = 0; b < 256; ++b) {
    if (printable(b)) by_byte[b] = utf8(static_cast<uint32_t>(b));
  }
  uint32_t shifted = 256;
  for (int b = 0; b < 256; ++b) {
    if (!printable(b)) by_byte[b] = utf8(shifted++);
  }
  return by_byte;
}

// Byte-level BPE as Qwen and gpt-oss use it: 256 byte tokens, merged tokens, then the special
// tokens.
Vocab bpe_vocab(int64_t n_vocab, const std::vector<std::string>& specials) {
  Vocab v;
  const std::vector<std::string> by_byte = gpt2_byte_chars();
  auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  };
  for (int pass = 0; pass < 2; ++pass) {
    for (int b = 0; b < 256; ++b) {
      if (printable(b) == (pass == 0)) v.tokens.push_back(by_byte[b]);
    }
  }
  const size_t n_merged = static_cast<size_t>(n_vocab) - 256 - specials.size();
  const std::string space = by_byte[' '];  // "Ġ"
  // Each piece is its one-shorter prefix plus a last ASCII character: that is its merge.
  for (std::string& p : chained_pieces(space, n_merged)) {
    v.merges.push_back(p.substr(0, p.size() - 1) + " " + p.substr(p.size() - 1));
    v.tokens.push_back(std::move(p));
  }
  v.types.assign(v.tokens.size(), type_id(TokenType::kNormal));
  for (const std::string& s : specials) {
    v.tokens.push_back(s);
    v.types.push_back(type_id(TokenType::kControl));
  }
  return v;
}

constexpr const char* kChatMlTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

// A chat template in the shape of OpenAI's harmony format (each message between <|start|> and
// <|end|>, the assistant's in the final channel), small enough to read: the released files'
// templates add tools, reasoning channels and system-prompt defaults.
constexpr const char* kHarmonyTemplate =
    "{% for message in messages %}{{ '<|start|>' + message['role'] }}"
    "{% if message['role'] == 'assistant' %}{{ '<|channel|>final' }}{% endif %}"
    "{{ '<|message|>' + message['content'] + '<|end|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start|>assistant' }}{% endif %}";

// gpt-oss's special tokens, in the order of their ids in the released vocabulary.
const std::vector<std::string>& gptoss_specials() {
  static const std::vector<std::string> kSpecials = {
      "<|startoftext|>", "<|endoftext|>", "<|return|>",  "<|constrain|>", "<|channel|>",
      "<|start|>",       "<|end|>",       "<|message|>", "<|call|>"};
  return kSpecials;
}

bool is_qwen(const std::string& arch) {
  return arch == "qwen2" || arch == "qwen3" || arch == "qwen3moe";
}

int64_t head_dim_of(const SynthParams& p) {
  return p.head_dim != 0 ? p.head_dim : (p.n_head > 0 ? p.n_embd / p.n_head : 0);
}

// llama.cpp's llama_ftype for a file whose 2-D weights are all `t` (the K-quants: the "_S"
// mix, in which every matrix has the one type). A dtype not listed writes 0.
constexpr std::pair<DType, uint32_t> kFileTypes[] = {
    {DType::kF32, 0},     {DType::kF16, 1},     {DType::kQ4_0, 2},  {DType::kQ4_1, 3},
    {DType::kQ8_0, 7},    {DType::kQ5_0, 8},    {DType::kQ5_1, 9},  {DType::kQ2_K, 10},
    {DType::kQ3_K, 11},   {DType::kQ4_K, 14},   {DType::kQ5_K, 16}, {DType::kQ6_K, 18},
    {DType::kIQ4_NL, 25}, {DType::kIQ4_XS, 30}, {DType::kBF16, 32}, {DType::kMXFP4, 38},
};

// llama-quantize's mixes, as llama_tensor_get_type assigns types for llama-family models.
// use_more_bits: the first and last eighth of the layers and every third one between.
bool use_more_bits(int64_t il, int64_t n) {
  return il < n / 8 || il >= 7 * n / 8 || (il - n / 8) % 3 == 2;
}

struct Mix {
  std::string_view name;
  uint32_t file_type;  // llama_ftype
  DType base;
  // attn_v and ffn_down of layer il of n; attn_output.
  DType (*attn_v)(int64_t il, int64_t n);
  DType (*ffn_down)(int64_t il, int64_t n);
  DType attn_output;
};

constexpr Mix kMixes[] = {
    {"q4_K_M", 15, DType::kQ4_K,
     [](int64_t il, int64_t n) { return use_more_bits(il, n) ? DType::kQ6_K : DType::kQ4_K; },
     [](int64_t il, int64_t n) { return use_more_bits(il, n) ? DType::kQ6_K : DType::kQ4_K; },
     DType::kQ4_K},
    {"q5_K_M", 17, DType::kQ5_K,
     [](int64_t il, int64_t n) { return use_more_bits(il, n) ? DType::kQ6_K : DType::kQ5_K; },
     [](int64_t il, int64_t n) { return use_more_bits(il, n) ? DType::kQ6_K : DType::kQ5_K; },
     DType::kQ5_K},
    {"q3_K_M", 12, DType::kQ3_K,
     [](int64_t il, int64_t) { return il < 2 ? DType::kQ5_K : DType::kQ4_K; },
     [](int64_t il, int64_t n) { return il < n / 16 ? DType::kQ5_K : DType::kQ4_K; }, DType::kQ4_K},
};

const Mix* find_mix(std::string_view name) {
  for (const Mix& m : kMixes) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

uint32_t file_type(DType t) {
  for (const auto& [dtype, ftype] : kFileTypes) {
    if (dtype == t) return ftype;
  }
  return 0;
}

// Llama 3.1's per-frequency divisors as its converter computes them (rope type llama3: factor
// 8, low/high frequency factors 1 and 4), for an original context of rope_orig_ctx (8192 when
// not given): 1 for short wavelengths, 8 for long ones, a smooth blend between.
std::vector<float> llama3_rope_freqs(const SynthParams& p, int64_t n_rot, double base) {
  const double factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
  const double old_ctx = p.rope_orig_ctx > 0 ? static_cast<double>(p.rope_orig_ctx) : 8192.0;
  const double low_freq_wavelen = old_ctx / low_freq_factor;
  const double high_freq_wavelen = old_ctx / high_freq_factor;
  std::vector<float> out;
  for (int64_t i = 0; i < n_rot; i += 2) {
    const double freq = 1.0 / std::pow(base, static_cast<double>(i) / static_cast<double>(n_rot));
    const double wavelen = 2 * 3.14159265358979323846 / freq;
    double f = 1.0;
    if (wavelen > low_freq_wavelen) {
      f = factor;
    } else if (wavelen >= high_freq_wavelen) {
      const double smooth =
          (old_ctx / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      f = 1.0 / ((1 - smooth) / factor + smooth);
    }
    out.push_back(static_cast<float>(f));
  }
  return out;
}

Status check_range(const char* name, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) {
    return invalid_argument(std::string(name) + " " + std::to_string(v) + " is outside " +
                            std::to_string(lo) + ".." + std::to_string(hi));
  }
  return Status::ok();
}

int64_t ff_exp_of(const SynthParams& p) { return p.n_ff_exp != 0 ? p.n_ff_exp : p.n_ff; }

// Experts only where the architecture's table has them, and always where it requires them.
Status validate_experts(const SynthParams& p) {
  const ArchDef* arch = arch_find(p.arch);
  bool may = false, must = false;
  for (const LayerTensorSpec& s : arch->layer_tensors) {
    if (s.ne2 != Dim::kExpert) continue;
    may = true;
    must = must || s.presence == Presence::kRequired;
  }
  if (!may && p.n_expert != 0) {
    return invalid_argument("arch " + p.arch + " has no experts (n_expert " +
                            std::to_string(p.n_expert) + ")");
  }
  STRATA_RETURN_IF_ERROR(check_range("n_expert", p.n_expert, must ? 1 : 0, kMaxExperts));
  if (p.n_expert == 0) {
    if (p.n_expert_used != 0 || p.n_ff_exp != 0) {
      return invalid_argument("n_expert_used and n_ff_exp need n_expert");
    }
    return Status::ok();
  }
  STRATA_RETURN_IF_ERROR(check_range("n_expert_used", p.n_expert_used, 1, p.n_expert));
  STRATA_RETURN_IF_ERROR(check_range("n_ff_exp", ff_exp_of(p), 1, kGenMaxFf));
  if (p.arch == "llama" && ff_exp_of(p) != p.n_ff) {
    return invalid_argument("llama experts are n_ff wide: n_ff_exp " + std::to_string(p.n_ff_exp) +
                            " differs from n_ff " + std::to_string(p.n_ff));
  }
  if (!p.script.empty()) return invalid_argument("a scripted model has no experts");
  return Status::ok();
}

// How a tensor's values are drawn.
struct Init {
  double mean;
  double scale;
};

}  // namespace

Status synth_validate(const SynthParams& p) {
  if (arch_find(p.arch) == nullptr) {
    return unsupported("arch '" + p.arch + "' is not one of " + arch_names());
  }
  STRATA_RETURN_IF_ERROR(check_range("n_embd", p.n_embd, 1, kGenMaxEmbd));
  STRATA_RETURN_IF_ERROR(check_range("n_layer", p.n_layer, 1, kGenMaxLayers));
  STRATA_RETURN_IF_ERROR(check_range("n_head", p.n_head, 1, kGenMaxHeads));
  STRATA_RETURN_IF_ERROR(check_range("n_head_kv", p.n_head_kv, 1, p.n_head));
  STRATA_RETURN_IF_ERROR(check_range("n_ff", p.n_ff, 1, kGenMaxFf));
  STRATA_RETURN_IF_ERROR(check_range("n_vocab", p.n_vocab, kSynthMinVocab, kGenMaxVocab));
  STRATA_RETURN_IF_ERROR(check_range("n_ctx", p.n_ctx, 1, kGenMaxCtx));
  if (p.head_dim == 0 && p.n_embd % p.n_head != 0) {
    return invalid_argument("n_embd " + std::to_string(p.n_embd) + " is not a multiple of n_head " +
                            std::to_string(p.n_head) + " (or give head_dim)");
  }
  if (p.n_head % p.n_head_kv != 0) {
    return invalid_argument("n_head " + std::to_string(p.n_head) +
                            " is not a multiple of n_head_kv " + std::to_string(p.n_head_kv));
  }
  const int64_t hd = head_dim_of(p);
  STRATA_RETURN_IF_ERROR(check_range("head_dim", hd, 2, kGenMaxHeadDim));
  if (hd % 2 != 0) {
    return invalid_argument("head_dim " + std::to_string(hd) + " is odd: rope rotates pairs");
  }
  if (p.n_rot != 0 && (p.n_rot < 2 || p.n_rot > hd || p.n_rot % 2 != 0)) {
    return invalid_argument("n_rot " + std::to_string(p.n_rot) + " must be even and in [2, " +
                            std::to_string(hd) + "]");
  }
  if (!p.rope_scaling.empty() && p.rope_scaling != "none" && p.rope_scaling != "linear" &&
      p.rope_scaling != "yarn" && p.rope_scaling != "longrope") {
    return invalid_argument("rope scaling '" + p.rope_scaling +
                            "' is not one of none, linear, yarn, longrope");
  }
  if (p.rope_freq_base < 0 || p.rms_eps < 0 || !std::isfinite(p.rope_freq_base) ||
      !std::isfinite(p.rms_eps)) {
    return invalid_argument("rope_freq_base and rms_eps must be finite and non-negative");
  }
  if (!p.script.empty()) {
    if (p.arch != "llama") return unsupported("a script needs arch llama, not '" + p.arch + "'");
    const int64_t n_pieces = static_cast<int64_t>(p.script.size());
    if (p.n_vocab - n_pieces < kSynthMinVocab) {
      return invalid_argument("n_vocab " + std::to_string(p.n_vocab) + " leaves fewer than " +
                              std::to_string(kSynthMinVocab) + " tokens beside the " +
                              std::to_string(n_pieces) + " pieces of the script");
    }
    if (p.n_embd < p.n_vocab) {
      return invalid_argument("a script needs n_embd >= n_vocab (one-hot embeddings): n_embd " +
                              std::to_string(p.n_embd) + ", n_vocab " + std::to_string(p.n_vocab));
    }
    if (p.tied_output) {
      return invalid_argument("a scripted model needs its own output matrix (no --tied)");
    }
    for (size_t i = 0; i < p.script.size(); ++i) {
      if (p.script[i].empty()) {
        return invalid_argument("script piece " + std::to_string(i) + " is empty");
      }
    }
  }
  if (p.arch == "gpt-oss") {
    const int64_t need = 256 + static_cast<int64_t>(gptoss_specials().size());
    if (p.n_vocab < need) {
      return invalid_argument("n_vocab " + std::to_string(p.n_vocab) + " is below " +
                              std::to_string(need) +
                              " (gpt-oss: 256 byte tokens and its special tokens)");
    }
  }
  STRATA_RETURN_IF_ERROR(validate_experts(p));
  const Mix* mix = p.mix.empty() ? nullptr : find_mix(p.mix);
  if (!p.mix.empty() && mix == nullptr) {
    return invalid_argument("mix '" + p.mix + "' is not one of q4_K_M, q5_K_M, q3_K_M");
  }
  const DTypeInfo& info = dtype_info(mix != nullptr ? DType::kQ6_K : p.dtype);  // widest block
  if (!info.has_kernels) {
    return unsupported("dtype " + std::string(info.name) + " has no kernels (use one of " +
                       dtype_names_with_kernels() + ")");
  }
  if (p.expert_dtype) {
    if (!dtype_info(*p.expert_dtype).has_kernels) {
      return unsupported("expert dtype " + std::string(dtype_name(*p.expert_dtype)) +
                         " has no kernels (use one of " + dtype_names_with_kernels() + ")");
    }
    if (p.n_expert == 0) return invalid_argument("an expert dtype needs n_expert");
    if (mix != nullptr) return invalid_argument("an expert dtype and a mix exclude each other");
  }
  const DTypeInfo& exp_info = p.expert_dtype ? dtype_info(*p.expert_dtype) : info;
  const int64_t ff_exp = p.n_expert > 0 ? ff_exp_of(p) : 0;
  const std::tuple<const char*, int64_t, const DTypeInfo*> rows[] = {
      {"token_embd.weight", p.n_embd, &info},
      {"blk.*.attn_q.weight", p.n_embd, &info},
      {"blk.*.attn_output.weight", p.n_head * hd, &info},
      {"blk.*.ffn_gate.weight", p.n_embd, &info},
      {"blk.*.ffn_down.weight", p.n_ff, &info},
      {"blk.*.ffn_gate_exps.weight", p.n_expert > 0 ? p.n_embd : 0, &exp_info},
      {"blk.*.ffn_down_exps.weight", ff_exp, &exp_info},
  };
  for (const auto& [name, ne0, row_info] : rows) {
    if (ne0 % row_info->block_size != 0) {
      return invalid_argument("tensor '" + std::string(name) +
                              "': row length ne[0] = " + std::to_string(ne0) +
                              " is not a multiple of the " + std::string(row_info->name) +
                              " block size " + std::to_string(row_info->block_size));
    }
  }
  return Status::ok();
}

Result<GgufWriter> synth_model(const SynthParams& p) {
  STRATA_RETURN_IF_ERROR(synth_validate(p));
  const bool qwen = is_qwen(p.arch);
  const bool gptoss = p.arch == "gpt-oss";
  const int64_t hd = head_dim_of(p);
  const std::string& a = p.arch;
  GgufWriter w;
  w.set_string("general.architecture", a);
  w.set_string("general.name", "synthetic-" + a);
  const Mix* mix = p.mix.empty() ? nullptr : find_mix(p.mix);
  // llama.cpp's MOSTLY_MXFP4_MOE for mxfp4 experts beside other matrices.
  const bool mxfp4_moe = p.expert_dtype == DType::kMXFP4 && p.dtype != DType::kMXFP4;
  w.set_u32("general.file_type", mix != nullptr ? mix->file_type
                                 : mxfp4_moe    ? 38
                                                : file_type(p.dtype));
  if (mix != nullptr || dtype_is_quantized(p.dtype) || mxfp4_moe) {
    w.set_u32("general.quantization_version", 2);
  }
  // The type of each matrix: p.dtype, or the mix's rule for it.
  auto matrix_dtype = [&](LayerTensor id, int64_t il) {
    const bool expert = id == LayerTensor::kWGateExps || id == LayerTensor::kWUpExps ||
                        id == LayerTensor::kWDownExps;
    if (expert && p.expert_dtype) return *p.expert_dtype;
    if (mix == nullptr) return p.dtype;
    if (id == LayerTensor::kWv) return mix->attn_v(il, p.n_layer);
    if (id == LayerTensor::kWDown || id == LayerTensor::kWDownExps) {
      return mix->ffn_down(il, p.n_layer);
    }
    if (id == LayerTensor::kWo) return mix->attn_output;
    return mix->base;
  };
  const DType embd_dtype = mix != nullptr ? mix->base : p.dtype;
  const DType output_dtype = mix != nullptr ? DType::kQ6_K : p.dtype;
  w.set_u32(a + ".context_length", static_cast<uint32_t>(p.n_ctx));
  w.set_u32(a + ".embedding_length", static_cast<uint32_t>(p.n_embd));
  w.set_u32(a + ".block_count", static_cast<uint32_t>(p.n_layer));
  w.set_u32(a + ".feed_forward_length", static_cast<uint32_t>(p.n_ff));
  w.set_u32(a + ".attention.head_count", static_cast<uint32_t>(p.n_head));
  w.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(p.n_head_kv));
  w.set_f32(a + ".attention.layer_norm_rms_epsilon",
            static_cast<float>(p.rms_eps != 0 ? p.rms_eps : (qwen ? 1e-6 : 1e-5)));
  const double rope_base = p.rope_freq_base != 0 ? p.rope_freq_base
                                                 : (qwen     ? 1e6
                                                    : gptoss ? 150000
                                                             : 1e4);
  w.set_f32(a + ".rope.freq_base", static_cast<float>(rope_base));
  const int64_t n_rot = p.n_rot > 0 ? p.n_rot : hd;
  w.set_u32(a + ".rope.dimension_count", static_cast<uint32_t>(n_rot));
  // gpt-oss without rope options: the released models' YaRN.
  const bool gptoss_yarn = gptoss && p.rope_scaling.empty();
  const std::string rope_scaling = gptoss_yarn ? "yarn" : p.rope_scaling;
  const double rope_factor = gptoss_yarn && p.rope_factor == 0 ? 32 : p.rope_factor;
  const int64_t rope_orig_ctx = gptoss_yarn && p.rope_orig_ctx == 0 ? 4096 : p.rope_orig_ctx;
  if (!rope_scaling.empty()) w.set_string(a + ".rope.scaling.type", rope_scaling);
  if (rope_factor > 0) w.set_f32(a + ".rope.scaling.factor", static_cast<float>(rope_factor));
  if (rope_orig_ctx > 0) {
    w.set_u32(a + ".rope.scaling.original_context_length", static_cast<uint32_t>(rope_orig_ctx));
  }
  if (p.rope_attn_factor > 0) {
    w.set_f32(a + ".rope.scaling.attn_factor", static_cast<float>(p.rope_attn_factor));
  }
  if (a == "gemma2" || a == "gemma3" || gptoss) {
    const int64_t n_swa = p.n_swa > 0 ? p.n_swa : (a == "gemma2" ? 4096 : gptoss ? 128 : 512);
    w.set_u32(a + ".attention.sliding_window", static_cast<uint32_t>(n_swa));
  }
  if (a == "gemma2") {
    w.set_f32(a + ".attn_logit_softcapping",
              static_cast<float>(p.attn_softcap > 0 ? p.attn_softcap : 50.0));
    w.set_f32(a + ".final_logit_softcapping",
              static_cast<float>(p.final_softcap > 0 ? p.final_softcap : 30.0));
  }
  w.set_u32(a + ".attention.key_length", static_cast<uint32_t>(hd));
  w.set_u32(a + ".attention.value_length", static_cast<uint32_t>(hd));
  w.set_u32(a + ".vocab_size", static_cast<uint32_t>(p.n_vocab));
  if (p.n_expert > 0) {
    // As the converters write them: Mixtral's experts take feed_forward_length.
    w.set_u32(a + ".expert_count", static_cast<uint32_t>(p.n_expert));
    w.set_u32(a + ".expert_used_count", static_cast<uint32_t>(p.n_expert_used));
    if (a != "llama") {
      w.set_u32(a + ".expert_feed_forward_length", static_cast<uint32_t>(ff_exp_of(p)));
    }
  }

  if (gptoss) {
    const std::vector<std::string>& specials = gptoss_specials();
    Vocab v = bpe_vocab(p.n_vocab, specials);
    const uint32_t first = static_cast<uint32_t>(p.n_vocab - static_cast<int64_t>(specials.size()));
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", "gpt-4o");
    w.set_strings("tokenizer.ggml.tokens", v.tokens);
    w.set_i32_array("tokenizer.ggml.token_type", v.types);
    w.set_strings("tokenizer.ggml.merges", v.merges);
    // As the released files: BOS <|startoftext|>, EOS <|return|>, padding <|endoftext|>.
    w.set_u32("tokenizer.ggml.bos_token_id", first);
    w.set_u32("tokenizer.ggml.eos_token_id", first + 2);
    w.set_u32("tokenizer.ggml.padding_token_id", first + 1);
    w.set_bool("tokenizer.ggml.add_bos_token", false);
    w.set_string("tokenizer.chat_template", kHarmonyTemplate);
  } else if (qwen) {
    Vocab v = bpe_vocab(p.n_vocab, {"<|endoftext|>", "<|im_start|>", "<|im_end|>"});
    const uint32_t eot = static_cast<uint32_t>(p.n_vocab - 3);  // <|endoftext|>
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", "qwen2");
    w.set_strings("tokenizer.ggml.tokens", v.tokens);
    w.set_i32_array("tokenizer.ggml.token_type", v.types);
    w.set_strings("tokenizer.ggml.merges", v.merges);
    w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(p.n_vocab - 1));  // im_end
    w.set_u32("tokenizer.ggml.padding_token_id", eot);
    w.set_u32("tokenizer.ggml.bos_token_id", eot);
    w.set_bool("tokenizer.ggml.add_bos_token", false);
    w.set_string("tokenizer.chat_template", kChatMlTemplate);
  } else {
    const int64_t n_pieces = static_cast<int64_t>(p.script.size());
    Vocab v = spm_vocab(p.n_vocab - n_pieces);
    // The script's pieces, last, with the lowest scores: SPM prefers every other merge.
    for (const std::string& piece : p.script) {
      std::string t;
      for (char c : piece) t += c == ' ' ? std::string("\xe2\x96\x81") : std::string(1, c);
      v.tokens.push_back(std::move(t));
      v.scores.push_back(-1e9f);
      v.types.push_back(type_id(TokenType::kNormal));
    }
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_strings("tokenizer.ggml.tokens", v.tokens);
    w.set_f32_array("tokenizer.ggml.scores", v.scores);
    w.set_i32_array("tokenizer.ggml.token_type", v.types);
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 2);
    w.set_u32("tokenizer.ggml.unknown_token_id", 0);
    w.set_bool("tokenizer.ggml.add_bos_token", true);
    w.set_bool("tokenizer.ggml.add_eos_token", false);
  }

  // Each tensor draws from its own stream, seeded by the model seed and its name, so its
  // values do not depend on which tensors come before it.
  auto add = [&](const std::string& name, DType dtype, std::vector<int64_t> ne,
                 Init init) -> Status {
    const uint64_t seed = p.seed ^ fnv1a(name);
    const int64_t ne0 = ne[0];
    return w.add_tensor(name, dtype, ne, [seed, dtype, ne0, init](std::span<uint8_t> dst) {
      NormalRng rng(seed);
      const size_t row_bytes = dtype_row_bytes(dtype, ne0);
      std::vector<float> row(static_cast<size_t>(ne0));
      for (size_t off = 0; off + row_bytes <= dst.size(); off += row_bytes) {
        for (float& x : row) x = static_cast<float>(init.mean + init.scale * rng.normal());
        quantize_row(dtype, row.data(), dst.data() + off, ne0);
      }
      return Status::ok();
    });
  };
  const bool scripted = !p.script.empty();
  // Matrices ~ N(0, 1/fan_in): a product with an O(1) input stays O(1). A scripted model's
  // layers add nothing: zero matrices and biases, unit norms.
  auto matrix = [&](int64_t fan_in) {
    return Init{0.0, scripted ? 0.0 : 1.0 / std::sqrt(double(fan_in))};
  };
  const Init norm{1.0, scripted ? 0.0 : 0.1};
  const Init bias{0.0, scripted ? 0.0 : 0.1};
  // Attention sinks are logits beside the scores, which are O(1) here: so are the sinks.
  const Init sinks{0.0, 1.0};
  // A scripted model's embedding and output: row r of a [n_embd, n_vocab] matrix has ones
  // at the columns `hot(r)` names.
  const int64_t first_piece = p.n_vocab - static_cast<int64_t>(p.script.size());
  const int64_t last_piece = p.n_vocab - 1;
  constexpr int64_t kEos = 2;
  auto add_one_hot = [&](const std::string& name, DType dtype, bool output) {
    const int64_t n_embd = p.n_embd;
    const int64_t n_vocab = p.n_vocab;
    return w.add_tensor(name, dtype, {n_embd, n_vocab}, [=](std::span<uint8_t> dst) {
      // The token that follows token t.
      auto successor = [&](int64_t t) {
        if (t == last_piece) return kEos;
        return t >= first_piece ? t + 1 : first_piece;
      };
      const size_t row_bytes = dtype_row_bytes(dtype, n_embd);
      std::vector<float> row(static_cast<size_t>(n_embd));
      for (int64_t r = 0; r < n_vocab; ++r) {
        std::fill(row.begin(), row.end(), 0.0f);
        if (!output) {
          row[static_cast<size_t>(r)] = 1.0f;
        } else {
          for (int64_t t = 0; t < n_vocab; ++t) {
            if (successor(t) == r) row[static_cast<size_t>(t)] = 1.0f;
          }
        }
        quantize_row(dtype, row.data(), dst.data() + static_cast<size_t>(r) * row_bytes, n_embd);
      }
      return Status::ok();
    });
  };
  // Tied: the embedding is also the output matrix, so scale it to give O(1) logits.
  const Init embd = p.tied_output ? Init{0.0, 2.0 / std::sqrt(double(p.n_embd))} : Init{0.0, 0.5};

  // The architecture's layer table: its required tensors, in table order.
  HParams hp;
  hp.n_embd = p.n_embd;
  hp.n_head = p.n_head;
  hp.n_head_kv = p.n_head_kv;
  hp.head_dim = hd;
  hp.n_ff = p.n_ff;
  hp.n_expert = p.n_expert;
  hp.n_ff_exp = p.n_expert > 0 ? ff_exp_of(p) : 0;
  if (scripted) {
    STRATA_RETURN_IF_ERROR(add_one_hot("token_embd.weight", embd_dtype, false));
  } else {
    STRATA_RETURN_IF_ERROR(add("token_embd.weight", embd_dtype, {p.n_embd, p.n_vocab}, embd));
  }
  for (int64_t l = 0; l < p.n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    for (const LayerTensorSpec& spec : arch_find(a)->layer_tensors) {
      if (!spec_required(spec, hp)) continue;
      const std::string name = b + std::string(layer_tensor_name(spec.id));
      const int64_t ne0 = dim_value(spec.ne0, hp);
      if (spec.ne1 == Dim::kOne) {
        const Init init = spec.role == TensorRole::kNorm       ? norm
                          : spec.id == LayerTensor::kAttnSinks ? sinks
                                                               : bias;
        STRATA_RETURN_IF_ERROR(add(name, DType::kF32, {ne0}, init));
        continue;
      }
      std::vector<int64_t> ne = {ne0, dim_value(spec.ne1, hp)};
      if (spec.ne2 != Dim::kOne) ne.push_back(dim_value(spec.ne2, hp));
      if (spec.role == TensorRole::kBias) {  // per-expert biases: F32 rows
        STRATA_RETURN_IF_ERROR(add(name, DType::kF32, ne, bias));
        continue;
      }
      const DType dtype = spec.role == TensorRole::kRouter ? DType::kF32 : matrix_dtype(spec.id, l);
      STRATA_RETURN_IF_ERROR(add(name, dtype, ne, matrix(ne0)));
    }
  }
  STRATA_RETURN_IF_ERROR(add("output_norm.weight", DType::kF32, {p.n_embd}, norm));
  // Rope frequency divisors, F32 [n_rot / 2].
  const int64_t n_pairs = n_rot / 2;
  auto add_factors = [&](const std::string& name, const std::vector<float>& v) {
    return w.add_tensor(name, DType::kF32, {n_pairs}, [v](std::span<uint8_t> dst) {
      std::memcpy(dst.data(), v.data(), dst.size());
      return Status::ok();
    });
  };
  if (p.rope_freqs) {
    STRATA_RETURN_IF_ERROR(
        add_factors("rope_freqs.weight", llama3_rope_freqs(p, n_rot, rope_base)));
  }
  if (p.rope_scaling == "longrope") {
    // Short factors near 1, long ones growing with the pair's wavelength, as Phi-3.5's.
    std::vector<float> shrt(static_cast<size_t>(n_pairs)), lng(static_cast<size_t>(n_pairs));
    for (int64_t i = 0; i < n_pairs; ++i) {
      const double x =
          static_cast<double>(i) / static_cast<double>(std::max<int64_t>(n_pairs - 1, 1));
      shrt[static_cast<size_t>(i)] = static_cast<float>(1.0 + 0.05 * x);
      lng[static_cast<size_t>(i)] = static_cast<float>(1.0 + 20.0 * x * x);
    }
    STRATA_RETURN_IF_ERROR(add_factors("rope_factors_long.weight", lng));
    STRATA_RETURN_IF_ERROR(add_factors("rope_factors_short.weight", shrt));
  }
  if (scripted) {
    STRATA_RETURN_IF_ERROR(add_one_hot("output.weight", output_dtype, true));
  } else if (!p.tied_output) {
    STRATA_RETURN_IF_ERROR(
        add("output.weight", output_dtype, {p.n_embd, p.n_vocab}, matrix(p.n_embd)));
  }
  return w;
}

Status synth_write(const SynthParams& p, const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(GgufWriter w, synth_model(p));
  return w.write(path);
}

}  // namespace strata
