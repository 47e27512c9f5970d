// classifier.cu: launcher of kernels/classifier.cuh (fused softmax + cross-entropy + dlogits).
#include "kernels/classifier.cuh"
#include "launch.h"

namespace tg::gpu {

void classifier(Ctx& c, float* logits, float* losses, const int32_t* targets, float dloss, int N,
                int V, int Vp) {
  launch(classifier_kernel, unsigned(N), 512, 0, c.stream, logits, losses, targets, dloss, V, Vp);
  TG_LAUNCH_CHECK();
}

}  // namespace tg::gpu
