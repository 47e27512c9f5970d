// quantize_tile.cuh: the one-pass quantizer of a GEMM operand (src/backends/cuda/quantize_blocks.cu
// picks it): the same values as quantize_blocks.cuh's passes (operand_amax_kernel,
// group_scale_kernel, then codes_kernel + native_scale_kernel or apply_kernel), bit for bit, with
// the source read once instead of twice.
//
// Why one pass is possible: a group's scale needs only its own amax, so where every scale group
// lies inside the block of threads that reads it, the block can take the amax of each of its
// groups, draw the scale pair by the same rule (scale_pair: src/numerics/group_scale.h, or the
// delayed recipe's given tensor_enc, which needs no amax at all) and round the values it still
// holds in registers. That holds for the 1 x B blocks (fp8-block's 1 x 128, mxfp8's and mxfp4's
// 1 x 32, 1 x 16) and B x B tiles (fp8-block's 128 x 128 weights, 16 x 16) and for the per-tensor
// delayed scale: a block reads a super-tile of nr x nc sub-tiles of 32 x 32 (1 or 4 each way, so
// that B up to 128 fits; up to 64 values a thread; a kernel is compiled for the most its format
// needs, kSpan: 4 only for 8-bit round-to-nearest codes, one_pass.h says why), each through shared memory as load_tile reads
// one (coalesced whether the operand is the tensor or its transpose) and rotated as read
// (rotate_in_warp, the FP4 recipes' Hadamard). Per-tensor current scaling needs the whole
// tensor's amax before the first value is rounded: where that amax was taken before
// (QuantParams::tensor_amax, a device word: the amax a kernel that read or wrote the same
// values took, e.g. bias_backward's of a linear's gradient, the layernorm's, GELU's or the
// attention's of the forward's input (kernels/amax.cuh) or an earlier quantizer's, see
// src/backends/cuda/matmul_scaled.cu), the scale is drawn from it on the device in the same
// fp32 operations as group_scale_kernel, and one pass does; where none was, the two passes
// stay. So with NVFP4, whose groups' UE4M3 scales are drawn against a tensor scale S from the
// operand's amax (group_scale.h): given that amax, each block draws S from it and its groups'
// scales from their own amaxes, and the finish kernel writes the GEMM's factor 1 / S.
//
// The all-NaN rule of an operand that holds an inf or NaN is the one thing a block cannot see
// alone: each block atomicMax-es its largest |x| bits into tensor_bits (which the per-tensor
// recipes also copy out for the amax history), and the small finish kernel after it, which reads
// only that word, writes *post and, for a non-finite operand, what the two-pass kernels write
// then (codes 0 and NaN fp32 / neutral byte scales; a dequantized operand all NaN), so every
// output and the GEMM's result stay bit-identical. In the finite case it writes only the scale
// layouts' padding (neutral).
#pragma once
#include "quantize_blocks.cuh"
#include "src/numerics/one_pass.h"

namespace tg::gpu::quant {

// A block's super-tile and the groups it meets (src/numerics/one_pass.h).
using TilePlan = OnePassPlan;
constexpr int kTileGroups = kOnePassGroups;

// The plan of p over an operand of `rows` x `cols` in super-tiles of up to max_span sub-tiles
// each way (one_pass_max_span), or false where it needs two passes.
inline bool plan_one_pass(const QuantParams& p, int rows, int cols, int max_span, TilePlan* t) {
  return one_pass_plan(rows, cols, p.gr, p.gc, p.ngr, p.ngc, p.scale == ScaleFormat::E4M3,
                       p.tensor_enc > 0, p.tensor_amax != nullptr, max_span, t);
}
// The span a kernel for format F, rounded stochastically or not, is compiled for.
template <ElemFormat F, bool SR>
constexpr int kSpan = one_pass_max_span(elem_bits(F), SR);

// The block's shared memory: the sub-tile being read, then its groups' amax bits and scales.
struct OnePassShared {  // (plain arrays: a __shared__ object has no initializers)
  float tile[32][33];
  unsigned gmax[kTileGroups];
  float enc[kTileGroups], dec[kTileGroups];
  unsigned wmax[32];
};

// A thread's values of its block's super-tile: sub-tile (a, b) of at most N x N, rows ty + 8k,
// column tx.
template <int N>
using TileValues = float[N][N][4];

// Whether sub-tile (a, b) of the super-tile at (R0, C0) holds any of the operand (block-uniform).
__device__ __forceinline__ bool sub_tile_in(const TilePlan& tp, int a, int b, int rows, int cols,
                                            int R0, int C0) {
  return a < tp.nr && b < tp.nc && R0 + 32 * a < rows && C0 + 32 * b < cols;
}

// The group of element (r, c) among the block's gmax / enc / dec entries.
__device__ __forceinline__ int group_key(const QuantParams& p, const TilePlan& tp, int r, int c,
                                         int R0, int C0) {
  return (r / p.gr - R0 / p.gr) * tp.gpc + (c / p.gc - C0 / p.gc);
}

// v <- the super-tile's values (0 outside the operand), each sub-tile read through shared
// memory as load_tile reads it and rotated as read (rotate_in_warp: every lane of a row's warp);
// *tmax <- the thread's largest |x| bits of the transpose ta asks for (TransposedAmax).
template <int N, typename T>
__device__ __forceinline__ void read_super_tile(OnePassShared& s, TileValues<N>& v, const T* src,
                                                int rows, int cols, bool transposed,
                                                const Rotation& h, const TransposedAmax& ta,
                                                const TilePlan& tp, int R0, int C0,
                                                unsigned* tmax) {
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
#pragma unroll
  for (int a = 0; a < N; a++)
#pragma unroll
    for (int b = 0; b < N; b++) {
#pragma unroll
      for (int k = 0; k < 4; k++) v[a][b][k] = 0.0f;
      if (!sub_tile_in(tp, a, b, rows, cols, R0, C0)) continue;
      const int r0 = R0 + 32 * a, c0 = C0 + 32 * b, c = c0 + tx;
      load_tile(s.tile, src, rows, cols, transposed, r0, c0);
#pragma unroll
      for (int k = 0; k < 4; k++)
        if (r0 + ty + 8 * k < rows)  // the warp's condition
          v[a][b][k] = rotate_in_warp(
              c < cols ? tile_value(s.tile, transposed, ty + 8 * k, tx) : 0.0f, c, cols, h);
      if (ta.bits)  // (block-uniform)
        *tmax = max_bits(*tmax,
                         transposed_tile_amax(s.tile, transposed, rows, cols, r0, c0, ta.h));
      __syncthreads();  // the next sub-tile refills the tile
    }
}

// s.gmax <- the max of |x|'s bits over each group the block meets (zeroed before; a max is
// order-free: a warp reduction where a row's 32 lanes are one group or two, else one shared
// atomic a lane), and *tensor_bits <- the block's largest |x| bits (non-finite: >= inf's).
template <int N>
__device__ __forceinline__ void super_tile_amax(OnePassShared& s, const TileValues<N>& v,
                                                const QuantParams& p, const TilePlan& tp, int rows,
                                                int cols, int R0, int C0, unsigned* tensor_bits) {
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  const bool groups = !p.groups_given();
  unsigned tmax = 0;
#pragma unroll
  for (int a = 0; a < N; a++)
#pragma unroll
    for (int b = 0; b < N; b++)
#pragma unroll
      for (int k = 0; k < 4; k++) {
        const int r = R0 + 32 * a + ty + 8 * k, c = C0 + 32 * b + tx;
        if (!sub_tile_in(tp, a, b, rows, cols, R0, C0) || r >= rows) continue;  // warp-uniform
        const unsigned x = c < cols ? f32_bits(v[a][b][k]) & 0x7fffffffu : 0u;
        tmax = x > tmax ? x : tmax;
        if (!groups) continue;
        unsigned m = x;
        bool lead = c < cols;
        if (p.gc % 32 == 0 || p.ngc == 1) {
          m = __reduce_max_sync(0xffffffffu, x), lead = tx == 0;  // column c0 < cols
        } else if (p.gc == 16) {
          for (int o = 8; o > 0; o >>= 1) {
            const unsigned y = __shfl_xor_sync(0xffffffffu, m, o);
            m = y > m ? y : m;
          }
          lead = lead && tx % 16 == 0;
        }
        if (lead) atomicMax(&s.gmax[group_key(p, tp, r, c, R0, C0)], m);
      }
  block_amax(tmax, tensor_bits, s.wmax);
}

// Group (gi, j)'s decode factor into the native scale tensor, every entry that holds it
// (native_index: one per row of the group, or one for a 128 x 128 tile or the tensor).
__device__ __forceinline__ void write_group_scale(void* out, cublasLtMatmulMatrixScale_t m,
                                                  const QuantParams& p, int rows, int gi, int j,
                                                  float dec) {
  if (m == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F ||
      m == CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F) {
    native_scale_store(out, m, native_index(m, 0, gi, j, rows, p.ngc), dec);
    return;
  }
  const int r1 = (gi + 1) * p.gr < rows ? (gi + 1) * p.gr : rows;
  for (int r = gi * p.gr; r < r1; r++)
    native_scale_store(out, m, native_index(m, r, gi, j, rows, p.ngc), dec);
}

// NVFP4's tensor scale S from the given amax (group_scale_kernel's, for the same bits); 1 for
// the other formats and a non-finite amax (the finish kernel writes NaN then).
__device__ __forceinline__ float given_tensor_scale(const QuantParams& p) {
  if (p.scale != ScaleFormat::E4M3 || !p.tensor_amax) return 1.0f;
  const unsigned tb = *p.tensor_amax;
  return tb < 0x7f800000u ? nvfp4_tensor_scale(p.elem, bits_f32(tb)) : 1.0f;
}

// s.enc, s.dec <- each group's scale pair from its amax (scale_pair: group_scale_kernel's rule;
// the one group's amax is *p.tensor_amax where that is given, NVFP4's tensor scale drawn from
// it; a non-finite one left to the finish kernel as in the two passes), and, when scale_out is
// given, its dec into the native layout,
// written by the block that holds the group's first element (a delayed tensor scale: block
// (0, 0)). Starts and ends with a barrier.
__device__ __forceinline__ void super_tile_scales(OnePassShared& s, const QuantParams& p,
                                                  const TilePlan& tp, int rows, int R0, int C0,
                                                  void* scale_out, cublasLtMatmulMatrixScale_t m) {
  __syncthreads();
  const float tscale = given_tensor_scale(p);
  for (int t = threadIdx.x; t < tp.gpr * tp.gpc; t += blockDim.x) {
    const int gi = R0 / p.gr + t / tp.gpc, j = C0 / p.gc + t % tp.gpc;
    if (gi >= p.ngr || j >= p.ngc) continue;
    const bool one_given = p.tensor_amax && p.scale != ScaleFormat::E4M3;
    const unsigned amax = one_given ? *p.tensor_amax : s.gmax[t];
    const Scale2 g = scale_pair(p, bits_f32(amax), tscale);
    s.enc[t] = g.enc, s.dec[t] = g.dec;
    if (scale_out && gi * p.gr >= R0 && j * p.gc >= C0)
      write_group_scale(scale_out, m, p, rows, gi, j, g.dec);
  }
  __syncthreads();
}

// The front of both one-pass kernels: read, amax, scales (the super-tile at (R0, C0)).
template <int N, typename T>
__device__ __forceinline__ void one_pass_front(OnePassShared& s, TileValues<N>& v, const T* src,
                                               int rows, int cols, bool transposed,
                                               const Rotation& h, const QuantParams& p,
                                               const TilePlan& tp, int R0, int C0,
                                               unsigned* tensor_bits, void* scale_out,
                                               cublasLtMatmulMatrixScale_t m) {
  for (int t = threadIdx.x; t < kTileGroups; t += blockDim.x) s.gmax[t] = 0;
  unsigned transposed_max = 0;
  read_super_tile(s, v, src, rows, cols, transposed, h, p.transposed_amax, tp, R0, C0,
                  &transposed_max);  // (barriers: the zeros)
  super_tile_amax(s, v, p, tp, rows, cols, R0, C0, tensor_bits);
  if (p.transposed_amax.bits) {  // (block-uniform; the barrier first: s.wmax is read above)
    __syncthreads();
    block_amax(transposed_max, p.transposed_amax.bits, s.wmax);
  }
  super_tile_scales(s, p, tp, rows, R0, C0, scale_out, m);
}

// codes (quantize_blocks.cuh's layout, codes_kernel's rounding and stochastic bits) and the
// native scale tensor of the operand, one block per super-tile (grid (cols / 32 nc, rows /
// 32 nr)); finish_codes_kernel runs after it. An E2M1 pair meets in the even lane.
template <typename T, ElemFormat F, bool SR, int N = kSpan<F, SR>>
__global__ void one_pass_codes_kernel(uint8_t* out, void* scale_out,
                                      cublasLtMatmulMatrixScale_t m, const T* src, int rows,
                                      int cols, bool transposed, Rotation h, QuantParams p,
                                      TilePlan tp, unsigned* tensor_bits, uint64_t mixed) {
  __shared__ OnePassShared s;
  TileValues<N> v;
  const int R0 = blockIdx.y * 32 * tp.nr, C0 = blockIdx.x * 32 * tp.nc;
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  one_pass_front(s, v, src, rows, cols, transposed, h, p, tp, R0, C0, tensor_bits, scale_out, m);
#pragma unroll
  for (int a = 0; a < N; a++)
#pragma unroll
    for (int b = 0; b < N; b++)
#pragma unroll
      for (int k = 0; k < 4; k++) {
        const int r = R0 + 32 * a + ty + 8 * k, c = C0 + 32 * b + tx;
        if (!sub_tile_in(tp, a, b, rows, cols, R0, C0) || r >= rows) continue;  // warp-uniform
        const size_t at = size_t(r) * cols + c;
        uint8_t code = 0;
        if (c < cols) {
          const uint32_t bits = SR ? quant_sr_bits(mixed, uint64_t(at)) : 0u;
          code = elem_code<F, SR>(v[a][b][k] * s.enc[group_key(p, tp, r, c, R0, C0)], bits);
        }
        if constexpr (elem_bits(F) == 4) {  // two codes a byte
          const unsigned high = __shfl_down_sync(0xffffffffu, unsigned(code), 1);
          if (tx % 2 == 0 && c < cols) out[at / 2] = uint8_t(code | (high << 4));
        } else if (c < cols) {
          out[at] = code;
        }
      }
}

// out (rows, cols, row-major) = round(x enc) dec as O (apply_kernel's values), one block per
// super-tile; finish_operand_kernel runs after it.
template <typename T, ElemFormat F, bool SR, typename O, int N = kSpan<F, SR>>
__global__ void one_pass_operand_kernel(O* out, const T* src, int rows, int cols, bool transposed,
                                        Rotation h, QuantParams p, TilePlan tp,
                                        unsigned* tensor_bits, uint64_t mixed) {
  __shared__ OnePassShared s;
  TileValues<N> v;
  const int R0 = blockIdx.y * 32 * tp.nr, C0 = blockIdx.x * 32 * tp.nc;
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  one_pass_front(s, v, src, rows, cols, transposed, h, p, tp, R0, C0, tensor_bits, nullptr,
                 CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F);
#pragma unroll
  for (int a = 0; a < N; a++)
#pragma unroll
    for (int b = 0; b < N; b++)
#pragma unroll
      for (int k = 0; k < 4; k++) {
        const int r = R0 + 32 * a + ty + 8 * k, c = C0 + 32 * b + tx;
        if (!sub_tile_in(tp, a, b, rows, cols, R0, C0) || r >= rows || c >= cols) continue;
        const size_t at = size_t(r) * cols + c;
        const int g = group_key(p, tp, r, c, R0, C0);
        const uint32_t bits = SR ? quant_sr_bits(mixed, uint64_t(at)) : 0u;
        out[at] = st<O>(round_elem<F, SR>(v[a][b][k] * s.enc[g], bits) * s.dec[g]);
      }
}

// The finishing word of the block reads, shared: whether the operand was finite.
__device__ __forceinline__ bool operand_finite(const unsigned* tensor_bits) {
  __shared__ unsigned tb;
  if (threadIdx.x == 0) tb = *tensor_bits;
  __syncthreads();
  return tb < 0x7f800000u;
}

// After one_pass_codes_kernel (a small grid-stride grid: each block reads tensor_bits once):
// *post = 1, NVFP4's 1 / S (nonfinite_post for a non-finite operand), the layout's padding
// neutral, and for a
// non-finite operand what the two-pass kernels write (native_scale_kernel's NaN fp32 / neutral
// byte scales, codes_kernel's zero codes).
static __global__ void finish_codes_kernel(const unsigned* tensor_bits, float* post,
                                           float nonfinite_post, uint8_t* codes, size_t code_bytes,
                                           void* scale, cublasLtMatmulMatrixScale_t m, int rows,
                                           QuantParams p) {
  const bool finite = operand_finite(tensor_bits);
  const size_t t0 = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  const size_t step = size_t(gridDim.x) * blockDim.x;
  if (t0 == 0) *post = finite ? 1.0f / given_tensor_scale(p) : nonfinite_post;
  const size_t n = native_scale_count(m, rows, p.ngr, p.ngc);
  for (size_t t = t0; t < n; t += step) {
    int gi = 0, j = 0;
    const bool in = native_entry(m, t, rows, p.gr, p.ngc, &gi, &j);
    if (in && finite) continue;  // the group's block wrote it
    native_scale_store(scale, m, t,
                       in && !native_scale_bytes_mode(m) ? bits_f32(0x7fc00000u) : 1.0f);
  }
  if (finite) return;
  for (size_t t = t0; t < code_bytes; t += step) codes[t] = 0;
}

// After one_pass_operand_kernel: *post = 1, NVFP4's 1 / S (1 either way for a non-finite
// operand: the portable path's factor), and NaN everywhere for a non-finite operand
// (apply_kernel's values then).
template <typename O>
__global__ void finish_operand_kernel(const unsigned* tensor_bits, float* post, O* out, size_t n,
                                      QuantParams p) {
  const bool finite = operand_finite(tensor_bits);
  const size_t t0 = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (t0 == 0) *post = finite ? 1.0f / given_tensor_scale(p) : 1.0f;
  if (finite) return;
  for (size_t t = t0; t < n; t += size_t(gridDim.x) * blockDim.x)
    out[t] = st<O>(bits_f32(0x7fc00000u));
}

}  // namespace tg::gpu::quant
