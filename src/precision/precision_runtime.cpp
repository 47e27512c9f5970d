// precision_runtime.cpp: the quantization machinery of a run (see precision_runtime.h).
#include "precision_runtime.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "src/base/common.h"
#include "src/comm/comm.h"
#include "src/precision/precision.h"

namespace tg {
using json = nlohmann::json;

PrecisionRuntime::PrecisionRuntime(const Config& cfg, Backend& be, GPT& model)
    : cfg_(cfg), be_(be), model_(model), mc_(model.config()) {
  const PrecisionSpec spec = precision_spec(cfg_);
  if (!spec.quantized_linears) return;
  state_ = std::make_unique<LinearQuantizers>(spec.recipe, mc_.n_layer);
  if (!be_.has_block_scaled_linears())
    throw UsageError(
        strf("precision.mode=%s: the %s backend has no quantized linears yet "
             "(train.device=cpu runs them)",
             mode_name(cfg_.precision.mode), be_.name().c_str()));
  QuantOptions o;
  o.fast_accum = cfg_.precision.fp8.fast_accum;
  o.recipe = &state_->recipe();
  be_.set_quant_options(o);
  model_.set_quantizers(state_.get());
  make_smoothing_and_auto();
  apply_linear_recipes();
  // auto measures its operands itself (kind "auto"); the fixed block-scaled recipes here.
  if (state_->block_scaled() && !auto_ && cfg_.precision.telemetry_every > 0)
    telemetry_ = std::make_unique<QuantTelemetry>(*state_, mc_.n_layer);
}

void PrecisionRuntime::make_smoothing_and_auto() {
  const auto& rc = cfg_.precision.recipe;
  const bool is_auto = cfg_.precision.mode == Mode::Auto;
  if (rc.smooth || (is_auto && cfg_.precision.auto_.outliers == OutlierHandling::Smooth)) {
    // Every backend with block-scaled linears (checked above) smooths their forward GEMM.
    if (!state_->block_scaled())  // config_validate refuses the other modes
      throw UsageError("config key 'precision.recipe.smooth': needs block-scaled linears");
    smooth_ =
        std::make_unique<ChannelSmoothing>(SmoothOptions{rc.smooth_alpha, rc.smooth_every}, mc_);
  }
  if (!is_auto) return;
  const auto& a = cfg_.precision.auto_;
  const AutoOptions ao{a.candidates, a.threshold_db, a.hysteresis_db,
                       a.budget,     a.priors,       a.every,
                       a.window,     a.outlier_k,    a.outliers == OutlierHandling::Split};
  auto_ = std::make_unique<AutoPrecision>(ao, auto_candidates(ao, recipe_options(cfg_)), mc_);
  auto_->set_smoothing(smooth_.get());
}

void PrecisionRuntime::apply_linear_recipes() {
  if (!auto_ && !smooth_)
    return;  // every linear runs the mode's recipe, as LinearQuantizers starts
  for (int l = 0; l < mc_.n_layer; l++)
    for (int lin = 0; lin < kAutoLinears; lin++) {
      QuantRecipe r = auto_ ? auto_->linear_recipe(l, lin) : state_->recipe();
      // Smoothing matters only where a forward operand is quantized (bf16 ones stay as they
      // are: smoothing them would only add the rounding of x / s).
      if (smooth_ && (is_low_bit(r.gemm[kForward].a) || is_low_bit(r.gemm[kForward].b)))
        r.smooth = smooth_->factors(l, lin);
      state_->set_linear_recipe(l, lin, r);
    }
}

// ---- a training step ----

void PrecisionRuntime::begin_step(int64_t step) {
  step_ = step;
  // The first micro-batch's operands are measured (copies; the step is unchanged).
  measure_auto_ = auto_ && auto_->due(step);
  measure_smooth_ = smooth_ && smooth_->due(step);
  measure_quant_ = telemetry_ && step % cfg_.precision.telemetry_every == 0;
  probes_.to.clear();
  if (measure_auto_) probes_.to.push_back(auto_.get());
  if (measure_smooth_) probes_.to.push_back(smooth_.get());
  if (measure_quant_) probes_.to.push_back(telemetry_.get());
}

void PrecisionRuntime::before_forward(int micro) {
  if (state_) state_->set_rng_seed(quant_seed(cfg_, step_ - 1, micro));
  if (micro != 0 || probes_.to.empty()) return;
  if (measure_auto_) auto_->begin(step_, quant_seed(cfg_, step_ - 1, -1));
  if (measure_smooth_) smooth_->begin(step_);
  if (measure_quant_) telemetry_->begin(step_, quant_seed(cfg_, step_ - 1, -1));
  model_.set_probe(&probes_);
}

void PrecisionRuntime::after_backward() { model_.set_probe(nullptr); }

void PrecisionRuntime::before_gradient_sum(Comm& comm) {
  if (measure_auto_) auto_grad_norms();
  if (state_ && comm.world() > 1) state_->reduce_latest(comm);
}

void PrecisionRuntime::after_gradient_sum(Comm& comm, LineWriter& metrics) {
  if (measure_auto_) auto_decide(comm, metrics);  // measured with the factors this step ran
  if (measure_quant_) {
    telemetry_->reduce(comm);
    metrics.write(telemetry_->record().dump());
  }
  if (measure_smooth_) smooth_update(comm, metrics);
}

// Each linear's weight gradient's squared norm, and all gradients' (this rank's, before the
// reduction: AutoPrecision::reduce sums them over the ranks).
void PrecisionRuntime::auto_grad_norms() {
  const size_t C = size_t(mc_.n_embd);
  const int weight[kAutoLinears] = {QKVW, ATTPROJW, FCW, FCPROJW};
  const size_t per[kAutoLinears] = {3 * C * C, C * C, 4 * C * C, 4 * C * C};
  std::vector<double> sq;
  for (int l = 0; l < mc_.n_layer; l++)
    for (int lin = 0; lin < kAutoLinears; lin++)
      sq.push_back(be_.sum_squares(model_.grad(weight[lin]).slice(size_t(l) * per[lin], per[lin])));
  auto_->take_grad_norms(sq, be_.sum_squares(model_.grads()));
}

void PrecisionRuntime::auto_decide(Comm& comm, LineWriter& metrics) {
  auto_->reduce(comm);
  const std::vector<AutoChange> changes = auto_->decide();
  if (comm.world() > 1) {  // the same statistics give the same decisions; a cheap check
    std::vector<int32_t> mine(auto_->formats().begin(), auto_->formats().end()), root = mine;
    comm.broadcast(root.data(), root.size() * sizeof(int32_t), 0);
    if (root != mine)
      throw Error(
          strf("precision.mode=auto: rank %d chose other formats than rank 0", comm.rank()));
  }
  metrics.write(auto_->record().dump());
  if (changes.empty()) return;
  apply_linear_recipes();
  if (comm.rank() != 0) return;
  for (const AutoChange& c : changes)
    printf("auto: step %lld: %s\n", (long long)step_, auto_->describe(c).c_str());
}

void PrecisionRuntime::smooth_update(Comm& comm, LineWriter& metrics) {
  smooth_->update(comm);
  const json rec = smooth_->record();
  metrics.write(rec.dump());
  apply_linear_recipes();
  // One line for the run's first factors; the later ones are in metrics.jsonl only.
  if (comm.rank() != 0 || smooth_logged_) return;
  smooth_logged_ = true;
  float lo = 1, hi = 1;
  for (const auto& x : rec["min_factor"]) lo = std::min(lo, x.get<float>());
  for (const auto& x : rec["max_factor"]) hi = std::max(hi, x.get<float>());
  printf(
      "smooth: step %lld: channel factors %.3g ... %.3g (recomputed every %d steps: "
      "metrics.jsonl kind \"smooth\")\n",
      (long long)smooth_->updated_at(), lo, hi, cfg_.precision.recipe.smooth_every);
}

// ---- checkpoints ----

void PrecisionRuntime::save(RunState& s) const {
  if (state_) s.fp8 = state_->to_json();
  if (auto_) s.auto_precision = auto_->to_json();
  if (smooth_) s.smoothing = smooth_->to_json();
}

bool PrecisionRuntime::takes_quantizers(const RunState& s) const {
  return state_ && s.mode == Mode::FP8 && !s.fp8.is_null();
}
bool PrecisionRuntime::takes_auto(const RunState& s) const {
  return auto_ && s.mode == Mode::Auto && !s.auto_precision.is_null();
}
bool PrecisionRuntime::takes_smoothing(const RunState& s) const {
  return smooth_ && !s.smoothing.is_null();
}

void PrecisionRuntime::verify(const RunState& s, const std::string& path) const {
  // Each is read into a copy: one that fails leaves the run's state as it was.
  if (takes_quantizers(s)) {
    LinearQuantizers check = *state_;
    check.from_json(s.fp8, path);
  }
  if (takes_auto(s)) {
    AutoPrecision check = *auto_;
    check.from_json(s.auto_precision, path);
  }
  if (takes_smoothing(s)) {
    ChannelSmoothing check = *smooth_;
    check.from_json(s.smoothing, path);
  }
}

void PrecisionRuntime::load(const RunState& s, const std::string& path) {
  if (takes_quantizers(s)) state_->from_json(s.fp8, path);
  if (takes_auto(s)) {
    auto_->from_json(s.auto_precision, path);
    apply_linear_recipes();
  }
  if (takes_smoothing(s)) {
    smooth_->from_json(s.smoothing, path);
    apply_linear_recipes();
  }
}

// ---- logs ----

void PrecisionRuntime::print_start() const {
  if (state_) {
    std::string kept;
    for (int l = 0; l < mc_.n_layer; l++)
      if (!state_->layer_in_fp8(l)) kept += (kept.empty() ? "" : ",") + std::to_string(l);
    printf("quantized linears: %s; layers kept in bf16: %s; path: %s\n",
           describe(state_->recipe()).c_str(), kept.empty() ? "none" : kept.c_str(),
           be_.fp8_path_name().c_str());
  }
  if (auto_) {
    const auto& a = cfg_.precision.auto_;
    std::string names;
    for (const AutoCandidate& c : auto_->candidates()) names += (names.empty() ? "" : ",") + c.name;
    printf(
        "auto: candidates %s (narrowest first); SQNR threshold %g dB, hysteresis %g dB, "
        "budget %s; measured at step 1 and every %d steps; priors %s\n",
        names.c_str(), a.threshold_db, a.hysteresis_db,
        a.budget > 0 ? strf("%.0f%% of block-linear FLOPs in <= 8 bits", 100 * a.budget).c_str()
                     : "none",
        a.every, a.priors ? "on (first and last layers start wide)" : "off");
  }
  if (smooth_)
    printf(
        "smoothing: forward GEMMs of the quantized linears, s_c = amax_x(c)^%g / "
        "amax_w(c)^%g, recomputed at step 1 and every %d steps\n",
        cfg_.precision.recipe.smooth_alpha, 1 - cfg_.precision.recipe.smooth_alpha,
        cfg_.precision.recipe.smooth_every);
}

void PrecisionRuntime::add_summary(json& summary) const {
  if (telemetry_) summary["quant"] = telemetry_->summary();
  if (auto_)
    summary[mode_name(Mode::Auto)] = {{"formats", auto_->map_json()},
                                      {"low_bit_flop_share", auto_->flop_share()}};
}

void PrecisionRuntime::print_summary() const {
  if (auto_)
    printf("auto: final formats (%.0f%% of block-linear FLOPs in <= 8 bits):\n%s",
           100 * auto_->flop_share(), auto_->map_text().c_str());
}

}  // namespace tg
