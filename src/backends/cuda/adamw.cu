// adamw.cu: launchers of kernels/adamw.cuh (AdamW, with its factor and skip from the device
// loss scaler of kernels/loss_scale.cuh when given) and of the type conversion beside it.
#include <cmath>

#include "kernels/adamw.cuh"
#include "kernels/loss_scale.cuh"
#include "launch.h"

namespace tg::gpu {

namespace {
constexpr int kThreads = 256;
}

void adamw(Ctx& c, DType pt, void* params, float* master, const void* grads, float* m, float* v,
           size_t n, const AdamWArgs& a, const LossScaleDevice* d) {
  AdamWParams p;
  p.lr = a.lr;
  p.beta1 = a.beta1;
  p.beta2 = a.beta2;
  p.eps = a.eps;
  p.weight_decay = a.weight_decay;
  p.grad_scale = a.grad_scale;
  // As src/backends/cpu/adamw.cpp computes them (float pow on the host).
  p.c1 = 1.0f - std::pow(a.beta1, float(a.step));
  p.c2 = 1.0f - std::pow(a.beta2, float(a.step));
  p.stochastic = a.rounding.stochastic;
  p.seed = a.rounding.seed;
  p.offset = a.rounding.offset;
  dispatch("adamw", pt, [&](auto tag) {
    using E = decltype(tag);
    if (d)
      launch(adamw_device_kernel<E>, c.grid(n, kThreads), kThreads, 0, c.stream,
             static_cast<E*>(params), master, static_cast<const E*>(grads), m, v, n, p, d);
    else
      launch(adamw_kernel<E>, c.grid(n, kThreads), kThreads, 0, c.stream, static_cast<E*>(params),
             master, static_cast<const E*>(grads), m, v, n, p);
    TG_LAUNCH_CHECK();
  });
}

void convert(Ctx& c, DType dt, void* dst, DType stype, const void* src, size_t n,
             const Rounding& r) {
  dispatch("convert", dt, [&](auto dtag) {
    dispatch("convert", stype, [&](auto stag) {
      using D = decltype(dtag);
      using S = decltype(stag);
      launch(convert_kernel<D, S>, c.grid(n, kThreads), kThreads, 0, c.stream, static_cast<D*>(dst),
             static_cast<const S*>(src), n, r.stochastic, r.seed, r.offset);
      TG_LAUNCH_CHECK();
    });
  });
}

}  // namespace tg::gpu
