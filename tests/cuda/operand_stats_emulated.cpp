// operand_stats_emulated.cpp: the CUDA backend's operand view (src/backends/cuda/operand_stats.cu,
// kernels/operand_stats.cuh) on the CPU, CUDA threads emulated, against the host view
// (src/backends/cpu/host_operand_view.cpp over cpu::quant_error): the amax and per-column amax bit
// for bit, and every field of the quantization error of every candidate recipe operand (nvfp4,
// mxfp4, mxfp8, fp8-block, fp8-rowwise, per-tensor fp8, and the presets' switchable ingredients):
// the counts (values, nonzero, underflow, saturated, zeros, groups, saturated and underflowing
// groups) exactly, the sums of squares to 1e-12 (their order of summation differs), on
// random and adversarial operands (outliers, all-zero blocks and tensors, subnormal-only
// blocks, huge and tiny values, partial edge blocks and tiles, an inf, a NaN), staged from
// fp32, bf16 and fp16, plain, transposed, smoothed (both directions), split and both. Then
// precision.mode=auto fed by device views decides exactly as when fed by host views.
#include "emulated_util.h"
// (first: it includes the emulation, which redefines the CUDA keywords the kernels use)
#include <cstring>
#include <string>
#include <vector>

#include "src/backends/cpu/host_operand_view.h"
#include "src/backends/cuda/operand_stats.h"
#include "src/numerics/recipe.h"
#include "src/precision/auto_precision.h"

using namespace emu_test;

namespace {

// Every distinct operand recipe of the candidate formats, with the presets' options.
std::vector<OperandRecipe> candidate_operand_recipes() {
  std::vector<OperandRecipe> out;
  auto add = [&](const OperandRecipe& o) {
    if (!is_low_bit(o)) return;
    for (const OperandRecipe& x : out)
      if (std::memcmp(&x, &o, sizeof o) == 0) return;
    out.push_back(o);
  };
  std::vector<RecipeOptions> opts(6);
  opts[1].pow2_scales = true;
  opts[2].scale_rule = tg::ScaleRuleChoice::Ocp;
  opts[3].scale_rule = tg::ScaleRuleChoice::Ceil;
  opts[4].grad_format = tg::GradFormat::E5M2;
  opts[5].weight_2d = false, opts[5].hadamard_size = 32;
  for (const char* name : {"nvfp4", "mxfp4", "mxfp8", "fp8-block", "fp8-rowwise", "fp8"})
    for (const RecipeOptions& o : opts) {
      const QuantRecipe r = candidate_recipe(name, o, "test");
      for (const GemmRecipe& g : r.gemm) add(g.a), add(g.b);
    }
  return out;
}

std::string describe_operand_recipe(const OperandRecipe& o) {
  QuantRecipe r;
  for (GemmRecipe& g : r.gemm) g.a = g.b = o;
  return describe(r) + " rounding=" + (o.rounding == RoundMode::Stochastic ? "sr" : "nearest") +
         " block=" + std::to_string(o.block) + " gran=" + std::to_string(int(o.granularity)) +
         " scale=" + std::to_string(int(o.scale)) +
         " transform=" + std::to_string(int(o.transform));
}

std::vector<TestOperand> operands() {
  Randn randn(11);
  std::vector<TestOperand> out;
  out.push_back({"random 48x160", 48, 160, randn(48, 160, 1.f)});
  out.push_back({"random 37x100 (partial blocks and tiles)", 37, 100, randn(37, 100, 0.3f)});
  {
    TestOperand o{"outliers, zero blocks, subnormal-only blocks, huge values", 40, 192,
                  randn(40, 192, 1e-2f)};
    for (int r = 0; r < 40; r += 7) o.x[size_t(r) * 192 + (r * 13) % 192] = 3.0e4f;
    for (int c = 0; c < 64; c++) o.x[size_t(3) * 192 + c] = 0.f;
    for (int r = 16; r < 32; r++)
      for (int c = 16; c < 32; c++) o.x[size_t(r) * 192 + c] = 0.f;
    for (int c = 64; c < 160; c++) o.x[size_t(5) * 192 + c] = float(int(c % 7) - 3) * 1.0e-41f;
    for (int c = 0; c < 32; c++) o.x[size_t(9) * 192 + c] = 1.0e-38f * float(c + 1);
    for (int c = 128; c < 192; c++)
      o.x[size_t(11) * 192 + c] = (c % 2 ? -1.f : 1.f) * 3.0e38f / float(c - 127);
    out.push_back(o);
  }
  out.push_back({"all zero 16x64", 16, 64, std::vector<float>(16 * 64, 0.f)});
  out.push_back({"tiny tensor 20x48", 20, 48, randn(20, 48, 1e-36f)});
  {
    TestOperand o{"an inf", 24, 64, randn(24, 64, 1.f)};
    o.x[100] = INFINITY;
    out.push_back(o);
  }
  {
    TestOperand o{"a NaN", 24, 64, randn(24, 64, 1.f)};
    o.x[777] = NAN;
    out.push_back(o);
  }
  return out;
}

// An operand held in type E on the emulated device, and its fp32 widening on the host.
template <typename E>
struct Held {
  std::vector<E> dev;
  std::vector<float> host;
  Held(const std::vector<float>& x) : dev(x.size()), host(x.size()) {
    for (size_t i = 0; i < x.size(); i++) {
      dev[i] = e<E>(x[i]);
      host[i] = f(dev[i]);
    }
  }
  Tensor tensor() { return Tensor{dev.data(), dtype_of<E>(), dev.size()}; }
};

// a == b for a count; for a sum within 1e-12 relative (both NaN, or both the same inf, where
// the operand is not finite).
void check_sum(double dev, double host, const char* what) {
  INFO(what << ": device " << dev << " host " << host);
  if (!std::isfinite(host)) {
    CHECK(std::isnan(dev) == std::isnan(host));
    if (!std::isnan(host)) CHECK(dev == host);
    return;
  }
  CHECK(std::fabs(dev - host) <= 1e-12 * std::fabs(host));
}

void check_error(const QuantError& d, const QuantError& h) {
  check_sum(d.signal, h.signal, "signal");
  check_sum(d.noise, h.noise, "noise");
  CHECK(d.values == h.values);
  CHECK(d.nonzero == h.nonzero);
  CHECK(d.underflow == h.underflow);
  CHECK(d.saturated == h.saturated);
  CHECK(d.zeros == h.zeros);
  CHECK(d.groups == h.groups);
  CHECK(d.groups_saturated == h.groups_saturated);
  CHECK(d.groups_underflow == h.groups_underflow);
}

template <typename E>
void check_errors(const OperandRecipe& o, const TestOperand& op, const OperandVariant& v,
                  uint64_t seed) {
  Held<E> x(op.x);
  auto dv = gpu::make_operand_view(emu_ctx(), x.tensor(), op.rows, op.cols);
  HostOperandView hv(x.host.data(), op.rows, op.cols);
  const QuantError d = dv->quant_error(o, seed, v), h = hv.quant_error(o, seed, v);
  check_emu();
  check_error(d, h);
}

std::vector<float> factors(int n, uint64_t seed) {
  std::mt19937 rng{static_cast<unsigned>(seed)};
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::vector<float> s(static_cast<size_t>(n));
  for (float& v : s) v = std::exp2(u(rng));
  return s;
}

}  // namespace

TEST_CASE("emulated: operand amax and column amax on the device == the host's, bit for bit") {
  for (const TestOperand& op : operands()) {
    INFO(op.what);
    FOR_TYPES({
      INFO(tname<E>());
      Held<E> x(op.x);
      auto dv = gpu::make_operand_view(emu_ctx(), x.tensor(), op.rows, op.cols);
      HostOperandView hv(x.host.data(), op.rows, op.cols);
      CHECK(bits(dv->amax()) == bits(hv.amax()));
      const std::vector<float> dc = dv->column_amax(), hc = hv.column_amax();
      REQUIRE(dc.size() == hc.size());
      size_t differ = 0;
      for (size_t c = 0; c < dc.size(); c++) differ += bits(dc[c]) != bits(hc[c]);
      CHECK(differ == 0);
      check_emu();
    })
  }
  // Many rows: several row slices per column meet in the atomic max.
  std::vector<float> tall(300 * 5, 0.5f);
  tall[size_t(257) * 5 + 3] = -9.f;
  tall[size_t(3) * 5 + 1] = NAN;
  Held<float> x(tall);
  auto dv = gpu::make_operand_view(emu_ctx(), x.tensor(), 300, 5);
  CHECK(dv->column_amax() == std::vector<float>{0.5f, 0.5f, 0.5f, 9.f, 0.5f});
  CHECK(dv->amax() == 9.f);
}

TEST_CASE("emulated: device quantization error == cpu::quant_error, every candidate operand") {
  const std::vector<OperandRecipe> recipes = candidate_operand_recipes();
  const std::vector<TestOperand> ops = operands();
  MESSAGE(recipes.size() << " operand recipes x " << ops.size() << " operands");
  OperandVariant t;
  t.transposed = true;
  uint64_t seed = 500;
  for (const OperandRecipe& o : recipes) {
    INFO(describe_operand_recipe(o));
    for (const TestOperand& op : ops) {
      INFO(op.what);
      INFO("fp32, as it is");
      check_errors<float>(o, op, OperandVariant{}, ++seed);
      INFO("bf16, transposed (the backward GEMMs' operands)");
      check_errors<bf16>(o, op, t, seed);
    }
  }
}

TEST_CASE("emulated: device quantization error of smoothed and split operands == the host's") {
  const std::vector<TestOperand> all = operands();
  const TestOperand* ops[] = {&all[0], &all[2]};
  std::vector<OperandRecipe> recipes;
  for (const char* name : {"nvfp4", "mxfp4", "mxfp8", "fp8-block", "fp8-rowwise", "fp8"}) {
    const QuantRecipe r = candidate_recipe(name, RecipeOptions{}, "test");
    recipes.push_back(r.gemm[kForward].a);
    recipes.push_back(r.gemm[kForward].b);
  }
  uint64_t seed = 9000;
  for (const TestOperand* op : ops) {
    const std::vector<float> s = factors(op->cols, seed);
    const std::vector<int> split = {0, 5, op->cols - 1};
    std::vector<OperandVariant> vs(5);
    vs[0].smooth = &s, vs[0].smooth_divide = true;
    vs[1].smooth = &s;
    vs[2].split = &split;
    vs[3].smooth = &s, vs[3].smooth_divide = true, vs[3].split = &split;
    vs[4] = vs[3], vs[4].transposed = true;
    for (const OperandRecipe& o : recipes)
      for (size_t k = 0; k < vs.size(); k++) {
        INFO(op->what << ", " << describe_operand_recipe(o) << ", variant " << k);
        check_errors<bf16>(o, *op, vs[k], ++seed);
      }
  }
}

TEST_CASE("emulated: one device view measures different variants in turn, none stale") {
  const TestOperand op = operands()[0];
  const OperandRecipe o = candidate_recipe("mxfp4", RecipeOptions{}, "test").gemm[kForward].a;
  const std::vector<float> s = factors(op.cols, 3);
  const std::vector<int> split = {7}, split2 = {7, 8};
  OperandVariant a, b, c, d, plain;
  a.smooth = &s, a.smooth_divide = true;
  b.split = &split;
  c.split = &split2;
  d.transposed = true;
  Held<bf16> x(op.x);
  auto dv = gpu::make_operand_view(emu_ctx(), x.tensor(), op.rows, op.cols);
  HostOperandView hv(x.host.data(), op.rows, op.cols);
  for (const OperandVariant* v : {&a, &b, &c, &plain, &d, &a, &c, &d, &b}) {
    check_error(dv->quant_error(o, 1, *v), hv.quant_error(o, 1, *v));
    check_emu();
  }
  // The measurement is a real one: splitting the largest channels changes it.
  CHECK(hv.quant_error(o, 1, b).noise != hv.quant_error(o, 1, plain).noise);
}

// precision.mode=auto's whole measurement fed by device views and by host views of the same
// operands: the same formats, split channels and changes, the SQNRs to 1e-9 dB.
TEST_CASE("emulated: auto fed by device operand views decides as fed by host views") {
  const GPTConfig m = gpt_config(2, 2, 32, 256, 16);
  AutoOptions o;
  o.candidates = {Mode::NVFP4, Mode::MXFP4, Mode::MXFP8, Mode::FP8, Mode::BF16};
  o.threshold_db = 16;
  o.outlier_k = 6;
  const std::vector<AutoCandidate> cand = auto_candidates(o, RecipeOptions{});
  AutoPrecision host(o, cand, m), dev(o, cand, m);
  const int N = 32, C = m.n_embd;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int step = 1; step <= 3; step++) {
    host.begin(step, 77 + step);
    dev.begin(step, 77 + step);
    for (int l = 0; l < m.n_layer; l++)
      for (int lin = 0; lin < kAutoLinears; lin++) {
        const int in = lin == LinearQuantizers::FCPROJ ? 4 * C : C;
        const int out = lin == LinearQuantizers::QKV  ? 3 * C
                        : lin == LinearQuantizers::FC ? 4 * C
                                                      : C;
        const int shape[kLinearOperands][2] = {{N, in}, {out, in}, {N, out}};
        for (int operand = 0; operand < kLinearOperands; operand++) {
          const int rows = shape[operand][0], cols = shape[operand][1];
          // Each linear's own spread of values, so that formats differ between slots; an
          // outlier input channel in layer 1's fc (split from the first measurement on).
          const float scale = operand == kLinearGrad     ? 1e-4f
                              : operand == kLinearWeight ? 0.02f
                                                         : 1.f;
          const float tail = float(1 + (l * kAutoLinears + lin) % 5);
          std::vector<float> x(size_t(rows) * cols);
          for (float& v : x) {
            const float g = nd(rng);
            v = scale * g * (std::fabs(g) > 1.5f ? tail * tail : 1.f);
          }
          if (l == 1 && lin == LinearQuantizers::FC && operand == kLinearInput)
            for (int r = 0; r < rows; r++) x[size_t(r) * cols + 3] = 400.f * (r % 2 ? 1 : -1);
          Held<bf16> held(x);
          auto dv = gpu::make_operand_view(emu_ctx(), held.tensor(), rows, cols);
          dev.take(l, lin, operand, *dv);
          host.take(l, lin, operand, held.host.data(), rows, cols);
          check_emu();
        }
      }
    const std::vector<AutoChange> hc = host.decide(), dc = dev.decide();
    INFO("step " << step);
    CHECK(dev.formats() == host.formats());
    REQUIRE(dc.size() == hc.size());
    for (size_t i = 0; i < dc.size(); i++) CHECK(dev.describe(dc[i]) == host.describe(hc[i]));
    CHECK(dev.split_channels(1, LinearQuantizers::FC) ==
          host.split_channels(1, LinearQuantizers::FC));
    const nlohmann::json hr = host.record(), dr = dev.record();
    CHECK(dr["tensors"] == hr["tensors"]);
    CHECK(dr["outliers"] == hr["outliers"]);
    for (const AutoCandidate& c : cand) {
      const auto& hs = hr["slots"]["sqnr_db"][c.name];
      const auto& ds = dr["slots"]["sqnr_db"][c.name];
      REQUIRE(hs.size() == ds.size());
      for (size_t s = 0; s < hs.size(); s++) {
        INFO(auto_slot_name(int(s)) << " " << c.name);
        CHECK(ds[s].is_null() == hs[s].is_null());
        if (!hs[s].is_null()) CHECK(std::fabs(ds[s].get<double>() - hs[s].get<double>()) < 1e-9);
      }
      CHECK(dr["slots"]["underflow"][c.name] == hr["slots"]["underflow"][c.name]);
      CHECK(dr["slots"]["saturation"][c.name] == hr["slots"]["saturation"][c.name]);
    }
    if (step == 1) {
      // The measurement is not trivial: formats differ between slots, a channel is split.
      CHECK(host.split_channels(1, LinearQuantizers::FC) == std::vector<int>{3});
      std::vector<int> seen(cand.size(), 0);
      for (int f : host.formats()) seen[size_t(f)] = 1;
      int kinds = 0;
      for (int k : seen) kinds += k;
      CHECK(kinds >= 2);
    }
  }
}
