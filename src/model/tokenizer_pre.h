// The pre-tokenizers of byte-level BPE vocabularies, as one table. A GGUF file names its
// pre-tokenizer in tokenizer.ggml.pre; the row with that name says how text is split before
// the merges and which vocabulary defaults llama.cpp ties to the same name.
//
// Goal: split text exactly as llama.cpp does for every name in the table.
// Non-goals: names missing from the table, refused with an error that names them; among
// them the pre-tokenizers that need more than regexes and these flags (kimi-k2's Han rules,
// gemma4's BPE over U+2581-escaped text without the byte-level map).
#pragma once

#include <span>
#include <string_view>

#include "core/status.h"

namespace strata {

// One row of the table. To add a pre-tokenizer: write its regexes as a named list in
// tokenizer_pre.cc (or reuse one), add a row with its names and flags, and add a case that
// shows what sets it apart to the table test in tokenizer_pre_test.cc.
struct PreTokenizer {
  // The tokenizer.ggml.pre values that select this row, separated by single spaces; the
  // first one names the row in messages.
  std::string_view names;
  // Applied in order: each regex splits the pieces that the previous ones left, and both
  // matches and the text between them become pieces (see RegexSplitter).
  std::span<const std::string_view> regexes;
  // A pre-token that is itself a token becomes that token, without merges.
  bool ignore_merges = false;
  // BOS is added unless tokenizer.ggml.add_bos_token says otherwise.
  bool add_bos = false;
  // llama.cpp's detokenizer removes the space before ?!., and before some contractions
  // (see DecodeOptions::clean_spaces).
  bool clean_spaces = true;

  std::string_view name() const { return names.substr(0, names.find(' ')); }
};

// Every row, in the order of the table.
std::span<const PreTokenizer> pretokenizer_table();

// The row that `name` selects, or an error that names it.
Result<const PreTokenizer*> pretokenizer_find(std::string_view name);

}  // namespace strata
