// Test helpers for chat templates: the real templates to check (../shared/templates, the GGUFs
// under ../shared/models, the one `gguf gen` writes) and the conversations of
// tests/reference/chat_conversations.json.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "jinja/json.h"
#include "jinja/value.h"
#include "model/gguf.h"
#include "model/synth.h"
#include "model/tokenizer.h"

namespace strata::chat_test {

inline const std::string kShared = STRATA_SHARED_DIR;

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// 2024-07-26 12:00:00, a Friday: the date tests/reference/jinja_ref.py gives strftime_now.
inline std::tm fixed_now() {
  std::tm t{};
  t.tm_year = 124;
  t.tm_mon = 6;
  t.tm_mday = 26;
  t.tm_hour = 12;
  t.tm_wday = 5;
  t.tm_yday = 207;
  return t;
}

struct Source {
  std::string label;
  std::string text;
  std::string bos;
  std::string eos;
};

// BOS / EOS texts of the models the shared template files come from (a file holds only the
// template, not the vocabulary).
inline void special_tokens(const std::string& label, std::string& bos, std::string& eos) {
  struct Row {
    const char* marker;
    const char* bos;
    const char* eos;
  };
  const Row rows[] = {
      {"Qwen", "", "<|im_end|>"},
      {"deepseek", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"},
      {"gemma", "<bos>", "<eos>"},
      {"Llama", "<|begin_of_text|>", "<|eot_id|>"},
      {"Phi", "<s>", "<|endoftext|>"},
      {"Mistral", "<s>", "</s>"},
  };
  bos = "<s>";
  eos = "</s>";
  for (const Row& r : rows) {
    if (label.find(r.marker) != std::string::npos) {
      bos = r.bos;
      eos = r.eos;
    }
  }
}

// The template of a GGUF with its vocabulary's BOS / EOS texts; false when it has none.
inline bool gguf_source(const std::string& path, const std::string& label, Source& out) {
  Result<GgufFile> f = GgufFile::open(path);
  if (!f || f->find("tokenizer.chat_template") == nullptr) return false;
  Result<std::string> text = f->get_string("tokenizer.chat_template");
  if (!text) return false;
  out = {label, *text, "", ""};
  Result<Tokenizer> tok = Tokenizer::from_gguf(*f);
  if (tok) {
    if (tok->bos() >= 0) out.bos = tok->token_text(tok->bos());
    if (tok->eos() >= 0) out.eos = tok->token_text(tok->eos());
  }
  return true;
}

struct Sources {
  std::vector<Source> templates;
  int template_files = 0;  // ../shared/templates/*.jinja
  int gguf_files = 0;      // GGUFs under ../shared/models
  int gguf_templates = 0;  // of which carry a chat template
};

// Every template to check: the shared files, the shared GGUFs that carry one, and gguf gen's.
inline Sources template_sources() {
  Sources out;
  const std::string dir = kShared + "/templates";
  if (std::filesystem::is_directory(dir)) {
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      if (e.path().extension() == ".jinja") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const std::filesystem::path& p : files) {
      Source s{p.filename().string(), slurp(p.string()), "", ""};
      special_tokens(s.label, s.bos, s.eos);
      out.templates.push_back(std::move(s));
      ++out.template_files;
    }
  }
  const std::string models = kShared + "/models";
  if (std::filesystem::is_directory(models)) {
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::recursive_directory_iterator(models)) {
      if (e.path().extension() == ".gguf") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const std::filesystem::path& p : files) {
      ++out.gguf_files;
      Source s;
      if (!gguf_source(p.string(), std::filesystem::relative(p, models).string(), s)) continue;
      out.templates.push_back(std::move(s));
      ++out.gguf_templates;
    }
  }
  SynthParams p;
  p.arch = "qwen2";
  p.n_embd = 64;
  p.n_head = 2;
  p.n_head_kv = 1;
  p.n_ff = 128;
  p.n_layer = 1;
  const std::string path = ::testing::TempDir() + "/chat_template_test_synth.gguf";
  Source s;
  if (synth_write(p, path).is_ok() && gguf_source(path, "gguf gen (qwen2)", s)) {
    out.templates.push_back(std::move(s));
  }
  std::remove(path.c_str());
  return out;
}

inline const Source* find_source(const std::vector<Source>& sources, std::string_view marker) {
  for (const Source& s : sources) {
    if (s.label.find(marker) != std::string::npos) return &s;
  }
  return nullptr;
}

struct Conversations {
  jinja::Value tools;  // OpenAI-style tool definitions
  std::vector<std::pair<std::string, jinja::Value>> chats;
};

inline Conversations conversations() {
  Conversations c;
  Result<jinja::Value> v =
      jinja::parse_json(slurp(STRATA_SOURCE_DIR "/tests/reference/chat_conversations.json"), 64);
  EXPECT_TRUE(v.is_ok()) << v.status().message();
  if (!v || !v->is_dict()) return c;
  c.tools = *v->as_dict().find("tools");
  for (const auto& [name, chat] : v->as_dict().find("conversations")->as_dict().items()) {
    c.chats.emplace_back(name.as_string(), chat);
  }
  return c;
}

}  // namespace strata::chat_test
