// gemm_amx: bf16 GEMMs on AMX-BF16 tiles (Intel Sapphire Rapids and later), in the tiles' own
// order of the fp32 additions: another function than gemm_bf16.h's.
//
// What TDPBF16PS computes, measured on an Intel Xeon (Sapphire Rapids class, under KVM) bit for
// bit against 440,000 random dot products (K 2 to 32, normal, wide-exponent and subnormal
// ranges; tests/backends/test_gemm_amx.cpp keeps a sample), as Intel's pseudo-code has it: for
// each output, one instruction's K (up to 32 values, 16 pairs) feeds two chains, e over the
// even k and o over the odd k, each a sequence of fp32 fused multiply-adds from +0, then
//     c = c + (e + o)
// every operation rounded to nearest even; subnormal operands (bf16 codes and C) read as zero
// and every result below 2^-126 is flushed to zero, products included (vdpbf16ps keeps a
// subnormal product exact inside its sum).
//
// gemm_bf16_amx takes K in tiles of 32 from k = 0 (zero-padded; gemm_bf16_amx_chunks from
// each chunk's start), each tile's e + o added to C in tile order: the same exact products
// as gemm_bf16.h's, summed in another fixed order that does not depend on the blocking or on
// the thread count. gemm_bf16.h's own order cannot use the tiles' width: each instruction adds
// to C once per output, so reproducing it takes one product per instruction (a masked pair),
// which measured 64-81 GFLOP/s here against vdpbf16ps's 85-99 (docs/benchmarks.md, 2026-12-06).
#pragma once
#include <cstdint>

namespace tg::cpu {

// Whether this process may use the tile registers: the CPU has AMX-TILE and AMX-BF16, the OS
// saves the tile state (XCR0) and Linux granted ARCH_REQ_XCOMP_PERM for it. Asked once,
// thread-safe; the permission is the process's, so OpenMP threads created before or after
// share it (each thread loads its own tile configuration: every kernel call does).
bool amx_tiles_granted();

struct PackQuant;  // gemm_bf16.h

// C(M,N) = (load ? C : 0) + op(A)(M,K) op(B)(K,N) in the tiles' order; M, N, K > 0. qa, qb
// (when given): A or B quantized as it is packed (gemm_bf16.h's PackQuant).
void gemm_bf16_amx(bool trans_a, bool trans_b, int M, int N, int K, const uint16_t* A, int lda,
                   const uint16_t* B, int ldb, bool load, float* C, int ldc,
                   PackQuant* qa = nullptr, PackQuant* qb = nullptr);

// gemm_bf16_chunks (gemm_bf16.h) with each chunk's product in the tiles' order: A(M,K), B(N,K)
// row-major, chunk in [1, kGemmBf16MaxChunk].
void gemm_bf16_amx_chunks(int M, int N, int K, int chunk, const uint16_t* A, int lda,
                          const uint16_t* B, int ldb, const float* sa, const float* sb, float* C,
                          int ldc);

}  // namespace tg::cpu
