// fp8_kernels.cuh: the device code of the FP8 kernels (types, device helpers, __global__
// kernels): amax, scales, casts (+ transposed copies), quantize-dequantize, poisoning, and the
// FP8 linears' bias rows, bias gradient and fallback alphas. The launchers are in
// src/backends/cuda/fp8_cast.cu and src/backends/cuda/matmul_fp8.cu (declared, with the semantics,
// in src/backends/cuda/fp8.h); the emulated tests run these kernels on the CPU.
//
// Needs the CUDA keywords and intrinsics it uses (__global__, __device__, __shared__,
// threadIdx, __syncthreads, __reduce_max_sync, atomicMax, __float_as_uint, uint2/uint4, max):
// nvcc provides them; the emulation defines them before including this file.
#pragma once
#include <cstdint>

#include "common.cuh"
#include "src/numerics/formats.h"

namespace tg::gpu {

enum class Fp8Format { E4M3, E5M2 };

TG_HD constexpr float fp8_format_max(Fp8Format f) {
  return f == Fp8Format::E4M3 ? E4M3_MAX : E5M2_MAX;
}
// The device-side scaling state of one quantized tensor (16 bytes, 16-byte aligned). The
// descale comes first so that the pointer cuBLASLt is given (A/B_SCALE_POINTER) is 16-byte
// aligned: on the H200 every per-tensor FP8 GEMM was refused while the same GEMMs with
// aligned scale pointers were offered algorithms (docs/gpu-results.md); whether the
// alignment was the cause is what scripts/cublaslt_probe.cu's launches will show.
struct alignas(16) Fp8TensorScale {
  float descale;  // 1 / s, what cuBLASLt multiplies the product by
  float scale;    // s: q = sat(x * s)
  float amax;     // max |x| of the tensor quantized last (+inf when non-finite)
  float reserved;
};

// The canonical NaN code of both formats (formats.h encodes every NaN to it).
inline constexpr uint8_t kFp8NaN = 0x7f;

// The device state of one FP8 linear (one per layer and linear; 80 bytes). Operand order is
// QuantState's: INP, WEIGHT, GRAD.
struct alignas(16) Fp8LinearDevice {
  Fp8TensorScale t[3];
  float alpha[4];  // fallback: [0] forward dI*dW, [1] dgrad dG*dW, [2] wgrad dG*dI
  float zero, one, reserved[2];
};
static_assert(sizeof(Fp8LinearDevice) == 80, "Fp8LinearDevice layout");
enum Fp8Operand { kFp8Inp = 0, kFp8Weight = 1, kFp8Grad = 2 };

namespace fp8_detail {

inline constexpr int kThreads = 256;  // block size of the element-wise kernels

template <Fp8Format F>
__device__ __forceinline__ uint8_t encode(float v) {
  if constexpr (F == Fp8Format::E4M3)
    return f32_to_e4m3(v, true);
  else
    return f32_to_e5m2(v, true);
}
template <Fp8Format F>
__device__ __forceinline__ float decode(uint8_t q) {
  if constexpr (F == Fp8Format::E4M3)
    return e4m3_to_f32(q);
  else
    return e5m2_to_f32(q);
}

// |x| as bits, NaN and inf both clamped to the bits of +inf: as unsigned integers these order
// like the magnitudes, so an integer max (and atomicMax) is the float amax.
__device__ __forceinline__ unsigned abs_bits_bf16(uint16_t h) {
  unsigned a = h & 0x7fffu;
  return (a < 0x7f80u ? a : 0x7f80u) << 16;
}
__device__ __forceinline__ unsigned abs_bits_f32(float x) {
  unsigned a = __float_as_uint(x) & 0x7fffffffu;
  return a < 0x7f800000u ? a : 0x7f800000u;
}

__device__ __forceinline__ bool finite_amax(const float* amax) {
  return (__float_as_uint(*amax) & 0x7fffffffu) < 0x7f800000u;
}

// Block-wide max of `v`, then one atomicMax into *out (as bits). blockDim.x multiple of 32,
// at most 1024.
__device__ __forceinline__ void block_atomic_max(unsigned v, unsigned* out) {
  __shared__ unsigned warp_max[32];
  v = __reduce_max_sync(0xffffffffu, v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_max[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int nwarps = (blockDim.x + 31) >> 5;
    unsigned m = lane < nwarps ? warp_max[lane] : 0u;
    m = __reduce_max_sync(0xffffffffu, m);
    if (lane == 0 && m != 0u) atomicMax(out, m);
  }
}

// ---- kernels ----

__device__ __forceinline__ unsigned abs_bits(bf16 h) { return abs_bits_bf16(h.bits); }
__device__ __forceinline__ unsigned abs_bits(float x) { return abs_bits_f32(x); }

// amax of x[0, n), X = bf16 or float. vec: x is 16-byte aligned (16 bytes
// per load).
template <typename X>
static __global__ void amax_kernel(const X* __restrict__ x, size_t n, bool vec,
                                   unsigned* __restrict__ amax_bits) {
  constexpr size_t kPack = 16 / sizeof(X);
  unsigned m = 0;
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t done = 0;
  if (vec) {
    const size_t nv = n / kPack;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    for (size_t i = tid; i < nv; i += stride) {
      const uint4 v = xv[i];
      const X* e = reinterpret_cast<const X*>(&v);
#pragma unroll
      for (size_t k = 0; k < kPack; k++) m = max(m, abs_bits(e[k]));
    }
    done = nv * kPack;
  }
  for (size_t i = done + tid; i < n; i += stride) m = max(m, abs_bits(x[i]));
  block_atomic_max(m, amax_bits);
}

// s = fp8_scale_from_amax(*amax, fmax, margin), descale = 1 / s. One thread.
static __global__ void compute_scale_kernel(const float* __restrict__ amax, float fmax, int margin,
                                            float* __restrict__ scale,
                                            float* __restrict__ descale) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    const float s = fp8_scale_from_amax(*amax, fmax, margin);
    *scale = s;
    *descale = 1.0f / s;
  }
}

// scale = s, descale = 1 / s (delayed recipe: s from the host). One thread.
static __global__ void set_scale_kernel(float s, float* __restrict__ scale,
                                        float* __restrict__ descale) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    *scale = s;
    *descale = 1.0f / s;
  }
}

// q[i] = encode(x[i] * s) for bf16 x[0, n); optional amax of x; optional poisoning.
// vec: x 16-byte aligned and q 8-byte aligned.
template <Fp8Format F>
static __global__ void cast_bf16_kernel(const bf16* __restrict__ x, uint8_t* __restrict__ q,
                                        size_t n, bool vec, const float* __restrict__ scale,
                                        unsigned* __restrict__ amax_bits,
                                        const float* __restrict__ poison_amax) {
  const float s = *scale;
  const bool poison = poison_amax != nullptr && !finite_amax(poison_amax);
  unsigned m = 0;
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t done = 0;
  if (vec) {
    const size_t nv = n / 8;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    uint2* qv = reinterpret_cast<uint2*>(q);
    for (size_t i = tid; i < nv; i += stride) {
      const uint4 v = xv[i];
      const unsigned w[4] = {v.x, v.y, v.z, v.w};
      unsigned out[2] = {0u, 0u};
#pragma unroll
      for (int k = 0; k < 8; k++) {
        const uint16_t h = uint16_t(k & 1 ? w[k >> 1] >> 16 : w[k >> 1] & 0xffffu);
        m = max(m, abs_bits_bf16(h));
        const uint8_t c = poison ? kFp8NaN : encode<F>(bf16_to_f32(h) * s);
        out[k >> 2] |= unsigned(c) << (8 * (k & 3));
      }
      qv[i] = make_uint2(out[0], out[1]);
    }
    done = nv * 8;
  }
  for (size_t i = done + tid; i < n; i += stride) {
    const uint16_t h = x[i].bits;
    m = max(m, abs_bits_bf16(h));
    q[i] = poison ? kFp8NaN : encode<F>(bf16_to_f32(h) * s);
  }
  if (amax_bits) block_atomic_max(m, amax_bits);
}

// Tile of the transposed cast: 64 x 64 elements per block of 256 threads.
inline constexpr int kTile = 64;

// x (rows, cols) bf16 row-major -> q (rows, cols) [optional] and qT (cols, rows), FP8
// row-major. Both sides coalesced: each thread reads 8 consecutive bf16 of a row (16 bytes)
// and writes their 8 codes to q; the tile goes through shared memory and each thread then
// writes 16 consecutive codes of a row of qT. vec_in: cols % 8 == 0 and x 16-byte aligned,
// q 8-byte aligned; vec_out: rows % 16 == 0 and qT 16-byte aligned. Partial tiles take the
// element-wise path.
template <Fp8Format F>
static __global__ void __launch_bounds__(256)
    cast_transpose_bf16_kernel(const bf16* __restrict__ x, uint8_t* __restrict__ q,
                               uint8_t* __restrict__ qT, int rows, int cols, bool vec_in,
                               bool vec_out, const float* __restrict__ scale,
                               unsigned* __restrict__ amax_bits,
                               const float* __restrict__ poison_amax) {
  __shared__ uint8_t tile[kTile][kTile + 4];
  const float s = *scale;
  const bool poison = poison_amax != nullptr && !finite_amax(poison_amax);
  const int r0 = blockIdx.y * kTile, c0 = blockIdx.x * kTile;
  const int t = threadIdx.x;
  unsigned m = 0;
  // Load: 8 threads per tile row (8 elements each), 32 rows per pass, 2 passes.
  const int lc = (t & 7) * 8;
#pragma unroll
  for (int pass = 0; pass < 2; pass++) {
    const int lr = pass * 32 + (t >> 3);
    const int r = r0 + lr, c = c0 + lc;
    uint8_t codes[8];
    if (r < rows && vec_in && c + 8 <= cols) {
      const uint4 v = *reinterpret_cast<const uint4*>(x + size_t(r) * cols + c);
      const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int k = 0; k < 8; k++) {
        const uint16_t h = uint16_t(k & 1 ? w[k >> 1] >> 16 : w[k >> 1] & 0xffffu);
        m = max(m, abs_bits_bf16(h));
        codes[k] = poison ? kFp8NaN : encode<F>(bf16_to_f32(h) * s);
      }
      if (q) {
        unsigned lo = 0, hi = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
          lo |= unsigned(codes[k]) << (8 * k);
          hi |= unsigned(codes[k + 4]) << (8 * k);
        }
        *reinterpret_cast<uint2*>(q + size_t(r) * cols + c) = make_uint2(lo, hi);
      }
    } else {
#pragma unroll
      for (int k = 0; k < 8; k++) {
        codes[k] = 0;
        if (r < rows && c + k < cols) {
          const uint16_t h = x[size_t(r) * cols + c + k].bits;
          m = max(m, abs_bits_bf16(h));
          codes[k] = poison ? kFp8NaN : encode<F>(bf16_to_f32(h) * s);
          if (q) q[size_t(r) * cols + c + k] = codes[k];
        }
      }
    }
#pragma unroll
    for (int k = 0; k < 8; k++) tile[lr][lc + k] = codes[k];
  }
  __syncthreads();
  // Store: qT row j = tile column; 4 threads per row, 16 codes each, 64 rows in one pass.
  const int j = t >> 2, li = (t & 3) * 16;
  const int orow = c0 + j, ocol = r0 + li;
  if (orow < cols) {
    if (vec_out && ocol + 16 <= rows) {
      unsigned w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
      for (int k = 0; k < 16; k++) w[k >> 2] |= unsigned(tile[li + k][j]) << (8 * (k & 3));
      *reinterpret_cast<uint4*>(qT + size_t(orow) * rows + ocol) =
          make_uint4(w[0], w[1], w[2], w[3]);
    } else {
      for (int k = 0; k < 16; k++)
        if (ocol + k < rows) qT[size_t(orow) * rows + ocol + k] = tile[li + k][j];
    }
  }
  if (amax_bits) block_atomic_max(m, amax_bits);
}

// y[i] = bf16(decode(encode(x[i] * s)) * d), d = *descale, or d = 1 when descale is null (the
// fp8 value itself, exact in bf16). Optional amax of x, optional poisoning (y = NaN).
// vec: x and y 16-byte aligned.
template <Fp8Format F>
static __global__ void qdq_bf16_kernel(const bf16* __restrict__ x, bf16* __restrict__ y, size_t n,
                                       bool vec, const float* __restrict__ scale,
                                       const float* __restrict__ descale,
                                       unsigned* __restrict__ amax_bits,
                                       const float* __restrict__ poison_amax) {
  const float s = *scale;
  const bool value_only = descale == nullptr;
  const float d = value_only ? 1.0f : *descale;
  const bool poison = poison_amax != nullptr && !finite_amax(poison_amax);
  unsigned m = 0;
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  auto one = [&](uint16_t h) -> uint16_t {
    m = max(m, abs_bits_bf16(h));
    if (poison) return 0x7fffu;
    const float v = decode<F>(encode<F>(bf16_to_f32(h) * s));
    return f32_to_bf16(value_only ? v : v * d);
  };
  size_t done = 0;
  if (vec) {
    const size_t nv = n / 8;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    uint4* yv = reinterpret_cast<uint4*>(y);
    for (size_t i = tid; i < nv; i += stride) {
      const uint4 v = xv[i];
      const unsigned w[4] = {v.x, v.y, v.z, v.w};
      unsigned o[4];
#pragma unroll
      for (int k = 0; k < 4; k++)
        o[k] =
            unsigned(one(uint16_t(w[k] & 0xffffu))) | (unsigned(one(uint16_t(w[k] >> 16))) << 16);
      yv[i] = make_uint4(o[0], o[1], o[2], o[3]);
    }
    done = nv * 8;
  }
  for (size_t i = done + tid; i < n; i += stride) y[i] = bf16{one(x[i].bits)};
  if (amax_bits) block_atomic_max(m, amax_bits);
}

// Every element of bf16 out[0, n) becomes NaN (0x7FFF) when *a or *b (either may be null) is
// non-finite; otherwise nothing is written (every thread returns after one load).
static __global__ void poison_bf16_kernel(bf16* __restrict__ out, size_t n,
                                          const float* __restrict__ a,
                                          const float* __restrict__ b) {
  const bool bad = (a != nullptr && !finite_amax(a)) || (b != nullptr && !finite_amax(b));
  if (!bad) return;
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = tid; i < n; i += stride) out[i] = bf16{0x7fffu};
}

// out(N, OC) rows = bias (before a GEMM with beta = 1 when no bias epilogue is available:
// the bias then enters the fp32 sum and the output is rounded once, as on the CPU).
static __global__ void fill_bias_rows_kernel(bf16* __restrict__ out, const bf16* __restrict__ bias,
                                             int N, int OC) {
  const size_t n = size_t(N) * OC;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    out[i] = bias[i % OC];
}

// dbias(OC) += sum over rows of dout(N, OC), fp32 sums, deterministic (fixed order): block
// (32 columns) x (8 row groups); row group y sums rows y, y+8, ...; then the 8 partial sums in
// order.
static __global__ void bias_backward_kernel(bf16* __restrict__ dbias, const bf16* __restrict__ dout,
                                            int N, int OC) {
  __shared__ float part[8][33];
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const int o = blockIdx.x * 32 + tx;
  float s = 0.f;
  if (o < OC)
    for (int r = ty; r < N; r += 8) s += bf16_to_f32(dout[size_t(r) * OC + o].bits);
  part[ty][tx] = s;
  __syncthreads();
  if (ty == 0 && o < OC) {
    float t = 0.f;
    for (int y = 0; y < 8; y++) t += part[y][tx];
    dbias[o] = bf16{f32_to_bf16(bf16_to_f32(dbias[o].bits) + t)};
  }
}

static __global__ void fallback_alpha_kernel(Fp8LinearDevice* d, int which) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const float di = d->t[kFp8Inp].descale, dw = d->t[kFp8Weight].descale,
              dg = d->t[kFp8Grad].descale;
  if (which == 0) d->alpha[0] = di * dw;
  if (which == 1) {
    d->alpha[1] = dg * dw;
    d->alpha[2] = dg * di;
  }
}

}  // namespace fp8_detail

}  // namespace tg::gpu
