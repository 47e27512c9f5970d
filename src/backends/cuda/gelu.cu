// gelu.cu: launchers of kernels/gelu.cuh (GELU forward/backward; 16-byte packs when aligned).
#include "kernels/gelu.cuh"
#include "launch.h"

namespace tg::gpu {

namespace {
constexpr int kThreads = 256;
}

void gelu_forward(Ctx& c, DType t, void* out, const void* inp, size_t n, unsigned* amax) {
  dispatch("gelu_forward", t, [&](auto tag) {
    using E = decltype(tag);
    E* o = static_cast<E*>(out);
    const E* x = static_cast<const E*>(inp);
    if (can_pack16<E>(n, {o, x})) {
      const size_t n16 = n / Pack16<E>::N;
      launch(gelu_forward_pack_kernel<E>, c.grid(n16, kThreads), kThreads, 0, c.stream, o, x, n16,
             amax);
    } else {
      launch(gelu_forward_kernel<E>, c.grid(n, kThreads), kThreads, 0, c.stream, o, x, n, amax);
    }
    TG_LAUNCH_CHECK();
  });
}

void gelu_backward(Ctx& c, DType t, void* dinp, const void* inp, const void* dout, size_t n) {
  dispatch("gelu_backward", t, [&](auto tag) {
    using E = decltype(tag);
    E* di = static_cast<E*>(dinp);
    const E* x = static_cast<const E*>(inp);
    const E* d = static_cast<const E*>(dout);
    if (can_pack16<E>(n, {di, x, d})) {
      const size_t n16 = n / Pack16<E>::N;
      launch(gelu_backward_pack_kernel<E>, c.grid(n16, kThreads), kThreads, 0, c.stream, di, x, d,
             n16);
    } else {
      launch(gelu_backward_kernel<E>, c.grid(n, kThreads), kThreads, 0, c.stream, di, x, d, n);
    }
    TG_LAUNCH_CHECK();
  });
}

}  // namespace tg::gpu
