// Byte-level BPE (GPT-2 family): split the text with the pre-tokenizer regexes, map every byte
// of a piece to its GPT-2 character, then apply merges in rank order within the piece.
#include <queue>

#include "core/utf8.h"
#include "model/tokenizer.h"

namespace strata {
namespace {

using Symbol = MergeSymbol;

struct BpeBigram {
  int left = 0;
  int right = 0;
  int rank = 0;
  size_t left_size = 0;  // sizes when queued: a stale entry no longer matches them
  size_t right_size = 0;
};

struct BpeBigramOrder {
  bool operator()(const BpeBigram& a, const BpeBigram& b) const {
    // priority_queue pops the largest: lowest rank, then smallest left index.
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

int Tokenizer::bpe_rank(std::string_view left, std::string_view right) const {
  std::string key;
  key.reserve(left.size() + right.size() + 1);
  key.append(left);
  key += '\xFF';
  key.append(right);
  const auto it = merge_ranks_.find(key);
  return it == merge_ranks_.end() ? -1 : it->second;
}

void Tokenizer::encode_bpe(std::string_view text, std::vector<int32_t>& out) const {
  std::string word;
  for (const TextSpan& span : splitter_->split(text)) {
    word.clear();
    byte_map_.encode(text.substr(span.begin, span.size), word);
    bpe_word(word, out);
  }
}

void Tokenizer::bpe_word(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    if (const int32_t id = lookup(word); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<Symbol> symbols = utf8_merge_symbols(word);

  std::priority_queue<BpeBigram, std::vector<BpeBigram>, BpeBigramOrder> queue;
  const auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[left];
    const Symbol& r = symbols[right];
    const int rank = bpe_rank(word.substr(l.begin, l.size), word.substr(r.begin, r.size));
    if (rank >= 0) queue.push({left, right, rank, l.size, r.size});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const BpeBigram b = queue.top();
    queue.pop();
    Symbol& l = symbols[b.left];
    Symbol& r = symbols[b.right];
    if (l.size != b.left_size || r.size != b.right_size || l.next != b.right) continue;
    l.size += r.size;
    r.size = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    const std::string_view piece = word.substr(s.begin, s.size);
    if (const int32_t id = lookup(piece); id >= 0) {
      out.push_back(id);
      continue;
    }
    // A piece that merges made is always a token; this is a character the vocabulary lacks.
    for (size_t pos = 0; pos < piece.size();) {
      const size_t len =
          std::min(utf8_seq_len(static_cast<uint8_t>(piece[pos])), piece.size() - pos);
      const int32_t id = lookup(piece.substr(pos, len));
      if (id >= 0) {
        out.push_back(id);
      } else if (unk_ >= 0) {
        out.push_back(unk_);
      }
      pos += len;
    }
  }
}

}  // namespace strata
