// transpose: dst(cols, rows) = src(rows, cols)^T, from fp32 or (widening) from bf16.
//
// A column walk over the whole source would touch a new cache line per element, so the copy
// goes tile by tile: 8 x 8 tiles are transposed inside eight AVX registers (unpack pairs,
// shuffle quads, swap 128-bit halves: the usual three steps), with edge rows and columns
// copied one by one; without AVX the tiles are 32 x 32 scalar copies. A bf16 source is
// widened on the way (its bits shifted up 16, exact), so the backward's bf16 operands take
// one pass instead of a widening copy and a transpose of that copy.
#include "transpose.h"

#include <cstddef>

#include "cpu_features.h"
#include "ops.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define TG_TRANSPOSE_AVX 1
#endif

namespace tg::cpu {

namespace {

template <typename T>
void copy_tile(float* dst, const T* src, int rows, int cols, int r0, int r1, int c0, int c1) {
  for (int c = c0; c < c1; c++)
    for (int r = r0; r < r1; r++) dst[size_t(c) * rows + r] = ld(src[size_t(r) * cols + c]);
}

template <typename T>
void transpose_scalar(float* dst, const T* src, int rows, int cols) {
  constexpr int kTile = 32;
#pragma omp parallel for schedule(static) if (size_t(rows) * cols >= kParallelMin)
  for (int c0 = 0; c0 < cols; c0 += kTile) {
    const int c1 = c0 + kTile < cols ? c0 + kTile : cols;
    for (int r0 = 0; r0 < rows; r0 += kTile)
      copy_tile(dst, src, rows, cols, r0, r0 + kTile < rows ? r0 + kTile : rows, c0, c1);
  }
}

#ifdef TG_TRANSPOSE_AVX
#define TG_TARGET_AVX2 __attribute__((target("avx,avx2")))

// 8 consecutive values of src as fp32.
TG_TARGET_AVX2 inline __m256 load8(const float* src) { return _mm256_loadu_ps(src); }
TG_TARGET_AVX2 inline __m256 load8(const bf16* src) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// The 8 x 8 tile at (r0, c0) of src into dst.
template <typename T>
TG_TARGET_AVX2 inline void tile8(float* dst, const T* src, int rows, int cols, int r0, int c0) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; i++) r[i] = load8(src + size_t(r0 + i) * cols + c0);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; i++) {
    t[i] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20);
    t[i + 4] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31);
  }
  for (int i = 0; i < 8; i++) _mm256_storeu_ps(dst + size_t(c0 + i) * rows + r0, t[i]);
}

template <typename T>
TG_TARGET_AVX2 void transpose_avx(float* dst, const T* src, int rows, int cols) {
  const int r8 = rows / 8 * 8, c8 = cols / 8 * 8;
  // Columns per task: 8 destination rows in flight, each line filled by two tiles in a row.
  // Rows 4 KiB apart (1024 source rows) share an L1 set of 8 ways, so 32 rows in flight
  // evicted each line between its two halves (twice the time).
  constexpr int kBand = 8;
#pragma omp parallel for schedule(static) if (size_t(rows) * cols >= kParallelMin)
  for (int b = 0; b < (cols + kBand - 1) / kBand; b++) {
    const int c0 = b * kBand, c1 = c0 + kBand < cols ? c0 + kBand : cols;
    const int c1_8 = c1 < c8 ? c1 : c8;
    for (int r0 = 0; r0 < r8; r0 += 8)
      for (int c = c0; c < c1_8; c += 8) tile8(dst, src, rows, cols, r0, c);
    if (c1_8 < c1) copy_tile(dst, src, rows, cols, 0, r8, c1_8, c1);  // edge columns
    copy_tile(dst, src, rows, cols, r8, rows, c0, c1);                // edge rows
  }
}
#endif

}  // namespace

namespace {
template <typename T>
void transpose_any(float* dst, const T* src, int rows, int cols) {
#ifdef TG_TRANSPOSE_AVX
  if (cpu_features().avx512f) return transpose_avx(dst, src, rows, cols);
#endif
  transpose_scalar(dst, src, rows, cols);
}
}  // namespace

void transpose(float* dst, const float* src, int rows, int cols) {
  transpose_any(dst, src, rows, cols);
}
void transpose(float* dst, const bf16* src, int rows, int cols) {
  transpose_any(dst, src, rows, cols);
}

void transpose_reference(float* dst, const float* src, int rows, int cols) {
  for (int c = 0; c < cols; c++)
    for (int r = 0; r < rows; r++) dst[size_t(c) * rows + r] = src[size_t(r) * cols + c];
}

}  // namespace tg::cpu
