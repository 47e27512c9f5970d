// Block-scaled linears through the Backend interface on the GPU (CudaBackend::
// matmul_forward_scaled / matmul_backward_scaled over src/backends/cuda/matmul_scaled.cu) against
// the CPU backend's (src/backends/cpu/matmul_scaled.cpp): every preset and its switchable
// ingredients, shapes with partial blocks and tiles, split channels, the NaN poisoning of a
// non-finite gradient, and a few training steps of a whole model per preset; and the native
// block-scaled GEMMs (src/backends/cuda/matmul_native.cu) where the device has them, their
// self-checks passing; channel smoothing (precision.recipe.smooth, src/precision/smoothing.h):
// smoothed linears and a few training steps with the factors measured and applied as the trainer
// does.
//
// Tolerances reflect accumulation order only: the quantized operands are bit-identical
// (tests/cuda/quantize_emulated.cpp checks the quantizer), so each GEMM multiplies the same
// values and sums them in another order; each bf16 output then differs by at most one ulp
// (2^-8 relative) where the two fp32 sums straddle a rounding boundary: 5e-3 on the relative
// norm, as the per-tensor FP8 tests allow.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "src/backends/cuda/scaled.h"
#include "src/comm/comm.h"
#include "src/model/linear_quantizers.h"
#include "src/model/model.h"
#include "src/numerics/recipe.h"
#include "src/precision/smoothing.h"
#include "tests/test_util.h"

using namespace tgc;

namespace {

constexpr double kTol = 5e-3;

struct Shape {
  int N, C, OC;
};

tg::QuantOptions block_scaled_options() {
  tg::QuantOptions o;
  return o;
}

// One forward + backward of a linear on both backends; checks outputs and gradients.
void check_linear(const tg::QuantRecipe& r, const Shape& s, DType t, uint64_t seed) {
  const int N = s.N, C = s.C, OC = s.OC;
  Twin tw;
  tw.gpu->set_quant_options(block_scaled_options());
  const tg::ScaledLinear q{&r, seed * 31 + 7};
  Pair inp = tw.rand(t, size_t(N) * C, seed), w = tw.rand(t, size_t(OC) * C, seed + 1, 0.05f),
       bias = tw.rand(t, OC, seed + 2, 0.1f);
  Pair out = tw.poisoned(t, size_t(N) * OC);
  tw.cpu->matmul_forward_scaled(out.cpu, inp.cpu, w.cpu, bias.cpu, N, C, OC, q);
  tw.gpu->matmul_forward_scaled(out.gpu, inp.gpu, w.gpu, bias.gpu, N, C, OC, q);
  CHECK(tw.err(out) < kTol);
  Pair dout = tw.rand(t, size_t(N) * OC, seed + 3, 1e-3f);
  Pair dinp = tw.poisoned(t, size_t(N) * C), dw = tw.rand(t, size_t(OC) * C, seed + 4, 0.01f),
       db = tw.rand(t, OC, seed + 5, 0.01f);
  tw.cpu->matmul_backward_scaled(dinp.cpu, dw.cpu, db.cpu, dout.cpu, inp.cpu, w.cpu, N, C, OC, q);
  tw.gpu->matmul_backward_scaled(dinp.gpu, dw.gpu, db.gpu, dout.gpu, inp.gpu, w.gpu, N, C, OC, q);
  CHECK(tw.err(dinp) < kTol);
  CHECK(tw.err(dw) < kTol);
  CHECK(tw.err(db) < kTol);
}

std::vector<std::pair<std::string, tg::RecipeOptions>> presets() {
  std::vector<std::pair<std::string, tg::RecipeOptions>> v;
  for (const char* m : {"fp8-rowwise", "fp8-block", "mxfp8", "mxfp4", "nvfp4"})
    v.push_back({m, tg::RecipeOptions{}});
  tg::RecipeOptions o;
  o.pow2_scales = true;
  v.push_back({"fp8-rowwise", o});
  o = {};
  o.scale_rule = tg::ScaleRuleChoice::Ocp;
  o.grad_format = tg::GradFormat::E5M2;
  v.push_back({"mxfp8", o});
  o = {};
  o.scale_rule = tg::ScaleRuleChoice::Ceil;
  o.stochastic_grads = false;
  o.hadamard = false;
  v.push_back({"mxfp4", o});
  o = {};
  o.weight_2d = false;
  o.hadamard_size = 32;
  v.push_back({"nvfp4", o});
  return v;
}

}  // namespace

TEST_CASE("cuda: block-scaled linears match the CPU's, every preset and ingredient") {
  TG_REQUIRE_GPU();
  {
    auto gpu = tg::make_cuda_backend();
    gpu->set_quant_options(block_scaled_options());
    MESSAGE("block-scaled path of this GPU: " << gpu->fp8_path_name());
    CHECK(gpu->has_block_scaled_linears());
    CHECK(gpu->fp8_path_name().find("block-scaled") != std::string::npos);
  }
  // GPT-2's block shapes at a small width; 40 / 72 leave partial 16-, 32- and 128-blocks,
  // N = 40 partial tiles.
  const Shape shapes[] = {{64, 64, 192}, {40, 72, 48}};
  uint64_t seed = 100;
  for (const auto& preset : presets()) {
    const std::string& mode = preset.first;
    const tg::QuantRecipe r = tg::block_scaled_recipe(mode, preset.second);
    for (const Shape& s : shapes) {
      INFO(mode << ": " << tg::describe(r) << "; N=" << s.N << " C=" << s.C << " OC=" << s.OC);
      check_linear(r, s, DType::BF16, seed += 10);
    }
  }
  INFO("fp32 tensors");
  check_linear(tg::block_scaled_recipe("nvfp4", {}), {40, 72, 48}, DType::F32, 900);
  check_linear(tg::block_scaled_recipe("fp8-block", {}), {40, 72, 48}, DType::F32, 910);
}

TEST_CASE("cuda: native block-scaled GEMMs pass their self-checks and match the CPU") {
  TG_REQUIRE_GPU();
  // Shapes every native mode takes (multiples of 128): on sm_90 fp8-rowwise and fp8-block run
  // natively, on sm_100 every preset; each (operand pair, shape class) self-checks on first
  // use, and a failed check (a scale layout cuBLASLt reads otherwise than matmul_native.cu
  // writes it) shows here instead of only as a fallback line.
  const int failed0 = tg::gpu::native_checks_failed();
  uint64_t seed = 900;
  for (const auto& preset : presets()) {
    const tg::QuantRecipe r = tg::block_scaled_recipe(preset.first, preset.second);
    auto gpu = tg::make_cuda_backend();
    tg::QuantOptions o = block_scaled_options();
    o.recipe = &r;
    gpu->set_quant_options(o);
    MESSAGE(preset.first << ": " << gpu->fp8_path_name());
    INFO(preset.first << ": " << tg::describe(r));
    check_linear(r, {256, 256, 256}, DType::BF16, seed += 10);
  }
  CHECK(tg::gpu::native_checks_failed() == failed0);
}

TEST_CASE("cuda: block-scaled split channels (precision.mode=auto's outliers) match the CPU") {
  TG_REQUIRE_GPU();
  tg::QuantRecipe r = tg::block_scaled_recipe("mxfp4", {});
  r.split_channels = {0, 5, 33, 71};
  check_linear(r, {40, 72, 48}, DType::BF16, 950);
}

// nvfp4: the GEMMs' NaN factor in the epilogue; fp8-block: the native GEMMs (whole 128-blocks)
// writing the outputs themselves, NaN through NaN scales; mxfp8: the portable GEMMs writing
// the outputs themselves, NaN through the all-NaN operand.
TEST_CASE("cuda: a non-finite gradient makes the block-scaled gradients NaN, as on the CPU") {
  TG_REQUIRE_GPU();
  const int N = 128, C = 128, OC = 128;
  for (const char* mode : {"nvfp4", "fp8-block", "mxfp8"}) {
    INFO(std::string(mode));
    const tg::QuantRecipe r = tg::block_scaled_recipe(mode, {});
    const tg::ScaledLinear q{&r, 5};
    Twin tw;
    Pair inp = tw.rand(DType::BF16, size_t(N) * C, 1), w = tw.rand(DType::BF16, size_t(OC) * C, 2);
    std::vector<float> g = randn(size_t(N) * OC, 3, 1e-3f);
    g[77] = INFINITY;
    Pair dout = tw.make(DType::BF16, g);
    Pair dinp = tw.poisoned(DType::BF16, size_t(N) * C),
         dw = tw.rand(DType::BF16, size_t(OC) * C, 4);
    tw.cpu->matmul_backward_scaled(dinp.cpu, dw.cpu, Tensor{}, dout.cpu, inp.cpu, w.cpu, N, C, OC,
                                   q);
    tw.gpu->matmul_backward_scaled(dinp.gpu, dw.gpu, Tensor{}, dout.gpu, inp.gpu, w.gpu, N, C, OC,
                                   q);
    for (Pair p : {dinp, dw})
      for (tg::Backend* be : {tw.cpu.get(), tw.gpu.get()}) {
        size_t nan = 0;
        const auto v = tw.get(*be, be == tw.cpu.get() ? p.cpu : p.gpu);
        for (double x : v) nan += std::isnan(x);
        CHECK(nan == v.size());
      }
  }
}

// A few steps of a whole model per preset: the losses follow the CPU's. Each linear differs
// by at most a bf16 ulp per output (above), which now and then flips an element's rounding
// (a 4-bit step of 12-33% on one value) in the next linear; over 2 layers and 4 steps the
// mean loss of 128 tokens moves by well under 2e-2 (a wrong scale, layout or stream moves
// it by far more, or makes it NaN).
TEST_CASE("cuda: four block-scaled training steps follow the CPU, every preset") {
  TG_REQUIRE_GPU();
  const tg::GPTConfig cfg = tg::gpt_config(2, 4, 64, 100, 32);
  const int B = 4, T = 32;
  for (const char* mode : {"fp8-rowwise", "fp8-block", "mxfp8", "mxfp4", "nvfp4"}) {
    INFO(mode);
    const tg::QuantRecipe r = tg::block_scaled_recipe(mode, {});
    auto cpu = tg::make_cpu_backend();
    auto gpu = tg::make_cuda_backend();
    gpu->set_quant_options(block_scaled_options());
    tg::LinearQuantizers sc(r, cfg.n_layer), sg(r, cfg.n_layer);
    tg::GPT mc(cfg, *cpu, DType::BF16), mg(cfg, *gpu, DType::BF16);
    mc.set_quantizers(&sc);
    mg.set_quantizers(&sg);
    mc.init_random(5);
    mg.init_random(5);
    for (int step = 1; step <= 4; step++) {
      const auto in = random_tokens(size_t(B) * T, cfg.vocab_size, 300 + step);
      const auto tgt = random_tokens(size_t(B) * T, cfg.vocab_size, 700 + step);
      double loss[2];
      tg::GPT* ms[2] = {&mc, &mg};
      for (int k = 0; k < 2; k++) {
        ms[k]->zero_grad();
        loss[k] = ms[k]->forward(in.data(), tgt.data(), B, T, 1.f);
        ms[k]->backward();
        tgc::clipped_adamw_step(*ms[k], step);
      }
      INFO("step " << step << ": loss cpu " << loss[0] << " gpu " << loss[1]);
      CHECK(std::fabs(loss[1] / loss[0] - 1) < 2e-2);
    }
  }
}

namespace {

// One smoothed forward + backward on both backends in fp32 tensors, where the quantized
// operands are the same bits (tests/cuda/native_emulated.cpp checks them) and only the GEMMs
// differ: tol, 1e-5 for the portable path (the order of fp32 sums). The native path on
// Hopper differed by 1.1e-4 to 2.0e-4 (H200, 2026-12-04: its FP8 tensor cores accumulate
// with fewer bits than fp32 between promotions, and the x40 outlier channel makes the sums
// cancel), so native shapes ask 5e-4. The GPU's forward with the factors ignored or swapped
// (X diag(s), W diag(1/s)) misses the CPU's smoothed output by far more (> 1e-3).
void check_smoothed_linear(const std::string& mode, const Shape& s, uint64_t seed, double tol) {
  const int N = s.N, C = s.C, OC = s.OC;
  const DType t = DType::F32;
  std::vector<float> x = randn(size_t(N) * C, seed), wv = randn(size_t(OC) * C, seed + 1, 0.05f);
  for (int n = 0; n < N; n++) x[size_t(n) * C + C / 3] *= 40.f;  // an outlier channel
  tg::QuantRecipe r = tg::block_scaled_recipe(mode, {});
  const tg::QuantRecipe plain = r;
  r.smooth = tg::smoothing_factors(tgt::column_amax(x, N, C), tgt::column_amax(wv, OC, C), 0.5);
  REQUIRE(r.smooth[size_t(C / 3)] > 4.f);
  tg::QuantRecipe swapped = r;
  for (float& f : swapped.smooth) f = 1.f / f;
  Twin tw;
  tw.gpu->set_quant_options(block_scaled_options());
  const tg::ScaledLinear q{&r, seed * 31 + 7};
  Pair inp = tw.make(t, x), w = tw.make(t, wv), bias = tw.rand(t, OC, seed + 2, 0.1f);
  Pair out = tw.poisoned(t, size_t(N) * OC);
  tw.cpu->matmul_forward_scaled(out.cpu, inp.cpu, w.cpu, bias.cpu, N, C, OC, q);
  tw.gpu->matmul_forward_scaled(out.gpu, inp.gpu, w.gpu, bias.gpu, N, C, OC, q);
  CHECK(tw.err(out) < tol);
  const tg::QuantRecipe* wrongs[] = {&plain, &swapped};
  for (const tg::QuantRecipe* wrong : wrongs) {
    Pair o2{out.cpu, tw.alloc(t, size_t(N) * OC).gpu};
    tw.gpu->matmul_forward_scaled(o2.gpu, inp.gpu, w.gpu, bias.gpu, N, C, OC,
                                  tg::ScaledLinear{wrong, q.seed});
    CHECK(tw.err(o2) > 1e-3);
  }
  Pair dout = tw.rand(t, size_t(N) * OC, seed + 3, 1e-3f);
  Pair dinp = tw.poisoned(t, size_t(N) * C), dw = tw.rand(t, size_t(OC) * C, seed + 4, 0.01f),
       db = tw.rand(t, OC, seed + 5, 0.01f);
  tw.cpu->matmul_backward_scaled(dinp.cpu, dw.cpu, db.cpu, dout.cpu, inp.cpu, w.cpu, N, C, OC, q);
  tw.gpu->matmul_backward_scaled(dinp.gpu, dw.gpu, db.gpu, dout.gpu, inp.gpu, w.gpu, N, C, OC, q);
  CHECK(tw.err(dinp) < tol);
  CHECK(tw.err(dw) < tol);
  CHECK(tw.err(db) < tol);
  CHECK(tw.same_bits(inp));  // the forward smoothed copies, never the model's tensors
  CHECK(tw.same_bits(w));
}

}  // namespace

TEST_CASE("cuda: smoothed block-scaled linears (precision.recipe.smooth) match the CPU's") {
  TG_REQUIRE_GPU();
  // 256 x 256 x 128: shapes the native GEMMs take (fp8-rowwise and fp8-block on sm_90, every
  // preset on sm_100); 40 x 72 x 48: partial blocks and tiles, the portable path.
  const Shape shapes[] = {{256, 256, 128}, {40, 72, 48}};
  const double tols[] = {5e-4, 1e-5};
  uint64_t seed = 1200;
  for (const std::string mode : {"fp8-rowwise", "fp8-block", "mxfp8", "mxfp4", "nvfp4"})
    for (int i = 0; i < 2; i++) {
      const Shape& s = shapes[i];
      INFO(mode << ": N=" << s.N << " C=" << s.C << " OC=" << s.OC);
      check_smoothed_linear(mode, s, seed += 10, tols[i]);
    }
  CHECK(tg::gpu::native_checks_failed() == 0);
}

// Hands every operand to the GPU's smoothing on the device view and, downloaded, to a twin on
// a host view: the device's column amaxes must give the very same factors.
struct SmoothTwin : tg::LinearProbe {
  tg::ChannelSmoothing *dev = nullptr, *host = nullptr;
  using tg::LinearProbe::take;
  void take(int layer, int linear, int operand, tg::OperandView& x) override {
    dev->take(layer, linear, operand, x);
    const std::vector<float> v = x.values();
    host->take(layer, linear, operand, v.data(), x.rows(), x.cols());
  }
};

// The trainer's smoothing loop (src/training/trainer.cpp) on both backends: the factors measured on
// the first step and every second (the GPU's from its device operand views' column amaxes, equal to
// a host twin's of the same operands), applied to every linear whose forward is quantized, the
// losses following the CPU's as in the unsmoothed steps above. The two models' factors agree to
// their operands' own differences. At step 1 (the same weights) most are equal, but a quantized
// element that rounds the other way in one model (above) moves the amax of a later linear's input
// channel by up to its 4-bit step. After an AdamW step more differ: its first update is about +-lr
// whatever the gradient's size, so a weight whose gradient is near zero moves by 2 lr between the
// models (a few percent of a column's amax): median and worst only bounded there.
TEST_CASE("cuda: block-scaled training steps with channel smoothing follow the CPU") {
  TG_REQUIRE_GPU();
  const tg::GPTConfig cfg = tg::gpt_config(2, 4, 64, 100, 32);
  const int B = 4, T = 32, L = cfg.n_layer;
  constexpr int kLinears = 4;  // qkv, attproj, fc, fcproj
  auto comm = tg::make_single_comm();
  for (const std::string mode : {"fp8-rowwise", "mxfp8", "nvfp4"}) {
    INFO(mode);
    const tg::QuantRecipe r = tg::block_scaled_recipe(mode, {});
    auto cpu = tg::make_cpu_backend();
    auto gpu = tg::make_cuda_backend();
    gpu->set_quant_options(block_scaled_options());
    tg::LinearQuantizers sc(r, L), sg(r, L);
    tg::GPT mc(cfg, *cpu, DType::BF16), mg(cfg, *gpu, DType::BF16);
    mc.set_quantizers(&sc);
    mg.set_quantizers(&sg);
    mc.init_random(5);
    mg.init_random(5);
    const tg::SmoothOptions so{0.5, 2};
    tg::ChannelSmoothing smc(so, cfg), smg(so, cfg), smh(so, cfg);
    SmoothTwin twin;
    twin.dev = &smg;
    twin.host = &smh;
    tg::GPT* ms[2] = {&mc, &mg};
    tg::LinearQuantizers* ss[2] = {&sc, &sg};
    tg::ChannelSmoothing* sm[2] = {&smc, &smg};
    for (int step = 1; step <= 4; step++) {
      const auto in = random_tokens(size_t(B) * T, cfg.vocab_size, 300 + step);
      const auto tgt = random_tokens(size_t(B) * T, cfg.vocab_size, 700 + step);
      const bool due = smc.due(step);
      double loss[2];
      for (int k = 0; k < 2; k++) {
        ms[k]->zero_grad();
        if (due) {
          sm[k]->begin(step);
          if (k == 1) smh.begin(step);
          ms[k]->set_probe(k == 1 ? static_cast<tg::LinearProbe*>(&twin) : sm[k]);
        }
        loss[k] = ms[k]->forward(in.data(), tgt.data(), B, T, 1.f);
        ms[k]->backward();
        ms[k]->set_probe(nullptr);
        if (due) {  // src/training/trainer.cpp's smooth_update and apply_linear_recipes
          sm[k]->update(*comm);
          if (k == 1) smh.update(*comm);
          for (int l = 0; l < L; l++)
            for (int lin = 0; lin < kLinears; lin++) {
              tg::QuantRecipe lr = r;
              if (tg::is_low_bit(lr.gemm[tg::kForward].a) ||
                  tg::is_low_bit(lr.gemm[tg::kForward].b))
                lr.smooth = sm[k]->factors(l, lin);
              ss[k]->set_linear_recipe(l, lin, lr);
            }
        }
        tgc::clipped_adamw_step(*ms[k], step);
      }
      INFO("step " << step << ": loss cpu " << loss[0] << " gpu " << loss[1]);
      CHECK(std::fabs(loss[1] / loss[0] - 1) < 2e-2);
      if (!due) continue;
      std::vector<double> diff;
      double lo = 1, hi = 1;
      for (int l = 0; l < L; l++)
        for (int lin = 0; lin < kLinears; lin++) {
          const std::vector<float>&a = smc.factors(l, lin), &b = smg.factors(l, lin);
          CHECK(b == smh.factors(l, lin));
          REQUIRE(a.size() == b.size());
          for (size_t i = 0; i < a.size(); i++) {
            diff.push_back(std::fabs(double(b[i]) / a[i] - 1));
            lo = std::min(lo, double(a[i]));
            hi = std::max(hi, double(a[i]));
          }
        }
      std::sort(diff.begin(), diff.end());
      const double median = diff[diff.size() / 2], worst = diff.back();
      MESSAGE(mode << " step " << step << ": factors " << lo << " ... " << hi
                   << "; GPU / CPU - 1: median " << median << ", worst " << worst);
      CHECK(median < (step == 1 ? 1e-6 : 0.05));
      CHECK(worst < (step == 1 ? 0.1 : 0.5));
      CHECK(hi / lo > 2);  // factors that do something
    }
    // The GPU's linears run with its factors.
    for (int l = 0; l < L; l++)
      for (int lin = 0; lin < kLinears; lin++)
        CHECK(sg.linear_recipe(l, lin).smooth == smg.factors(l, lin));
  }
}
