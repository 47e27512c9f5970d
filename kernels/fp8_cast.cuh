// fp8_cast.cuh: per-tensor FP8 quantization on the GPU (precision.mode = fp8).
//
// What the CPU emulation (src/cpu/cpu_backend.cpp, CpuBackend::qdq) does, split into kernels
// that the FP8 GEMMs (kernels/matmul_fp8.cuh) consume:
//
//   amax      max |x| of a bf16 or fp32 tensor, into a device float. Any NaN or inf in x makes
//             the amax +inf, exactly like qdq (which reports INFINITY for a non-finite tensor):
//             |x| is compared as fp32 bits clamped to the bits of +inf, so NaN counts as inf.
//   scale     `current` recipe: s = fp8_scale_from_amax(amax, fmax, margin) (src/formats.h),
//             computed on the device from the device amax; `delayed`: the host's scale (from
//             the amax history, Fp8State::quant) written to the device by a one-thread kernel.
//             Either way no host synchronization is needed. Next to s the kernel writes the
//             descale 1.0f / s, which is what cuBLASLt's A/B_SCALE_POINTER multiply by.
//   cast      q = sat(x * s) in E4M3 or E5M2, round to nearest even, saturating to the largest
//             finite value (like __nv_cvt_float_to_fp8(..., __NV_SATFINITE, ...)), through the
//             software encoders of src/formats.h, bit for bit the CPU's round trip. x * s is
//             one fp32 multiply, as on the CPU. Optionally also the transposed copy qT
//             (Hopper FP8 GEMMs take only the TN layout), the amax of x (fused: the delayed
//             recipe records it for the next steps), and NaN poisoning: when `poison_amax` is
//             given and non-finite, every code written is the NaN code 0x7F, as qdq turns the
//             whole tensor into NaN so the step is skipped.
//   qdq       bf16 -> fp8 -> bf16, the fallback for GPUs without FP8 tensor cores (cc < 8.9):
//             either the fp8 *value* (decode(q), exact in bf16; the GEMM multiplies by the
//             descales as alpha) or the dequantized value decode(q) * (1/s) rounded to bf16
//             (= bf16 of the CPU's qdq result).
//
// Scale conventions (per quantized tensor, all fp32 in device memory, Fp8TensorScale):
//   scale   s        q = sat(x * s)
//   descale 1 / s    x ~= decode(q) * descale; cuBLASLt's A/B scale pointers point here
//   amax    max |x|  of the unscaled tensor; +inf when x holds a NaN or an inf
//
// Layout of every tensor: row-major, bf16 as raw 16-bit codes (__nv_bfloat16), FP8 as raw
// bytes (uint8_t; E4M3 or E5M2 by the template argument). All launchers take a stream and
// never synchronize. Sizes: n up to 2^63 elements; the transposed cast takes rows, cols < 2^31.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "src/common.h"
#include "src/formats.h"

namespace tg::cuda {

enum class Fp8Format { E4M3, E5M2 };

TG_HD constexpr float fp8_format_max(Fp8Format f) {
  return f == Fp8Format::E4M3 ? E4M3_MAX : E5M2_MAX;
}
inline const char* fp8_format_name(Fp8Format f) { return f == Fp8Format::E4M3 ? "e4m3" : "e5m2"; }

// The device-side scaling state of one quantized tensor (16 bytes, 16-byte aligned).
struct alignas(16) Fp8TensorScale {
  float amax;     // max |x| of the tensor quantized last (+inf when non-finite)
  float scale;    // s: q = sat(x * s)
  float descale;  // 1 / s, what cuBLASLt multiplies the product by
  float reserved;
};

// The canonical NaN code of both formats (formats.h encodes every NaN to it).
inline constexpr uint8_t kFp8NaN = 0x7f;

[[noreturn]] inline void fp8_fail(const std::string& msg) { throw Error(msg); }

inline void fp8_check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    fp8_fail(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}

namespace fp8_detail {

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

inline int sm_count() {
  static int cached[64] = {0};
  int dev = 0;
  fp8_check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
  if (dev < 0 || dev >= 64) dev = 0;
  if (cached[dev] == 0) {
    int n = 0;
    fp8_check_cuda(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev),
                   "cudaDeviceGetAttribute(SM count)");
    cached[dev] = n > 0 ? n : 1;
  }
  return cached[dev];
}

inline constexpr int kThreads = 256;

// Grid for a grid-stride loop over `work` items (16-byte vectors): enough blocks to fill the
// device (4 resident blocks of 256 threads per SM), never more than the work needs.
inline unsigned grid_for(size_t work) {
  const size_t per_block = kThreads;
  size_t want = (work + per_block - 1) / per_block;
  const size_t cap = size_t(sm_count()) * 4;
  if (want > cap) want = cap;
  return unsigned(want < 1 ? 1 : want);
}

inline bool aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

// ---- kernels ----

// amax of bf16 x[0, n). vec: x is 16-byte aligned (8 elements per load).
__global__ void amax_bf16_kernel(const uint16_t* __restrict__ x, size_t n, bool vec,
                                 unsigned* __restrict__ amax_bits) {
  unsigned m = 0;
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t done = 0;
  if (vec) {
    const size_t nv = n / 8;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    for (size_t i = tid; i < nv; i += stride) {
      const uint4 v = xv[i];
      const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int k = 0; k < 4; k++) {
        m = max(m, abs_bits_bf16(uint16_t(w[k] & 0xffffu)));
        m = max(m, abs_bits_bf16(uint16_t(w[k] >> 16)));
      }
    }
    done = nv * 8;
  }
  for (size_t i = done + tid; i < n; i += stride) m = max(m, abs_bits_bf16(x[i]));
  block_atomic_max(m, amax_bits);
}

// amax of fp32 x[0, n). vec: x is 16-byte aligned (4 elements per load).
__global__ void amax_f32_kernel(const float* __restrict__ x, size_t n, bool vec,
                                unsigned* __restrict__ amax_bits) {
  unsigned m = 0;
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t done = 0;
  if (vec) {
    const size_t nv = n / 4;
    const float4* xv = reinterpret_cast<const float4*>(x);
    for (size_t i = tid; i < nv; i += stride) {
      const float4 v = xv[i];
      m = max(max(m, abs_bits_f32(v.x)), abs_bits_f32(v.y));
      m = max(max(m, abs_bits_f32(v.z)), abs_bits_f32(v.w));
    }
    done = nv * 4;
  }
  for (size_t i = done + tid; i < n; i += stride) m = max(m, abs_bits_f32(x[i]));
  block_atomic_max(m, amax_bits);
}

// s = fp8_scale_from_amax(*amax, fmax, margin), descale = 1 / s. One thread.
__global__ void compute_scale_kernel(const float* __restrict__ amax, float fmax, int margin,
                                     float* __restrict__ scale, float* __restrict__ descale) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    const float s = fp8_scale_from_amax(*amax, fmax, margin);
    *scale = s;
    *descale = 1.0f / s;
  }
}

// scale = s, descale = 1 / s (delayed recipe: s from the host). One thread.
__global__ void set_scale_kernel(float s, float* __restrict__ scale, float* __restrict__ descale) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    *scale = s;
    *descale = 1.0f / s;
  }
}

// q[i] = encode(x[i] * s) for bf16 x[0, n); optional amax of x; optional poisoning.
// vec: x 16-byte aligned and q 8-byte aligned.
template <Fp8Format F>
__global__ void cast_bf16_kernel(const uint16_t* __restrict__ x, uint8_t* __restrict__ q, size_t n,
                                 bool vec, const float* __restrict__ scale,
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
    const uint16_t h = x[i];
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
__global__ void __launch_bounds__(256)
    cast_transpose_bf16_kernel(const uint16_t* __restrict__ x, uint8_t* __restrict__ q,
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
          const uint16_t h = x[size_t(r) * cols + c + k];
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
__global__ void qdq_bf16_kernel(const uint16_t* __restrict__ x, uint16_t* __restrict__ y, size_t n,
                                bool vec, const float* __restrict__ scale,
                                const float* __restrict__ descale, unsigned* __restrict__ amax_bits,
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
  for (size_t i = done + tid; i < n; i += stride) y[i] = one(x[i]);
  if (amax_bits) block_atomic_max(m, amax_bits);
}

// Every element of bf16 out[0, n) becomes NaN (0x7FFF) when *a or *b (either may be null) is
// non-finite; otherwise nothing is written (every thread returns after one load).
__global__ void poison_bf16_kernel(uint16_t* __restrict__ out, size_t n,
                                   const float* __restrict__ a, const float* __restrict__ b) {
  const bool bad = (a != nullptr && !finite_amax(a)) || (b != nullptr && !finite_amax(b));
  if (!bad) return;
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = tid; i < n; i += stride) out[i] = 0x7fffu;
}

}  // namespace fp8_detail

// ---- launchers (raw device pointers; asynchronous on `stream`) ----

// *amax = max |x[i]| (+inf if any x[i] is NaN or inf). Resets *amax first.
inline void fp8_amax(float* amax, const __nv_bfloat16* x, size_t n, cudaStream_t stream) {
  using namespace fp8_detail;
  fp8_check_cuda(cudaMemsetAsync(amax, 0, sizeof(float), stream), "fp8_amax (reset)");
  if (n == 0) return;
  const bool vec = aligned(x, 16);
  amax_bf16_kernel<<<grid_for(vec ? n / 8 + 1 : n), kThreads, 0, stream>>>(
      reinterpret_cast<const uint16_t*>(x), n, vec, reinterpret_cast<unsigned*>(amax));
  fp8_check_cuda(cudaGetLastError(), "fp8_amax (bf16)");
}
inline void fp8_amax(float* amax, const float* x, size_t n, cudaStream_t stream) {
  using namespace fp8_detail;
  fp8_check_cuda(cudaMemsetAsync(amax, 0, sizeof(float), stream), "fp8_amax (reset)");
  if (n == 0) return;
  const bool vec = aligned(x, 16);
  amax_f32_kernel<<<grid_for(vec ? n / 4 + 1 : n), kThreads, 0, stream>>>(
      x, n, vec, reinterpret_cast<unsigned*>(amax));
  fp8_check_cuda(cudaGetLastError(), "fp8_amax (f32)");
}

// `current` recipe: st->scale = fp8_scale_from_amax(st->amax, fmax(fmt), margin),
// st->descale = 1 / scale, on the device.
inline void fp8_compute_scale(Fp8TensorScale* st, Fp8Format fmt, int margin, cudaStream_t stream) {
  fp8_detail::compute_scale_kernel<<<1, 32, 0, stream>>>(&st->amax, fp8_format_max(fmt), margin,
                                                         &st->scale, &st->descale);
  fp8_check_cuda(cudaGetLastError(), "fp8_compute_scale");
}

// `delayed` recipe (or a fixed scale, e.g. the forward's scale reused in the backward):
// st->scale = s, st->descale = 1 / s. No host synchronization (s travels as an argument).
inline void fp8_set_scale(Fp8TensorScale* st, float s, cudaStream_t stream) {
  fp8_detail::set_scale_kernel<<<1, 32, 0, stream>>>(s, &st->scale, &st->descale);
  fp8_check_cuda(cudaGetLastError(), "fp8_set_scale");
}

// q = sat(x * scale) in fmt, with scale = *scale (device). Optional:
//   amax_out     also *amax_out = max |x| (reset first); may equal poison_amax only if the
//                caller does not need the poisoning (it would read a partial amax) - don't.
//   poison_amax  if non-null and *poison_amax is non-finite, every code is NaN (0x7F)
inline void fp8_cast(uint8_t* q, const __nv_bfloat16* x, size_t n, Fp8Format fmt,
                     const float* scale, float* amax_out, const float* poison_amax,
                     cudaStream_t stream) {
  using namespace fp8_detail;
  if (amax_out)
    fp8_check_cuda(cudaMemsetAsync(amax_out, 0, sizeof(float), stream), "fp8_cast (reset amax)");
  if (n == 0) return;
  const bool vec = aligned(x, 16) && aligned(q, 8);
  const unsigned grid = grid_for(vec ? n / 8 + 1 : n);
  const uint16_t* xs = reinterpret_cast<const uint16_t*>(x);
  unsigned* ab = reinterpret_cast<unsigned*>(amax_out);
  if (fmt == Fp8Format::E4M3)
    cast_bf16_kernel<Fp8Format::E4M3>
        <<<grid, kThreads, 0, stream>>>(xs, q, n, vec, scale, ab, poison_amax);
  else
    cast_bf16_kernel<Fp8Format::E5M2>
        <<<grid, kThreads, 0, stream>>>(xs, q, n, vec, scale, ab, poison_amax);
  fp8_check_cuda(cudaGetLastError(), "fp8_cast");
}

// x (rows, cols) -> qT (cols, rows) = sat(x * scale)^T, and q (rows, cols) too when q is not
// null: one read of x for both copies. amax_out / poison_amax as in fp8_cast.
inline void fp8_cast_transpose(uint8_t* q, uint8_t* qT, const __nv_bfloat16* x, int rows, int cols,
                               Fp8Format fmt, const float* scale, float* amax_out,
                               const float* poison_amax, cudaStream_t stream) {
  using namespace fp8_detail;
  if (amax_out)
    fp8_check_cuda(cudaMemsetAsync(amax_out, 0, sizeof(float), stream),
                   "fp8_cast_transpose (reset amax)");
  if (rows <= 0 || cols <= 0) return;
  const bool vec_in = cols % 8 == 0 && aligned(x, 16) && (q == nullptr || aligned(q, 8));
  const bool vec_out = rows % 16 == 0 && aligned(qT, 16);
  const dim3 grid((cols + kTile - 1) / kTile, (rows + kTile - 1) / kTile);
  if (grid.y > 65535u) fp8_fail("fp8_cast_transpose: too many rows for one launch");
  const uint16_t* xs = reinterpret_cast<const uint16_t*>(x);
  unsigned* ab = reinterpret_cast<unsigned*>(amax_out);
  if (fmt == Fp8Format::E4M3)
    cast_transpose_bf16_kernel<Fp8Format::E4M3>
        <<<grid, 256, 0, stream>>>(xs, q, qT, rows, cols, vec_in, vec_out, scale, ab, poison_amax);
  else
    cast_transpose_bf16_kernel<Fp8Format::E5M2>
        <<<grid, 256, 0, stream>>>(xs, q, qT, rows, cols, vec_in, vec_out, scale, ab, poison_amax);
  fp8_check_cuda(cudaGetLastError(), "fp8_cast_transpose");
}

// Quantize-dequantize bf16 -> fp8 -> bf16 (the fallback without FP8 tensor cores):
//   descale == nullptr  y = decode(sat(x * s))            (exact; descale goes into the GEMM)
//   descale != nullptr  y = bf16(decode(sat(x * s)) * d)   (bf16 of the CPU qdq value)
// amax_out / poison_amax (poisoned y = bf16 NaN 0x7FFF) as in fp8_cast. y may equal x.
inline void fp8_qdq_bf16(__nv_bfloat16* y, const __nv_bfloat16* x, size_t n, Fp8Format fmt,
                         const float* scale, const float* descale, float* amax_out,
                         const float* poison_amax, cudaStream_t stream) {
  using namespace fp8_detail;
  if (amax_out)
    fp8_check_cuda(cudaMemsetAsync(amax_out, 0, sizeof(float), stream), "fp8_qdq_bf16 (reset)");
  if (n == 0) return;
  const bool vec = aligned(x, 16) && aligned(y, 16);
  const unsigned grid = grid_for(vec ? n / 8 + 1 : n);
  const uint16_t* xs = reinterpret_cast<const uint16_t*>(x);
  uint16_t* ys = reinterpret_cast<uint16_t*>(y);
  unsigned* ab = reinterpret_cast<unsigned*>(amax_out);
  if (fmt == Fp8Format::E4M3)
    qdq_bf16_kernel<Fp8Format::E4M3>
        <<<grid, kThreads, 0, stream>>>(xs, ys, n, vec, scale, descale, ab, poison_amax);
  else
    qdq_bf16_kernel<Fp8Format::E5M2>
        <<<grid, kThreads, 0, stream>>>(xs, ys, n, vec, scale, descale, ab, poison_amax);
  fp8_check_cuda(cudaGetLastError(), "fp8_qdq_bf16");
}

// out[0, n) = NaN when *amax_a or *amax_b (either may be null) is non-finite, as the CPU's
// poisoned operands make every product NaN. Costs one tiny launch when finite.
inline void fp8_poison_if_nonfinite(__nv_bfloat16* out, size_t n, const float* amax_a,
                                    const float* amax_b, cudaStream_t stream) {
  using namespace fp8_detail;
  if (n == 0) return;
  poison_bf16_kernel<<<grid_for(n / 8 + 1), kThreads, 0, stream>>>(reinterpret_cast<uint16_t*>(out),
                                                                   n, amax_a, amax_b);
  fp8_check_cuda(cudaGetLastError(), "fp8_poison_if_nonfinite");
}

// The `current` recipe in one call: st->amax = amax(x); st->scale/descale from it; q (and qT
// when non-null, then x is (rows, cols) and q may be null) = sat(x * scale), all NaN when the
// amax is non-finite (like qdq). rows * cols == n.
inline void fp8_quantize_current(uint8_t* q, uint8_t* qT, const __nv_bfloat16* x, int rows,
                                 int cols, Fp8Format fmt, int margin, Fp8TensorScale* st,
                                 cudaStream_t stream) {
  fp8_amax(&st->amax, x, size_t(rows) * size_t(cols), stream);
  fp8_compute_scale(st, fmt, margin, stream);
  if (qT)
    fp8_cast_transpose(q, qT, x, rows, cols, fmt, &st->scale, nullptr, &st->amax, stream);
  else
    fp8_cast(q, x, size_t(rows) * size_t(cols), fmt, &st->scale, nullptr, &st->amax, stream);
}

// The `delayed` recipe in one call: st->scale = s (from the host's history), q (and qT) =
// sat(x * s), and st->amax = amax(x) fused into the same pass, for the history. Codes of a
// non-finite x are not poisoned here (the amax is known only at the end): callers poison the
// GEMM output with fp8_poison_if_nonfinite(out, ..., &st->amax, ...), which gives the CPU's
// result (every output NaN).
inline void fp8_quantize_delayed(uint8_t* q, uint8_t* qT, const __nv_bfloat16* x, int rows,
                                 int cols, Fp8Format fmt, float s, Fp8TensorScale* st,
                                 cudaStream_t stream) {
  fp8_set_scale(st, s, stream);
  if (qT)
    fp8_cast_transpose(q, qT, x, rows, cols, fmt, &st->scale, &st->amax, nullptr, stream);
  else
    fp8_cast(q, x, size_t(rows) * size_t(cols), fmt, &st->scale, &st->amax, nullptr, stream);
}

}  // namespace tg::cuda
