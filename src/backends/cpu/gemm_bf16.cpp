// gemm_bf16: the bf16 GEMM on AVX512-BF16 (gemm_bf16.h says what it computes).
//
// GotoBLAS-style blocking: for each NC-column block and KC-deep slice of op(B), the slice
// is packed once into panels of NR columns; for each MC-row block of op(A), its slice is
// packed into panels of MR rows; an MR x NR micro-kernel then runs over the panels, keeping
// the MR x NR fp32 sums in registers. vdpbf16ps multiplies 32-bit lanes holding a pair of
// bf16 values (k even in the low half, k odd in the high half), so both packed layouts store
// pairs along K: B panel [pair][column] (one 64-byte row of NR = 16 lanes per register),
// A panel [pair][row] (each row's pair broadcast to all lanes). Sizes: a B panel of KC/2
// pairs x 32 columns is 32 KiB and an A panel 8 KiB (L1 and L2), the packed B slice
// KC x NC bf16 = 512 KiB stays in L2.
// The micro-kernel is compiled for AVX512-BF16 by a target attribute, so the binary runs on
// CPUs without it; set_narrow_gemm never selects it there.
#include "gemm_bf16.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "gemm_amx.h"
#include "ops.h"
#include "src/base/common.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define TG_BF16_KERNEL 1
#endif

namespace tg::cpu {

namespace {

constexpr int kMR = 8, kNR = 32;  // micro-tile: 8 rows x 2 registers of 16 columns
constexpr int kKC = kGemmBf16MaxChunk, kMC = 96,
              kNC = 1024;  // kKC even: pairs never straddle slices
static_assert(kKC % 2 == 0 && kMC % kMR == 0 && kNC % kNR == 0, "blocking");

// op(X)(r, k) of a row-major X: X(r, k), or X(k, r) when transposed.
inline uint32_t at(const uint16_t* X, int ld, bool trans, int r, int k) {
  return trans ? X[size_t(k) * ld + r] : X[size_t(r) * ld + k];
}

// Packs rows [r0, r0 + rows) x k in [k0, k0 + kc) of op(X) into panels of `width` rows:
// out[panel][pair][row] = op(X)(r, 2p) | op(X)(r, 2p + 1) << 16, zeros beyond the edges.
// B is packed the same way through its transpose (its rows are op(B)'s columns).
void pack_pairs(uint32_t* out, const uint16_t* X, int ld, bool trans, int r0, int rows, int k0,
                int kc, int width) {
  const int pairs = (kc + 1) / 2;
  for (int p0 = 0; p0 < rows; p0 += width) {
    uint32_t* panel = out + size_t(p0) * pairs;
    const int w = std::min(width, rows - p0);
    if (!trans) {
      // Rows of X are contiguous along k: each pair is one 32-bit word.
      for (int i = 0; i < w; i++) {
        const uint16_t* x = X + size_t(r0 + p0 + i) * ld + k0;
        for (int p = 0; p < kc / 2; p++) {
          uint32_t v;
          std::memcpy(&v, x + 2 * p, 4);
          panel[size_t(p) * width + i] = v;
        }
        if (kc % 2) panel[size_t(pairs - 1) * width + i] = x[kc - 1];
      }
    } else {
      // X(k, r): the pair comes from two rows of X, contiguous along r.
      for (int p = 0; p < pairs; p++) {
        const int k = k0 + 2 * p;
        const bool hi = 2 * p + 1 < kc;
        uint32_t* dst = panel + size_t(p) * width;
        for (int i = 0; i < w; i++)
          dst[i] = at(X, ld, true, r0 + p0 + i, k) |
                   (hi ? at(X, ld, true, r0 + p0 + i, k + 1) << 16 : 0u);
      }
    }
    if (w < width)
      for (int p = 0; p < pairs; p++)
        std::fill(panel + size_t(p) * width + w, panel + size_t(p + 1) * width, 0u);
  }
}

#ifdef TG_BF16_KERNEL
#define TG_TARGET_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// c(kMR, kNR) at ldc = (load ? c : 0) + the pairs' products, in pair order. With chunk
// scales (sa: kMR rows, sb: kNR columns) the pairs' sum P starts from zero instead and c
// becomes P (sa sb) (load false) or fma(P, sa sb, c): one K chunk of gemm_bf16_chunks.
TG_TARGET_BF16 void micro_kernel(int pairs, const uint32_t* a, const uint32_t* b, float* c, int ldc,
                                 bool load, const float* sa, const float* sb) {
  __m512 acc[kMR][2];
  const bool start = load && !sa;
#pragma GCC unroll 8
  for (int i = 0; i < kMR; i++) {
    acc[i][0] = start ? _mm512_loadu_ps(c + size_t(i) * ldc) : _mm512_setzero_ps();
    acc[i][1] = start ? _mm512_loadu_ps(c + size_t(i) * ldc + 16) : _mm512_setzero_ps();
  }
  for (int p = 0; p < pairs; p++) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + size_t(p) * kNR);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + size_t(p) * kNR + 16);
    const uint32_t* ap = a + size_t(p) * kMR;
#pragma GCC unroll 8
    for (int i = 0; i < kMR; i++) {
      const __m512bh ai = (__m512bh)_mm512_set1_epi32(int(ap[i]));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
    }
  }
  if (sa) {
    const __m512 s0 = _mm512_loadu_ps(sb), s1 = _mm512_loadu_ps(sb + 16);
#pragma GCC unroll 8
    for (int i = 0; i < kMR; i++) {
      const __m512 ai = _mm512_set1_ps(sa[i]);
      const __m512 f0 = _mm512_mul_ps(ai, s0), f1 = _mm512_mul_ps(ai, s1);
      float* ci = c + size_t(i) * ldc;
      acc[i][0] =
          load ? _mm512_fmadd_ps(acc[i][0], f0, _mm512_loadu_ps(ci)) : _mm512_mul_ps(acc[i][0], f0);
      acc[i][1] = load ? _mm512_fmadd_ps(acc[i][1], f1, _mm512_loadu_ps(ci + 16))
                       : _mm512_mul_ps(acc[i][1], f1);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < kMR; i++) {
    _mm512_storeu_ps(c + size_t(i) * ldc, acc[i][0]);
    _mm512_storeu_ps(c + size_t(i) * ldc + 16, acc[i][1]);
  }
}

// One packed MC x NC block slice: every micro-tile, edges through a full-size scratch tile.
// sa, sb (or null): the block's row and column chunk scales, padded to whole micro-tiles.
void block_kernel(int mc, int nc, int pairs, const uint32_t* pa, const uint32_t* pb, float* C,
                  int ldc, bool load, const float* sa = nullptr, const float* sb = nullptr) {
  float tile[kMR * kNR];
  for (int j = 0; j < nc; j += kNR) {
    const int nr = std::min(kNR, nc - j);
    const uint32_t* b = pb + size_t(j) * pairs;
    const float* sbj = sb ? sb + j : nullptr;
    for (int i = 0; i < mc; i += kMR) {
      const int mr = std::min(kMR, mc - i);
      const uint32_t* a = pa + size_t(i) * pairs;
      const float* sai = sa ? sa + i : nullptr;
      float* c = C + size_t(i) * ldc + j;
      if (mr == kMR && nr == kNR) {
        micro_kernel(pairs, a, b, c, ldc, load, sai, sbj);
        continue;
      }
      std::fill(tile, tile + kMR * kNR, 0.0f);
      if (load)
        for (int r = 0; r < mr; r++)
          std::copy(c + size_t(r) * ldc, c + size_t(r) * ldc + nr, tile + r * kNR);
      micro_kernel(pairs, a, b, tile, kNR, sa ? load : true, sai, sbj);
      for (int r = 0; r < mr; r++)
        std::copy(tile + r * kNR, tile + r * kNR + nr, c + size_t(r) * ldc);
    }
  }
}
#endif

}  // namespace

void quantize_packed(uint32_t* words, size_t n, PackQuant* q) {
  if (!q) return;
  uint16_t* h = reinterpret_cast<uint16_t*>(words);
  q->amax_bits = std::max(q->amax_bits, fp8_codes_serial(h, h, 2 * n, q->scale, q->format));
}

void gemm_bf16(bool ta, bool tb, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B,
               int ldb, float beta, float* C, int ldc, PackQuant* qa, PackQuant* qb) {
  if (M <= 0 || N <= 0) return;
  if (beta != 0.0f && beta != 1.0f)
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) C[size_t(i) * ldc + j] *= beta;
  if (K <= 0) {
    if (beta == 0.0f)
      for (int i = 0; i < M; i++) std::fill(C + size_t(i) * ldc, C + size_t(i) * ldc + N, 0.0f);
    return;
  }
  if (narrow_gemm() == NarrowGemm::AmxBf16)  // the tiles' order: gemm_amx.h
    return gemm_bf16_amx(ta, tb, M, N, K, A, lda, B, ldb, beta != 0.0f, C, ldc, qa, qb);
#ifdef TG_BF16_KERNEL
  // Thread-local packing buffers: callers run one gemm_bf16 per OpenMP thread.
  static thread_local std::vector<uint32_t> pa, pb;
  pa.resize(size_t(kMC) * (kKC / 2));
  pb.resize(size_t(kNC) * (kKC / 2));
  for (int j0 = 0; j0 < N; j0 += kNC) {
    const int nc = std::min(kNC, N - j0);
    for (int k0 = 0; k0 < K; k0 += kKC) {
      const int kc = std::min(kKC, K - k0), pairs = (kc + 1) / 2;
      // op(B)'s columns are the rows of B^T: transposed unless B is stored (N, K).
      pack_pairs(pb.data(), B, ldb, !tb, j0, nc, k0, kc, kNR);
      quantize_packed(pb.data(), size_t(nc + kNR - 1) / kNR * kNR * pairs, qb);
      const bool load = k0 > 0 || beta != 0.0f;
      for (int i0 = 0; i0 < M; i0 += kMC) {
        const int mc = std::min(kMC, M - i0);
        pack_pairs(pa.data(), A, lda, ta, i0, mc, k0, kc, kMR);
        quantize_packed(pa.data(), size_t(mc + kMR - 1) / kMR * kMR * pairs, qa);
        block_kernel(mc, nc, pairs, pa.data(), pb.data(), C + size_t(i0) * ldc + j0, ldc, load);
      }
    }
  }
#else
  (void)ta, (void)tb, (void)A, (void)lda, (void)B, (void)ldb, (void)ldc;
  throw Error("gemm_bf16: this build has no AVX512-BF16 kernel");
#endif
}

// The K loop runs chunk by chunk (one packed slice each, kc <= kKC), so every chunk's sum
// starts from zero, as a separate gemm_bf16 of depth kc would, and the micro-kernel scales it
// into C while it is still in registers: no product buffer, no second pass over C.
void gemm_bf16_chunks(int M, int N, int K, int chunk, const uint16_t* A, int lda, const uint16_t* B,
                      int ldb, const float* sa, const float* sb, float* C, int ldc) {
  if (M <= 0 || N <= 0 || K <= 0) return;
  if (chunk <= 0 || chunk > kGemmBf16MaxChunk)
    throw Error(strf("gemm_bf16_chunks: chunk %d outside 1..%d", chunk, kGemmBf16MaxChunk));
  if (narrow_gemm() == NarrowGemm::AmxBf16)
    return gemm_bf16_amx_chunks(M, N, K, chunk, A, lda, B, ldb, sa, sb, C, ldc);
#ifdef TG_BF16_KERNEL
  const int nch = (K + chunk - 1) / chunk;
  static thread_local std::vector<uint32_t> pa, pb;
  static thread_local std::vector<float> sac, sbc;  // one chunk's scales, zero-padded
  pa.resize(size_t(kMC) * (kKC / 2));
  pb.resize(size_t(kNC) * (kKC / 2));
  sac.assign(kMC, 0.0f);
  sbc.assign(kNC, 0.0f);
  for (int j0 = 0; j0 < N; j0 += kNC) {
    const int nc = std::min(kNC, N - j0);
    for (int ch = 0; ch < nch; ch++) {
      const int k0 = ch * chunk, kc = std::min(chunk, K - k0), pairs = (kc + 1) / 2;
      pack_pairs(pb.data(), B, ldb, false, j0, nc, k0, kc, kNR);
      for (int j = 0; j < nc; j++) sbc[j] = sb[size_t(j0 + j) * nch + ch];
      for (int i0 = 0; i0 < M; i0 += kMC) {
        const int mc = std::min(kMC, M - i0);
        pack_pairs(pa.data(), A, lda, false, i0, mc, k0, kc, kMR);
        for (int i = 0; i < mc; i++) sac[i] = sa[size_t(i0 + i) * nch + ch];
        block_kernel(mc, nc, pairs, pa.data(), pb.data(), C + size_t(i0) * ldc + j0, ldc, ch > 0,
                     sac.data(), sbc.data());
      }
    }
  }
#else
  (void)A, (void)lda, (void)B, (void)ldb, (void)sa, (void)sb, (void)C, (void)ldc;
  throw Error("gemm_bf16_chunks: this build has no AVX512-BF16 kernel");
#endif
}

NarrowGemm choose_narrow_gemm(NarrowGemmRequest key, bool gemm_loops, const CpuFeatures& f) {
  if (key == NarrowGemmRequest::Exact || gemm_loops) return NarrowGemm::Exact;
  if (key == NarrowGemmRequest::Avx512Bf16) return NarrowGemm::Avx512Bf16;
  if (key == NarrowGemmRequest::AmxBf16) return NarrowGemm::AmxBf16;
  // auto: the fastest this CPU has (the OS's permission for the tiles: set_narrow_gemm).
  if (f.amx_tile && f.amx_bf16) return NarrowGemm::AmxBf16;
  return f.avx512_bf16 && f.avx512bw ? NarrowGemm::Avx512Bf16 : NarrowGemm::Exact;
}

namespace {
NarrowGemm g_narrow = NarrowGemm::Exact;
}  // namespace

void set_narrow_gemm(NarrowGemm g) {
  bool bf16 = cpu_features().avx512_bf16 && cpu_features().avx512bw;
#ifndef TG_BF16_KERNEL
  bf16 = false;
#endif
  if (g == NarrowGemm::AmxBf16 && !amx_tiles_granted())
    g = bf16 ? NarrowGemm::Avx512Bf16 : NarrowGemm::Exact;
  if (g == NarrowGemm::Avx512Bf16 && !bf16) g = NarrowGemm::Exact;
  g_narrow = g;
}

NarrowGemm narrow_gemm() { return g_narrow; }

const char* narrow_gemm_name(NarrowGemm g) {
  switch (g) {
    case NarrowGemm::Exact: return "exact (fp32 sgemm of widened values)";
    case NarrowGemm::Avx512Bf16: return "avx512_bf16";
    case NarrowGemm::AmxBf16: return "amx_bf16";
  }
  return "?";
}

}  // namespace tg::cpu
