// gemm_bf16: C(M,N) = op(A)(M,K) op(B)(K,N) + beta C with bf16 operands (16-bit codes) and
// fp32 accumulation and output, on the CPU's bf16 dot-product instruction (AVX512-BF16's
// vdpbf16ps), single-threaded like gemm() (callers split the rows across OpenMP threads).
// With cpu.narrow_gemm=amx_bf16 (auto's choice where the CPU has AMX-BF16) it runs on AMX
// tiles instead and sums in their order (gemm_amx.h); what follows is the AVX512-BF16 path.
//
// What it computes, measured on AMD Zen 4 and as Intel's manual defines vdpbf16ps: each
// product of two bf16 values is exact in fp32; the K values are taken in pairs (2p, 2p+1)
// from k = 0 up, and every output is accumulated as
//     c = beta C;  for each pair p:  c = (c + a[2p+1] b[2p+1]) + a[2p] b[2p]
// with each addition rounded to nearest even (an odd K pads its last pair with zeros). This
// order does not depend on the blocking or on how rows are split across threads, so results
// are bit-identical run to run and for any thread count. Unlike sgemm on widened values,
// subnormals are not kept: subnormal operands (bf16 codes and C) count as zero and a sum
// below 2^-126 is flushed to zero (a product that small is still exact inside the sum); the
// instruction ignores MXCSR. tests/backends/test_gemm_bf16.cpp checks all of this.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "cpu_features.h"
#include "src/base/path_choices.h"
#include "src/numerics/elem_format.h"

namespace tg::cpu {

// An operand quantized as it is packed (the fp8 mode's per-tensor FP8): each of its values x
// enters the products as the bf16 code of round_F(x scale), F = format (E4M3 or E5M2), the
// code quantize_tensor_fp8 writes (ops.h), and amax_bits collects the largest |x| packed, as
// fp32 bits (>= 0x7f800000: a value was not finite, and the products are then meaningless).
// The packed panels are quantized in place while they are in cache: the operand is read once,
// as an unquantized one is, instead of once more by a quantizing pass (which, bound by
// memory, cost as much as the rest of the fp8 mode's overhead on the CPU).
struct PackQuant {
  float scale = 1.0f;
  ElemFormat format = ElemFormat::E4M3;
  uint32_t amax_bits = 0;
};
// The packed words' 16-bit halves as q says (nothing when q is null).
void quantize_packed(uint32_t* words, size_t n, PackQuant* q);

// beta: 0 overwrites C, 1 adds to it (other values scale C first). qa, qb (when given): A or B
// quantized as it is packed.
void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, const uint16_t* A, int lda,
               const uint16_t* B, int ldb, float beta, float* C, int ldc, PackQuant* qa = nullptr,
               PackQuant* qb = nullptr);

// The deepest K chunk gemm_bf16_chunks takes (the kernel's K slice).
constexpr int kGemmBf16MaxChunk = 256;

// C(M,N) = sum over the K chunks [k0, k0 + chunk) of P_c (sa sb), where P_c = A_c B_c^T is the
// chunk's sum in gemm_bf16's order from zero (its own gemm_bf16 call with beta 0), A(M,K) and
// B(N,K) row-major, and the scales per row and chunk: sa[m * nch + c], sb[n * nch + c] (nch
// chunks, the last one possibly shorter). C = P_0 (sa sb), then C = fma(P_c, sa sb, C) for each
// later chunk: what a block-scaled GEMM with fp32 scales per 128 along K (DeepSeek-V3's
// promotion) computes. chunk in [1, kGemmBf16MaxChunk]; beta is 0.
void gemm_bf16_chunks(int M, int N, int K, int chunk, const uint16_t* A, int lda, const uint16_t* B,
                      int ldb, const float* sa, const float* sb, float* C, int ldc);

// How the narrow modes' matmuls multiply (cpu.narrow_gemm): widened to fp32 and through
// gemm() (Exact, the reference), or as bf16 products on the CPU's instructions: this file's
// function on AVX512-BF16 (Avx512Bf16), or AMX tiles in their own order of the additions
// (AmxBf16: another function, gemm_amx.h), where gemm_bf16 and gemm_bf16_chunks go then.
enum class NarrowGemm { Exact, Avx512Bf16, AmxBf16 };
// The path for a cpu.narrow_gemm value on a CPU with features f; auto is the fastest the CPU
// has: AmxBf16, else Avx512Bf16, else Exact. cpu.gemm=loops (rounding independent of the CPU)
// keeps every value on the exact path.
NarrowGemm choose_narrow_gemm(NarrowGemmRequest key, bool gemm_loops, const CpuFeatures& f);
// Process-wide, like set_gemm_loops; make_backend sets it from the config. A path the CPU
// (or the OS: the tile state) lacks falls back to the next: AmxBf16 to Avx512Bf16 to Exact.
void set_narrow_gemm(NarrowGemm g);
NarrowGemm narrow_gemm();
inline bool narrow_gemm_hardware() { return narrow_gemm() != NarrowGemm::Exact; }
// "exact (fp32 sgemm of widened values)", "avx512_bf16" or "amx_bf16", for logs and the
// benchmark.
const char* narrow_gemm_name(NarrowGemm g);

}  // namespace tg::cpu
