#include "auto_precision.h"

#include <algorithm>
#include <cmath>

#include "smoothing.h"
#include "src/base/common.h"
#include "src/comm/comm.h"
#include "src/numerics/formats.h"

namespace tg {

using json = nlohmann::json;

const char* auto_linear_name(int linear) {
  static const char* n[kAutoLinears] = {"qkv", "attproj", "fc", "fcproj"};
  return n[linear];
}

const char* auto_role_name(int role) {
  static const char* n[kGemmRoles] = {"forward", "dgrad", "wgrad"};
  return n[role];
}

// forward = input x weight^T, dgrad = grad x weight, wgrad = grad^T x input
// (src/numerics/recipe.h).
int auto_slot_operand(int role, int b) {
  if (role == kForward) return b ? kLinearWeight : kLinearInput;
  if (role == kInputGrad) return b ? kLinearWeight : kLinearGrad;
  return b ? kLinearInput : kLinearGrad;
}

bool auto_slot_transposed(int role, int b) {
  return role == kWeightGrad || (role == kInputGrad && b);
}

const char* auto_operand_name(int operand) {
  static const char* n[kLinearOperands] = {"input", "weight", "grad"};
  return n[operand];
}

std::string auto_slot_name(int slot) {
  const int b = slot % 2, role = slot / 2 % kGemmRoles, lin = slot / kSlotsPerLinear % kAutoLinears;
  const int layer = slot / (kSlotsPerLinear * kAutoLinears);
  return strf("layer %d %s %s %s", layer, auto_linear_name(lin), auto_role_name(role),
              auto_operand_name(auto_slot_operand(role, b)));
}

double sqnr_db(const QuantError& e) {
  if (!std::isfinite(e.noise) || !std::isfinite(e.signal)) return NAN;
  if (e.noise == 0 || e.signal == 0) return INFINITY;
  return 10.0 * std::log10(e.signal / e.noise);
}

std::vector<AutoCandidate> auto_candidates(const AutoOptions& a, const RecipeOptions& o) {
  const char* key = "precision.auto.candidates";
  if (a.candidates.empty()) throw UsageError(strf("config key '%s': must not be empty", key));
  std::vector<AutoCandidate> out;
  for (const Mode m : a.candidates) {
    const std::string name = mode_name(m);
    for (const AutoCandidate& c : out)
      if (c.name == name)
        throw UsageError(strf("config key '%s': '%s' is listed twice", key, name.c_str()));
    AutoCandidate c;
    c.name = name;
    c.recipe = candidate_recipe(m, o, key);
    c.low_bit = is_low_bit(c.recipe.gemm[kForward].a);
    out.push_back(c);
  }
  return out;
}

QuantRecipe compose_linear_recipe(const std::vector<AutoCandidate>& c, const int* f) {
  QuantRecipe r;
  r.name = mode_name(Mode::Auto);
  for (int g = 0; g < kGemmRoles; g++) {
    GemmRecipe& gr = r.gemm[g];
    gr.a = c[size_t(f[g * 2])].recipe.gemm[g].a;
    gr.b = c[size_t(f[g * 2 + 1])].recipe.gemm[g].b;
    // A rotation cancels in the product only when both operands take the same one.
    if (gr.a.transform != gr.b.transform || gr.a.transform_size != gr.b.transform_size) {
      gr.a.transform = gr.b.transform = Transform::None;
      gr.a.transform_size = gr.b.transform_size = 0;
    }
  }
  return r;
}

double low_bit_flop_share(const std::vector<int>& formats, const std::vector<bool>& low_bit,
                          const std::vector<double>& gemm_flops) {
  double low = 0, all = 0;
  for (size_t g = 0; g < gemm_flops.size(); g++) {
    all += gemm_flops[g];
    if (low_bit[size_t(formats[2 * g])] && low_bit[size_t(formats[2 * g + 1])])
      low += gemm_flops[g];
  }
  return all > 0 ? low / all : 0;
}

namespace {

// The narrowest candidate whose SQNR meets the threshold; a narrower one than now must beat
// it by the hysteresis (NaN meets nothing). The last candidate is the fallback.
int threshold_choice(const double* sqnr, int n, int current, const AutoPolicy& p) {
  for (int c = 0; c < n; c++) {
    const double need = p.threshold_db + (c < current ? p.hysteresis_db : 0.0);
    if (sqnr[c] >= need) return c;
  }
  return n - 1;
}

std::string db_text(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return "inf";
  return strf("%.1f", x);
}

// The low-bit candidate with the highest SQNR for a slot (-1: none), and that SQNR.
int best_low_bit(const double* sqnr, const std::vector<bool>& low_bit, double* best) {
  int pick = -1;
  *best = -INFINITY;
  for (size_t c = 0; c < low_bit.size(); c++) {
    const double s = std::isnan(sqnr[c]) ? -INFINITY : sqnr[c];
    if (low_bit[c] && (pick < 0 || s > *best)) pick = int(c), *best = s;
  }
  return pick;
}

}  // namespace

std::vector<int> choose_formats(const std::vector<int>& current, const std::vector<double>& sqnr_db,
                                const std::vector<bool>& low_bit,
                                const std::vector<double>& gemm_flops, const AutoPolicy& p,
                                const std::vector<std::string>& names,
                                std::vector<AutoChange>* changes) {
  const int n = int(low_bit.size());
  const size_t slots = current.size();
  std::vector<int> f(slots);
  std::vector<std::string> why(slots);
  for (size_t s = 0; s < slots; s++) {
    const double* q = &sqnr_db[s * size_t(n)];
    const int cur = current[s];
    f[s] = threshold_choice(q, n, cur, p);
    if (f[s] > cur)
      why[s] = strf("SQNR %s dB < %s dB", db_text(q[cur]).c_str(), db_text(p.threshold_db).c_str());
    else if (f[s] < cur)
      why[s] = strf("SQNR %s dB >= %s + %s dB", db_text(q[f[s]]).c_str(),
                    db_text(p.threshold_db).c_str(), db_text(p.hysteresis_db).c_str());
  }
  // The budget: narrow whole GEMMs, the best-measured first, until enough FLOPs are low-bit.
  // A GEMM that is low-bit now keeps its formats and ranks hysteresis_db higher, so the
  // budget's choice does not flap between GEMMs of about equal SQNR either.
  auto budget_format = [&](size_t s, double* sqnr) {
    const int k = low_bit[size_t(current[s])]
                      ? current[s]
                      : best_low_bit(&sqnr_db[s * size_t(n)], low_bit, sqnr);
    if (k >= 0)
      *sqnr = std::isnan(sqnr_db[s * size_t(n) + size_t(k)]) ? -INFINITY
                                                             : sqnr_db[s * size_t(n) + size_t(k)];
    return k;
  };
  while (p.budget > 0) {
    const double share = low_bit_flop_share(f, low_bit, gemm_flops);
    if (share >= p.budget) break;
    int best_g = -1;
    double best_score = -INFINITY;
    for (size_t g = 0; g < gemm_flops.size(); g++) {
      double score = INFINITY;
      bool wide = false;
      for (size_t s = 2 * g; s < 2 * g + 2; s++) {
        if (low_bit[size_t(f[s])]) continue;
        double b = -INFINITY;
        if (budget_format(s, &b) < 0) b = -INFINITY;
        wide = true;
        score = std::min(score, b);
      }
      if (low_bit[size_t(current[2 * g])] && low_bit[size_t(current[2 * g + 1])])
        score += p.hysteresis_db;
      if (wide && score > -INFINITY && (best_g < 0 || score > best_score))
        best_g = int(g), best_score = score;
    }
    if (best_g < 0) break;  // nothing left to narrow
    for (size_t s = 2 * size_t(best_g); s < 2 * size_t(best_g) + 2; s++) {
      if (low_bit[size_t(f[s])]) continue;
      double b = -INFINITY;
      f[s] = budget_format(s, &b);
      why[s] = strf("budget: low-bit FLOP share %.2f < %.2f, SQNR %s dB", share, p.budget,
                    db_text(b).c_str());
    }
  }
  if (changes)
    for (size_t s = 0; s < slots; s++)
      if (f[s] != current[s])
        changes->push_back({int(s), current[s], f[s],
                            names[size_t(current[s])] + " -> " + names[size_t(f[s])] + ", " +
                                (why[s].empty() ? "budget" : why[s])});
  return f;
}

// ---- AutoPrecision ----

AutoPrecision::AutoPrecision(const AutoOptions& o, std::vector<AutoCandidate> c, const GPTConfig& m)
    : opt_(o), cand_(std::move(c)), n_layer_(m.n_layer) {
  const int n = int(cand_.size());
  const double C = m.n_embd, oc[kAutoLinears] = {3 * C, C, 4 * C, C},
               ic[kAutoLinears] = {C, C, C, 4 * C};
  for (int l = 0; l < n_layer_; l++)
    for (int lin = 0; lin < kAutoLinears; lin++)
      for (int g = 0; g < kGemmRoles; g++) gemm_flops_.push_back(2.0 * ic[lin] * oc[lin]);
  // Start: the widest 8-bit candidate (the first, if none is), priors: first and last layers
  // in the widest candidate.
  int start = 0;
  for (int k = 0; k < n; k++)
    if (cand_[size_t(k)].low_bit) start = k;
  fmt_.assign(size_t(n_layer_) * kAutoLinears * kSlotsPerLinear, start);
  if (opt_.priors)
    for (int l : {0, n_layer_ - 1})
      for (int s = 0; s < kAutoLinears * kSlotsPerLinear; s++)
        fmt_[size_t(l) * kAutoLinears * kSlotsPerLinear + size_t(s)] = n - 1;
  amax_window_.resize(size_t(n_layer_) * kAutoLinears * kLinearOperands);
  in_channels_ = {m.n_embd, m.n_embd, m.n_embd, 4 * m.n_embd};
  split_.resize(size_t(n_layer_) * kAutoLinears);
  outliers_.resize(split_.size());
  outlier_ratio_.assign(split_.size(), 0.0);
}

void AutoPrecision::begin(int64_t step, uint64_t seed) {
  step_ = step;
  seed_ = seed;
  err_.assign(fmt_.size() * cand_.size(), QuantError{});
  amax_.assign(amax_window_.size(), 0.0f);
  grad_sq_.assign(size_t(n_layer_) * kAutoLinears, 0.0);
  grad_total_sq_ = 0;
  last_changes_.clear();
  chan_amax_.assign(split_.size(), {});
  for (int l = 0; l < n_layer_; l++)
    for (int lin = 0; lin < kAutoLinears; lin++)
      chan_amax_[size_t(l) * kAutoLinears + size_t(lin)].assign(size_t(in_channels_[size_t(lin)]),
                                                                0.0f);
}

// The forward GEMM runs the smoothed operands (the backward ones the operands as they are),
// and with split channels the error is that of the quantized rest, relative to the rest (an
// outlier's energy, kept exactly, would otherwise hide how much the other channels lose).
void AutoPrecision::take(int layer, int linear, int operand, OperandView& x) {
  const int rows = x.rows(), cols = x.cols();
  const size_t n = size_t(rows) * cols;
  amax_[size_t(tensor_index(layer, linear, operand))] = x.amax();
  const size_t li = size_t(layer) * kAutoLinears + size_t(linear);
  if (operand == kLinearInput) {
    std::vector<float>& ch = chan_amax_[li];
    const std::vector<float> col = x.column_amax();
    for (int c = 0; c < cols && c < int(ch.size()); c++)
      ch[size_t(c)] = std::max(ch[size_t(c)], col[size_t(c)]);
  }
  OperandVariant forward;
  if (smooth_ && operand != kLinearGrad && !smooth_->factors(layer, linear).empty()) {
    forward.smooth = &smooth_->factors(layer, linear);
    forward.smooth_divide = operand == kLinearInput;
  }
  forward.split = &split_[li];
  for (int g = 0; g < kGemmRoles; g++)
    for (int b = 0; b < 2; b++) {
      if (auto_slot_operand(g, b) != operand) continue;
      OperandVariant v;
      if (auto_slot_transposed(g, b))
        v.transposed = true;
      else if (g == kForward)
        v = forward;
      const int slot = auto_slot(layer, linear, g, b);
      for (size_t c = 0; c < cand_.size(); c++) {
        const GemmRecipe& gr = cand_[c].recipe.gemm[g];
        const OperandRecipe& o = b ? gr.b : gr.a;
        QuantError& e = err_[size_t(slot) * cand_.size() + c];
        if (!is_low_bit(o)) {  // bf16 operands are kept as they are: nothing lost
          e.values = double(n);
          continue;
        }
        const uint64_t s = detail::splitmix64_mix(seed_ + uint64_t(slot * 64 + int(c) + 1) *
                                                              0x9E3779B97F4A7C15ull);
        e = x.quant_error(o, s, v);
      }
    }
}

void AutoPrecision::take_grad_norms(const std::vector<double>& linear_sq, double total_sq) {
  grad_sq_ = linear_sq;
  grad_total_sq_ = total_sq;
}

void AutoPrecision::reduce(Comm& comm) {
  if (comm.world() == 1) return;
  const size_t nf = kQuantErrorFields;
  std::vector<double> v(err_.size() * nf);
  for (size_t i = 0; i < err_.size(); i++) quant_error_fields(err_[i], &v[i * nf]);
  v.insert(v.end(), grad_sq_.begin(), grad_sq_.end());
  v.push_back(grad_total_sq_);
  comm.all_reduce_sum(v.data(), v.size());
  for (size_t i = 0; i < err_.size(); i++) err_[i] = quant_error_from_fields(&v[i * nf]);
  size_t k = err_.size() * nf;
  for (double& g : grad_sq_) g = v[k++];
  grad_total_sq_ = v[k];
  comm.all_reduce_max(amax_.data(), amax_.size());
  for (auto& ch : chan_amax_) comm.all_reduce_max(ch.data(), ch.size());
}

// Channels above outlier_k x the median channel amax; with splitting, they join the split.
void AutoPrecision::find_outliers() {
  for (size_t i = 0; i < chan_amax_.size(); i++) {
    std::vector<float> sorted = chan_amax_[i];
    std::sort(sorted.begin(), sorted.end());
    const float median = sorted.empty() ? 0.0f : sorted[sorted.size() / 2];
    outliers_[i].clear();
    outlier_ratio_[i] = median > 0 ? sorted.back() / double(median) : 0.0;
    // A split channel stays split while above half the threshold, so the split set does not
    // flap with channels hovering around k x the median.
    std::vector<int> split;
    if (median > 0)
      for (size_t c = 0; c < chan_amax_[i].size(); c++) {
        const float a = chan_amax_[i][c];
        if (a > opt_.outlier_k * median) outliers_[i].push_back(int(c));
        const bool was = std::binary_search(split_[i].begin(), split_[i].end(), int(c));
        if (a > opt_.outlier_k * median || (was && a > 0.5 * opt_.outlier_k * median))
          split.push_back(int(c));
      }
    if (!opt_.split_outliers || split == split_[i]) continue;
    std::string list;
    for (int c : split) list += (list.empty() ? "" : ",") + std::to_string(c);
    const int slot = auto_slot(int(i) / kAutoLinears, int(i) % kAutoLinears, kForward, 0);
    last_changes_.push_back(
        {slot, fmt_[size_t(slot)], fmt_[size_t(slot)],
         split.empty()
             ? std::string("no outlier channels: none split any more")
             : strf("outlier channels [%s] (largest %.1fx the median) split out unquantized",
                    list.c_str(), outlier_ratio_[i])});
    split_[i] = split;
  }
}

std::vector<AutoChange> AutoPrecision::decide() {
  for (size_t i = 0; i < amax_window_.size(); i++) {
    amax_window_[i].push_back(amax_[i]);
    while (int(amax_window_[i].size()) > opt_.window) amax_window_[i].pop_front();
  }
  std::vector<double> sqnr(err_.size());
  for (size_t i = 0; i < err_.size(); i++) sqnr[i] = sqnr_db(err_[i]);
  std::vector<bool> low_bit;
  std::vector<std::string> names;
  for (const AutoCandidate& c : cand_) {
    low_bit.push_back(c.low_bit);
    names.push_back(c.name);
  }
  last_changes_.clear();
  fmt_ = choose_formats(fmt_, sqnr, low_bit, gemm_flops_,
                        AutoPolicy{opt_.threshold_db, opt_.hysteresis_db, opt_.budget}, names,
                        &last_changes_);
  find_outliers();
  return last_changes_;
}

std::string AutoPrecision::describe(const AutoChange& c) const {
  return auto_slot_name(c.slot) + ": " + c.why;
}

QuantRecipe AutoPrecision::linear_recipe(int layer, int linear) const {
  QuantRecipe r = compose_linear_recipe(cand_, &fmt_[size_t(auto_slot(layer, linear, 0, 0))]);
  // The split matters only where a forward operand is quantized.
  if (is_low_bit(r.gemm[kForward].a) || is_low_bit(r.gemm[kForward].b))
    r.split_channels = split_channels(layer, linear);
  return r;
}

double AutoPrecision::flop_share() const {
  std::vector<bool> low_bit;
  for (const AutoCandidate& c : cand_) low_bit.push_back(c.low_bit);
  return low_bit_flop_share(fmt_, low_bit, gemm_flops_);
}

namespace {
json finite_or_null(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }
}  // namespace

json AutoPrecision::record() const {
  json names = json::array(),
       slots = {{"layer", json::array()},      {"linear", json::array()},
                {"role", json::array()},       {"operand", json::array()},
                {"format", json::array()},     {"sqnr_db", json::object()},
                {"underflow", json::object()}, {"saturation", json::object()}};
  for (const AutoCandidate& c : cand_) {
    names.push_back(c.name);
    slots["sqnr_db"][c.name] = slots["underflow"][c.name] = slots["saturation"][c.name] =
        json::array();
  }
  for (size_t s = 0; s < fmt_.size(); s++) {
    const int b = int(s % 2), role = int(s / 2 % kGemmRoles);
    slots["layer"].push_back(int(s / (kSlotsPerLinear * kAutoLinears)));
    slots["linear"].push_back(auto_linear_name(int(s / kSlotsPerLinear % kAutoLinears)));
    slots["role"].push_back(auto_role_name(role));
    slots["operand"].push_back(auto_operand_name(auto_slot_operand(role, b)));
    slots["format"].push_back(cand_[size_t(fmt_[s])].name);
    for (size_t c = 0; c < cand_.size(); c++) {
      const QuantError& e = err_[s * cand_.size() + c];
      slots["sqnr_db"][cand_[c].name].push_back(finite_or_null(sqnr_db(e)));
      slots["underflow"][cand_[c].name].push_back(e.nonzero > 0 ? e.underflow / e.nonzero : 0.0);
      slots["saturation"][cand_[c].name].push_back(e.values > 0 ? e.saturated / e.values : 0.0);
    }
  }
  json tensors = {{"layer", json::array()},
                  {"linear", json::array()},
                  {"operand", json::array()},
                  {"amax", json::array()},
                  {"amax_drift", json::array()}};
  for (size_t i = 0; i < amax_.size(); i++) {
    tensors["layer"].push_back(int(i / (kAutoLinears * kLinearOperands)));
    tensors["linear"].push_back(auto_linear_name(int(i / kLinearOperands % kAutoLinears)));
    tensors["operand"].push_back(auto_operand_name(int(i % kLinearOperands)));
    tensors["amax"].push_back(amax_[i]);
    const auto& w = amax_window_[i];
    const float lo = w.empty() ? 0.0f : *std::min_element(w.begin(), w.end());
    const float hi = w.empty() ? 0.0f : *std::max_element(w.begin(), w.end());
    tensors["amax_drift"].push_back(lo > 0 ? json(double(hi) / lo) : json(nullptr));
  }
  json share = json::array();
  for (double g : grad_sq_) share.push_back(grad_total_sq_ > 0 ? g / grad_total_sq_ : 0.0);
  json changes = json::array();
  for (const AutoChange& c : last_changes_) changes.push_back(describe(c));
  json outliers = {{"count", json::array()},
                   {"channels", json::array()},
                   {"max_ratio", json::array()},
                   {"split", json::array()}};
  for (size_t i = 0; i < outliers_.size(); i++) {
    outliers["count"].push_back(outliers_[i].size());
    outliers["channels"].push_back(outliers_[i]);
    outliers["max_ratio"].push_back(outlier_ratio_[i]);
    outliers["split"].push_back(split_[i]);
  }
  return {{"kind", mode_name(Mode::Auto)},
          {"step", step_},
          {"candidates", names},
          {"threshold_db", opt_.threshold_db},
          {"low_bit_flop_share", flop_share()},
          {"slots", slots},
          {"tensors", tensors},
          {"grad_share", share},
          {"outliers", outliers},
          {"changes", changes}};
}

std::string AutoPrecision::map_text() const {
  std::string s =
      "layer  linear   fwd input/weight  dgrad grad/weight  wgrad grad/input  split channels\n";
  for (int l = 0; l < n_layer_; l++)
    for (int lin = 0; lin < kAutoLinears; lin++) {
      s += strf("%5d  %-7s", l, auto_linear_name(lin));
      for (int g = 0; g < kGemmRoles; g++) {
        const int k = auto_slot(l, lin, g, 0);
        s += strf("  %8s/%-8s", cand_[size_t(fmt_[size_t(k)])].name.c_str(),
                  cand_[size_t(fmt_[size_t(k) + 1])].name.c_str());
      }
      std::string list;
      for (int c : split_channels(l, lin)) list += (list.empty() ? "" : ",") + std::to_string(c);
      s += "  " + (list.empty() ? std::string("-") : list) + "\n";
    }
  return s;
}

json AutoPrecision::map_json() const {
  json layers = json::array();
  for (int l = 0; l < n_layer_; l++) {
    json lj = json::object();
    for (int lin = 0; lin < kAutoLinears; lin++) {
      json r = json::object();
      for (int g = 0; g < kGemmRoles; g++)
        for (int b = 0; b < 2; b++)
          r[std::string(auto_role_name(g)) + "." + auto_operand_name(auto_slot_operand(g, b))] =
              cand_[size_t(fmt_[size_t(auto_slot(l, lin, g, b))])].name;
      r["split_channels"] = split_channels(l, lin);
      lj[auto_linear_name(lin)] = r;
    }
    layers.push_back(lj);
  }
  return layers;
}

json AutoPrecision::to_json() const {
  json names = json::array(), formats = json::array(), windows = json::array();
  for (const AutoCandidate& c : cand_) names.push_back(c.name);
  for (int f : fmt_) formats.push_back(cand_[size_t(f)].name);
  for (const auto& w : amax_window_) windows.push_back(std::vector<float>(w.begin(), w.end()));
  return {{"candidates", names},
          {"formats", formats},
          {"amax_window", windows},
          {"split_channels", split_}};
}

void AutoPrecision::from_json(const json& j, const std::string& path) {
  auto bad = [&](const std::string& field, const std::string& what) {
    throw Error(
        strf("checkpoint state %s: field 'auto.%s' %s", path.c_str(), field.c_str(), what.c_str()));
  };
  if (!j.is_object()) bad("", "is not an object");
  if (!j.contains("candidates") || j["candidates"] != to_json()["candidates"])
    bad("candidates", "differs from precision.auto.candidates of this run");
  if (!j.contains("formats") || !j["formats"].is_array() || j["formats"].size() != fmt_.size())
    bad("formats", strf("does not hold %zu formats (this model's slots)", fmt_.size()));
  std::vector<int> f;
  for (const auto& x : j["formats"]) {
    int k = -1;
    for (size_t c = 0; c < cand_.size(); c++)
      if (x.is_string() && x.get<std::string>() == cand_[c].name) k = int(c);
    if (k < 0) bad("formats", strf("holds %s, not a candidate", x.dump().c_str()));
    f.push_back(k);
  }
  if (!j.contains("amax_window") || !j["amax_window"].is_array() ||
      j["amax_window"].size() != amax_window_.size())
    bad("amax_window", strf("does not hold %zu windows", amax_window_.size()));
  std::vector<std::deque<float>> w(amax_window_.size());
  for (size_t i = 0; i < w.size(); i++) {
    const json& a = j["amax_window"][i];
    if (!a.is_array() || a.size() > 4096) bad("amax_window", strf("entry %zu is not a list", i));
    for (const auto& x : a) {
      if (!x.is_number() || !(x.get<double>() >= 0) || x.get<double>() > 3.4e38)
        bad("amax_window", strf("entry %zu holds %s, not an amax", i, x.dump().c_str()));
      w[i].push_back(x.get<float>());
    }
    while (int(w[i].size()) > opt_.window) w[i].pop_front();
  }
  const json& sc = j.contains("split_channels") ? j["split_channels"] : json();
  if (!sc.is_array() || sc.size() != split_.size())
    bad("split_channels", strf("does not hold %zu channel lists", split_.size()));
  std::vector<std::vector<int>> split(split_.size());
  for (size_t i = 0; i < split.size(); i++) {
    const int n = in_channels_[i % kAutoLinears];
    if (!sc[i].is_array()) bad("split_channels", strf("entry %zu is not a list", i));
    for (const auto& c : sc[i]) {
      if (!c.is_number_integer() || c.get<int64_t>() < 0 || c.get<int64_t>() >= n ||
          (!split[i].empty() && c.get<int64_t>() <= split[i].back()))
        bad("split_channels",
            strf("entry %zu holds %s, not an increasing channel below %d", i, c.dump().c_str(), n));
      split[i].push_back(c.get<int>());
    }
  }
  fmt_ = f;
  amax_window_ = w;
  split_ = split;
}

}  // namespace tg
