// loss_scale.cuh: the loss-scale decision on the device, so that an optimizer step needs no
// host round trip: loss_scale_step_kernel reads the fused unscale/finite/norm result
// (global_norm.cuh: {sum of squares of the unscaled gradients, non-finite count}) and updates
// the scaler state in device memory with src/numerics/loss_scaler.h's loss_scale_update (the very
// function LossScaler::update runs on the host: identical state); adamw_device_kernel is
// adamw_kernel with its gradient factor (clip factor / loss scale) and skip flag read from that
// state. The host reads LossScaleDevice only to log.
//
// Used by training with precision.loss_scale.on_device=true (CUDA backend, one process, unsharded:
// Backend::device_decide_step / adamw_decided / device_step_report): the host learns the
// decision once per step, after AdamW is queued, to log it, count applied steps (the learning
// rate and Adam's bias corrections for the next step) and keep LossScaler (checkpoints) in step.
// Several ranks keep the host decision (the found-inf flag is all-reduced first).
#pragma once
#include "adamw.cuh"
#include "src/numerics/loss_scaler.h"

namespace tg::gpu {

using tg::LossScaleDevice;  // src/numerics/loss_scaler.h

// One thread (static: the header may be included by several translation units): check = {sum of
// squares, non-finite count} from the fused gradient pass.
static __global__ void loss_scale_step_kernel(LossScaleDevice* d, const float* check,
                                              LossScaleParams p, double clip) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  d->step = loss_scale_step(d->state, p, check[0], check[1], clip);
  d->applied += d->step.skip ? 0 : 1;
}

// adamw_kernel with a.grad_scale taken from d->step.grad_scale; nothing changes when the step
// is skipped (but the weights' amax, given a SegmentAmax, is taken of them as they stand).
// (lr and the bias corrections still come from the host.)
template <typename P, typename SM, typename SV>
__global__ void adamw_device_kernel(P* params, MasterPtrs master, const P* grads, SM* m, SV* v,
                                    size_t n, AdamWParams a, SegmentAmax amax,
                                    const LossScaleDevice* d) {
  if (d->step.skip) return weights_amax_loop<1>(params, n, amax);
  const float gs = d->step.grad_scale;
  adamw_loop<1>(n, amax,
                [&](size_t i) { return adamw_element(params, master, grads, m, v, i, a, gs); });
}
// The same four elements a thread (adamw.cuh's adamw_packed_kernel).
template <typename P, typename SM, typename SV>
__global__ void adamw_device_packed_kernel(P* params, MasterPtrs master, const P* grads, SM* m,
                                           SV* v, size_t n, AdamWParams a, SegmentAmax amax,
                                           const LossScaleDevice* d) {
  if (d->step.skip) return weights_amax_loop<kAdamWPack>(params, n, amax);
  const float gs = d->step.grad_scale;
  adamw_loop<kAdamWPack>(
      n, amax, [&](size_t j) { return adamw_group(params, master, grads, m, v, j, a, gs); });
}

}  // namespace tg::gpu
