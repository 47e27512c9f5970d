// bpe_long_piece.cpp: byte-pair merging of a long piece in 3 bytes per byte (see
// bpe_long_piece.h).
#include "bpe_long_piece.h"

#include <algorithm>

namespace tg {

namespace {

constexpr uint16_t kNone = 0xFFFF;
constexpr size_t kBlock = 32;  // positions per leaf of the tree

struct LongMerge {
  std::string_view piece;
  const TokenRankFn& rank_of;
  std::vector<uint8_t> len;    // per position: the length of the part starting there, or 0
  std::vector<uint16_t> pair;  // per position: that part's pair rank with the next, or kNone
  std::vector<uint16_t> tree;  // [1] the root; [leaves + b] block b's lowest pair rank
  size_t leaves = 1;

  LongMerge(std::string_view p, const TokenRankFn& r)
      : piece(p), rank_of(r), len(p.size(), 1), pair(p.size(), kNone) {
    const size_t blocks = (p.size() + kBlock - 1) / kBlock;
    while (leaves < blocks) leaves *= 2;
    tree.assign(2 * leaves, kNone);
    for (size_t i = 0; i + 1 < p.size(); i++) pair[i] = pair_rank(i);
    for (size_t b = 0; b < blocks; b++) tree[leaves + b] = block_min(b);
    for (size_t t = leaves; t-- > 1;) tree[t] = std::min(tree[2 * t], tree[2 * t + 1]);
  }

  // The rank of part i joined with the part after it, kNone when that is no token.
  uint16_t pair_rank(size_t i) const {
    const size_t j = i + len[i];
    if (j >= piece.size()) return kNone;
    const uint32_t r = rank_of(piece.substr(i, size_t(len[i]) + len[j]));
    return r < kNone ? uint16_t(r) : kNone;
  }
  uint16_t block_min(size_t b) const {
    uint16_t m = kNone;
    for (size_t k = b * kBlock, e = std::min(k + kBlock, pair.size()); k < e; k++)
      m = std::min(m, pair[k]);
    return m;
  }
  void set(size_t i, uint16_t r) {
    pair[i] = r;
    size_t t = leaves + i / kBlock;
    tree[t] = block_min(i / kBlock);
    for (t /= 2; t >= 1; t /= 2) tree[t] = std::min(tree[2 * t], tree[2 * t + 1]);
  }
  // The leftmost position holding the lowest pair rank (the tree's root).
  size_t leftmost_min() const {
    size_t t = 1;
    while (t < leaves) t = tree[2 * t] == tree[1] ? 2 * t : 2 * t + 1;
    size_t k = (t - leaves) * kBlock;
    while (pair[k] != tree[1]) k++;
    return k;
  }
  void run() {
    while (tree[1] != kNone) {
      const size_t l = leftmost_min(), r = l + len[l];
      len[l] = uint8_t(len[l] + len[r]);  // a token's length: below 256 (fits)
      len[r] = 0;
      set(r, kNone);
      set(l, pair_rank(l));
      if (l == 0) continue;
      size_t p = l - 1;
      while (len[p] == 0) p--;
      set(p, pair_rank(p));
    }
  }
};

}  // namespace

bool long_piece_merge_fits(size_t vocab_size, size_t longest_token_bytes) {
  return vocab_size < kNone && longest_token_bytes < 256;
}

void merge_long_piece(std::string_view piece, const TokenRankFn& rank_of,
                      std::vector<uint32_t>* out) {
  if (piece.empty()) return;
  LongMerge m(piece, rank_of);
  m.run();
  // The pair ranks go before the ids come (the ids take 4 bytes per token, the ranks 2 per
  // byte), and the ids are reserved exactly: a growing vector's doubling would briefly hold
  // three times them.
  std::vector<uint16_t>().swap(m.pair);
  std::vector<uint16_t>().swap(m.tree);
  size_t count = 0;
  for (size_t i = 0; i < piece.size(); i += m.len[i]) count++;
  out->reserve(out->size() + count);
  for (size_t i = 0; i < piece.size(); i += m.len[i])
    out->push_back(rank_of(piece.substr(i, m.len[i])));
}

}  // namespace tg
