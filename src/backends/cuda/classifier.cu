// classifier.cu: launcher of kernels/classifier.cuh (fused softmax + cross-entropy + dlogits,
// the gradient in the type g: fp32 in place, or the compute type over the logits' rows): the
// row staged in shared memory where its V fp32 logits fit the device's limit per block,
// the kernel that reads the row from global memory three times otherwise.
#include <algorithm>

#include "kernels/classifier.cuh"
#include "launch.h"

namespace tg::gpu {

namespace {
constexpr int kThreads = 512;                      // the unstaged kernel's block
constexpr size_t kDefaultSmem = size_t(48) << 10;  // a block's without opting in

size_t staged_bytes(int V) { return (size_t(V) * 4 + 15) / 16 * 16; }
// The dynamic shared memory a block of this device may have (its opt-in limit, 48 KiB at
// least, less the kernel's static shared memory).
size_t stage_limit(const cudaDeviceProp& p) {
  return std::max(size_t(p.sharedMemPerBlockOptin), kDefaultSmem) - kClassifierStaticSmem;
}
}  // namespace

void classifier(Ctx& c, const float* logits, float* losses, const int32_t* targets, DType g,
                void* dlogits, size_t ld, float dloss, int N, int V, int Vp) {
  dispatch("classifier", g, [&](auto tag) {
    using G = decltype(tag);
    G* dl = static_cast<G*>(dlogits);
    const size_t smem = staged_bytes(V);
    if (smem > stage_limit(c.prop)) {
      launch(classifier_kernel<G>, unsigned(N), kThreads, 0, c.stream, logits, losses, targets, dl,
             ld, dloss, V, Vp);
      TG_LAUNCH_CHECK();
      return;
    }
    // 16-byte packs: each fp32 row and each row of G aligned, whole packs of G per row.
    constexpr size_t kN = Pack16<G>::N;
    const bool vec =
        can_pack16<float>(size_t(Vp), {logits}) && can_pack16<G>(size_t(Vp), {dl}) && ld % kN == 0;
    auto kernel = vec ? classifier_smem_kernel<G, true> : classifier_smem_kernel<G, false>;
    if (smem + kClassifierStaticSmem > kDefaultSmem)
      TG_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    launch(kernel, unsigned(N), kClassifierThreads, smem, c.stream, logits, losses, targets, dl, ld,
           dloss, V, Vp);
    TG_LAUNCH_CHECK();
  });
}

}  // namespace tg::gpu
