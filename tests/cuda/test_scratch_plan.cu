// test_scratch_plan.cu: `train_gpt memory`'s plan of the block-scaled linears' scratch
// (src/precision/scaled_scratch.h) against the slots this GPU's CUDA backend grows
// (cuda_scratch_bytes: the largest request per slot; cudaMalloc gets it rounded up to 64 bytes),
// byte for byte, on the GPU's own path: native where its compute capability has the recipe's scale
// modes (shapes permitting), portable elsewhere, each GEMM's decision the plan's. The plan assumes
// cuBLASLt 12.9 or newer and native GEMMs that pass their self-checks; where either fails the
// case says so instead of comparing slots. Under the emulation this runs as
// sm_90 (tests/cuda/scratch_plan_emulated.cpp runs sm_80 and sm_100 and a training step).
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "src/backends/cuda/scaled.h"
#include "src/numerics/recipe.h"
#include "src/precision/scaled_scratch.h"

using namespace tgc;

TEST_CASE("cuda: the block-scaled linears' scratch is train_gpt memory's plan") {
  TG_REQUIRE_GPU();
  cudaDeviceProp prop;
  REQUIRE(cudaGetDeviceProperties(&prop, 0) == cudaSuccess);
  tg::gpu::Ctx ctx;
  ctx.prop = prop;
  // The block linears of a C = 128 model on 128 tokens: whole 128-blocks everywhere.
  const int N = 128, C = 128;
  const int shapes[4][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};
  for (const char* mode : {"nvfp4", "mxfp8", "fp8-block", "fp8-rowwise"}) {
    const tg::QuantRecipe r = tg::block_scaled_recipe(mode, {});
    INFO(mode << " on sm_" << prop.major << prop.minor);
    tg::gpu::native_forget_checks();  // the self-checks run (and grow their slots) again
    auto gpu = tg::make_cuda_backend();
    tg::QuantOptions o;
    o.recipe = &r;
    gpu->set_quant_options(o);
    auto make = [&](size_t n, uint64_t seed, float scale) {
      Tensor t = gpu->alloc(DType::BF16, n);
      gpu->upload(t, encode(randn(n, seed, scale), DType::BF16).data());
      return t;
    };
    tg::ScaledScratch plan;
    bool same_paths = true;
    uint64_t seed = 40;
    for (const auto& sh : shapes) {
      const int in = sh[0], out = sh[1];
      const tg::ScaledLinear q{&r, seed};
      Tensor x = make(size_t(N) * in, seed++, 1.f), w = make(size_t(out) * in, seed++, 0.05f);
      Tensor b = make(size_t(out), seed++, 0.1f), dy = make(size_t(N) * out, seed++, 1e-3f);
      Tensor dw = make(size_t(out) * in, seed++, 0.01f), db = make(size_t(out), seed++, 0.01f);
      Tensor y = gpu->alloc(DType::BF16, size_t(N) * out),
             dx = gpu->alloc(DType::BF16, size_t(N) * in);
      gpu->matmul_forward_scaled(y, x, w, b, N, in, out, q);
      gpu->matmul_backward_scaled(dx, dw, db, dy, x, w, N, in, out, q);
      for (Tensor t : {x, w, b, y, dy, dx, dw, db}) gpu->free(t);
      tg::scaled_linear_scratch(plan, r, N, in, out, prop.major);
      const int dims[tg::kGemmRoles][3] = {{N, out, in}, {N, in, out}, {out, in, N}};
      for (int g = 0; g < tg::kGemmRoles; g++) {
        const auto& d = dims[g];
        const std::string why = tg::gpu::native_problem(ctx, r.gemm[g], d[0], d[1], d[2]);
        const bool runs = tg::native_gemm_runs(r.gemm[g], prop.major, d[0], d[1], d[2]);
        INFO("GEMM role " << g << ": " << (why.empty() ? "native" : why));
        if (why.find("needs cuBLASLt") != std::string::npos) {
          same_paths = false;  // the plan assumes a cuBLASLt with every native mode
          continue;
        }
        CHECK(runs == why.empty());
        same_paths &= runs == why.empty();
      }
    }
    if (!same_paths || tg::gpu::native_checks_failed() > 0) {
      MESSAGE(mode << ": the GPU's path differs from the plan's (above); slots not compared");
      continue;
    }
    for (int s = 0; s < tg::kScaledSlots; s++) {
      INFO("slot kScratch" << std::string(tg::scaled_slot_name(s)));
      CHECK(tg::cuda_scratch_bytes(*gpu, tg::gpu::kScratchQStageA + s) == plan.bytes[s]);
    }
  }
  tg::gpu::native_forget_checks();
}
