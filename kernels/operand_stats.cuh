// operand_stats.cuh: the probes' statistics of one GEMM operand reduced on the device (the
// device twin of src/backends/cpu/host_operand_view.cpp over src/backends/cpu/quant_error.cpp), so
// that only the few numbers cross to the host.
//
// Maxima are order-free: every max here folds |x| with `a > m ? a : m` from 0, which skips
// NaN as the host's std::max(m, |x|) does, and combines partial maxima (non-negative, finite or
// inf) through atomicMax on their bits, which order as the values do. Counts are integers
// (atomicAdd of 64-bit words). The two sums of squares run in fp64 per thread, then per block
// in a fixed tree, then over the blocks in a fixed order: deterministic, and equal to the
// host's in-order fp64 sums up to the order of summation.
//
// The error of one recipe (cpu::quant_error) takes, in stream order on the operand r (the
// reference: staged, smoothed, split, transposed, rotated as the caller prepared it) and its
// quantize-dequantized copy q (kernels/quantize_blocks.cuh, factor post):
//   group_amax_kernel    one warp per (row, column group): max |r| (NaN skipped), the tensor
//                        max of those, and whether any value is non-finite
//   group_flags_kernel   one thread per scale group: its amax, its scale pair by the shared
//                        group_scale, and the saturated / underflowing group counts (the
//                        host's group_stats)
//   error_sums_kernel    grid-stride over the elements: per-block sums of r^2 and
//                        (r - q post)^2 and the counts of nonzero, underflowing, zero and
//                        (finite tensors only, as quantize.cpp counts) saturated values
//   sum_blocks_kernel    one block: the per-block sums added in a fixed order
#pragma once
#include <cstdint>

#include "common.cuh"
#include "quantize_blocks.cuh"

namespace tg::gpu::stats {

constexpr int kThreads = 256;  // every kernel here runs 256-thread blocks

// The counters one error measurement accumulates (zeroed before it).
enum Count {
  kNonzero,
  kUnderflow,
  kZeros,
  kSaturated,
  kGroupsSaturated,
  kGroupsUnderflow,
  kCounts
};

constexpr float kUe4m3MinNormal = elem_format_info(ElemFormat::UE4M3).min_normal;

__device__ __forceinline__ float max_skip_nan(float m, float a) { return a > m ? a : m; }

// Sum over the block of one value per thread (blockDim.x == kThreads), in a fixed tree;
// thread 0 gets the total. `shared` holds kThreads values.
template <typename V>
__device__ __forceinline__ V block_sum(V x, V* shared) {
  shared[threadIdx.x] = x;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (int(threadIdx.x) < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  return shared[0];
}

// Max over the block of non-negative non-NaN floats, for thread 0.
__device__ __forceinline__ float block_max(float x, float* shared) {
  shared[threadIdx.x] = x;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (int(threadIdx.x) < s)
      shared[threadIdx.x] = max_skip_nan(shared[threadIdx.x], shared[threadIdx.x + s]);
    __syncthreads();
  }
  return shared[0];
}

// *bits = max(*bits, the bits of max |x| over n values), NaN skipped (*bits starts at 0).
template <typename T>
__global__ void amax_kernel(const T* x, size_t n, unsigned* bits) {
  __shared__ float sh[kThreads];
  float m = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    m = max_skip_nan(m, fabsf(ld(x[i])));
  m = block_max(m, sh);
  if (threadIdx.x == 0) atomicMax(bits, f32_bits(m));
}

// bits[c] = max(bits[c], bits of max |x(r, c)| over this block's rows), NaN skipped: a thread
// per column (blockIdx.x * kThreads + threadIdx.x), blockIdx.y a slice of rows_per_block rows.
template <typename T>
__global__ void column_amax_kernel(const T* x, int rows, int cols, int rows_per_block,
                                   unsigned* bits) {
  const int c = int(blockIdx.x) * kThreads + int(threadIdx.x);
  if (c >= cols) return;
  const int r0 = int(blockIdx.y) * rows_per_block;
  const int r1 = r0 + rows_per_block < rows ? r0 + rows_per_block : rows;
  float m = 0;
  for (int r = r0; r < r1; r++) m = max_skip_nan(m, fabsf(ld(x[size_t(r) * cols + c])));
  atomicMax(&bits[c], f32_bits(m));
}

// Columns ch[0..k) of x(rows, cols) set to zero (split channels). One thread per (row, j).
static __global__ void zero_columns_kernel(float* x, int rows, int cols, const int* ch, int k) {
  const size_t n = size_t(rows) * k;
  for (size_t t = blockIdx.x * size_t(blockDim.x) + threadIdx.x; t < n;
       t += size_t(gridDim.x) * blockDim.x)
    x[size_t(t / k) * cols + ch[t % k]] = 0.0f;
}

// row_amax[r * ngc + j] = max |x| over row r's column group j (NaN skipped); words[0] = max of
// their bits, words[1] = 1 when any value is non-finite (both start at 0). One warp per (row,
// group); blockDim kThreads.
static __global__ void group_amax_kernel(const float* x, int rows, int cols, int gc, int ngc,
                                         float* row_amax, unsigned* words) {
  const int lane = threadIdx.x % 32;
  const size_t warps = size_t(gridDim.x) * (blockDim.x / 32);
  const size_t total = size_t(rows) * ngc;
  for (size_t w = blockIdx.x * size_t(blockDim.x / 32) + threadIdx.x / 32; w < total; w += warps) {
    const int r = int(w / ngc), j = int(w % ngc);
    const int c1 = (j + 1) * gc < cols ? (j + 1) * gc : cols;
    const float* xr = x + size_t(r) * cols;
    float m = 0;
    unsigned bad = 0;
    for (int c = j * gc + lane; c < c1; c += 32) {
      const float a = fabsf(xr[c]);
      m = max_skip_nan(m, a);
      bad |= !(a <= tg::kMaxFloat);
    }
    // m is never NaN and never negative: its bits order as its value.
    const unsigned mb = __reduce_max_sync(0xffffffffu, f32_bits(m));
    bad = __reduce_max_sync(0xffffffffu, bad);
    if (lane == 0) {
      row_amax[w] = bits_f32(mb);
      atomicMax(&words[0], mb);
      if (bad) atomicMax(&words[1], 1u);
    }
  }
}

// One thread per scale group: its amax (max over its rows' row_amax), its scale by the shared
// group_scale at the tensor scale of the tensor amax (NVFP4's second level), stored in
// scales[g] for the saturation count, and the saturated / underflowing group counts of
// src/backends/cpu/quant_error.cpp's group_stats.
static __global__ void group_flags_kernel(const float* row_amax, int rows, quant::QuantParams p,
                                          const unsigned* words, quant::Scale2* scales,
                                          unsigned long long* counts) {
  const float fmax = elem_format_max(p.elem);
  const float tensor_scale =
      p.scale == ScaleFormat::E4M3
          ? fp8_scale_from_amax(bits_f32(words[0]), elem_format_max(ElemFormat::UE4M3) * fmax, 0)
          : 1.0f;
  // Beyond the largest by more than an fp32 scale's own rounding (as quantize.cpp counts).
  const float clip = fmax * (1.0f + 1.0f / 1024);
  const size_t total = size_t(p.ngr) * p.ngc;
  for (size_t t = blockIdx.x * size_t(blockDim.x) + threadIdx.x; t < total;
       t += size_t(gridDim.x) * blockDim.x) {
    const int gi = int(t / p.ngc), j = int(t % p.ngc);
    const int r1 = (gi + 1) * p.gr < rows ? (gi + 1) * p.gr : rows;
    float a = 0;
    for (int r = gi * p.gr; r < r1; r++) a = max_skip_nan(a, row_amax[size_t(r) * p.ngc + j]);
    const quant::Scale2 g = quant::group_scale(p, a, tensor_scale);
    scales[t] = g;
    bool under = false;
    if (a > 0) switch (p.scale) {
        case ScaleFormat::FP32:
        case ScaleFormat::Pow2: under = g.enc >= tg::kMaxFloat / 2; break;
        case ScaleFormat::E8M0: under = g.dec <= e8m0_to_f32(0); break;
        case ScaleFormat::E4M3: under = g.dec < kUe4m3MinNormal; break;
      }
    if (a * g.enc > clip) atomicAdd(&counts[kGroupsSaturated], 1ull);
    if (under) atomicAdd(&counts[kGroupsUnderflow], 1ull);
  }
}

// Per block b: sums[2b] = sum r^2, sums[2b + 1] = sum (r - q post)^2 over its elements (fp64),
// and the element counts into counts. scales: group_flags_kernel's, for the saturation count
// (|r enc| beyond the element format's largest), which a non-finite tensor skips (words[1]).
static __global__ void error_sums_kernel(const float* ref, const float* q, const float* post,
                                         int rows, int cols, quant::QuantParams p,
                                         const quant::Scale2* scales, const unsigned* words,
                                         double* sums, unsigned long long* counts) {
  __shared__ double shd[kThreads];
  __shared__ unsigned long long shc[kThreads];
  const double f = double(*post);
  const bool finite = words[1] == 0;
  const float clip = elem_format_max(p.elem) * (1.0f + 1.0f / 1024);
  const size_t n = size_t(rows) * cols;
  double sig = 0, noise = 0;
  unsigned long long c[4] = {0, 0, 0, 0};
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float rf = ref[i], qf = q[i];
    const double r = rf, d = r - double(qf) * f;
    sig += r * r;
    noise += d * d;
    c[kNonzero] += rf != 0;
    c[kUnderflow] += rf != 0 && qf == 0;
    c[kZeros] += qf == 0;
    if (finite) {
      const int row = int(i / cols), col = int(i % cols);
      const float enc = scales[size_t(row / p.gr) * p.ngc + col / p.gc].enc;
      c[kSaturated] += fabsf(rf * enc) > clip;
    }
  }
  sig = block_sum(sig, shd);
  if (threadIdx.x == 0) sums[2 * blockIdx.x] = sig;
  __syncthreads();
  noise = block_sum(noise, shd);
  if (threadIdx.x == 0) sums[2 * blockIdx.x + 1] = noise;
  for (int k = 0; k < 4; k++) {
    __syncthreads();
    const unsigned long long t = block_sum(c[k], shc);
    if (threadIdx.x == 0 && t) atomicAdd(&counts[k], t);
  }
}

// out[k] = sum over blocks b of sums[2b + k], k = 0, 1: each thread a fixed stride of blocks,
// then the block tree. One block.
static __global__ void sum_blocks_kernel(const double* sums, int blocks, double* out) {
  __shared__ double sh[kThreads];
  for (int k = 0; k < 2; k++) {
    double s = 0;
    for (int b = int(threadIdx.x); b < blocks; b += kThreads) s += sums[2 * b + k];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) out[k] = s;
    __syncthreads();
  }
}

}  // namespace tg::gpu::stats
