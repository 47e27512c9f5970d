// loss_scale.cu: launcher of kernels/loss_scale.cuh's decision on the device.
#include "kernels/loss_scale.cuh"
#include "launch.h"

namespace tg::gpu {

void loss_scale_decide(Ctx& c, LossScaleDevice* d, const float* check, const LossScaleParams& p,
                       double clip) {
  launch(loss_scale_step_kernel, 1, 32, 0, c.stream, d, check, p, clip);
  TG_LAUNCH_CHECK();
}

}  // namespace tg::gpu
