// `strata gguf info FILE` describes a GGUF file; `strata gguf gen` writes a synthetic model.
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "core/dtype.h"
#include "flags.h"
#include "model/arch.h"
#include "model/gguf.h"
#include "model/synth.h"

namespace strata::tools {
namespace {

constexpr size_t kMaxShownString = 96;
constexpr uint64_t kShownElements = 6;

void print_usage() {
  std::printf(
      "usage: strata gguf info FILE\n"
      "       strata gguf gen -o FILE [options]\n\n"
      "info: version, metadata, tensor table and total weight bytes of a GGUF file.\n"
      "gen:  a synthetic model with seeded random weights and a complete tokenizer.\n"
      "      See `strata gguf gen --help`.\n");
}

void print_gen_usage() {
  std::printf(
      "usage: strata gguf gen -o FILE [options]\n\n"
      "  -o, --output FILE   where to write the model (required)\n"
      "  --arch NAME         %s (default llama)\n"
      "  --n-embd N          embedding width (default 256)\n"
      "  --n-layer N         layers (default 2)\n"
      "  --n-head N          attention heads (default 4)\n"
      "  --n-head-kv N       key/value heads (default 2)\n"
      "  --n-ff N            feed-forward width (default 768)\n"
      "  --n-vocab N         vocabulary size (default 512, at least %" PRId64
      ")\n"
      "  --n-ctx N           context length (default 2048)\n"
      "  --head-dim N        per-head width (default n-embd / n-head)\n"
      "  --dtype T           %s (default f32)\n"
      "  --seed N            weight seed (default 1); same options, same bytes\n"
      "  --rope-freq-base F  default 10000 for llama, 1e6 for qwen, 150000 for gpt-oss\n"
      "  --rms-eps F         default 1e-5 for llama, 1e-6 for qwen\n"
      "  --tied              no output.weight: the output reuses token_embd.weight\n"
      "  --n-rot N           rotated dims per head (default the head width; less: partial)\n"
      "  --rope-scaling T    none | linear | yarn | longrope (longrope writes short and long\n"
      "                      factor tensors; gpt-oss default: yarn, factor 32, orig ctx 4096)\n"
      "  --rope-factor F     rope.scaling.factor\n"
      "  --rope-orig-ctx N   rope.scaling.original_context_length\n"
      "  --rope-attn-factor F  rope.scaling.attn_factor\n"
      "  --mix M             q4_K_M | q5_K_M | q3_K_M: llama-quantize's type per tensor\n"
      "                      (overrides --dtype)\n"
      "  --rope-freqs        a Llama 3.1 rope_freqs.weight (frequency divisors 1..8)\n"
      "  --swa N             gemma2/gemma3/gpt-oss sliding window (default 4096 / 512 / 128)\n"
      "  --attn-softcap F    gemma2 attention soft-cap (default 50)\n"
      "  --final-softcap F   gemma2 logit soft-cap (default 30)\n"
      "  --n-expert N        experts per layer (qwen3moe, gpt-oss; llama: Mixtral-style;\n"
      "                      default 0)\n"
      "  --n-expert-used K   experts each token is routed to\n"
      "  --n-ff-exp F        one expert's feed-forward width (default n-ff; llama: n-ff)\n"
      "  --expert-dtype T    the experts' matrices (default --dtype; gpt-oss as released:\n"
      "                      mxfp4 experts, q8_0 elsewhere)\n"
      "  --script FILE       a JSON array of strings: the model says them, one token each,\n"
      "                      then EOS, whatever the prompt (llama; needs n-embd >= n-vocab)\n",
      arch_names().c_str(), kSynthMinVocab, dtype_names_with_kernels(" | ").c_str());
}

// --script FILE: a JSON array of strings.
Result<std::vector<std::string>> read_script(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("--script: cannot read '" + path + "'");
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_array()) {
    return invalid_argument("--script '" + path + "' is not a JSON array of strings");
  }
  std::vector<std::string> pieces;
  for (const nlohmann::json& piece : j) {
    if (!piece.is_string()) {
      return invalid_argument("--script '" + path + "': element " + std::to_string(pieces.size()) +
                              " is not a string");
    }
    pieces.push_back(piece.get<std::string>());
  }
  return pieces;
}

// Printable, bounded form of a string from the file.
std::string shown(std::string_view s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size(); ++i) {
    if (out.size() > kMaxShownString) {
      out += "...(" + std::to_string(s.size()) + " bytes)";
      return out + "\"";
    }
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);  // UTF-8 passes through
    }
  }
  return out + "\"";
}

std::string number_at(GgufType t, const uint8_t* p) {
  auto get = [p](auto v) {
    std::memcpy(&v, p, sizeof(v));
    return v;
  };
  switch (t) {
    case GgufType::kUint8:
      return std::to_string(get(uint8_t{}));
    case GgufType::kInt8:
      return std::to_string(get(int8_t{}));
    case GgufType::kUint16:
      return std::to_string(get(uint16_t{}));
    case GgufType::kInt16:
      return std::to_string(get(int16_t{}));
    case GgufType::kUint32:
      return std::to_string(get(uint32_t{}));
    case GgufType::kInt32:
      return std::to_string(get(int32_t{}));
    case GgufType::kUint64:
      return std::to_string(get(uint64_t{}));
    case GgufType::kInt64:
      return std::to_string(get(int64_t{}));
    case GgufType::kBool:
      return get(uint8_t{}) ? "true" : "false";
    case GgufType::kFloat32: {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%g", static_cast<double>(get(float{})));
      return buf;
    }
    case GgufType::kFloat64: {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%g", get(double{}));
      return buf;
    }
    default:
      return "?";
  }
}

std::string value_text(const GgufKv& kv) {
  if (kv.type == GgufType::kString) return shown(kv.str);
  if (kv.type != GgufType::kArray) {
    // Scalars: re-encode the decoded value for number_at's single formatter.
    uint8_t buf[8] = {};
    switch (kv.type) {
      case GgufType::kFloat32: {
        const float f = static_cast<float>(kv.f64);
        std::memcpy(buf, &f, 4);
        break;
      }
      case GgufType::kFloat64:
        std::memcpy(buf, &kv.f64, 8);
        break;
      default:
        std::memcpy(buf, &kv.i64, 8);  // little-endian: the low bytes hold the value
    }
    return number_at(kv.type, buf);
  }
  std::string out = "[";
  const uint64_t n = std::min(kv.array_len, kShownElements);
  for (uint64_t i = 0; i < n; ++i) {
    if (i > 0) out += ", ";
    if (kv.array_type == GgufType::kString) {
      out += shown(kv.strings[i]);
    } else {
      out += number_at(kv.array_type, kv.array_data + i * gguf_scalar_size(kv.array_type));
    }
  }
  if (kv.array_len > n) out += ", ...";
  return out + "]";
}

std::string type_text(const GgufKv& kv) {
  if (kv.type != GgufType::kArray) return std::string(gguf_type_name(kv.type));
  return "array[" + std::string(gguf_type_name(kv.array_type)) + "; " +
         std::to_string(kv.array_len) + "]";
}

int info(const Args& args) {
  Flags flags({}, {"-h|--help"});
  if (Status s = flags.parse(args); !s.is_ok()) return fail("gguf info", s);
  if (flags.has("--help")) {
    print_usage();
    return 0;
  }
  if (flags.positional().size() != 1) {
    return fail("gguf info", invalid_argument("expected one FILE, got " +
                                              std::to_string(flags.positional().size())));
  }
  Result<GgufFile> r = GgufFile::open(flags.positional()[0]);
  if (!r.is_ok()) return fail("gguf info", r.status());
  const GgufFile& f = *r;
  std::printf("file:        %s (%zu bytes)\n", f.path().c_str(), f.file_size());
  std::printf("version:     %u\n", f.version());
  std::printf("alignment:   %" PRIu64 "\n", f.alignment());
  std::printf("data offset: %" PRIu64 "\n", f.data_offset());
  std::printf("kv count:    %zu\n", f.kvs().size());
  for (const GgufKv& kv : f.kvs()) {
    std::printf("  %-44s %-22s %s\n", kv.key.c_str(), type_text(kv).c_str(),
                value_text(kv).c_str());
  }
  std::printf("tensors:     %zu\n", f.tensors().size());
  std::printf("  %-36s %-7s %-24s %14s %14s\n", "name", "dtype", "shape", "offset", "bytes");
  uint64_t total = 0;
  for (const GgufTensorInfo& t : f.tensors()) {
    std::string shape = "[";
    for (int d = 0; d < t.n_dims; ++d) shape += (d ? ", " : "") + std::to_string(t.ne[d]);
    shape += "]";
    std::printf("  %-36s %-7s %-24s %14" PRIu64 " %14" PRIu64 "\n", t.name.c_str(),
                std::string(dtype_name(t.dtype)).c_str(), shape.c_str(), t.offset, t.size_bytes);
    total += t.size_bytes;
  }
  std::printf("total weight bytes: %" PRIu64 " (%.2f MiB)\n", total, total / 1048576.0);
  return 0;
}

int gen(const Args& args) {
  Flags flags({"-o|--output",
               "--arch",
               "--n-embd",
               "--n-layer",
               "--n-head",
               "--n-head-kv",
               "--n-ff",
               "--n-vocab",
               "--n-ctx",
               "--head-dim",
               "--dtype",
               "--seed",
               "--rope-freq-base",
               "--rms-eps",
               "--n-rot",
               "--rope-scaling",
               "--rope-factor",
               "--rope-orig-ctx",
               "--rope-attn-factor",
               "--swa",
               "--attn-softcap",
               "--final-softcap",
               "--mix",
               "--script",
               "--n-expert",
               "--n-expert-used",
               "--n-ff-exp",
               "--expert-dtype"},
              {"-h|--help", "--tied", "--rope-freqs"});
  if (Status s = flags.parse(args); !s.is_ok()) return fail("gguf gen", s);
  if (flags.has("--help")) {
    print_gen_usage();
    return 0;
  }
  if (!flags.positional().empty()) {
    return fail("gguf gen", invalid_argument("unexpected argument '" + flags.positional()[0] +
                                             "' (the output goes after -o)"));
  }
  const std::optional<std::string> out = flags.get("--output");
  if (!out) return fail("gguf gen", invalid_argument("missing -o FILE"));
  SynthParams p;
  p.arch = flags.get_or("--arch", p.arch);
  p.tied_output = flags.has("--tied");
  p.rope_freqs = flags.has("--rope-freqs");
  p.rope_scaling = flags.get_or("--rope-scaling", "");
  p.mix = flags.get_or("--mix", "");
  if (std::optional<std::string> script = flags.get("--script")) {
    Result<std::vector<std::string>> pieces = read_script(*script);
    if (!pieces.is_ok()) return fail("gguf gen", pieces.status());
    p.script = std::move(*pieces);
  }
  // Ranges here only keep values in int64; synth_validate applies the real limits.
  constexpr int64_t kBig = int64_t{1} << 40;
  struct IntFlag {
    const char* name;
    int64_t* field;
    int64_t min;
  };
  const IntFlag ints[] = {{"--n-embd", &p.n_embd, 1},
                          {"--n-layer", &p.n_layer, 1},
                          {"--n-head", &p.n_head, 1},
                          {"--n-head-kv", &p.n_head_kv, 1},
                          {"--n-ff", &p.n_ff, 1},
                          {"--n-vocab", &p.n_vocab, 1},
                          {"--n-ctx", &p.n_ctx, 1},
                          {"--head-dim", &p.head_dim, 0},
                          {"--n-rot", &p.n_rot, 0},
                          {"--rope-orig-ctx", &p.rope_orig_ctx, 0},
                          {"--swa", &p.n_swa, 0},
                          {"--n-expert", &p.n_expert, 0},
                          {"--n-expert-used", &p.n_expert_used, 0},
                          {"--n-ff-exp", &p.n_ff_exp, 0}};
  for (const IntFlag& f : ints) {
    Result<int64_t> v = flags.get_int(f.name, *f.field, f.min, kBig);
    if (!v.is_ok()) return fail("gguf gen", v.status());
    *f.field = *v;
  }
  Result<int64_t> seed = flags.get_int("--seed", 1, 0, INT64_MAX);
  if (!seed.is_ok()) return fail("gguf gen", seed.status());
  p.seed = static_cast<uint64_t>(*seed);
  Result<double> freq = flags.get_double("--rope-freq-base", 0);
  if (!freq.is_ok()) return fail("gguf gen", freq.status());
  p.rope_freq_base = *freq;
  struct DoubleFlag {
    const char* name;
    double* field;
  };
  const DoubleFlag doubles[] = {{"--rms-eps", &p.rms_eps},
                                {"--rope-factor", &p.rope_factor},
                                {"--rope-attn-factor", &p.rope_attn_factor},
                                {"--attn-softcap", &p.attn_softcap},
                                {"--final-softcap", &p.final_softcap}};
  for (const DoubleFlag& f : doubles) {
    Result<double> v = flags.get_double(f.name, 0);
    if (!v.is_ok()) return fail("gguf gen", v.status());
    *f.field = *v;
  }
  const std::string dtype = flags.get_or("--dtype", "f32");
  std::optional<DType> dt = dtype_from_name(dtype);
  if (!dt) return fail("gguf gen", invalid_argument("--dtype: unknown type '" + dtype + "'"));
  p.dtype = *dt;
  if (std::optional<std::string> e = flags.get("--expert-dtype")) {
    p.expert_dtype = dtype_from_name(*e);
    if (!p.expert_dtype) {
      return fail("gguf gen", invalid_argument("--expert-dtype: unknown type '" + *e + "'"));
    }
  }

  Result<GgufWriter> w = synth_model(p);
  if (!w.is_ok()) return fail("gguf gen", w.status());
  if (Status s = w->write(*out); !s.is_ok()) return fail("gguf gen", s);
  const uint64_t size = w->file_size();
  std::printf("wrote %s: %s, %" PRId64 " layers, n_embd %" PRId64 ", n_vocab %" PRId64
              ", %s, %zu tensors, %" PRIu64 " bytes (%.2f MiB)\n",
              out->c_str(), p.arch.c_str(), p.n_layer, p.n_embd, p.n_vocab,
              (p.mix.empty() ? std::string(dtype_name(p.dtype)) : p.mix).c_str(), w->n_tensors(),
              size, size / 1048576.0);
  return 0;
}

}  // namespace

int cmd_gguf(const Args& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    print_usage();
    return args.empty() ? 1 : 0;
  }
  const Args rest(args.begin() + 1, args.end());
  if (args[0] == "info") return info(rest);
  if (args[0] == "gen") return gen(rest);
  return fail("gguf", invalid_argument("unknown subcommand '" + args[0] + "' (info | gen)"));
}

}  // namespace strata::tools
