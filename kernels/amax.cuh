// amax.cuh: an op that writes a per-tensor-scaled linear's operand takes that operand's amax as
// it writes it, so that the linear's quantizer reads the operand once instead of twice (an amax
// pass, then the codes; current per-tensor scaling needs the whole tensor's amax before the
// first value is rounded, kernels/quantize_tile.cuh): the forward's input by the op that writes
// it (layernorm, GELU, the attention's output: Backend's InputAmax), the weights by AdamW as it
// writes them (Backend's WeightAmax: segment_amax below). The measure is the quantizers' own
// (operand_amax_kernel's): the max of |x|'s fp32 bits over the values as stored (widened from
// the tensor's type), which order as |x| does, inf above every finite value and NaN above inf.
// The word must start at 0.
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

// Where one call of an elementwise kernel (AdamW) takes the amaxes of the linears' weights it
// writes (Backend's WeightAmax, with the words the backend keeps): element i of the call with
// lo[r] <= i < hi[r] lies in segment (i - lo[r]) / seg_len[r] of range r, whose amax goes to
// words[r][segment]. n = 0: none taken.
struct SegmentAmax {
  static constexpr int kMax = 4;
  int n = 0;
  uint64_t lo[kMax] = {}, hi[kMax] = {}, seg_len[kMax] = {};
  unsigned* words[kMax] = {};
};
// Element i's word (null outside every range).
__device__ __forceinline__ unsigned* segment_word(const SegmentAmax& s, uint64_t i) {
  for (int r = 0; r < s.n; r++)
    if (i >= s.lo[r] && i < s.hi[r]) return s.words[r] + (i - s.lo[r]) / s.seg_len[r];
  return nullptr;
}
// Every lane of the warp calls it with its values' word (null: none) and largest |x| bits m:
// where the lanes share one word (a warp's values lie in one linear's weight but where a
// segment ends), one atomicMax a warp, else one a lane.
__device__ __forceinline__ void segment_amax(unsigned* word, unsigned m) {
  const unsigned all = 0xffffffffu;
  const auto w0 =
      reinterpret_cast<unsigned*>(__shfl_sync(all, reinterpret_cast<unsigned long long>(word), 0));
  if (__all_sync(all, word == w0)) {
    m = __reduce_max_sync(all, m);
    if (threadIdx.x % 32 == 0 && w0) atomicMax(w0, m);
  } else if (word) {
    atomicMax(word, m);
  }
}

}  // namespace tg::gpu
