// classifier.cu: launcher of kernels/classifier.cuh (fused softmax + cross-entropy + dlogits,
// the gradient in the type g: fp32 in place, or the compute type over the logits' rows).
#include "kernels/classifier.cuh"
#include "launch.h"

namespace tg::gpu {

void classifier(Ctx& c, const float* logits, float* losses, const int32_t* targets, DType g,
                void* dlogits, size_t ld, float dloss, int N, int V, int Vp) {
  dispatch("classifier", g, [&](auto tag) {
    using G = decltype(tag);
    launch(classifier_kernel<G>, unsigned(N), 512, 0, c.stream, logits, losses, targets,
           static_cast<G*>(dlogits), ld, dloss, V, Vp);
    TG_LAUNCH_CHECK();
  });
}

}  // namespace tg::gpu
