// strata embed: llama.cpp's llama-embedding. Each text (the prompt cut at --embd-separator) is
// one sequence of one batch; its vector is the final hidden state after the output norm, pooled
// as the model says (or --pooling) and normalised (--embd-normalize).
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"
#include "engine/embedding.h"
#include "flags.h"
#include "loader.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace strata::tools {

namespace {

// Most texts one call embeds: each is a sequence of the context.
constexpr size_t kMaxTexts = 256;

std::vector<std::string> split_texts(const std::string& prompt, const std::string& sep) {
  std::vector<std::string> out;
  if (sep.empty()) return {prompt};
  size_t start = 0;
  while (true) {
    const size_t at = prompt.find(sep, start);
    out.push_back(prompt.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) break;
    start = at + sep.size();
  }
  return out;
}

}  // namespace

int cmd_embed(const Args& args) {
  std::vector<std::string> with_value = model_flags();
  with_value.insert(with_value.end(), {"-p|--prompt", "--ids", "--pooling", "--embd-normalize",
                                       "--embd-separator", "--embd-output-format", "-o|--output"});
  std::vector<std::string> switches = model_switches();
  switches.insert(switches.end(), {"-h|--help"});
  Flags flags(with_value, switches);
  if (Status s = flags.parse(args); !s) return fail("embed", s);
  if (flags.has("-h")) {
    std::printf(
        "usage: strata embed -m FILE (-p TEXT | --ids \"1 403 407\") [options]\n"
        "Embeddings, as llama.cpp's llama-embedding: each text (the prompt cut at the separator)\n"
        "is one sequence; its vector is the final hidden state after the output norm, pooled\n"
        "and normalised. The model's flags (-t, --rpc, --device, ...) as in `strata run`.\n"
        "  -p, --prompt TEXT          the texts, separated by --embd-separator (default \\n)\n"
        "      --ids \"A B C\"          one sequence of token ids instead of a prompt\n"
        "      --pooling none|mean|cls|last   (default: the model's pooling_type, else none)\n"
        "      --embd-normalize N     -1 none, 0 max-abs to int16 range, 1 taxicab,\n"
        "                             2 euclidean (default), >2 p-norm\n"
        "      --embd-output-format F  '' one line per vector (default), array, json (OpenAI's\n"
        "                             list), raw (float32 little-endian to -o FILE)\n"
        "  -o, --output FILE          with raw: where the floats go\n");
    return 0;
  }
  const auto prompt = flags.get("-p");
  const auto ids_text = flags.get("--ids");
  if (!prompt == !ids_text) {
    return fail("embed", invalid_argument("give one of -p TEXT and --ids"));
  }
  Result<int64_t> norm = flags.get_int("--embd-normalize", 2, -1, 64);
  if (!norm) return fail("embed", norm.status());
  const std::string format = flags.get("--embd-output-format").value_or("");
  if (format != "" && format != "array" && format != "json" && format != "raw") {
    return fail("embed", invalid_argument("--embd-output-format '" + format +
                                          "': one of '', array, json, raw"));
  }
  const auto out_path = flags.get("-o");
  if ((format == "raw") != out_path.has_value()) {
    return fail("embed", invalid_argument("-o FILE goes with --embd-output-format raw"));
  }

  Result<server::LoadOptions> options = load_options(flags);
  if (!options) return fail("embed", options.status());
  options->embeddings = true;
  // Tokenize first: the context's size and sequences follow from the texts.
  Result<GgufFile> file = GgufFile::open(options->model_path);
  if (!file) return fail("embed", file.status());
  std::vector<std::vector<int32_t>> seqs;
  if (ids_text) {
    Result<std::vector<int32_t>> ids = parse_token_ids(*ids_text);
    if (!ids) return fail("embed", ids.status());
    seqs.push_back(std::move(ids).value());
  } else {
    Result<Tokenizer> tok = Tokenizer::from_gguf(*file);
    if (!tok) return fail("embed", tok.status().with_context(options->model_path));
    for (const std::string& text :
         split_texts(*prompt, flags.get("--embd-separator").value_or("\n"))) {
      std::vector<int32_t> ids = tok->encode(text, true, false);
      if (ids.empty()) return fail("embed", invalid_argument("a text of no tokens"));
      seqs.push_back(std::move(ids));
    }
  }
  if (seqs.size() > kMaxTexts) {
    return fail("embed", invalid_argument(std::to_string(seqs.size()) + " texts; at most " +
                                          std::to_string(kMaxTexts)));
  }
  int64_t total = 0;
  for (const auto& s : seqs) total += static_cast<int64_t>(s.size());
  options->min_ctx = total;
  ProgressBar bar("loading " + options->model_path);
  options->progress = [&bar](uint64_t done, uint64_t total_bytes) {
    bar.update(done, total_bytes);
  };
  auto loaded = server::load_model(*options, static_cast<int32_t>(seqs.size()));
  if (!loaded) return fail("embed", loaded.status());
  Context& ctx = *loaded->context;
  const Model& model = ctx.model();
  Pooling pooling = Pooling::kNone;
  if (const auto name = flags.get("--pooling")) {
    const std::optional<Pooling> p = pooling_from_name(*name);
    if (!p) {
      return fail("embed",
                  invalid_argument("--pooling '" + *name + "': one of none, mean, cls, last"));
    }
    pooling = *p;
  } else {
    Result<Pooling> p = model_pooling(model);
    if (!p) return fail("embed", p.status());
    pooling = *p;
  }

  Result<std::vector<std::vector<float>>> embedded =
      embed_inputs(ctx, seqs, pooling, static_cast<int>(*norm));
  if (!embedded) return fail("embed", embedded.status());
  const std::vector<std::vector<float>>& vectors = *embedded;
  const int64_t n_embd = model.hparams().n_embd;

  if (format == "raw") {
    FILE* f = std::fopen(out_path->c_str(), "wb");
    if (f == nullptr) return fail("embed", io_error("cannot write " + *out_path));
    bool ok = true;
    for (const auto& v : vectors) ok = ok && std::fwrite(v.data(), 4, v.size(), f) == v.size();
    ok = std::fclose(f) == 0 && ok;
    if (!ok) return fail("embed", io_error("write to " + *out_path + " failed"));
    return 0;
  }
  // One vector per line of its n_embd values (with pooling none, each token's).
  std::vector<std::vector<float>> lines;
  for (const auto& v : vectors) {
    for (size_t at = 0; at < v.size(); at += static_cast<size_t>(n_embd)) {
      lines.emplace_back(v.begin() + static_cast<ptrdiff_t>(at),
                         v.begin() + static_cast<ptrdiff_t>(at) + n_embd);
    }
  }
  const auto values = [](const std::vector<float>& v, const char* sep) {
    std::string s;
    char buf[32];
    for (size_t i = 0; i < v.size(); ++i) {
      std::snprintf(buf, sizeof(buf), "%s%.9g", i == 0 ? "" : sep, static_cast<double>(v[i]));
      s += buf;
    }
    return s;
  };
  if (format == "") {
    for (size_t i = 0; i < lines.size(); ++i) {
      std::printf("embedding %zu: %s\n", i, values(lines[i], " ").c_str());
    }
  } else if (format == "array") {
    std::printf("[");
    for (size_t i = 0; i < lines.size(); ++i) {
      std::printf("%s[%s]", i == 0 ? "" : ",", values(lines[i], ",").c_str());
    }
    std::printf("]\n");
  } else {
    std::printf("{\"object\": \"list\", \"data\": [");
    for (size_t i = 0; i < lines.size(); ++i) {
      std::printf("%s{\"object\": \"embedding\", \"index\": %zu, \"embedding\": [%s]}",
                  i == 0 ? "" : ", ", i, values(lines[i], ",").c_str());
    }
    std::printf("], \"usage\": {\"prompt_tokens\": %lld, \"total_tokens\": %lld}}\n",
                static_cast<long long>(total), static_cast<long long>(total));
  }
  return 0;
}

}  // namespace strata::tools
