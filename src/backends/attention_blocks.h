// attention_blocks.h: the row blocks of the cuBLAS attention's causal GEMMs
// (src/backends/cuda/attention.cu), as pure functions that the CUDA launchers, the softmax
// backward kernel, the CUDA scratch plan's readers and the cost model (tests/cuda) share.
//
// Each product of the materialised attention (S = q k^T, y = att v; dP = dy v^T, dv = att^T dy,
// dq = dS k, dk = dS^T q) is one batched GEMM per row block (every B x NH head in the call),
// over only the columns up to the block's end (or, for dv and dk, only the rows from the
// block's start): the masked half is computed only inside the diagonal blocks. Why 4 blocks:
// n blocks cover (n + 1) / 2n of the T x T square (1 block 1, 2: 3/4, 4: 5/8, 8: 9/16), each
// block a call of each of the six products. From 4 to 8 blocks would save 1/16 of the square
// more (at GPT-2 124M in bf16 about 13 MB, 3 us at 4.3 TB/s, a product per layer) for 24 more
// cuBLASLt calls a layer, each a launch of a few us and a smaller tile grid; 2 blocks would
// leave 1/8 of the square (twice that) to save 12 calls. Blocks are a multiple of 16 rows, so
// that every block's operands start 32-byte aligned for the T and hs the model uses; at T 1024
// that is 256 rows, a whole cuBLASLt tile of M.
#pragma once

namespace tg {

// Rows per block at sequence length T: T / 4 rounded up to a multiple of 16 (at most 4 blocks).
inline int attention_row_block(int T) { return (T + 63) / 64 * 16; }
inline int attention_row_blocks(int T) {
  const int r = attention_row_block(T);
  return (T + r - 1) / r;
}

}  // namespace tg
