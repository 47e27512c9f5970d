#include "state_telemetry.h"

#include <cmath>
#include <limits>

#include "src/comm/comm.h"

namespace tg {

namespace {

// The sums of one (tensor, layer) slot; all additive, so ranks add theirs.
enum Sum { kNonzeroGrad, kUnchanged, kMZero, kVZero, kMSat, kVSat, kDw2, kW2, kSums };

// The slots: every tensor's layers in parameter order, with the [begin, end) of each.
struct Slot {
  int tensor, layer;
  size_t begin, end;
};
std::vector<Slot> param_slots(const GPTConfig& c) {
  const auto sizes = param_sizes(c);
  std::vector<Slot> out;
  size_t off = 0;
  for (int i = 0; i < kNumParamTensors; i++) {
    const bool stacked = i >= LN1W && i <= FCPROJB;
    const int layers = stacked ? c.n_layer : 1;
    const size_t per = sizes[i] / size_t(layers);
    for (int l = 0; l < layers; l++) out.push_back({i, l, off + l * per, off + (l + 1) * per});
    off += sizes[i];
  }
  return out;
}

// The largest finite value a stored moment can take (fp16 saturates there), or infinity.
float moment_max(const MomentFormat& f) {
  if (f.dtype == DType::F16) return moment_decode16(0x7bff, f);
  return std::numeric_limits<float>::infinity();
}

bool saturated(float x, float max) { return !(std::fabs(x) < max); }

}  // namespace

StateProbe state_probe_before(GPT& model) { return {model.master_shard_f32()}; }

nlohmann::json state_probe_after(GPT& model, const StateProbe& probe, Comm* comm) {
  const std::vector<float> after = model.master_shard_f32();
  const std::vector<float> m = model.moment_shard_f32(false), v = model.moment_shard_f32(true);
  const std::vector<float> g = model.grads_shard_f32();
  const float m_max = moment_max(model.moment_formats().m);
  const float v_max = moment_max(model.moment_formats().v);
  const std::vector<Slot> slots = param_slots(model.config());
  std::vector<double> sums(slots.size() * kSums, 0.0);
  const size_t lo = model.shard_begin(), hi = lo + model.shard_count();
  for (size_t s = 0; s < slots.size(); s++) {
    double* acc = &sums[s * kSums];
    for (size_t k = std::max(lo, slots[s].begin); k < std::min(hi, slots[s].end); k++) {
      const size_t i = k - lo;
      const double dw = double(after[i]) - double(probe.before[i]);
      acc[kDw2] += dw * dw;
      acc[kW2] += double(probe.before[i]) * probe.before[i];
      if (g[i] == 0) continue;
      acc[kNonzeroGrad] += 1;
      acc[kUnchanged] += dw == 0;
      acc[kMZero] += m[i] == 0;
      acc[kVZero] += v[i] == 0;
      acc[kMSat] += saturated(m[i], m_max);
      acc[kVSat] += saturated(v[i], v_max);
    }
  }
  if (model.sharded() && comm) comm->all_reduce_sum(sums.data(), sums.size());
  nlohmann::json out = nlohmann::json::object();
  auto share = [](double part, double whole) { return whole > 0 ? part / whole : 0.0; };
  for (size_t s = 0; s < slots.size(); s++) {
    const double* acc = &sums[s * kSums];
    nlohmann::json& t = out[param_name(slots[s].tensor)];
    const double n = acc[kNonzeroGrad];
    t["stagnation"].push_back(share(acc[kUnchanged], n));
    t["update_ratio"].push_back(acc[kW2] > 0 ? std::sqrt(acc[kDw2] / acc[kW2]) : 0.0);
    t["m_underflow"].push_back(share(acc[kMZero], n));
    t["v_underflow"].push_back(share(acc[kVZero], n));
    t["m_saturation"].push_back(share(acc[kMSat], n));
    t["v_saturation"].push_back(share(acc[kVSat], n));
  }
  return out;
}

}  // namespace tg
