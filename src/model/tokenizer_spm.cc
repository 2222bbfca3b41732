// SentencePiece-style BPE over the characters of a text whose spaces are already U+2581:
// repeatedly merge the adjacent pair whose concatenation is the highest-scoring token
// (leftmost on ties); characters left without a token fall back to their bytes.
#include <queue>

#include "core/utf8.h"
#include "model/tokenizer.h"

namespace strata {
namespace {

using Symbol = MergeSymbol;

struct SpmBigram {
  int left = 0;
  int right = 0;
  float score = 0;
  size_t size = 0;  // bytes of the pair when it was queued: a stale entry no longer matches
};

struct SpmBigramOrder {
  bool operator()(const SpmBigram& a, const SpmBigram& b) const {
    // priority_queue pops the largest: highest score, then smallest left index.
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

void Tokenizer::encode_spm(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<Symbol> symbols = utf8_merge_symbols(text);

  std::priority_queue<SpmBigram, std::vector<SpmBigram>, SpmBigramOrder> queue;
  const auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[left];
    const Symbol& r = symbols[right];
    const int32_t id = lookup(text.substr(l.begin, l.size + r.size));
    // Only tokens that SentencePiece itself can emit take part in merges.
    if (id < 0) return;
    const TokenType t = types_[id];
    if (t != TokenType::kNormal && t != TokenType::kUserDefined && t != TokenType::kUndefined) {
      return;
    }
    queue.push({left, right, scores_[id], l.size + r.size});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const SpmBigram b = queue.top();
    queue.pop();
    Symbol& l = symbols[b.left];
    Symbol& r = symbols[b.right];
    if (l.size == 0 || r.size == 0 || l.size + r.size != b.size) continue;
    l.size += r.size;
    r.size = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    const std::string_view piece = text.substr(s.begin, s.size);
    const int32_t id = lookup(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    // Merges only form tokens, so what is left is one character with no token of its own.
    for (char c : piece) {
      const int32_t byte_id = byte_tokens_[static_cast<uint8_t>(c)];
      if (byte_id >= 0) {
        out.push_back(byte_id);
      } else if (unk_ >= 0) {
        out.push_back(unk_);
      }
    }
  }
}

}  // namespace strata
