// fp8_cast.cu: launchers of the per-tensor FP8 quantization kernels (kernels/fp8_kernels.cuh),
// what the CPU emulation (CpuBackend::qdq) does, split into kernels that the FP8 GEMMs
// (matmul_fp8.cu) consume: amax, the scale (device-side for the `current` recipe, from the
// host for `delayed`), the cast (optionally transposed, with fused amax and NaN poisoning),
// quantize-dequantize for the bf16 fallback. Semantics: src/backends/cuda/fp8.h, kernels/README.md.
#include <cstdint>

#include "fp8.h"
#include "launch.h"

namespace tg::gpu {

namespace {

bool aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

int sm_count() {
  static int cached[64] = {0};
  int dev = 0;
  TG_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= 64) dev = 0;
  if (cached[dev] == 0) {
    int n = 0;
    TG_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    cached[dev] = n > 0 ? n : 1;
  }
  return cached[dev];
}

}  // namespace

const char* fp8_format_name(Fp8Format f) { return f == Fp8Format::E4M3 ? "e4m3" : "e5m2"; }

unsigned fp8_grid(size_t work) {
  return grid_stride_blocks(work, fp8_detail::kThreads, sm_count(), 4);
}

void fp8_amax(float* amax, const bf16* x, size_t n, cudaStream_t stream) {
  using namespace fp8_detail;
  TG_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
  if (n == 0) return;
  const bool vec = aligned(x, 16);
  launch(amax_kernel<bf16>, fp8_grid(vec ? n / 8 + 1 : n), kThreads, 0, stream, x, n, vec,
         reinterpret_cast<unsigned*>(amax));
  TG_LAUNCH_CHECK();
}
void fp8_amax(float* amax, const float* x, size_t n, cudaStream_t stream) {
  using namespace fp8_detail;
  TG_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
  if (n == 0) return;
  const bool vec = aligned(x, 16);
  launch(amax_kernel<float>, fp8_grid(vec ? n / 4 + 1 : n), kThreads, 0, stream, x, n, vec,
         reinterpret_cast<unsigned*>(amax));
  TG_LAUNCH_CHECK();
}

void fp8_compute_scale(Fp8TensorScale* st, Fp8Format fmt, int margin, cudaStream_t stream) {
  launch(fp8_detail::compute_scale_kernel, 1, 32, 0, stream, &st->amax, fp8_format_max(fmt), margin,
         &st->scale, &st->descale);
  TG_LAUNCH_CHECK();
}

void fp8_set_scale(Fp8TensorScale* st, float s, cudaStream_t stream) {
  launch(fp8_detail::set_scale_kernel, 1, 32, 0, stream, s, &st->scale, &st->descale);
  TG_LAUNCH_CHECK();
}

void fp8_cast(uint8_t* q, const bf16* x, size_t n, Fp8Format fmt, const float* scale,
              float* amax_out, const float* poison_amax, cudaStream_t stream) {
  using namespace fp8_detail;
  if (amax_out) TG_CUDA_CHECK(cudaMemsetAsync(amax_out, 0, sizeof(float), stream));
  if (n == 0) return;
  const bool vec = aligned(x, 16) && aligned(q, 8);
  const unsigned grid = fp8_grid(vec ? n / 8 + 1 : n);
  unsigned* ab = reinterpret_cast<unsigned*>(amax_out);
  if (fmt == Fp8Format::E4M3)
    launch(cast_bf16_kernel<Fp8Format::E4M3>, grid, kThreads, 0, stream, x, q, n, vec, scale, ab,
           poison_amax);
  else
    launch(cast_bf16_kernel<Fp8Format::E5M2>, grid, kThreads, 0, stream, x, q, n, vec, scale, ab,
           poison_amax);
  TG_LAUNCH_CHECK();
}

void fp8_cast_transpose(uint8_t* q, uint8_t* qT, const bf16* x, int rows, int cols, Fp8Format fmt,
                        const float* scale, float* amax_out, const float* poison_amax,
                        cudaStream_t stream) {
  using namespace fp8_detail;
  if (amax_out) TG_CUDA_CHECK(cudaMemsetAsync(amax_out, 0, sizeof(float), stream));
  if (rows <= 0 || cols <= 0) return;
  const bool vec_in = cols % 8 == 0 && aligned(x, 16) && (q == nullptr || aligned(q, 8));
  const bool vec_out = rows % 16 == 0 && aligned(qT, 16);
  const dim3 grid((cols + kTile - 1) / kTile, (rows + kTile - 1) / kTile);
  if (grid.y > 65535u) throw Error("fp8_cast_transpose: too many rows for one launch");
  unsigned* ab = reinterpret_cast<unsigned*>(amax_out);
  if (fmt == Fp8Format::E4M3)
    launch(cast_transpose_bf16_kernel<Fp8Format::E4M3>, grid, 256, 0, stream, x, q, qT, rows, cols,
           vec_in, vec_out, scale, ab, poison_amax);
  else
    launch(cast_transpose_bf16_kernel<Fp8Format::E5M2>, grid, 256, 0, stream, x, q, qT, rows, cols,
           vec_in, vec_out, scale, ab, poison_amax);
  TG_LAUNCH_CHECK();
}

void fp8_qdq_bf16(bf16* y, const bf16* x, size_t n, Fp8Format fmt, const float* scale,
                  const float* descale, float* amax_out, const float* poison_amax,
                  cudaStream_t stream) {
  using namespace fp8_detail;
  if (amax_out) TG_CUDA_CHECK(cudaMemsetAsync(amax_out, 0, sizeof(float), stream));
  if (n == 0) return;
  const bool vec = aligned(x, 16) && aligned(y, 16);
  const unsigned grid = fp8_grid(vec ? n / 8 + 1 : n);
  unsigned* ab = reinterpret_cast<unsigned*>(amax_out);
  if (fmt == Fp8Format::E4M3)
    launch(qdq_bf16_kernel<Fp8Format::E4M3>, grid, kThreads, 0, stream, x, y, n, vec, scale,
           descale, ab, poison_amax);
  else
    launch(qdq_bf16_kernel<Fp8Format::E5M2>, grid, kThreads, 0, stream, x, y, n, vec, scale,
           descale, ab, poison_amax);
  TG_LAUNCH_CHECK();
}

void fp8_poison_if_nonfinite(bf16* out, size_t n, const float* amax_a, const float* amax_b,
                             cudaStream_t stream) {
  using namespace fp8_detail;
  if (n == 0) return;
  launch(poison_bf16_kernel, fp8_grid(n / 8 + 1), kThreads, 0, stream, out, n, amax_a, amax_b);
  TG_LAUNCH_CHECK();
}

// amax is non-finite (like qdq). rows * cols == n.
void fp8_quantize_current(uint8_t* q, uint8_t* qT, const bf16* x, int rows, int cols, Fp8Format fmt,
                          int margin, Fp8TensorScale* st, cudaStream_t stream) {
  fp8_amax(&st->amax, x, size_t(rows) * size_t(cols), stream);
  fp8_compute_scale(st, fmt, margin, stream);
  if (qT)
    fp8_cast_transpose(q, qT, x, rows, cols, fmt, &st->scale, nullptr, &st->amax, stream);
  else
    fp8_cast(q, x, size_t(rows) * size_t(cols), fmt, &st->scale, nullptr, &st->amax, stream);
}

void fp8_quantize_delayed(uint8_t* q, uint8_t* qT, const bf16* x, int rows, int cols, Fp8Format fmt,
                          float s, Fp8TensorScale* st, cudaStream_t stream) {
  fp8_set_scale(st, s, stream);
  if (qT)
    fp8_cast_transpose(q, qT, x, rows, cols, fmt, &st->scale, &st->amax, nullptr, stream);
  else
    fp8_cast(q, x, size_t(rows) * size_t(cols), fmt, &st->scale, &st->amax, nullptr, stream);
}

}  // namespace tg::gpu
