// quantize_blocks.cuh: quantize-dequantize of one GEMM operand with a block-scaled recipe
// (src/numerics/recipe.h), the device twin of src/backends/cpu/quantize.cpp, value for value; and
// the same quantization into element codes and a scale tensor for the native block-scaled GEMMs.
//
// The operand is a (rows, cols) matrix whose cols run along its GEMM's reduction dimension,
// read where it lies: the model's tensor (bf16, fp16 or fp32), transposed for the backward
// GEMMs, and optionally through a random Hadamard rotation of up to 32 points along its rows
// (the FP4 recipes' wgrad operands: warp shuffles, rotate_in_warp), so that quantizing fuses
// the transposed copy, the conversion to fp32 and the rotation into the passes below instead
// of staging the operand first; or an fp32 copy (stage_kernel) where a step changes the
// values before they are quantized (channel smoothing, the split channels, a larger rotation
// by hadamard_rows_kernel). Its scale groups are the whole tensor, each row, each 1 x B
// block of a row or each B x B tile; partial groups at the edges are groups of their own.
// Current scaling needs every group's amax before the first value is rounded (and NVFP4's
// tensor scale and the all-NaN rule need the whole operand's), so the source is read twice
// (but where every group fits the block that reads it, or the scale is given: then
// kernels/quantize_tile.cuh reads it once); three kernels, in stream order:
//   operand_amax_kernel one block per 32 x 32 tile: each row's amax per column group (bits,
//                       atomicMax: a max is order-free; none for a one-group operand), and the
//                       operand's largest |x| bits, which also say whether any value is
//                       non-finite (bits >= inf's)
//   group_scale_kernel  one thread per group: the max over its rows, then the scale pair
//                       (enc before rounding, dec after) by src/numerics/group_scale.h (the rule
//                       the CPU calls), the NVFP4 tensor scale from the tensor amax, and the GEMM's
//                       tensor factor (1 / S for UE4M3 scales, else 1)
//   apply_kernel        one block per tile: round(x enc) dec into the output type (fp32, or
//                       bf16 where the caller knows it is exact), row-major, NaN everywhere
//                       when any input was non-finite; stochastic rounding draws
//                       quant_sr_bits(quant_sr_seed(seed), r * cols + c), the CPU's counter
// or, for the native block-scaled GEMMs, instead of apply_kernel (section below):
//   native_scale_kernel the groups' dec in cuBLASLt's scale-tensor layout for the scale mode
//   codes_kernel        round(x enc) as element codes (apply_kernel's rounding and bits)
// Per element of a bf16 operand that is 2 + 2 bytes read and 1 or 2 written, where staging
// first moved 2 + 4 (the copy) + 4 + 4 (rotation) + 4 + 4 (amax, apply) + 2. The row maxima
// and the scales lie group-major (row_amax[j * rows + r], scales[j * ngr + gi]), so that a
// tile's 32 rows of one column group are consecutive: the amax kernel's atomics and the quantize
// kernels' scale reads, staged per tile in shared memory, take a few sectors per tile rather
// than one per row (or per row and element), about 0.3 bytes per element where they took 3. Every
// formula is quantize.cpp's in the same fp32 operations (IEEE division and ldexpf; no operation
// here can be contracted into an FMA), so the values are bit-identical.
#pragma once
#include <cublasLt.h>

#include <cstdint>

#include "amax.cuh"
#include "common.cuh"
#include "src/numerics/group_scale.h"
#include "src/numerics/recipe.h"

namespace tg::gpu::quant {

// The random Hadamard rotation of the operand's rows as part of reading it (the wgrad
// operands of the FP4 presets): each full run of n columns x <- H D x as hadamard_rows_kernel
// computes it, for n a power of two up to 32, so that a run lies within one tile row and its
// butterflies are warp shuffles (lane = column % 32). n = 0: none. Larger n are staged and
// rotated by hadamard_rows_kernel instead (src/backends/cuda/matmul_scaled.cu).
struct Rotation {
  int n = 0;
  uint64_t seed = 0;
  float norm = 1.0f;  // 1 / sqrt(n), computed on the host as quantize.cpp computes it
};

// What a quantizer reading an operand as it lies also takes on the way: the amax of the
// operand's transpose as another GEMM's quantizer reads it, rotated along this operand's rows
// by h (NVFP4's wgrad reads inp^T and dout^T through its 16-point rotation, and its tensor
// scale needs the amax of that: the forward's input quantizer and the dgrad's dout quantizer,
// which read the same values, take it), as |x|'s bits into *bits (device, zeroed before;
// null: none).
struct TransposedAmax {
  Rotation h;
  unsigned* bits = nullptr;
};

// What the kernels need of an OperandRecipe, group shape resolved against the operand.
struct QuantParams {
  ElemFormat elem = ElemFormat::E4M3;
  ScaleFormat scale = ScaleFormat::FP32;
  ScaleRule rule = ScaleRule::Ocp;
  int gr = 1, gc = 1;  // rows and columns of one scale group (clipped to the operand)
  int ngr = 1, ngc = 1;
  // The per-tensor recipes' own scale (src/backends/cuda/scaled.h's OperandSource): a delayed
  // scale given by the host (> 0), else (fmax / amax) / 2^margin of the operand.
  float tensor_enc = 0;
  int margin = 0;
  // The operand's amax bits taken by the kernel that produced it or by an earlier quantizer of
  // the same values (device; null: none): a one-group (per-tensor) operand's scale, or NVFP4's
  // tensor scale S, is drawn from it on the device, so the one-pass kernels need no amax pass
  // of their own (quantize_tile.cuh).
  const unsigned* tensor_amax = nullptr;
  TransposedAmax transposed_amax;  // none unless asked
  // Whether no group needs an amax of its own: a given scale, or one group of given amax.
  __host__ __device__ bool groups_given() const {
    return tensor_enc > 0 || (tensor_amax && scale != ScaleFormat::E4M3);
  }
};

// One group's multipliers, before rounding (enc) and after (dec): src/numerics/group_scale.h's, the
// rule the CPU quantizer calls.
using Scale2 = GroupScale;

__device__ __forceinline__ Scale2 group_scale(const QuantParams& p, float amax, float tscale) {
  return tg::group_scale(p.elem, p.scale, p.rule, amax, tscale);
}

// v rounded into the element format and back (formats.h's encoder, saturating).
template <ElemFormat F, bool SR>
__device__ __forceinline__ float round_elem(float v, uint32_t bits) {
  return elem_to_f32<F>(f32_to_elem<F>(v, SR, bits));
}

// The operand is read where it lies, as a view of the model's tensor src of type T: (rows,
// cols) row-major, or (cols, rows) when `transposed` (the backward's operands are the
// transposes of the forward's tensors). The kernels below that read it work on 32 x 32 tiles
// of the operand through shared memory, 256 threads per block (8 warps of 32 lanes), grid
// (cols, rows) / 32, so that both the source and the operand are read and written along rows
// whichever way the operand lies: load_tile fills the block's tile, and tile_value(t, i, lane)
// is then the operand's element (r0 + i, c0 + lane).
template <typename T>
__device__ __forceinline__ void load_tile(float (&tile)[32][33], const T* src, int rows, int cols,
                                          bool transposed, int r0, int c0) {
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  for (int i = ty; i < 32; i += 8) {
    // transposed: tile[i][tx] = src row (c0 + i), column (r0 + tx) = operand (r0 + tx, c0 + i)
    const int sr = transposed ? c0 + i : r0 + i, sc = transposed ? r0 + tx : c0 + tx;
    const int srows = transposed ? cols : rows, scols = transposed ? rows : cols;
    if (sr < srows && sc < scols) tile[i][tx] = ld(src[size_t(sr) * scols + sc]);
  }
  __syncthreads();
}

__device__ __forceinline__ float tile_value(const float (&tile)[32][33], bool transposed, int i,
                                            int lane) {
  return transposed ? tile[lane][i] : tile[i][lane];
}

__host__ __device__ inline bool rotates_in_warp(int n) {
  return n >= 2 && n <= 32 && (n & (n - 1)) == 0;
}

// v, the operand's value at column c (lane c % 32 of a warp that holds 32 consecutive
// columns of one row, every lane taking part), after the rotation of its run: the signs, then
// the Sylvester butterflies in hadamard_rows_kernel's order (the lane with bit h clear keeps
// a + b, its partner a - b), then the factor; a partial run at the row's end is left as it is.
__device__ __forceinline__ float rotate_in_warp(float v, int c, int cols, const Rotation& h) {
  if (h.n < 2) return v;
  const int lane = threadIdx.x % 32;
  const bool full = (c / h.n + 1) * h.n <= cols;  // the run's lanes agree
  if (full && (sr_hash(h.seed, uint64_t(c)) & 1u)) v = -v;
  for (int d = 1; d < h.n; d *= 2) {
    const float o = __shfl_xor_sync(0xffffffffu, v, d);
    const float r = lane & d ? o - v : v + o;
    if (full) v = r;
  }
  return full ? v * h.norm : v;
}

// A thread's largest |x| bits of the tile's transpose read through h (TransposedAmax): the
// transposed operand's element (c0 + j, r0 + lane) is this one's (r0 + lane, c0 + j), its
// columns (`rows` of them) along the lanes, read as load_tile and rotate_in_warp read that
// operand (zeros beyond its columns, the same runs and signs), so the bits are its quantizer's.
__device__ __forceinline__ unsigned transposed_tile_amax(const float (&tile)[32][33],
                                                         bool transposed, int rows, int cols,
                                                         int r0, int c0, const Rotation& h) {
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  const int c = r0 + tx;  // the transposed operand's column
  unsigned m = 0;
  for (int j = ty; j < 32 && c0 + j < cols; j += 8) {  // the warp's condition
    const float v =
        rotate_in_warp(c < rows ? tile_value(tile, transposed, tx, j) : 0.0f, c, rows, h);
    const unsigned a = c < rows ? f32_bits(v) & 0x7fffffffu : 0u;
    m = a > m ? a : m;
  }
  return m;
}

// dst(rows, cols) = the operand in fp32 (the staged copy that the Hadamard rotation, channel
// smoothing and the split channels change in place; operand_stats.cu's measured copy).
template <typename T>
__global__ void stage_kernel(float* dst, const T* src, int rows, int cols, bool transposed) {
  __shared__ float tile[32][33];
  const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  load_tile(tile, src, rows, cols, transposed, r0, c0);
  for (int i = ty; i < 32; i += 8) {
    const int r = r0 + i, c = c0 + tx;
    if (r < rows && c < cols) dst[size_t(r) * cols + c] = tile_value(tile, transposed, i, tx);
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

// The column groups a tile's 32 columns c0 .. c0 + 31 meet: the first, and how many (1 to 32).
__device__ __forceinline__ int tile_groups(int c0, int cols, int gc, int* j0) {
  *j0 = c0 / gc;
  return ((c0 + 32 < cols ? c0 + 32 : cols) - 1) / gc - *j0 + 1;
}

// The max of |x|'s bits a (lane's value; 0 outside the operand) over each column group of the
// lanes' 32 columns c0 .. c0 + 31 of the tile's row i, into gmax[group - j0][i] (shared, zeroed;
// a max is order-free). A group of 32k columns (or one that spans the row) holds all 32 lanes,
// one of 16 half of them: a shuffle reduction, and the lane that holds the max stores it (the
// one writer of that entry: a row is one warp's); other widths, a shared atomic per lane.
__device__ __forceinline__ void group_amax_into(unsigned (&gmax)[32][33], int i, unsigned a, int c0,
                                                int cols, int gc) {
  const int lane = threadIdx.x % 32;
  if (gc % 32 == 0 || gc >= cols) {
    const unsigned m = __reduce_max_sync(0xffffffffu, a);
    if (lane == 0) gmax[0][i] = m;
  } else if (gc == 16) {
    unsigned m = a;
    for (int o = 8; o > 0; o >>= 1) {
      const unsigned x = __shfl_xor_sync(0xffffffffu, m, o);
      m = x > m ? x : m;
    }
    if (lane % 16 == 0 && c0 + lane < cols) gmax[lane / 16][i] = m;
  } else if (c0 + lane < cols) {
    atomicMax(&gmax[(c0 + lane) / gc - c0 / gc][i], a);
  }
}

// row_amax[j * rows + r] = the bits of max |x| over the operand's row r, column group j (gc
// columns; group-major, so that the tile's 32 rows of a group are 32 consecutive words: one
// warp-wide atomic of 4 sectors, not a sector per row), and *tensor_bits = the max of |x|'s
// bits over the operand; both must start at 0. row_amax null: the operand is one group, whose
// amax is the tensor's (the per-tensor recipes). |x|'s bits order as |x| does, inf above every
// finite value and NaNs above inf, so the tensor's bits also say whether any value is
// non-finite. Reads the source once, in tiles; the tile's maxima meet in shared memory first,
// one global atomic per (row, group) and one per block for the tensor; and ta's amax, where
// asked (one atomic more a block).
template <typename T>
__global__ void operand_amax_kernel(const T* src, int rows, int cols, bool transposed, Rotation h,
                                    int gc, unsigned* row_amax, unsigned* tensor_bits,
                                    TransposedAmax ta) {
  __shared__ float tile[32][33];
  __shared__ unsigned gmax[32][33];  // [group - j0][row - r0]
  __shared__ unsigned wmax[32];      // each warp's
  const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  for (int t = threadIdx.x; t < 32 * 33; t += blockDim.x) (&gmax[0][0])[t] = 0;
  load_tile(tile, src, rows, cols, transposed, r0, c0);  // (its barrier orders the zeros too)
  unsigned tmax = 0;
  const int c = c0 + tx;
  for (int i = ty; i < 32 && r0 + i < rows; i += 8) {  // the condition is the warp's
    const float v =
        rotate_in_warp(c < cols ? tile_value(tile, transposed, i, tx) : 0.0f, c, cols, h);
    const unsigned a = c < cols ? f32_bits(v) & 0x7fffffffu : 0u;
    tmax = a > tmax ? a : tmax;
    if (row_amax) group_amax_into(gmax, i, a, c0, cols, gc);
  }
  block_amax(tmax, tensor_bits, wmax);
  if (ta.bits) {  // (block-uniform; the barrier first: wmax is read above)
    __syncthreads();
    block_amax(transposed_tile_amax(tile, transposed, rows, cols, r0, c0, ta.h), ta.bits, wmax);
  }
  if (!row_amax) return;
  int j0 = 0;
  const int ng = tile_groups(c0, cols, gc, &j0);
  for (int t = threadIdx.x; t < ng * 32; t += blockDim.x) {
    const int g = t / 32, i = t % 32;
    if (r0 + i < rows) atomicMax(&row_amax[size_t(j0 + g) * rows + r0 + i], gmax[g][i]);
  }
}

// The scale pair of a group of amax m: a given delayed scale or a margin gives the per-tensor
// recipes' enc, dec = 1 / enc (quantize.cpp's qdq_tensor_fp8); with neither, group_scale's (its
// FP32 case is the same rule). p carries the operand's tensor_enc and margin.
__device__ __forceinline__ Scale2 scale_pair(const QuantParams& p, float m, float tscale) {
  if (p.tensor_enc <= 0 && p.margin == 0) return group_scale(p, m, tscale);
  const float enc =
      p.tensor_enc > 0 ? p.tensor_enc : fp8_scale_from_amax(m, elem_format_max(p.elem), p.margin);
  return Scale2{enc, 1.0f / enc};
}

// scales[j * ngr + gi] for every group (row group gi, column group j; group-major, as
// row_amax), and *post = the GEMM's factor for the operand. row_amax null: one group, whose
// amax is the tensor's (the max over its rows' either way, bit for bit). nonfinite_post: *post
// when the tensor held a non-finite value (1 for the portable path, whose operand is all NaN
// then; NaN for the native path, whose codes cannot all be NaN).
static __global__ void group_scale_kernel(const unsigned* row_amax, int rows, QuantParams p,
                                          const unsigned* tensor_bits, Scale2* scales, float* post,
                                          float nonfinite_post) {
  const unsigned tb = *tensor_bits;
  const bool finite = tb < 0x7f800000u;
  // NVFP4's second level: the tensor scale that maps the largest block scale to E4M3's max.
  const float tscale =
      p.scale == ScaleFormat::E4M3 && finite ? nvfp4_tensor_scale(p.elem, bits_f32(tb)) : 1.0f;
  const size_t total = size_t(p.ngr) * p.ngc;
  const size_t t0 = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (t0 == 0)
    *post = !finite ? nonfinite_post : p.scale == ScaleFormat::E4M3 ? 1.0f / tscale : 1.0f;
  if (!finite) return;  // apply_kernel writes NaN without reading a scale
  for (size_t t = t0; t < total; t += size_t(gridDim.x) * blockDim.x) {
    const int j = int(t / p.ngr), gi = int(t % p.ngr);
    const int r1 = (gi + 1) * p.gr < rows ? (gi + 1) * p.gr : rows;
    float m = row_amax ? 0.0f : bits_f32(tb);
    for (int r = gi * p.gr; row_amax && r < r1; r++) {
      const float a = bits_f32(row_amax[size_t(j) * rows + r]);
      m = a > m ? a : m;
    }
    scales[t] = scale_pair(p, m, tscale);
  }
}

// The scales of the tile's rows r0 .. r0 + 31 and the column groups its columns meet, staged in
// shared memory (ts.at(group - j0, row - r0); a warp reads 32 consecutive entries of a group,
// not a sector per row and element), and the tensor's amax bits, read once per block. Ends
// with a barrier.
struct TileScales {  // (plain arrays: a __shared__ object has no initializers)
  float enc[32][32], dec[32][32];
  unsigned tbits;
  __device__ Scale2 at(int g, int i) const { return Scale2{enc[g][i], dec[g][i]}; }
};
__device__ __forceinline__ void load_tile_scales(TileScales& ts, const Scale2* scales,
                                                 const unsigned* tensor_bits, const QuantParams& p,
                                                 int rows, int cols, int r0, int c0) {
  if (threadIdx.x == 0) ts.tbits = *tensor_bits;
  __syncthreads();
  if (ts.tbits >= 0x7f800000u) return;  // no scales were drawn (the operand goes NaN)
  int j0 = 0;
  const int ng = tile_groups(c0, cols, p.gc, &j0);
  for (int t = threadIdx.x; t < ng * 32; t += blockDim.x) {
    const int g = t / 32, i = t % 32;
    if (r0 + i >= rows) continue;
    const Scale2 x = scales[size_t(j0 + g) * p.ngr + (r0 + i) / p.gr];
    ts.enc[g][i] = x.enc, ts.dec[g][i] = x.dec;
  }
  __syncthreads();
}

// out (rows, cols, row-major) = round(x enc) dec at each element's group scale, stored as O
// (exact when the caller chose O = bf16); all NaN when the operand held a non-finite value.
// The source read in tiles, as operand_amax_kernel read it.
template <typename T, ElemFormat F, bool SR, typename O>
__global__ void apply_kernel(O* out, const T* src, int rows, int cols, bool transposed, Rotation h,
                             QuantParams p, const Scale2* scales, const unsigned* tensor_bits,
                             uint64_t mixed) {
  __shared__ float tile[32][33];
  __shared__ TileScales ts;
  const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  load_tile_scales(ts, scales, tensor_bits, p, rows, cols, r0, c0);
  load_tile(tile, src, rows, cols, transposed, r0, c0);
  const bool finite = ts.tbits < 0x7f800000u;
  const int c = c0 + tx;
  for (int i = ty; i < 32 && r0 + i < rows; i += 8) {  // the condition is the warp's
    const int r = r0 + i;
    const float v =
        rotate_in_warp(c < cols ? tile_value(tile, transposed, i, tx) : 0.0f, c, cols, h);
    if (c >= cols) continue;
    const size_t at = size_t(r) * cols + c;
    if (!finite) {
      out[at] = st<O>(bits_f32(0x7fc00000u));
      continue;
    }
    const Scale2 g = ts.at(c / p.gc - c0 / p.gc, i);
    const uint32_t bits = SR ? quant_sr_bits(mixed, uint64_t(at)) : 0u;
    out[at] = st<O>(round_elem<F, SR>(v * g.enc, bits) * g.dec);
  }
}

// ---- Codes for the native block-scaled GEMMs (src/backends/cuda/matmul_native.cu) ----
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
//     SCALAR_32F      fp32, one for the tensor (Tensor granularity: the per-tensor recipes)
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
    case CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F: return 1;
    default: return size_t((rows + 127) / 128) * 128 * ((nj + 3) / 4 * 4);
  }
}

__host__ __device__ inline bool native_scale_bytes_mode(cublasLtMatmulMatrixScale_t m) {
  return m == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0 ||
         m == CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3;
}

// Entry t of the layout: the row group gi and block j whose dec it holds; false for padding.
__device__ __forceinline__ bool native_entry(cublasLtMatmulMatrixScale_t m, size_t t, int rows,
                                             int gr, int nj, int* gi, int* j) {
  const int njp = (nj + 3) / 4 * 4;
  *gi = 0, *j = 0;
  switch (m) {
    case CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F: *gi = int(t); return true;
    case CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F: return true;  // the one group
    case CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F:
      *gi = int(t % rows) / gr, *j = int(t / rows);
      return true;
    case CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F:
      *gi = int(t / njp), *j = int(t % njp);
      return *j < nj;
    default: {
      const int tile = int(t / 512), w = int(t % 512), nct = njp / 4;
      const int r = (tile / nct) * 128 + ((w % 16) / 4) * 32 + w / 16;
      *j = (tile % nct) * 4 + w % 4;
      *gi = r / gr;
      return r < rows && *j < nj;
    }
  }
}

// The inverse: the entry of row r (of row group gi) and block j (native_entry's layouts).
__device__ __forceinline__ size_t native_index(cublasLtMatmulMatrixScale_t m, int r, int gi, int j,
                                               int rows, int nj) {
  const int njp = (nj + 3) / 4 * 4;
  switch (m) {
    case CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F: return size_t(r);
    case CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F: return 0;
    case CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F: return size_t(j) * rows + r;
    case CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F: return size_t(gi) * njp + j;
    default:
      return (size_t(r / 128) * (njp / 4) + j / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 +
             j % 4;
  }
}

// out[t] = dec in the mode's type (an E8M0 / UE4M3 byte: dec is a power of two / a UE4M3 value).
__device__ __forceinline__ void native_scale_store(void* out, cublasLtMatmulMatrixScale_t m,
                                                   size_t t, float dec) {
  if (m == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0)
    static_cast<uint8_t*>(out)[t] = f32_to_e8m0(dec, false, true);
  else if (m == CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3)
    static_cast<uint8_t*>(out)[t] = f32_to_ue4m3(dec);
  else
    static_cast<float*>(out)[t] = dec;
}

// One thread per scale entry (grid-stride over native_scale_count): the layout above, from the
// groups' scales; when the tensor held a non-finite value (the GEMM's factor is NaN then),
// NaN for the fp32 layouts and neutral for the byte ones (padding is neutral always): NaN fp32
// scales, so that code 0 times NaN makes every product NaN in a GEMM that writes the output
// itself (matmul_scaled.cu's direct form, which has no epilogue to apply the NaN factor);
// neutral byte scales (E8M0 / UE4M3, whose GEMMs keep the epilogue and its factor).
static __global__ void native_scale_kernel(void* out, cublasLtMatmulMatrixScale_t m,
                                           const Scale2* scales, QuantParams p, int rows,
                                           const unsigned* tensor_bits) {
  const bool finite = *tensor_bits < 0x7f800000u;
  const size_t n = native_scale_count(m, rows, p.ngr, p.ngc);
  for (size_t t = blockIdx.x * size_t(blockDim.x) + threadIdx.x; t < n;
       t += size_t(gridDim.x) * blockDim.x) {
    int gi = 0, j = 0;
    const bool in = native_entry(m, t, rows, p.gr, p.ngc, &gi, &j);
    const float dec = !in                         ? 1.0f
                      : finite                    ? scales[size_t(j) * p.ngr + gi].dec
                      : native_scale_bytes_mode(m) ? 1.0f
                                                  : bits_f32(0x7fc00000u);
    native_scale_store(out, m, t, dec);
  }
}

// The code of round(v) in format F (apply_kernel's rounding, the code instead of its value).
template <ElemFormat F, bool SR>
__device__ __forceinline__ uint8_t elem_code(float v, uint32_t bits) {
  return f32_to_elem<F>(v, SR, bits);
}

// codes (layout above) of the operand at its groups' scales, the source read in tiles as
// apply_kernel reads it; the stochastic bits of element i are apply_kernel's. An E2M1 pair
// (columns c, c + 1: lanes 2k, 2k + 1) meets in the even lane through a shuffle. Zeros when
// the operand held a non-finite value.
template <typename T, ElemFormat F, bool SR>
__global__ void codes_kernel(uint8_t* out, const T* src, int rows, int cols, bool transposed,
                             Rotation h, QuantParams p, const Scale2* scales,
                             const unsigned* tensor_bits, uint64_t mixed) {
  __shared__ float tile[32][33];
  __shared__ TileScales ts;
  const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  load_tile_scales(ts, scales, tensor_bits, p, rows, cols, r0, c0);
  load_tile(tile, src, rows, cols, transposed, r0, c0);
  const bool finite = ts.tbits < 0x7f800000u;
  const int c = c0 + tx;
  for (int i = ty; i < 32 && r0 + i < rows; i += 8) {  // the condition is the warp's
    const int r = r0 + i;
    const size_t at = size_t(r) * cols + c;
    const float v =
        rotate_in_warp(c < cols ? tile_value(tile, transposed, i, tx) : 0.0f, c, cols, h);
    uint8_t code = 0;
    if (finite && c < cols) {
      const Scale2 g = ts.at(c / p.gc - c0 / p.gc, i);
      const uint32_t bits = SR ? quant_sr_bits(mixed, uint64_t(at)) : 0u;
      code = elem_code<F, SR>(v * g.enc, bits);
    }
    if constexpr (elem_bits(F) == 4) {  // two codes a byte
      const unsigned high = __shfl_down_sync(0xffffffffu, unsigned(code), 1);
      if (tx % 2 == 0 && c < cols) out[at / 2] = uint8_t(code | (high << 4));
    } else if (c < cols) {
      out[at] = code;
    }
  }
}

// Channel smoothing (src/precision/smoothing.h): x(rows, cols) <- x diag(1/s) (divide: the
// correctly rounded x / s, as nvcc's IEEE division gives it without --use_fast_math) or x diag(s),
// as src/backends/cpu/matmul_scaled.cpp's smooth_columns, so the smoothed operands are
// bit-identical. Grid-stride over the elements. (The scaled linear's forward and the operand
// statistics.)
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

// A scaled GEMM's scalars on the device where it writes the output itself with the operands'
// tensor factors (NVFP4's 1 / S, src/backends/cuda/matmul_scaled.cu): alpha = post_a post_b,
// the epilogue's f below (the same fp32 product), and beta = 1 when accumulating, else 0.
static __global__ void gemm_scalars_kernel(float* scalars, const float* post, bool accumulate) {
  scalars[0] = post[0] * post[1];
  scalars[1] = accumulate ? 1.0f : 0.0f;
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
