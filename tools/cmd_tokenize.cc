// strata tokenize -m FILE -p TEXT [--no-bos] [--parse-special]
// Prints the token ids of TEXT on one line. Reads only the GGUF metadata, so vocabulary-only
// files work and a large model costs no more than its header.
#include <cstdio>
#include <string>

#include "commands.h"
#include "flags.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace strata::tools {

int cmd_tokenize(const Args& args) {
  Flags flags({"-m|--model", "-p|--prompt"}, {"--no-bos", "--parse-special", "-h|--help"});
  if (Status s = flags.parse(args); !s) return fail("tokenize", s);
  if (flags.has("--help")) {
    std::printf(
        "usage: strata tokenize -m FILE -p TEXT [--no-bos] [--parse-special]\n"
        "  -m, --model FILE   GGUF file (a vocabulary-only file is enough)\n"
        "  -p, --prompt TEXT  text to tokenize\n"
        "  --no-bos           do not add BOS/EOS even when the vocabulary asks for them\n"
        "  --parse-special    turn control tokens written in TEXT into their ids\n");
    return 0;
  }
  const auto model = flags.get("--model");
  const auto prompt = flags.get("--prompt");
  if (!model) return fail("tokenize", invalid_argument("-m FILE is required"));
  if (!prompt) return fail("tokenize", invalid_argument("-p TEXT is required"));

  Result<GgufFile> file = GgufFile::open(*model);
  if (!file) return fail("tokenize", file.status());
  Result<Tokenizer> tok = Tokenizer::from_gguf(*file);
  if (!tok) return fail("tokenize", tok.status().with_context(*model));

  const std::vector<int32_t> ids =
      tok->encode(*prompt, !flags.has("--no-bos"), flags.has("--parse-special"));
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) line += ' ';
    line += std::to_string(ids[i]);
  }
  std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace strata::tools
