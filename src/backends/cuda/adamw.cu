// adamw.cu: launchers of kernels/adamw.cuh (AdamW, with its factor and skip from the device
// loss scaler of kernels/loss_scale.cuh when given; one kernel per parameter type and moment
// storage, fp32 or 16-bit codes; kernels/adamw_blocked.cuh when a moment is in FP8 blocks) and
// of the type conversion beside it. Given a SegmentAmax, each kernel takes the linears' weight
// amaxes as it writes the weights (kernels/amax.cuh).
#include <cmath>
#include <type_traits>

#include "kernels/adamw.cuh"
#include "kernels/adamw_blocked.cuh"
#include "kernels/loss_scale.cuh"
#include "launch.h"

namespace tg::gpu {

namespace {
constexpr int kThreads = 256;
}

namespace {
// Calls f with a typed null pointer for a moment's storage: float, or the 16-bit codes.
template <typename F>
void moment_storage(const MomentFormat& fmt, F&& f) {
  if (moment_is_plain(fmt))
    f(static_cast<float*>(nullptr));
  else
    f(static_cast<uint16_t*>(nullptr));
}

// The packed kernels' group is an fp32 16-byte pack (kernels/common.cuh's can_pack16 says
// whether a tensor's arrays and length allow it; null arrays pass).
static_assert(Pack16<float>::N == kAdamWPack, "a group of AdamW is one fp32 pack");

// Whether every segment of amax starts on a group of the packed kernels, which take a group's
// amax into its first element's word.
bool groups_in_segments(const SegmentAmax& s) {
  for (int r = 0; r < s.n; r++)
    if (s.lo[r] % kAdamWPack != 0 || s.seg_len[r] % kAdamWPack != 0) return false;
  return true;
}

AdamWParams adamw_params(const AdamWArgs& a) {
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
  p.m_format = a.m_format;
  p.v_format = a.v_format;
  p.m_seed = a.m_seed;
  p.v_seed = a.v_seed;
  return p;
}
}  // namespace

namespace {
// Either moment in FP8 blocks: a warp per block (kernels/adamw_blocked.cuh).
void adamw_blocked(Ctx& c, DType pt, void* params, MasterPtrs w, const void* grads, void* m,
                   void* v, size_t n, const AdamWArgs& a, const LossScaleDevice* d,
                   const SegmentAmax& amax) {
  const AdamWParams p = adamw_params(a);
  const MomentRef rm{m, static_cast<float*>(a.m_meta.data), a.m_format, a.m_seed},
                  rv{v, static_cast<float*>(a.v_meta.data), a.v_format, a.v_seed};
  const int block = moment_is_blocked(a.m_format) ? a.m_format.block : a.v_format.block;
  const size_t lanes = moment_blocks(n, block) * 32;
  dispatch("adamw", pt, [&](auto tag) {
    using E = decltype(tag);
    launch(adamw_blocked_kernel<E>, c.grid(lanes, kThreads), kThreads, 0, c.stream,
           static_cast<E*>(params), w, static_cast<const E*>(grads), rm, rv, n, p, a.decay, amax,
           d);
    TG_LAUNCH_CHECK();
  });
}
}  // namespace

void adamw(Ctx& c, DType pt, void* params, void* master, const void* grads, void* m, void* v,
           size_t n, const AdamWArgs& a, const LossScaleDevice* d, const SegmentAmax& amax) {
  const MasterPtrs w{a.master == MasterFormat::FP32 ? static_cast<float*>(master) : nullptr,
                     a.master == MasterFormat::BF16Kahan ? static_cast<uint16_t*>(master)
                                                         : nullptr};
  if (moment_is_blocked(a.m_format) || moment_is_blocked(a.v_format))
    return adamw_blocked(c, pt, params, w, grads, m, v, n, a, d, amax);
  if (a.decay.n != 0) throw Error("cuda backend: adamw: weight-decay ranges need fp8 moments");
  const AdamWParams p = adamw_params(a);
  dispatch("adamw", pt, [&](auto tag) {
    using E = decltype(tag);
    moment_storage(a.m_format, [&](auto* mtag) {
      moment_storage(a.v_format, [&](auto* vtag) {
        using SM = std::remove_pointer_t<decltype(mtag)>;
        using SV = std::remove_pointer_t<decltype(vtag)>;
        SM* pm = static_cast<SM*>(m);
        SV* pv = static_cast<SV*>(v);
        E* pp = static_cast<E*>(params);
        const E* pg = static_cast<const E*>(grads);
        if (can_pack16<float>(n, {params, grads, m, v, w.master, w.comp}) &&
            groups_in_segments(amax)) {
          const size_t groups = n / kAdamWPack;
          if (d)
            launch(adamw_device_packed_kernel<E, SM, SV>, c.grid(groups, kThreads), kThreads, 0,
                   c.stream, pp, w, pg, pm, pv, n, p, amax, d);
          else
            launch(adamw_packed_kernel<E, SM, SV>, c.grid(groups, kThreads), kThreads, 0, c.stream,
                   pp, w, pg, pm, pv, n, p, amax);
        } else if (d) {
          launch(adamw_device_kernel<E, SM, SV>, c.grid(n, kThreads), kThreads, 0, c.stream, pp, w,
                 pg, pm, pv, n, p, amax, d);
        } else {
          launch(adamw_kernel<E, SM, SV>, c.grid(n, kThreads), kThreads, 0, c.stream, pp, w, pg, pm,
                 pv, n, p, amax);
        }
        TG_LAUNCH_CHECK();
      });
    });
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
