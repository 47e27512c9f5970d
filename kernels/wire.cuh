// wire.cuh: gradients on the wire (src/numerics/wire_format.h), the CUDA twins of the host
// rows of src/numerics/wire_format.cpp, in rows of `part` elements (row r of the bytes at
// r * wire_bytes(part)):
//   encode:  fp32 rows -> encoded rows. bf16: one thread per element. FP8 (e4m3 or e5m2): one block of
//            kWireBlock threads per scale block: the block's amax and finiteness reduced in
//            shared memory (max is exact in any order), the scale from them
//            (wire_fp8_scale), one code per thread, the descale by thread 0, the row's padding
//            zeroed by the last block of the row.
//   sum:     sum[i] = -0 + row 0's element i + row 1's + ... (wire_add, in row order): one
//            thread per element, so the order is the CPU's.
//   decode:  every row's elements (wire_add onto -0), one thread per element.
// fp32 rows are copied as they are (the launcher's cudaMemcpyAsync).
#pragma once
#include "common.cuh"
#include "src/numerics/wire_format.h"

namespace tg::gpu {

__global__ void wire_encode_bf16_kernel(uint16_t* out, const float* x, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    out[i] = f32_to_bf16(x[i]);
}

// Grid: rows x blocks_per_row blocks of kWireBlock threads.
__global__ void wire_encode_fp8_kernel(uint8_t* out, const float* x, size_t part,
                                       size_t blocks_per_row, WireFormat f) {
  __shared__ float shared[32];
  const size_t row = blockIdx.x / blocks_per_row, b = blockIdx.x % blocks_per_row;
  const size_t i = b * kWireBlock + threadIdx.x, row_bytes = wire_bytes(part, f);
  uint8_t* dst = out + row * row_bytes;
  const bool here = i < part;
  const float v = here ? x[row * part + i] : 0.f;
  const float amax = block_reduce<true>(here ? fabsf(v) : 0.f, shared);
  const float bad = block_reduce<true>(here && !isfinite(v) ? 1.f : 0.f, shared);
  const float s = wire_fp8_scale(amax, f);
  if (here) dst[4 * blocks_per_row + i] = wire_fp8_code(v, s, f);
  if (threadIdx.x == 0) {
    const float descale = wire_fp8_descale(s, bad == 0.f);
    memcpy(dst + 4 * b, &descale, 4);
  }
  // The codes' padding to whole words: at most 3 bytes, by the row's last block.
  const size_t pad_end = row_bytes - 4 * blocks_per_row;
  if (b == blocks_per_row - 1 && threadIdx.x < pad_end - part)
    dst[4 * blocks_per_row + part + threadIdx.x] = 0;
}

__global__ void wire_sum_kernel(float* sum, const uint8_t* in, size_t part, size_t rows,
                                WireFormat f) {
  const size_t row_bytes = wire_bytes(part, f);
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < part;
       i += size_t(gridDim.x) * blockDim.x) {
    float acc = -0.f;
    for (size_t r = 0; r < rows; r++) acc = wire_add(in + r * row_bytes, part, i, f, acc);
    sum[i] = acc;
  }
}

__global__ void wire_decode_kernel(float* out, const uint8_t* in, size_t part, size_t rows,
                                   WireFormat f) {
  const size_t row_bytes = wire_bytes(part, f);
  for (size_t k = blockIdx.x * size_t(blockDim.x) + threadIdx.x; k < rows * part;
       k += size_t(gridDim.x) * blockDim.x)
    out[k] = wire_add(in + (k / part) * row_bytes, part, k % part, f, -0.f);
}

}  // namespace tg::gpu
