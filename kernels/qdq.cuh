// qdq.cuh: FP8 quantize-dequantize emulation of a matmul operand (what the CPU backend's
// qdq in src/cpu/cpu_backend.cpp does), for the FP8 block linears until real FP8 GEMMs land:
//   amax = max |x| (non-finite -> inf);  s = scale, or from amax (current scaling);
//   x <- decode(encode_sat(x * s)) / s  in E4M3 or E5M2 (src/formats.h, round to nearest
//   even, saturating); a non-finite amax turns every x into NaN so the step is skipped.
// The operand is an fp32 copy (the GEMM after it runs in fp32, like the CPU's sgemm).
// amax: fixed grid of partial maxima + non-finite counts, then one block (deterministic).
#pragma once
#include "common.cuh"

namespace tg::gpu {

constexpr int kAmaxBlocks = 256, kAmaxThreads = 512;

__global__ void amax_partial_kernel(float* partial_max, float* partial_bad, const float* x,
                                    size_t n) {
  __shared__ float shared[32];
  float m = 0, bad = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float a = fabsf(x[i]);
    if (!isfinite(a))
      bad += 1.f;
    else
      m = fmaxf(m, a);
  }
  m = block_reduce<true>(m, shared);
  bad = block_reduce<false>(bad, shared);
  if (threadIdx.x == 0) {
    partial_max[blockIdx.x] = m;
    partial_bad[blockIdx.x] = bad;
  }
}

// One block: out[0] = amax (inf when any value is non-finite).
__global__ void amax_final_kernel(float* out, const float* partial_max, const float* partial_bad,
                                  int parts) {
  __shared__ float shared[32];
  float m = 0, bad = 0;
  for (int i = threadIdx.x; i < parts; i += blockDim.x) {
    m = fmaxf(m, partial_max[i]);
    bad += partial_bad[i];
  }
  m = block_reduce<true>(m, shared);
  bad = block_reduce<false>(bad, shared);
  if (threadIdx.x == 0) out[0] = bad > 0 ? INFINITY : m;
}

// x <- qdq(x) with scale s (host-computed from amax); finite == false poisons with NaN.
__global__ void qdq_kernel(float* x, size_t n, float s, bool e4m3, bool finite) {
  const float inv = 1.f / s;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    if (!finite) {
      x[i] = NAN;
      continue;
    }
    const float v = x[i] * s;
    const float q = e4m3 ? e4m3_to_f32(f32_to_e4m3(v, true)) : e5m2_to_f32(f32_to_e5m2(v, true));
    x[i] = q * inv;
  }
}

}  // namespace tg::gpu
