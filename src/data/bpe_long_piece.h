// bpe_long_piece.h: byte-pair merging of one long piece in little memory.
//
// BpeTokenizer merges a piece with linked parts and a heap of candidate pairs: about 40 bytes
// of scratch per byte of the piece, which on a pathological line (50 MB of letters without a
// space is one piece of the GPT-2 pattern) took 1.5 GB. merge_long_piece makes the same
// merges (the lowest-ranked adjacent pair whose bytes are a token, leftmost among equal ranks,
// until no pair is a token) in 3 bytes per byte of the piece and a tree an eighth of that: each
// byte position holds the length of the part that starts there (0 inside a part) and the rank
// of the pair that part makes with the next one (none for a position inside a part); a tree
// over blocks of 32 positions keeps each block's lowest rank, so the next merge is found in
// O(log n + 32) steps. A part's left neighbour is found by walking back over the zero lengths,
// at most the longest token's length.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

namespace tg {

// The id of the token whose bytes are the argument, or UINT32_MAX when none is.
using TokenRankFn = std::function<uint32_t(std::string_view)>;

// Whether merge_long_piece serves a vocabulary: ids below 65535 and tokens shorter than 256
// bytes (GPT-2's 50257 ids, at most 128 bytes, do; another vocabulary takes the heap merge at
// any length).
bool long_piece_merge_fits(size_t vocab_size, size_t longest_token_bytes);

// Appends the ids of `piece` merged as above (no cache, no whole-piece shortcut).
void merge_long_piece(std::string_view piece, const TokenRankFn& rank_of,
                      std::vector<uint32_t>* out);

}  // namespace tg
