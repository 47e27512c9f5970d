// layernorm.cu: launchers of kernels/layernorm.cuh (a warp per row; the forward kernels staged
// in shared memory where a block's rows fit, the backward fused into one pass over its inputs
// where a block's rows fit, plus the final dw/db sum; 16-byte accesses where the rows and
// pointers allow).
#include <algorithm>

#include "kernels/layernorm.cuh"
#include "launch.h"

namespace tg::gpu {

namespace {
constexpr int kWarps = 8, kThreads = 32 * kWarps;
unsigned row_blocks(int N) { return unsigned((N + kWarps - 1) / kWarps); }

// The staged forward's rows per block: up to kMaxStagedWarps (16) where the weight, the bias and
// the rows of C elements of `es` bytes fit the 48 KiB a block has without opting in beside the
// rows' statistics (GPT-2 124M's C 768 in bf16: 16 rows, 28 KiB), fewer for wider rows, 0 (the
// plain kernels) when not even one fits. 16 rows read the weight and bias once per 16 rows, not
// 8: 3% of the minimum traffic instead of 6%.
int staged_warps(int C, size_t es) {
  const size_t row = size_t(C) * es, budget = (size_t(48) << 10) - kStatBytes;
  if (budget < 3 * row) return 0;
  return int(std::min<size_t>(kMaxStagedWarps, budget / row - 2));
}
size_t staged_smem(int C, size_t es, int warps) { return kStatBytes + size_t(2 + warps) * C * es; }

// The fused backward's warps per block and its shared memory (kernels/layernorm.cuh): 8 warps
// where the dw/db sums, the weight and 8 staged pairs of rows fit 48 KiB (GPT-2 124M's C 768 in
// bf16: 32 KiB), fewer for wider rows, 0 (the dinp and partial kernels) when not even one fits.
size_t backward_smem(int C, size_t es, int warps) {
  return size_t(C) * (8 + es) + size_t(warps) * (16 + 2 * size_t(C) * es);
}
int backward_warps(int C, size_t es) {
  const size_t budget = size_t(48) << 10, fixed = backward_smem(C, es, 0);
  if (budget < backward_smem(C, es, 1)) return 0;
  return int(std::min<size_t>(kWarps, (budget - fixed) / (16 + 2 * size_t(C) * es)));
}

// The forward of N rows, with the residual add before it where bb is given (res = a + bb), and
// out's amax into *amax where given.
void forward(Ctx& c, DType t, void* res, void* out, float* mean, float* rstd, const void* a,
             const void* bb, const void* w, const void* b, int N, int C, unsigned* amax) {
  dispatch(bb ? "residual_layernorm_forward" : "layernorm_forward", t, [&](auto tag) {
    using E = decltype(tag);
    const int warps = staged_warps(C, sizeof(E));
    auto* r = static_cast<E*>(res);
    auto* o = static_cast<E*>(out);
    const auto *pa = static_cast<const E*>(a), *pb = static_cast<const E*>(bb);
    const auto *pw = static_cast<const E*>(w), *pbias = static_cast<const E*>(b);
    with_run_width<E>(can_pack16<E>(size_t(C), {res, out, a, bb, w, b}), [&](auto v) {
      constexpr int V = decltype(v)::value;
      const unsigned blocks = warps > 0 ? unsigned((N + warps - 1) / warps) : row_blocks(N);
      const int threads = warps > 0 ? 32 * warps : kThreads;
      const size_t smem = warps > 0 ? staged_smem(C, sizeof(E), warps) : 0;
      if (bb)
        launch(warps > 0 ? residual_layernorm_forward_smem_kernel<E, V>
                         : residual_layernorm_forward_kernel<E, V>,
               blocks, threads, smem, c.stream, r, o, mean, rstd, pa, pb, pw, pbias, N, C, amax);
      else
        launch(warps > 0 ? layernorm_forward_smem_kernel<E, V> : layernorm_forward_kernel<E, V>,
               blocks, threads, smem, c.stream, o, mean, rstd, pa, pw, pbias, N, C, amax);
      TG_LAUNCH_CHECK();
    });
  });
}
}  // namespace

void layernorm_forward(Ctx& c, DType t, void* out, float* mean, float* rstd, const void* inp,
                       const void* w, const void* b, int N, int C, unsigned* amax) {
  forward(c, t, nullptr, out, mean, rstd, inp, nullptr, w, b, N, C, amax);
}

void residual_layernorm_forward(Ctx& c, DType t, void* res, void* out, float* mean, float* rstd,
                                const void* a, const void* bb, const void* w, const void* b, int N,
                                int C, unsigned* amax) {
  forward(c, t, res, out, mean, rstd, a, bb, w, b, N, C, amax);
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
    auto* di = static_cast<E*>(dinp);
    const E* pw = static_cast<const E*>(w);
    const int warps = backward_warps(C, sizeof(E));
    with_run_width<E>(can_pack16<E>(size_t(C), {dinp, dout, inp, w}), [&](auto v) {
      constexpr int V = decltype(v)::value;
      if (warps > 0) {
        launch(layernorm_backward_fused_kernel<E, V>, unsigned(chunks), 32 * warps,
               backward_smem(C, sizeof(E), warps), c.stream, di, pdw, pdb, d, x, pw, mean, rstd, N,
               C, rows);
        TG_LAUNCH_CHECK();
        return;
      }
      launch(layernorm_backward_dinp_kernel<E, V>, row_blocks(N), kThreads, 0, c.stream, di, d, x,
             pw, mean, rstd, N, C);
      TG_LAUNCH_CHECK();
      dim3 grid(unsigned((C + 255) / 256), unsigned(chunks));
      launch(layernorm_backward_partial_kernel<E>, grid, 256, 0, c.stream, pdw, pdb, d, x, mean,
             rstd, N, C, rows);
      TG_LAUNCH_CHECK();
    });
    launch(layernorm_backward_final_kernel<E>, unsigned((C + 255) / 256), 256, 0, c.stream,
           static_cast<E*>(dw), static_cast<E*>(db), pdw, pdb, chunks, C);
    TG_LAUNCH_CHECK();
  });
}

}  // namespace tg::gpu
