// precision.mode=auto on the CUDA backend: the trainer's measure-decide-apply loop over a
// whole model on the GPU, its operand statistics reduced on the device (the backend's operand
// views, src/backends/cuda/operand_stats.cu), checked two ways:
//   - against host views of the very same operands (each device view's values() downloaded
//     into a second AutoPrecision): the same formats, split channels and changes at every
//     measurement, every SQNR to 1e-9 dB, the counts behind underflow and saturation equal;
//   - against the same loop on the CPU backend: the same formats wherever the decision is not
//     within the two models' own operand differences of a threshold, the losses close.
// The CPU and GPU models do not see identical operands: each GEMM sums in another order, so a
// bf16 output now and then lands one ulp apart (test_scaled_backend.cu), which on these small
// tensors moves a 4-bit format's SQNR by up to about half a dB (a wrong statistic moves it by
// far more, or makes it NaN, and the first check sees any difference at all).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "src/model/linear_quantizers.h"
#include "src/model/model.h"
#include "src/numerics/recipe.h"
#include "src/precision/auto_precision.h"

using namespace tgc;

namespace {

// Every linear's recipe from auto's choices (src/training/trainer.cpp's apply_linear_recipes).
void apply_recipes(const tg::AutoPrecision& a, tg::LinearQuantizers& s, int n_layer) {
  for (int l = 0; l < n_layer; l++)
    for (int lin = 0; lin < tg::kAutoLinears; lin++)
      s.set_linear_recipe(l, lin, a.linear_recipe(l, lin));
}

// Hands every operand to auto on the device view and, downloaded, to a twin on a host view.
struct TwinProbe : tg::LinearProbe {
  tg::AutoPrecision *dev = nullptr, *host = nullptr;
  using tg::LinearProbe::take;
  void take(int layer, int linear, int operand, tg::OperandView& x) override {
    dev->take(layer, linear, operand, x);
    const std::vector<float> v = x.values();
    host->take(layer, linear, operand, v.data(), x.rows(), x.cols());
  }
};

// Whether slot s's decision is within `tol` dB of a threshold for some candidate.
bool near_threshold(const nlohmann::json& rec, const std::vector<tg::AutoCandidate>& cand, size_t s,
                    const tg::AutoOptions& o, double tol) {
  for (const tg::AutoCandidate& c : cand) {
    const auto& v = rec["slots"]["sqnr_db"][c.name][s];
    if (v.is_null()) continue;
    for (double t : {o.threshold_db, o.threshold_db + o.hysteresis_db})
      if (std::fabs(v.get<double>() - t) < tol) return true;
  }
  return false;
}

// Squared norms of each linear's weight gradient and of all (src/training/trainer.cpp's
// auto_grad_norms).
void grad_norms(tg::GPT& m, tg::AutoPrecision& a) {
  const tg::GPTConfig& c = m.config();
  const size_t C = size_t(c.n_embd);
  const int weight[tg::kAutoLinears] = {tg::QKVW, tg::ATTPROJW, tg::FCW, tg::FCPROJW};
  const size_t per[tg::kAutoLinears] = {3 * C * C, C * C, 4 * C * C, 4 * C * C};
  std::vector<double> sq;
  for (int l = 0; l < c.n_layer; l++)
    for (int lin = 0; lin < tg::kAutoLinears; lin++)
      sq.push_back(
          m.backend().sum_squares(m.grad(weight[lin]).slice(size_t(l) * per[lin], per[lin])));
  a.take_grad_norms(sq, m.backend().sum_squares(m.grads()));
}

// Two measurements of the same operands: SQNRs to 1e-9 dB, everything else equal.
void check_same_record(const nlohmann::json& a, const nlohmann::json& b,
                       const std::vector<tg::AutoCandidate>& cand) {
  CHECK(a["tensors"] == b["tensors"]);
  CHECK(a["outliers"] == b["outliers"]);
  CHECK(a["slots"]["format"] == b["slots"]["format"]);
  for (const tg::AutoCandidate& c : cand) {
    const auto &x = a["slots"]["sqnr_db"][c.name], &y = b["slots"]["sqnr_db"][c.name];
    REQUIRE(x.size() == y.size());
    for (size_t s = 0; s < x.size(); s++) {
      INFO(tg::auto_slot_name(int(s)) << " " << c.name);
      REQUIRE(x[s].is_null() == y[s].is_null());
      if (!x[s].is_null()) CHECK(std::fabs(x[s].get<double>() - y[s].get<double>()) < 1e-9);
    }
    CHECK(a["slots"]["underflow"][c.name] == b["slots"]["underflow"][c.name]);
    CHECK(a["slots"]["saturation"][c.name] == b["slots"]["saturation"][c.name]);
  }
}

}  // namespace

TEST_CASE("cuda: an auto run decides on the GPU as on the CPU, statistics reduced on the device") {
  TG_REQUIRE_GPU();
  const tg::GPTConfig cfg = tg::gpt_config(2, 4, 64, 100, 32);
  const int B = 4, T = 32, L = cfg.n_layer;
  tg::AutoOptions o;
  o.candidates = {tg::Mode::NVFP4, tg::Mode::MXFP4, tg::Mode::MXFP8, tg::Mode::FP8, tg::Mode::BF16};
  o.every = 2;
  o.threshold_db = 17;
  o.hysteresis_db = 1;
  o.outlier_k = 4;
  const std::vector<tg::AutoCandidate> cand = tg::auto_candidates(o, tg::RecipeOptions{});
  auto cpu = tg::make_cpu_backend();
  auto gpu = tg::make_cuda_backend();
  {
    // Both backends hand out views of their own (the GPU's reduce on the device).
    Tensor t = gpu->alloc(DType::BF16, 64), h = cpu->alloc(DType::BF16, 64);
    CHECK(bool(gpu->operand_view(t, 8, 8)));
    CHECK(bool(cpu->operand_view(h, 8, 8)));
    gpu->free(t);
    cpu->free(h);
  }
  tg::QuantRecipe base = tg::candidate_recipe("bf16", tg::RecipeOptions{}, "test");
  base.name = "auto";
  tg::LinearQuantizers sc(base, L), sg(base, L);
  tg::QuantOptions fo;
  gpu->set_quant_options(fo);
  cpu->set_quant_options(fo);
  tg::AutoPrecision ac(o, cand, cfg), ag(o, cand, cfg), ah(o, cand, cfg);
  TwinProbe twin;
  twin.dev = &ag;
  twin.host = &ah;
  tg::GPT mc(cfg, *cpu, DType::BF16), mg(cfg, *gpu, DType::BF16);
  mc.set_quantizers(&sc);
  mg.set_quantizers(&sg);
  mc.init_random(5);
  mg.init_random(5);
  apply_recipes(ac, sc, L);
  apply_recipes(ag, sg, L);
  tg::GPT* ms[2] = {&mc, &mg};
  tg::AutoPrecision* as[2] = {&ac, &ag};
  tg::LinearQuantizers* ss[2] = {&sc, &sg};
  int measured = 0, changes = 0, mismatched = 0;
  for (int step = 1; step <= 5; step++) {
    const auto in = random_tokens(size_t(B) * T, cfg.vocab_size, 300 + step);
    const auto tgt = random_tokens(size_t(B) * T, cfg.vocab_size, 700 + step);
    const bool measure = ac.due(step);
    double loss[2];
    for (int k = 0; k < 2; k++) {
      ms[k]->zero_grad();
      if (measure) {
        as[k]->begin(step, 1000 + uint64_t(step));
        if (k == 1) ah.begin(step, 1000 + uint64_t(step));
        ms[k]->set_probe(k == 1 ? static_cast<tg::LinearProbe*>(&twin) : as[k]);
      }
      loss[k] = ms[k]->forward(in.data(), tgt.data(), B, T, 1.f);
      ms[k]->backward();
      ms[k]->set_probe(nullptr);
      if (measure) {
        grad_norms(*ms[k], *as[k]);
        const std::vector<tg::AutoChange> ch = as[k]->decide();
        changes += int(ch.size()) * (k == 0);
        if (k == 1) {  // the twin: the same statistics from host views, the same decisions
          grad_norms(*ms[k], ah);
          const std::vector<tg::AutoChange> hc = ah.decide();
          CHECK(ah.formats() == ag.formats());
          REQUIRE(hc.size() == ch.size());
          for (size_t i = 0; i < ch.size(); i++) CHECK(ag.describe(ch[i]) == ah.describe(hc[i]));
          check_same_record(ag.record(), ah.record(), cand);
        }
        apply_recipes(*as[k], *ss[k], L);
      }
      tgc::clipped_adamw_step(*ms[k], step);
    }
    INFO("step " << step << ": loss cpu " << loss[0] << " gpu " << loss[1]);
    CHECK(std::fabs(loss[1] / loss[0] - 1) < 2e-2);
    if (!measure) continue;
    measured++;
    for (int l = 0; l < L; l++)
      for (int lin = 0; lin < tg::kAutoLinears; lin++)
        CHECK(ag.split_channels(l, lin) == ac.split_channels(l, lin));
    const nlohmann::json rc = ac.record(), rg = ag.record();
    for (size_t s = 0; s < ac.formats().size(); s++)
      if (ag.formats()[s] != ac.formats()[s]) {
        mismatched++;
        INFO(tg::auto_slot_name(int(s)));
        CHECK(near_threshold(rc, cand, s, o, 1.0));
      }
    double worst = 0, nearest = INFINITY;
    for (const tg::AutoCandidate& c : cand) {
      const auto& a = rc["slots"]["sqnr_db"][c.name];
      const auto& b = rg["slots"]["sqnr_db"][c.name];
      for (size_t s = 0; s < a.size(); s++) {
        INFO(tg::auto_slot_name(int(s)) << " " << c.name);
        REQUIRE(a[s].is_null() == b[s].is_null());
        if (a[s].is_null()) continue;
        worst = std::max(worst, std::fabs(a[s].get<double>() - b[s].get<double>()));
        nearest = std::min(nearest, std::fabs(a[s].get<double>() - o.threshold_db));
      }
    }
    MESSAGE("step " << step << ": largest SQNR difference " << worst << " dB; nearest to the "
                    << "threshold " << nearest << " dB");
    CHECK(worst < 1.0);
  }
  MESSAGE(mismatched << " slot decisions differ between the CPU and the GPU (near a threshold)");
  CHECK(measured == 3);
  // The run chose something: formats moved away from the priors.
  CHECK(changes > 0);
}
