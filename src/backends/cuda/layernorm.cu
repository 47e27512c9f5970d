// layernorm.cu: launchers of kernels/layernorm.cuh (a warp per row, 8 rows per block; the
// forward kernels staged in shared memory where a block's rows fit, the backward fused into one
// pass over its inputs where a block's rows fit, plus the final dw/db sum).
#include <algorithm>

#include "kernels/layernorm.cuh"
#include "launch.h"

namespace tg::gpu {

namespace {
constexpr int kWarps = 8, kThreads = 32 * kWarps;
unsigned row_blocks(int N) { return unsigned((N + kWarps - 1) / kWarps); }

// The staged kernels' rows per block: 8 where the weight, the bias and 8 rows of C elements of
// `es` bytes fit the 48 KiB a block has without opting in (GPT-2 1.5B's C 1600 in bf16: 32
// KiB), fewer for wider rows, 0 (the unstaged kernels) when not even one fits.
int staged_warps(int C, size_t es) {
  const size_t row = size_t(C) * es, budget = size_t(48) << 10;
  if (budget < 3 * row) return 0;
  return int(std::min<size_t>(kWarps, budget / row - 2));
}
size_t staged_smem(int C, size_t es, int warps) { return size_t(2 + warps) * C * es; }

// The fused backward's warps per block and its shared memory (kernels/layernorm.cuh): 8 warps
// where the dw/db sums, the weight and 8 staged pairs of rows fit 48 KiB (GPT-2 124M's C 768 in
// bf16: 32 KiB), fewer for wider rows, 0 (the dinp and partial kernels) when not even one fits.
size_t backward_smem(int C, size_t es, int warps) {
  return size_t(C) * (8 + es) + size_t(warps) * (8 + 2 * size_t(C) * es);
}
int backward_warps(int C, size_t es) {
  const size_t budget = size_t(48) << 10, fixed = backward_smem(C, es, 0);
  if (budget < backward_smem(C, es, 1)) return 0;
  return int(std::min<size_t>(kWarps, (budget - fixed) / (8 + 2 * size_t(C) * es)));
}
}  // namespace

void layernorm_forward(Ctx& c, DType t, void* out, float* mean, float* rstd, const void* inp,
                       const void* w, const void* b, int N, int C) {
  dispatch("layernorm_forward", t, [&](auto tag) {
    using E = decltype(tag);
    const int warps = staged_warps(C, sizeof(E));
    if (warps > 0)
      launch(layernorm_forward_smem_kernel<E>, unsigned((N + warps - 1) / warps), 32 * warps,
             staged_smem(C, sizeof(E), warps), c.stream, static_cast<E*>(out), mean, rstd,
             static_cast<const E*>(inp), static_cast<const E*>(w), static_cast<const E*>(b), N, C);
    else
      launch(layernorm_forward_kernel<E>, row_blocks(N), kThreads, 0, c.stream,
             static_cast<E*>(out), mean, rstd, static_cast<const E*>(inp),
             static_cast<const E*>(w), static_cast<const E*>(b), N, C);
    TG_LAUNCH_CHECK();
  });
}

void residual_layernorm_forward(Ctx& c, DType t, void* res, void* out, float* mean, float* rstd,
                                const void* a, const void* bb, const void* w, const void* b, int N,
                                int C) {
  dispatch("residual_layernorm_forward", t, [&](auto tag) {
    using E = decltype(tag);
    const int warps = staged_warps(C, sizeof(E));
    if (warps > 0)
      launch(residual_layernorm_forward_smem_kernel<E>, unsigned((N + warps - 1) / warps),
             32 * warps, staged_smem(C, sizeof(E), warps), c.stream, static_cast<E*>(res),
             static_cast<E*>(out), mean, rstd, static_cast<const E*>(a),
             static_cast<const E*>(bb), static_cast<const E*>(w), static_cast<const E*>(b), N, C);
    else
      launch(residual_layernorm_forward_kernel<E>, row_blocks(N), kThreads, 0, c.stream,
             static_cast<E*>(res), static_cast<E*>(out), mean, rstd, static_cast<const E*>(a),
             static_cast<const E*>(bb), static_cast<const E*>(w), static_cast<const E*>(b), N, C);
    TG_LAUNCH_CHECK();
  });
}

void layernorm_backward(Ctx& c, DType t, void* dinp, void* dw, void* db, const void* dout,
                        const void* inp, const void* w, const float* mean, const float* rstd, int N,
                        int C) {
  const int rows = rows_per_chunk(N), chunks = (N + rows - 1) / rows;
  float* pdw = static_cast<float*>(c.scratch(kScratchPartialA, size_t(chunks) * C * 4));
  float* pdb = static_cast<float*>(c.scratch(kScratchPartialB, size_t(chunks) * C * 4));
  dispatch("layernorm_backward", t, [&](auto tag) {
    using E = decltype(tag);
    const E* d = static_cast<const E*>(dout);
    const E* x = static_cast<const E*>(inp);
    const int warps = backward_warps(C, sizeof(E));
    if (warps > 0) {
      launch(layernorm_backward_fused_kernel<E>, unsigned(chunks), 32 * warps,
             backward_smem(C, sizeof(E), warps), c.stream, static_cast<E*>(dinp), pdw, pdb, d, x,
             static_cast<const E*>(w), mean, rstd, N, C, rows);
      TG_LAUNCH_CHECK();
    } else {
      launch(layernorm_backward_dinp_kernel<E>, row_blocks(N), kThreads, 0, c.stream,
             static_cast<E*>(dinp), d, x, static_cast<const E*>(w), mean, rstd, N, C);
      TG_LAUNCH_CHECK();
      dim3 grid(unsigned((C + 255) / 256), unsigned(chunks));
      launch(layernorm_backward_partial_kernel<E>, grid, 256, 0, c.stream, pdw, pdb, d, x, mean,
             rstd, N, C, rows);
      TG_LAUNCH_CHECK();
    }
    launch(layernorm_backward_final_kernel<E>, unsigned((C + 255) / 256), 256, 0, c.stream,
           static_cast<E*>(dw), static_cast<E*>(db), pdw, pdb, chunks, C);
    TG_LAUNCH_CHECK();
  });
}

}  // namespace tg::gpu
