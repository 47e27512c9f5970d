// cuda_scratch_emulated.cpp: the CUDA backend's own scratch plan (src/precision/cuda_scratch.h,
// part of the GPU memory plan) against the slots the emulated CUDA backend grows in one
// training step (cuda_scratch_bytes: the largest request per slot), byte for byte: each
// attention path (cublas, fused, flash), fp32 and bf16, the GEMM fallback.
#include "emulated_util.h"
// (first: it includes the emulation, which redefines the CUDA keywords the kernels use)
#include <string>
#include <vector>

#include "src/backends/cuda/cuda_backend.h"
#include "src/model/model.h"
#include "src/precision/cuda_scratch.h"

static_assert(tg::gpu::kScratchBuckets - tg::gpu::kScratchPartialA + 1 == tg::kCudaSlots,
              "src/precision/cuda_scratch.h's slots follow src/backends/cuda/launch.h's");

namespace {

constexpr int kB = 2, kT = 8;

// One training step; every token distinct (the plan's token buckets are the most there can be).
void train_step(tg::GPT& m) {
  std::vector<int32_t> in(kB * kT), tgt(kB * kT);
  for (int i = 0; i < kB * kT; i++) {
    in[size_t(i)] = i;
    tgt[size_t(i)] = (i * 7 + 1) % 64;
  }
  m.zero_grad();
  m.forward(in.data(), tgt.data(), kB, kT, 1.0f);
  m.backward();
  m.check_grads(1.0);
  tg::AdamWArgs a{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1, tg::Rounding{}};
  m.adamw_step(a);
}

void check_plan(tg::DType t, const std::string& attention, bool fallback, int n_embd) {
  INFO("dtype " << tg::dtype_name(t) << ", attention " << attention << ", fallback " << fallback
                << ", C " << n_embd);
  tg::BackendOptions o;
  o.attention = attention;
  o.gemm_fallback = fallback;
  auto be = tg::make_cuda_backend(0, o);
  const tg::GPTConfig c = tg::gpt_config(2, 2, n_embd, 64, 16);
  {
    tg::GPT m(c, *be, t, tg::DataParallel{});
    m.init_random(5);
    train_step(m);
    be->synchronize();
  }
  const tg::CudaScratchPlan p = tg::plan_cuda_scratch(c, t, kB, kT, attention, fallback);
  for (int s = 0; s < tg::kCudaSlots; s++) {
    INFO("slot kScratch" << tg::cuda_slot_name(s));
    CHECK(tg::cuda_scratch_bytes(*be, tg::gpu::kScratchPartialA + s) == p.slot[s]);
  }
  CHECK(be->peak_bytes() >= p.total());
}

}  // namespace

TEST_CASE("emulated: the CUDA backend's scratch plan, slot by slot, after a training step") {
  for (tg::DType t : {tg::DType::F32, tg::DType::BF16})
    for (const char* attention : {"cublas", "fused", "flash"}) check_plan(t, attention, false, 64);
  check_plan(tg::DType::BF16, "cublas", true, 64);
  check_plan(tg::DType::BF16, "flash", false, 48);  // head size 24: flash falls back
}
