// quantize_blocks.cuh: quantize-dequantize of one GEMM operand with a block-scaled recipe
// (src/recipe.h), the device twin of src/cpu/quantize.cpp, value for value; and the same
// quantization into element codes and a scale tensor for the native block-scaled GEMMs.
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
//                       (enc before rounding, dec after) by src/group_scale.h (the rule the
//                       CPU calls), the NVFP4 tensor scale from the tensor amax, and the
//                       GEMM's tensor factor (1 / S for UE4M3 scales, else 1)
//   apply_kernel        one thread per element (grid-stride): round(x enc) dec into the
//                       output type (fp32, or bf16 where the caller knows it is exact), NaN
//                       everywhere when any input was non-finite; stochastic rounding draws
//                       quant_sr_bits(quant_sr_seed(seed), r * cols + c), the CPU's counter
// or, for the native block-scaled GEMMs, instead of apply_kernel (section below):
//   native_scale_kernel the groups' dec in cuBLASLt's scale-tensor layout for the scale mode
//   codes_kernel        round(x enc) as element codes (apply_kernel's rounding and bits)
// Every formula is quantize.cpp's in the same fp32 operations (IEEE division and ldexpf; no
// operation here can be contracted into an FMA), so the values are bit-identical.
#pragma once
#include <cublasLt.h>

#include <cstdint>

#include "common.cuh"
#include "src/group_scale.h"
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

// One group's multipliers, before rounding (enc) and after (dec): src/group_scale.h's, the
// rule the CPU quantizer calls.
using Scale2 = GroupScale;

__device__ __forceinline__ float elem_max(ElemFormat f) { return elem_max_value(f); }

__device__ __forceinline__ Scale2 group_scale(const QuantParams& p, float amax, float tscale) {
  return tg::group_scale(p.elem, p.scale, p.rule, amax, tscale);
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
// nonfinite_post: *post when the tensor held a non-finite value (1 for the portable path, whose
// operand is all NaN then; NaN for the native path, whose codes cannot all be NaN).
static __global__ void group_scale_kernel(const float* row_amax, int rows, QuantParams p,
                                          const unsigned* tensor_bits, Scale2* scales, float* post,
                                          float nonfinite_post) {
  const unsigned tb = *tensor_bits;
  const bool finite = tb < 0x7f800000u;
  // NVFP4's second level: the tensor scale that maps the largest block scale to E4M3's max.
  const float tscale = p.scale == ScaleFormat::E4M3 && finite
                           ? fp8_scale_from_amax(bits_f32(tb), E4M3_MAX * elem_max(p.elem), 0)
                           : 1.0f;
  const size_t total = size_t(p.ngr) * p.ngc;
  const size_t t0 = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (t0 == 0)
    *post = !finite ? nonfinite_post : p.scale == ScaleFormat::E4M3 ? 1.0f / tscale : 1.0f;
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

// ---- Codes for the native block-scaled GEMMs (src/cuda/matmul_native.cu) ----
// The same quantization as apply_kernel, but the output is the element codes and the scale
// tensor cuBLASLt reads, instead of the dequantized values. An operand X(rows, K) is row-major
// with its blocks along K; cuBLASLt sees it as the column-major K x rows operand of a TN GEMM
// (op T for A, N for B), so for either operand `rows` is its outer dimension and K the inner.
//   codes  E4M3 / E5M2: one byte per element, row-major (rows, K) (ld K)
//          E2M1: two elements per byte, row-major, element 2i in the low nibble and 2i+1 in
//          the high one (CUDA's __nv_fp4x2_e2m1 order, cuda_fp4.h); K even
//   scales the group's decode factor dec (x' = code dec) in the scale mode's layout, as the
//          cuBLAS documentation (cublasLtMatmulMatrixScale_t, "Scaling factors layouts")
//          describes them:
//     OUTER_VEC_32F   fp32, one per row (Row granularity): scale[r]
//     VEC128_32F      fp32 per 1 x 128 block, outer-dimension-major: scale[j * rows + r] for row
//                     r, block j (PyTorch's _scaled_mm asks the same "M-major" strides of 1x128
//                     scales on Hopper)
//     BLK128x128_32F  fp32 per 128 x 128 tile, row-major over tiles with the block dimension
//                     padded to a multiple of 4 (16 bytes): scale[i * roundup(nj, 4) + j]
//     VEC32_UE8M0,    one byte (E8M0 code; UE4M3 code) per 1 x 32 (1 x 16) block. The (rows x
//     VEC16_UE4M3     nj) byte matrix, padded to multiples of 128 rows and 4 blocks, is cut into
//                     128 x 4 tiles of 512 bytes stored one after another along K first:
//                     tile (r / 128, j / 4) at ((r / 128) * ceil(nj / 4) + j / 4) * 512, and in a
//                     tile (r, c) at (r % 32) * 16 + ((r % 128) / 32) * 4 + c % 4 ("1D Block
//                     Scaling Factors Layout"; the same as Transformer Engine's and torchao's
//                     swizzle to the "blocked" layout). A 16 x 16 weight tile's scale is written
//                     into each of its 16 rows (per-16 1-D scales, replicated).
// Padding holds neutral scales (1.0, E8M0 127, UE4M3 0x38). Nobody can run cuBLASLt here: the
// 32F layouts are the documentation's as read; matmul_native.cu checks each on the GPU
// against the portable path before trusting it.

// Scale entries (elements of the mode's type) of an operand of `rows` rows and nj blocks.
__host__ __device__ inline size_t native_scale_count(cublasLtMatmulMatrixScale_t m, int rows,
                                                     int ngr, int nj) {
  switch (m) {
    case CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F: return size_t(rows);
    case CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F: return size_t(rows) * nj;
    case CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F: return size_t(ngr) * ((nj + 3) / 4 * 4);
    default: return size_t((rows + 127) / 128) * 128 * ((nj + 3) / 4 * 4);
  }
}

// One thread per scale entry (grid-stride over native_scale_count): the layout above, from the
// groups' scales; neutral everywhere when the tensor held a non-finite value (the GEMM's
// factor is NaN then).
static __global__ void native_scale_kernel(void* out, cublasLtMatmulMatrixScale_t m,
                                           const Scale2* scales, QuantParams p, int rows,
                                           const unsigned* tensor_bits) {
  const bool finite = *tensor_bits < 0x7f800000u;
  const int nj = p.ngc, njp = (nj + 3) / 4 * 4;
  const size_t n = native_scale_count(m, rows, p.ngr, nj);
  for (size_t t = blockIdx.x * size_t(blockDim.x) + threadIdx.x; t < n;
       t += size_t(gridDim.x) * blockDim.x) {
    int gi = 0, j = 0;
    bool in = true;
    switch (m) {
      case CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F: gi = int(t); break;
      case CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F:
        gi = int(t % rows) / p.gr, j = int(t / rows);
        break;
      case CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F:
        gi = int(t / njp), j = int(t % njp), in = j < nj;
        break;
      default: {
        const int tile = int(t / 512), w = int(t % 512), nct = njp / 4;
        const int r = (tile / nct) * 128 + ((w % 16) / 4) * 32 + w / 16;
        j = (tile % nct) * 4 + w % 4;
        in = r < rows && j < nj;
        gi = r / p.gr;
      }
    }
    const float dec = in && finite ? scales[size_t(gi) * nj + j].dec : 1.0f;
    if (m == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0)
      static_cast<uint8_t*>(out)[t] = f32_to_e8m0(dec, false, true);  // dec: a power of two
    else if (m == CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3)
      static_cast<uint8_t*>(out)[t] = f32_to_ue4m3(dec);  // dec: a UE4M3 value (or 0)
    else
      static_cast<float*>(out)[t] = dec;
  }
}

// The code of round(v) in format F (apply_kernel's rounding, the code instead of its value).
template <ElemFormat F, bool SR>
__device__ __forceinline__ uint8_t elem_code(float v, uint32_t bits) {
  if constexpr (F == ElemFormat::E4M3)
    return SR ? f32_to_e4m3_sr(v, bits) : f32_to_e4m3(v, true);
  else if constexpr (F == ElemFormat::E5M2)
    return SR ? f32_to_e5m2_sr(v, bits) : f32_to_e5m2(v, true);
  else
    return SR ? f32_to_e2m1_sr(v, bits) : f32_to_e2m1(v);
}

// codes (layout above) of x at its groups' scales: one thread per byte (grid-stride), i.e. per
// element of FP8 and per pair of E2M1; the stochastic bits of element i are apply_kernel's.
// Zeros when the tensor held a non-finite value.
template <ElemFormat F, bool SR>
__global__ void codes_kernel(uint8_t* out, const float* x, int rows, int cols, QuantParams p,
                             const Scale2* scales, const unsigned* tensor_bits, uint64_t mixed) {
  constexpr int kPer = F == ElemFormat::E2M1 ? 2 : 1;
  const bool finite = *tensor_bits < 0x7f800000u;
  const size_t n = size_t(rows) * cols / kPer;
  for (size_t b = blockIdx.x * size_t(blockDim.x) + threadIdx.x; b < n;
       b += size_t(gridDim.x) * blockDim.x) {
    uint8_t code = 0;
    for (int e = 0; e < kPer && finite; e++) {
      const size_t i = b * kPer + e;
      const int r = int(i / cols), c = int(i % cols);
      const Scale2 g = scales[size_t(r / p.gr) * p.ngc + c / p.gc];
      const uint32_t bits = SR ? quant_sr_bits(mixed, uint64_t(i)) : 0u;
      code |= uint8_t(elem_code<F, SR>(x[i] * g.enc, bits) << (4 * e));
    }
    out[b] = code;
  }
}

// Channel smoothing (src/smoothing.h): x(rows, cols) <- x diag(1/s) (divide: the correctly
// rounded x / s, as nvcc's IEEE division gives it without --use_fast_math) or x diag(s), as
// src/cpu/matmul_scaled.cpp's smooth_columns, so the smoothed operands are bit-identical.
// Grid-stride over the elements. (The scaled linear's forward and the operand statistics.)
static __global__ void smooth_columns_kernel(float* x, int rows, int cols, const float* s,
                                             bool divide) {
  const size_t n = size_t(rows) * cols;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float f = s[i % cols];
    x[i] = divide ? x[i] / f : x[i] * f;
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
