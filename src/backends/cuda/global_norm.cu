// global_norm.cu: launcher of kernels/global_norm.cuh (sum of squares and non-finite count in
// two passes, fixed order).
#include "kernels/global_norm.cuh"
#include "launch.h"

namespace tg::gpu {

void norm(Ctx& c, DType t, const void* x, size_t n, float inv_scale, float* out) {
  float* ps = static_cast<float*>(c.scratch(kScratchPartialA, kNormBlocks * sizeof(float)));
  float* pb = static_cast<float*>(c.scratch(kScratchPartialB, kNormBlocks * sizeof(float)));
  dispatch("norm", t, [&](auto tag) {
    using E = decltype(tag);
    const auto partials = [&](auto run) {
      launch(norm_partial_kernel<E, decltype(run)::value>, kNormBlocks, kNormThreads, 0, c.stream,
             ps, pb, static_cast<const E*>(x), n, inv_scale);
    };
    with_run_width<E>(can_pack16<E>(0, {x}), partials);  // the tail of n % 8 (or 4) apart
    TG_LAUNCH_CHECK();
  });
  launch(norm_final_kernel, 1, kNormThreads, 0, c.stream, out, ps, pb, kNormBlocks);
  TG_LAUNCH_CHECK();
}

}  // namespace tg::gpu
