// residual.cu: launcher of kernels/residual.cuh (out = a + b; 16-byte packs when aligned).
#include "kernels/residual.cuh"
#include "launch.h"

namespace tg::gpu {

namespace {
constexpr int kThreads = 256;
}

void residual_forward(Ctx& c, DType t, void* out, const void* a, const void* b, size_t n) {
  dispatch("residual_forward", t, [&](auto tag) {
    using E = decltype(tag);
    E* o = static_cast<E*>(out);
    const E* pa = static_cast<const E*>(a);
    const E* pb = static_cast<const E*>(b);
    if (can_pack16<E>(n, {o, pa, pb})) {
      const size_t n16 = n / Pack16<E>::N;
      launch(residual_forward_pack_kernel<E>, c.grid(n16, kThreads), kThreads, 0, c.stream, o, pa,
             pb, n16);
    } else {
      launch(residual_forward_kernel<E>, c.grid(n, kThreads), kThreads, 0, c.stream, o, pa, pb, n);
    }
    TG_LAUNCH_CHECK();
  });
}

}  // namespace tg::gpu
