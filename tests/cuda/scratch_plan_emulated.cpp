// scratch_plan_emulated.cpp: the scratch plan of the block-scaled linears
// (src/precision/scaled_scratch.h, what `train_gpt memory` prints) against the slots the emulated
// CUDA backend actually grows (cuda_scratch_bytes: the largest request per slot; the allocation
// rounds it up to 64 bytes, which the plan leaves out), byte for byte:
//   - the forward, wgrad and dgrad of each block linear shape of a small model, every preset
//     the native path takes (nvfp4, mxfp8, fp8-block, fp8-rowwise), on an sm_80 device (the
//     portable path) and on an sm_100 one (native GEMMs with their self-checks, and the
//     portable path for the GEMMs whose shapes the native modes refuse);
//   - one training step of a whole model with quantization telemetry (the operand statistics'
//     slots, and the quantizer's slots they reuse), and the last layer that nvfp4 keeps bf16.
#include "emulated_util.h"
// (first: it includes the emulation, which redefines the CUDA keywords the kernels use)
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "src/backends/cuda/cuda_backend.h"
#include "src/backends/cuda/scaled.h"
#include "src/model/linear_quantizers.h"
#include "src/model/model.h"
#include "src/numerics/recipe.h"
#include "src/precision/quant_telemetry.h"
#include "src/precision/scaled_scratch.h"

namespace emu_test {
extern int device_major;  // runtime_emulation.cpp
}

using namespace emu_test;

static_assert(gpu::kScratchStatsArgs - gpu::kScratchQStageA + 1 == tg::kScaledSlots,
              "src/precision/scaled_scratch.h's slots follow src/backends/cuda/launch.h's");

namespace {

// Backends made in this scope see a GPU of compute capability `major`.0; the native path's
// verdicts start afresh (its self-checks run again, as in a new process).
struct Major {
  int saved;
  explicit Major(int major) : saved(device_major) {
    device_major = major;
    gpu::native_forget_checks();
  }
  ~Major() {
    device_major = saved;
    gpu::native_forget_checks();
  }
};

std::unique_ptr<Backend> block_scaled_backend(const QuantRecipe& r) {
  auto be = make_cuda_backend();
  QuantOptions o;
  o.recipe = &r;
  be->set_quant_options(o);
  return be;
}

Tensor random_bf16(Backend& be, size_t n, uint64_t seed, float scale) {
  Tensor t = be.alloc(DType::BF16, n);
  be.upload(t, tgc::encode(tgc::randn(n, seed, scale), DType::BF16).data());
  return t;
}

void check_slots(const Backend& be, const ScaledScratch& plan) {
  for (int s = 0; s < kScaledSlots; s++) {
    INFO("slot kScratch" << std::string(scaled_slot_name(s)));
    CHECK(cuda_scratch_bytes(be, gpu::kScratchQStageA + s) == plan.bytes[s]);
  }
}

// A launch context of compute capability `major`.0, for native_problem.
gpu::Ctx ctx_of(int major) {
  gpu::Ctx c;
  c.prop.major = major;
  return c;
}

const char* kModes[] = {"nvfp4", "mxfp8", "fp8-block", "fp8-rowwise"};

}  // namespace

TEST_CASE("emulated: the block-scaled linears' scratch is the plan's, portable and native") {
  // C = 128, 128 tokens: every GEMM of every preset runs natively on sm_100; C = 64, 80 tokens:
  // fp8-block's and FP4's native modes refuse some shapes, which then run portably.
  const int sizes[2][2] = {{128, 128}, {80, 64}};  // {N, C}
  for (const char* mode : kModes)
    for (int major : {8, 10})
      for (const auto& sz : sizes) {
        const int N = sz[0], C = sz[1];
        const QuantRecipe r = block_scaled_recipe(mode, {});
        INFO(mode << " on sm_" << major << "0, N=" << N << " C=" << C);
        Major dev(major);
        auto be = block_scaled_backend(r);
        ScaledScratch plan;
        const int shapes[4][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};
        uint64_t seed = 10;
        for (const auto& sh : shapes) {
          const int in = sh[0], out = sh[1];
          // nvfp4 smooths its forward GEMMs (the factors' slot; not powers of two)
          QuantRecipe rs = r;
          if (std::string(mode) == "nvfp4")
            for (int i = 0; i < in; i++) rs.smooth.push_back(1.f + 0.37f * float(i % 7));
          const ScaledLinear q{&rs, seed};
          Tensor x = random_bf16(*be, size_t(N) * in, seed++, 1.f);
          Tensor w = random_bf16(*be, size_t(out) * in, seed++, 0.05f);
          Tensor b = random_bf16(*be, size_t(out), seed++, 0.1f);
          Tensor y = be->alloc(DType::BF16, size_t(N) * out);
          Tensor dy = random_bf16(*be, size_t(N) * out, seed++, 1e-3f);
          Tensor dx = be->alloc(DType::BF16, size_t(N) * in);
          Tensor dw = random_bf16(*be, size_t(out) * in, seed++, 0.01f);
          Tensor db = random_bf16(*be, size_t(out), seed++, 0.01f);
          be->matmul_forward_scaled(y, x, w, b, N, in, out, q);
          be->matmul_backward_scaled(dx, dw, db, dy, x, w, N, in, out, q);
          for (Tensor t : {x, w, b, y, dy, dx, dw, db}) be->free(t);
          scaled_linear_scratch(plan, rs, N, in, out, major);
          // The plan's native decision is the backend's.
          const int dims[kGemmRoles][3] = {{N, out, in}, {N, in, out}, {out, in, N}};
          for (int g = 0; g < kGemmRoles; g++) {
            const auto& d = dims[g];
            CHECK(native_gemm_runs(r.gemm[g], major, d[0], d[1], d[2]) ==
                  gpu::native_problem(ctx_of(major), r.gemm[g], d[0], d[1], d[2]).empty());
          }
        }
        check_emu();
        CHECK(gpu::native_checks_failed() == 0);
        check_slots(*be, plan);
      }
}

TEST_CASE("emulated: a training step's block-scaled scratch with telemetry is the plan's") {
  // 3 layers (nvfp4 keeps the last in bf16), C = 128, 2 x 64 tokens.
  const GPTConfig cfg = gpt_config(3, 2, 128, 96, 64);
  const int B = 2, T = 64;
  for (const char* mode : {"nvfp4", "fp8-block"})
    for (int major : {8, 10}) {
      const QuantRecipe r = block_scaled_recipe(mode, {});
      INFO(mode << " on sm_" << major << "0");
      Major dev(major);
      auto be = block_scaled_backend(r);
      LinearQuantizers fp8(r, cfg.n_layer);
      QuantTelemetry telemetry(fp8, cfg.n_layer);
      GPT m(cfg, *be, DType::BF16);
      m.set_quantizers(&fp8);
      m.init_random(3);
      telemetry.begin(1, 99);
      m.set_probe(&telemetry);
      const auto in = tgc::random_tokens(size_t(B) * T, cfg.vocab_size, 1);
      const auto tgt = tgc::random_tokens(size_t(B) * T, cfg.vocab_size, 2);
      m.zero_grad();
      m.forward(in.data(), tgt.data(), B, T, 1.f);
      m.backward();
      m.set_probe(nullptr);
      check_emu();
      // The emulated device has one multiprocessor.
      const ScaledScratchPlan p = plan_scaled_scratch(cfg, r, B, T, 1);
      CHECK(p.quantized_layers == (std::string(mode) == "nvfp4" ? 2 : 3));
      ScaledScratch plan = major >= 10 ? p.native : p.portable;
      plan.grow(p.stats);
      check_slots(*be, plan);
    }
}
