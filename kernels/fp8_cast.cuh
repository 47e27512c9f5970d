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
// The kernels themselves are in kernels/fp8_kernels.cuh (device code only, so that a CPU
// emulation can run them too); this file holds their launchers.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "kernels/fp8_kernels.cuh"
#include "src/common.h"
#include "src/formats.h"

namespace tg::cuda {

inline const char* fp8_format_name(Fp8Format f) { return f == Fp8Format::E4M3 ? "e4m3" : "e5m2"; }

[[noreturn]] inline void fp8_fail(const std::string& msg) { throw Error(msg); }

inline void fp8_check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    fp8_fail(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}

namespace fp8_detail {

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
