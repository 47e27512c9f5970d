// quantize_blocks.cuh: quantize-dequantize of one GEMM operand with a block-scaled recipe
// (src/recipe.h), the device twin of src/cpu/quantize.cpp, value for value.
//
// The operand is a (rows, cols) row-major fp32 matrix whose cols run along its GEMM's
// reduction dimension (stage_kernel builds it from the model's tensor, transposed for the
// backward GEMMs, hadamard_rows_kernel optionally rotates it). Its scale groups are the
// whole tensor, each row, each 1 x B block of a row or each B x B tile; partial groups at the
// edges are groups of their own. Four kernels, in stream order:
//   row_amax_kernel     one warp per (row, column group): the group's amax in that row, and
//                       the tensor's largest |x| bits (atomicMax; a max is order-free), which
//                       also says whether any value is non-finite (bits >= inf's)
//   group_scale_kernel  one thread per group: the max over its rows, then the scale pair
//                       (enc before rounding, dec after) by the recipe's scale format, the
//                       NVFP4 tensor scale from the tensor amax, and the GEMM's tensor factor
//                       (1 / S for UE4M3 scales, else 1)
//   apply_kernel        one thread per element (grid-stride): round(x enc) dec into the
//                       output type (fp32, or bf16 where the caller knows it is exact), NaN
//                       everywhere when any input was non-finite; stochastic rounding draws
//                       quant_sr_bits(quant_sr_seed(seed), r * cols + c), the CPU's counter
// Every formula is quantize.cpp's in the same fp32 operations (IEEE division and ldexpf; no
// operation here can be contracted into an FMA), so the values are bit-identical.
#pragma once
#include <cstdint>

#include "common.cuh"
#include "src/recipe.h"

namespace tg::gpu::quant {

// What the kernels need of an OperandRecipe, group shape resolved against the operand.
struct QuantParams {
  ElemFormat elem = ElemFormat::E4M3;
  ScaleFormat scale = ScaleFormat::FP32;
  ScaleRule rule = ScaleRule::Ocp;
  int gr = 1, gc = 1;  // rows and columns of one scale group (clipped to the operand)
  int ngr = 1, ngc = 1;
};

// One group's multipliers: before rounding (enc) and after (dec).
struct Scale2 {
  float enc, dec;
};

constexpr float kMaxFloat = 3.40282347e38f;

__device__ __forceinline__ float elem_max(ElemFormat f) {
  return f == ElemFormat::E4M3 ? E4M3_MAX : f == ElemFormat::E5M2 ? E5M2_MAX : E2M1_MAX;
}
// OCP MX's emax_elem: the exponent of the format's largest power of two.
__device__ __forceinline__ int elem_emax(ElemFormat f) {
  return f == ElemFormat::E4M3 ? 8 : f == ElemFormat::E5M2 ? 15 : 2;
}

// quantize.cpp's group_scale.
__device__ __forceinline__ Scale2 group_scale(const QuantParams& p, float amax, float tscale) {
  const float fmax = elem_max(p.elem);
  Scale2 g{1.f, 1.f};
  switch (p.scale) {
    case ScaleFormat::FP32:
      g.enc = fp8_scale_from_amax(amax, fmax, 0);
      g.dec = 1.0f / g.enc;
      break;
    case ScaleFormat::Pow2:
      g.enc = bits_f32(f32_bits(fp8_scale_from_amax(amax, fmax, 0)) & 0xff800000u);
      g.dec = 1.0f / g.enc;
      break;
    case ScaleFormat::E8M0: {
      int code = 127;
      if (amax > 0) {
        if (p.rule == ScaleRule::Ceil) {
          code = f32_to_e8m0(amax / fmax, true, true);
        } else {
          code = int(f32_to_e8m0(amax, false, true)) - elem_emax(p.elem);
          if (code < 0) code = 0;
        }
      }
      g.dec = e8m0_to_f32(uint8_t(code));
      g.enc = ldexpf(1.0f, 127 - code);
      break;
    }
    case ScaleFormat::E4M3:
      g.dec = ue4m3_to_f32(f32_to_ue4m3(amax / fmax * tscale));
      g.enc = g.dec > 0 ? tscale / g.dec : 0.0f;
      if (!(g.enc <= kMaxFloat)) g.enc = kMaxFloat;
      break;
  }
  return g;
}

// v rounded into the element format and back (formats.h's encoders, saturating).
template <ElemFormat F, bool SR>
__device__ __forceinline__ float round_elem(float v, uint32_t bits) {
  if constexpr (F == ElemFormat::E4M3)
    return e4m3_to_f32(SR ? f32_to_e4m3_sr(v, bits) : f32_to_e4m3(v, true));
  else if constexpr (F == ElemFormat::E5M2)
    return e5m2_to_f32(SR ? f32_to_e5m2_sr(v, bits) : f32_to_e5m2(v, true));
  else
    return e2m1_to_f32(SR ? f32_to_e2m1_sr(v, bits) : f32_to_e2m1(v));
}

// dst(rows, cols) = src as fp32; src is (rows, cols) row-major, or (cols, rows) when
// `transposed` (dst = src^T). 32 x 32 tiles through shared memory, so both sides are read and
// written along rows; 256 threads per block (8 rows of 32 lanes), grid (cols, rows) / 32.
template <typename T>
__global__ void stage_kernel(float* dst, const T* src, int rows, int cols, bool transposed) {
  __shared__ float tile[32][33];
  const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  for (int i = ty; i < 32; i += 8) {
    // transposed: tile[i][tx] = src row (c0 + i), column (r0 + tx) = dst (r0 + tx, c0 + i)
    const int sr = transposed ? c0 + i : r0 + i, sc = transposed ? r0 + tx : c0 + tx;
    const int srows = transposed ? cols : rows, scols = transposed ? rows : cols;
    if (sr < srows && sc < scols) tile[i][tx] = ld(src[size_t(sr) * scols + sc]);
  }
  __syncthreads();
  for (int i = ty; i < 32; i += 8) {
    const int r = r0 + i, c = c0 + tx;
    if (r < rows && c < cols) dst[size_t(r) * cols + c] = transposed ? tile[tx][i] : tile[i][tx];
  }
}

// x <- H D x on each full run of n values of every row, as quantize.cpp's hadamard_rows
// (forward direction): signs sr_hash(seed, c), Sylvester butterflies in its order, then the
// factor norm = 1/sqrt(n) (computed on the host as there). One thread per (row, run).
static __global__ void hadamard_rows_kernel(float* x, int rows, int cols, int n, uint64_t seed,
                                            float norm) {
  const int runs = cols / n;
  const size_t total = size_t(rows) * runs;
  for (size_t t = blockIdx.x * size_t(blockDim.x) + threadIdx.x; t < total;
       t += size_t(gridDim.x) * blockDim.x) {
    const int r = int(t / runs), c0 = int(t % runs) * n;
    float* v = x + size_t(r) * cols + c0;
    for (int i = 0; i < n; i++)
      if (sr_hash(seed, uint64_t(c0 + i)) & 1u) v[i] = -v[i];
    for (int h = 1; h < n; h *= 2)
      for (int i = 0; i < n; i += 2 * h)
        for (int j = i; j < i + h; j++) {
          const float a = v[j], b = v[j + h];
          v[j] = a + b;
          v[j + h] = a - b;
        }
    for (int i = 0; i < n; i++) v[i] *= norm;
  }
}

// row_amax[r * ngc + j] = max |x| over row r's column group j; *tensor_bits = max of |x|'s
// bits over the tensor (must start at 0). |x|'s bits order as |x| does, inf above every
// finite value and NaNs above inf. One warp per (row, group); blockDim 256.
static __global__ void row_amax_kernel(const float* x, int rows, int cols, int gc, int ngc,
                                       float* row_amax, unsigned* tensor_bits) {
  const int lane = threadIdx.x % 32;
  const size_t warps = size_t(gridDim.x) * (blockDim.x / 32);
  const size_t total = size_t(rows) * ngc;
  for (size_t w = blockIdx.x * size_t(blockDim.x / 32) + threadIdx.x / 32; w < total; w += warps) {
    const int r = int(w / ngc), j = int(w % ngc);
    const int c1 = (j + 1) * gc < cols ? (j + 1) * gc : cols;
    const float* xr = x + size_t(r) * cols;
    unsigned m = 0;
    for (int c = j * gc + lane; c < c1; c += 32) {
      const unsigned a = f32_bits(xr[c]) & 0x7fffffffu;
      m = a > m ? a : m;
    }
    m = __reduce_max_sync(0xffffffffu, m);
    if (lane == 0) {
      row_amax[w] = bits_f32(m);
      atomicMax(tensor_bits, m);
    }
  }
}

// scales[g] for every group g = gi * ngc + j, and *post = the GEMM's factor for the operand.
static __global__ void group_scale_kernel(const float* row_amax, int rows, QuantParams p,
                                          const unsigned* tensor_bits, Scale2* scales,
                                          float* post) {
  const unsigned tb = *tensor_bits;
  const bool finite = tb < 0x7f800000u;
  // NVFP4's second level: the tensor scale that maps the largest block scale to E4M3's max.
  const float tscale = p.scale == ScaleFormat::E4M3 && finite
                           ? fp8_scale_from_amax(bits_f32(tb), E4M3_MAX * elem_max(p.elem), 0)
                           : 1.0f;
  const size_t total = size_t(p.ngr) * p.ngc;
  const size_t t0 = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (t0 == 0) *post = p.scale == ScaleFormat::E4M3 && finite ? 1.0f / tscale : 1.0f;
  if (!finite) return;  // apply_kernel writes NaN without reading a scale
  for (size_t t = t0; t < total; t += size_t(gridDim.x) * blockDim.x) {
    const int gi = int(t / p.ngc), j = int(t % p.ngc);
    const int r1 = (gi + 1) * p.gr < rows ? (gi + 1) * p.gr : rows;
    float m = 0;
    for (int r = gi * p.gr; r < r1; r++) {
      const float a = row_amax[size_t(r) * p.ngc + j];
      m = a > m ? a : m;
    }
    scales[t] = group_scale(p, m, tscale);
  }
}

// out[i] = round(x[i] enc) dec at x[i]'s group scale, stored as O (exact when the caller
// chose O = bf16); all NaN when the tensor held a non-finite value.
template <ElemFormat F, bool SR, typename O>
__global__ void apply_kernel(O* out, const float* x, int rows, int cols, QuantParams p,
                             const Scale2* scales, const unsigned* tensor_bits, uint64_t mixed) {
  const bool finite = *tensor_bits < 0x7f800000u;
  const size_t n = size_t(rows) * cols;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    if (!finite) {
      out[i] = st<O>(bits_f32(0x7fc00000u));
      continue;
    }
    const int r = int(i / cols), c = int(i % cols);
    const Scale2 g = scales[size_t(r / p.gr) * p.ngc + c / p.gc];
    const uint32_t bits = SR ? quant_sr_bits(mixed, uint64_t(i)) : 0u;
    out[i] = st<O>(round_elem<F, SR>(x[i] * g.enc, bits) * g.dec);
  }
}

// Split channels (precision.mode=auto's outlier channels): dst(rows, k) = x's columns ch[0..k)
// and those columns of x set to zero, so that they set no scale. One thread per (row, j).
static __global__ void take_columns_kernel(float* dst, float* x, int rows, int cols, const int* ch,
                                           int k) {
  const size_t n = size_t(rows) * k;
  for (size_t t = blockIdx.x * size_t(blockDim.x) + threadIdx.x; t < n;
       t += size_t(gridDim.x) * blockDim.x) {
    const int r = int(t / k), j = int(t % k);
    float& v = x[size_t(r) * cols + ch[j]];
    dst[t] = v;
    v = 0.0f;
  }
}

// The scaled GEMM's epilogue, in matmul_scaled.cpp's order of fp32 operations:
// out(M,N) = [out +] acc * (post_a post_b) [+ extra] [+ bias(N)], rounded once into O.
template <typename O>
__global__ void scaled_epilogue_kernel(O* out, const float* acc, const float* post,
                                       const float* extra, const O* bias, bool accumulate, int M,
                                       int N) {
  const float f = post[0] * post[1];
  const size_t n = size_t(M) * N;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    float v = acc[i] * f;
    if (accumulate) v = ld(out[i]) + v;
    if (extra) v += extra[i];
    if (bias) v += ld(bias[i % N]);
    out[i] = st<O>(v);
  }
}

}  // namespace tg::gpu::quant
