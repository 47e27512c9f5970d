// wire.cu: launchers of kernels/wire.cuh (gradients on the wire: encode, sum, decode rows of
// `part` elements; src/numerics/wire_format.h).
#include "kernels/wire.cuh"
#include "launch.h"

namespace tg::gpu {

namespace {
constexpr int kThreads = 256;
}

void wire_encode(Ctx& c, const float* x, size_t part, size_t rows, WireFormat f, uint8_t* out) {
  if (rows == 0 || part == 0) return;
  if (f == WireFormat::FP32) {
    TG_CUDA_CHECK(cudaMemcpyAsync(out, x, rows * part * sizeof(float), cudaMemcpyDeviceToDevice,
                                  c.stream));
    return;
  }
  if (f == WireFormat::BF16) {
    const size_t n = rows * part;
    launch(wire_encode_bf16_kernel, c.grid(n, kThreads), kThreads, 0, c.stream,
           reinterpret_cast<uint16_t*>(out), x, n);
  } else {
    const size_t blocks = wire_blocks(part);
    launch(wire_encode_fp8_kernel, dim3(unsigned(rows * blocks)), unsigned(kWireBlock), 0,
           c.stream, out, x, part, blocks, f);
  }
  TG_LAUNCH_CHECK();
}

void wire_sum(Ctx& c, const uint8_t* in, size_t part, size_t rows, WireFormat f, float* sum) {
  if (part == 0) return;
  launch(wire_sum_kernel, c.grid(part, kThreads), kThreads, 0, c.stream, sum, in, part, rows, f);
  TG_LAUNCH_CHECK();
}

void wire_decode(Ctx& c, const uint8_t* in, size_t part, size_t rows, WireFormat f, float* out) {
  if (rows == 0 || part == 0) return;
  launch(wire_decode_kernel, c.grid(rows * part, kThreads), kThreads, 0, c.stream, out, in, part,
         rows, f);
  TG_LAUNCH_CHECK();
}

}  // namespace tg::gpu
