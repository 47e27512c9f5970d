// cuda_scratch_emulated.cpp: the CUDA backend's own scratch plan (src/precision/cuda_scratch.h,
// part of the GPU memory plan) against the slots the emulated CUDA backend grows in one
// training step (cuda_scratch_bytes: the largest request per slot), byte for byte: each
// attention path that runs here (cublas, and fused read as cublas), fp32 and bf16, the GEMM
// fallback.
#include "emulated_util.h"
// (first: it includes the emulation, which redefines the CUDA keywords the kernels use)
#include <string>
#include <vector>

#include "src/backends/cuda/cuda_backend.h"
#include "src/model/model.h"
#include "src/precision/cuda_scratch.h"
#include "src/precision/quant_memory.h"
#include "src/training/memory_check.h"

namespace emu_test {
extern size_t device_free_bytes;
}

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

void check_plan(tg::DType t, const std::string& name, bool fallback, int n_embd) {
  tg::AttentionRequest attention = tg::AttentionRequest::Auto;
  REQUIRE(tg::parse_enum(name, &attention));
  INFO("dtype " << tg::dtype_name(t) << ", attention " << name << ", fallback " << fallback
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
    for (const char* attention : {"cublas", "fused"}) check_plan(t, attention, false, 64);
  check_plan(tg::DType::BF16, "cublas", true, 64);
}

TEST_CASE("emulated: the CUDA backend reports the device's free memory, which the check reads") {
  const size_t saved = emu_test::device_free_bytes;
  emu_test::device_free_bytes = size_t(3) << 30;
  auto be = tg::make_cuda_backend(0, tg::BackendOptions{});
  size_t free = 0, total = 0;
  REQUIRE(be->device_memory(&free, &total));
  CHECK(free == size_t(3) << 30);
  CHECK(total == size_t(80) << 30);
  // GPT-2 124M in bf16 at 8 x 1024 plans about 9 GiB: refused on 3 GiB free.
  tg::Config cfg;
  cfg.model.n_layer = 12;
  cfg.model.n_head = 12;
  cfg.model.n_embd = 768;
  cfg.model.vocab_size = 50257;
  cfg.model.max_seq_len = 1024;
  cfg.data.batch_size = 8;
  cfg.data.seq_len = 1024;
  cfg.precision.mode = tg::Mode::BF16;
  const tg::GPTConfig mc = tg::gpt_config(12, 12, 768, 50257, 1024);
  const size_t planned = tg::planned_gpu_bytes(cfg, mc, 1);
  CHECK(planned > size_t(8) << 30);
  const std::string e =
      tg::gpu_memory_refusal(cfg, tg::MemoryPlan{}, planned, free, total, be->device_model());
  CHECK(e.find("3.0 GiB free of 80.0 GiB") != std::string::npos);
  emu_test::device_free_bytes = saved;
}
