// config_validate.cpp: the checks of a config beyond each key's own type and range: keys that
// must agree (n_embd and n_head, seq_len and max_seq_len, the batch and the ranks), the
// optimizer state's formats against the mode and the ranks (a refused state preset names the
// mode that keeps it), precision.inject_outlier's entries.
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "config.h"
#include "config_keys.h"
#include "src/base/common.h"
#include "src/numerics/recipe.h"

namespace tg {

namespace {
// One entry of precision.inject_outlier; false with *why when it is not LAYER:CHANNEL:FACTOR.
bool parse_outlier_entry(const std::string& e, InjectedOutlier* o, std::string* why) {
  *why = strf(
      "entry '%s' is not LAYER:CHANNEL:FACTOR (LAYER a number or *, CHANNEL a number "
      "or C%%P; e.g. 1:5:30 or *:5%%16:20)",
      e.c_str());
  const size_t c1 = e.find(':'), c2 = c1 == std::string::npos ? c1 : e.find(':', c1 + 1);
  if (c2 == std::string::npos) return false;
  const std::string layer = e.substr(0, c1), chan = e.substr(c1 + 1, c2 - c1 - 1),
                    factor = e.substr(c2 + 1);
  int n = 0;
  if (layer == "*")
    o->layer = -1;
  else if (sscanf(layer.c_str(), "%d%n", &o->layer, &n) != 1 || n != int(layer.size()) ||
           o->layer < 0)
    return false;
  const size_t pct = chan.find('%');
  const std::string first = chan.substr(0, pct);
  if (sscanf(first.c_str(), "%d%n", &o->channel, &n) != 1 || n != int(first.size()) ||
      o->channel < 0)
    return false;
  o->period = 0;
  if (pct != std::string::npos) {
    const std::string per = chan.substr(pct + 1);
    if (sscanf(per.c_str(), "%d%n", &o->period, &n) != 1 || n != int(per.size()) || o->period <= 0)
      return false;
    if (o->channel >= o->period) {
      *why = strf("entry '%s': channel %d is not below the period %d", e.c_str(), o->channel,
                  o->period);
      return false;
    }
  }
  if (sscanf(factor.c_str(), "%lf%n", &o->factor, &n) != 1 || n != int(factor.size()) ||
      !std::isfinite(o->factor))
    return false;
  return true;
}
}  // namespace

bool parse_inject_outlier(const std::string& s, std::vector<InjectedOutlier>* out,
                          std::string* why) {
  out->clear();
  size_t pos = 0;
  while (pos < s.size()) {
    size_t next = s.find(',', pos);
    if (next == std::string::npos) next = s.size();
    InjectedOutlier o;
    if (!parse_outlier_entry(s.substr(pos, next - pos), &o, why)) return false;
    out->push_back(o);
    pos = next + 1;
    if (next + 1 == s.size()) {  // a trailing comma
      *why = "ends with a comma";
      return false;
    }
  }
  return true;
}

// precision.state.*: bf16 master weights are the bf16 compute weights, so the mode must compute
// with bf16 weights; bf16-kahan stores to nearest with its compensation, which leaves nothing for
// precision.stochastic_rounding to round.
template <typename Err>
void validate_state(const Config& c, Err err) {
  const int block = c.precision.state.moment_block;
  if (block & (block - 1))
    err("precision.state.moment_block",
        strf("%d is not a power of two (fp8 moment blocks: 16, 32, ..., 1024)", block));
  const MasterFormat master = c.precision.state.master;
  if (!master_in_weights(master)) return;
  const DType w = mode_info(c.precision.mode).storage;
  if (w != DType::BF16)
    err("precision.state.master",
        strf("%s keeps the master weights in the bf16 weights, but precision.mode=%s computes "
             "with %s weights (use a mode with bf16 weights: bf16, fp8, mxfp8, nvfp4, ...)",
             master_format_name(master), mode_name(c.precision.mode), dtype_name(w)));
  if (master == MasterFormat::BF16Kahan && c.precision.stochastic_rounding)
    err("precision.stochastic_rounding",
        "true rounds an fp32 master into the weights stochastically; with "
        "precision.state.master=bf16-kahan there is no fp32 master (the compensation keeps what "
        "rounding loses): set one of them");
}

// precision.state.weight_comm=fp8-e4m3: the gathered weights are decoded into the compute
// weights of every rank, which must therefore be a copy of an fp32 master (16-bit weights).
static void validate_weight_comm(const Config& c) {
  if (c.precision.state.weight_comm != WeightComm::FP8E4M3) return;
  const char* key = "precision.state.weight_comm";
  const char* fp8 = enum_name(WeightComm::FP8E4M3);
  if (c.train.zero_stage != 1)
    throw UsageError(
        strf("config key '%s': %s gathers ZeRO-1's weight shards, and "
             "train.zero_stage is %d (set it to 1)",
             key, fp8, c.train.zero_stage));
  const DType w = mode_info(c.precision.mode).storage;
  if (dtype_size(w) != 2)
    throw UsageError(
        strf("config key '%s': %s rounds the compute weights, and "
             "precision.mode=%s computes with %s weights, its master weights "
             "themselves (use a mode with 16-bit weights)",
             key, fp8, mode_name(c.precision.mode), dtype_name(w)));
  if (master_in_weights(c.precision.state.master))
    throw UsageError(
        strf("config key '%s': %s would round precision.state.master=%s, which "
             "keeps the master weights in the compute weights (use fp32)",
             key, fp8, master_format_name(c.precision.state.master)));
}

namespace {
// What config_validate_run checks of the state formats against the mode and the ranks.
void validate_state_and_wire(const Config& c) {
  validate_state(c, [](const char* key, const std::string& msg) {
    throw UsageError(strf("config key '%s': %s", key, msg.c_str()));
  });
  validate_weight_comm(c);
}
}  // namespace

std::optional<Mode> state_keeping_mode(const Config& c) {
  for (Mode m : {Mode::BF16, Mode::FP16, Mode::FP32}) {
    Config t = c;
    t.precision.mode = m;
    try {
      validate_state_and_wire(t);
      return m;
    } catch (const UsageError&) {
    }
  }
  return std::nullopt;
}

void config_validate_run(const Config& c, int world) {
  config_validate(c, world);
  try {
    validate_state_and_wire(c);
  } catch (const UsageError& e) {
    const std::string& preset = c.precision.state.preset;
    if (preset.empty()) throw;
    // Name the preset the user typed, and the mode that keeps it.
    const std::optional<Mode> keeps = state_keeping_mode(c);
    if (!keeps)  // not the mode's doing (e.g. a ZeRO-1 preset without ZeRO-1)
      throw UsageError(
          strf("state preset '%s' (precision.state.preset): %s", preset.c_str(), e.what()));
    throw UsageError(strf(
        "state preset '%s' (precision.state.preset) cannot be kept in precision.mode=%s: %s; it "
        "can with --precision.mode=%s",
        preset.c_str(), mode_name(c.precision.mode), e.what(), mode_name(*keeps)));
  }
}

void config_validate(const Config& c, int world) {
  check_key_ranges(c);
  auto err = [](const char* key, const std::string& msg) {
    throw UsageError(strf("config key '%s': %s", key, msg.c_str()));
  };
  if (c.model.n_embd % c.model.n_head != 0)
    err("model.n_embd",
        strf("%d is not a multiple of model.n_head=%d", c.model.n_embd, c.model.n_head));
  if (c.data.seq_len > c.model.max_seq_len)
    err("data.seq_len",
        strf("%d exceeds model.max_seq_len=%d", c.data.seq_len, c.model.max_seq_len));
  int64_t micro = int64_t(c.data.batch_size) * c.data.seq_len * world;
  if (c.data.total_batch_tokens != 0 && c.data.total_batch_tokens % micro != 0)
    err("data.total_batch_tokens", strf("%lld is not a multiple of batch_size*seq_len*ranks=%lld",
                                        (long long)c.data.total_batch_tokens, (long long)micro));
  if (c.data.train.empty()) err("data.train", "must not be empty");
  const auto& ls = c.precision.loss_scale;
  if (ls.min > ls.max)
    err("precision.loss_scale.min",
        strf("%g is above precision.loss_scale.max=%g", ls.min, ls.max));
  const int hs = c.precision.recipe.hadamard_size;
  if (hs & (hs - 1)) err("precision.recipe.hadamard_size", strf("%d is not a power of two", hs));
  if (c.precision.recipe.smooth && c.precision.mode != Mode::Auto &&
      !is_block_scaled(c.precision.mode))
    err("precision.recipe.smooth",
        strf("needs a block-scaled precision.mode or auto, not %s", mode_name(c.precision.mode)));
  std::vector<InjectedOutlier> io;
  std::string why;
  if (!parse_inject_outlier(c.precision.inject_outlier, &io, &why))
    err("precision.inject_outlier", why);
  if (c.train.out_dir.empty()) err("train.out_dir", "must not be empty");
#ifdef TG_NO_BLAS
  if (c.cpu.gemm == CpuGemm::Blas)
    err("cpu.gemm", "blas: this binary was built without OpenBLAS (NO_BLAS=1)");
#endif
}

}  // namespace tg
