#include "smoothing.h"

#include <algorithm>
#include <cmath>

#include "src/base/common.h"
#include "src/comm/comm.h"

namespace tg {

using json = nlohmann::json;

std::vector<float> smoothing_factors(const std::vector<float>& x_amax,
                                     const std::vector<float>& w_amax, double alpha) {
  std::vector<float> s(x_amax.size(), 1.0f);
  for (size_t c = 0; c < s.size() && c < w_amax.size(); c++) {
    const double ax = x_amax[c], aw = w_amax[c];
    if (!(ax > 0) || !(aw > 0) || !std::isfinite(ax) || !std::isfinite(aw)) continue;
    const float f = float(std::pow(ax, alpha) / std::pow(aw, 1.0 - alpha));
    // A subnormal or huge factor would lose bits of x / s or w s: leave the channel alone.
    if (std::isnormal(f) && std::isnormal(1.0f / f)) s[c] = f;
  }
  return s;
}

ChannelSmoothing::ChannelSmoothing(const SmoothOptions& o, const GPTConfig& m)
    : opt_(o), n_layer_(m.n_layer) {
  in_channels_ = {m.n_embd, m.n_embd, m.n_embd, 4 * m.n_embd};
  factors_.resize(size_t(n_layer_) * kLinears);
}

void ChannelSmoothing::begin(int64_t step) {
  step_ = step;
  x_amax_.assign(factors_.size(), {});
  w_amax_.assign(factors_.size(), {});
  for (size_t i = 0; i < factors_.size(); i++) {
    x_amax_[i].assign(size_t(in_channels_[i % kLinears]), 0.0f);
    w_amax_[i].assign(size_t(in_channels_[i % kLinears]), 0.0f);
  }
}

void ChannelSmoothing::take(int layer, int linear, int operand, OperandView& x) {
  if (operand != kLinearInput && operand != kLinearWeight) return;
  const size_t i = size_t(layer) * kLinears + size_t(linear);
  std::vector<float>& a = operand == kLinearInput ? x_amax_[i] : w_amax_[i];
  // Both are (rows, C): the input channels are the columns.
  const std::vector<float> col = x.column_amax();  // NaN: ignored
  for (int c = 0; c < x.cols() && c < int(a.size()); c++)
    a[size_t(c)] = std::max(a[size_t(c)], col[size_t(c)]);
}

void ChannelSmoothing::update(Comm& comm) {
  if (comm.world() > 1)
    for (size_t i = 0; i < factors_.size(); i++) {
      comm.all_reduce_max(x_amax_[i].data(), x_amax_[i].size());
      comm.all_reduce_max(w_amax_[i].data(), w_amax_[i].size());
    }
  for (size_t i = 0; i < factors_.size(); i++)
    factors_[i] = smoothing_factors(x_amax_[i], w_amax_[i], opt_.alpha);
  if (comm.world() > 1)
    for (std::vector<float>& f : factors_) comm.broadcast(f.data(), f.size() * sizeof(float), 0);
  updated_at_ = step_;
}

json ChannelSmoothing::record() const {
  json lo = json::array(), hi = json::array();
  for (const std::vector<float>& f : factors_) {
    lo.push_back(f.empty() ? 1.0f : *std::min_element(f.begin(), f.end()));
    hi.push_back(f.empty() ? 1.0f : *std::max_element(f.begin(), f.end()));
  }
  return {{"kind", "smooth"},
          {"step", updated_at_},
          {"alpha", opt_.alpha},
          {"min_factor", lo},
          {"max_factor", hi}};
}

json ChannelSmoothing::to_json() const {
  return {{"alpha", opt_.alpha}, {"updated_at", updated_at_}, {"factors", factors_}};
}

void ChannelSmoothing::from_json(const json& j, const std::string& path) {
  auto bad = [&](const std::string& what) {
    throw Error(
        strf("checkpoint state %s: field 'smoothing.factors' %s", path.c_str(), what.c_str()));
  };
  if (!j.is_object() || !j.contains("factors") || !j["factors"].is_array() ||
      j["factors"].size() != factors_.size())
    bad(strf("does not hold %zu factor lists (this model's linears)", factors_.size()));
  std::vector<std::vector<float>> f(factors_.size());
  for (size_t i = 0; i < f.size(); i++) {
    const json& a = j["factors"][i];
    const size_t n = size_t(in_channels_[i % kLinears]);
    if (!a.is_array() || (!a.empty() && a.size() != n))
      bad(strf("entry %zu is not a list of %zu factors", i, n));
    for (const json& x : a) {
      const double v = x.is_number() ? x.get<double>() : 0.0;
      if (!(v > 0) || !std::isnormal(float(v)))
        bad(strf("entry %zu holds %s, not a factor", i, x.dump().c_str()));
      f[i].push_back(float(v));
    }
  }
  factors_ = f;
  updated_at_ = j.contains("updated_at") && j["updated_at"].is_number_integer()
                    ? j["updated_at"].get<int64_t>()
                    : 0;
}

}  // namespace tg
