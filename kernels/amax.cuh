// amax.cuh: an op that writes a per-tensor-scaled linear's input takes that input's amax as it
// writes it (layernorm, GELU, the attention's output: Backend's InputAmax), so that the linear's
// quantizer reads the input once instead of twice (an amax pass, then the codes; current
// per-tensor scaling needs the whole tensor's amax before the first value is rounded,
// kernels/quantize_tile.cuh). The measure is the quantizers' own (operand_amax_kernel's): the
// max of |x|'s fp32 bits over the values as stored (widened from the tensor's type), which
// order as |x| does, inf above every finite value and NaN above inf. The word must start at 0.
#pragma once
#include "common.cuh"

namespace tg::gpu {

// |x|'s fp32 bits (the measure above) of a value as the tensor stores it.
template <typename T>
__device__ __forceinline__ unsigned abs_bits(T x) {
  return f32_bits(ld(x)) & 0x7fffffffu;
}
__device__ __forceinline__ unsigned max_bits(unsigned a, unsigned b) { return a > b ? a : b; }

// *amax <- max(*amax, the warp's largest m): one atomic a warp. Every lane of the warp calls it.
__device__ __forceinline__ void warp_amax(unsigned m, unsigned* amax) {
  m = __reduce_max_sync(0xffffffffu, m);
  if (threadIdx.x % 32 == 0) atomicMax(amax, m);
}

// *amax <- max(*amax, the block's largest m): one atomic a block. Every thread of the block
// calls it (a barrier); blockDim.x a multiple of 32; wmax: the kernel's 32 shared words.
__device__ __forceinline__ void block_amax(unsigned m, unsigned* amax, unsigned* wmax) {
  m = __reduce_max_sync(0xffffffffu, m);
  if (threadIdx.x % 32 == 0) wmax[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (unsigned w = 1; w < blockDim.x / 32; w++) m = max_bits(m, wmax[w]);
    atomicMax(amax, m);
  }
}

}  // namespace tg::gpu
