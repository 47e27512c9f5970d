#include "moment_resume.h"

#include <algorithm>
#include <cstring>

#include "src/base/common.h"
#include "src/numerics/moment_block.h"
#include "src/precision/precision.h"

namespace tg {

namespace {
// "precision.state.adam_m=bf16 (the checkpoint's fp32)" for a moment whose format changes.
std::string change_text(const char* key, StateFormat from, const MomentBlocking& bf,
                        StateFormat to, const MomentBlocking& bt) {
  return strf("%s=%s (the checkpoint's %s)", key, moment_blocking_name(to, bt).c_str(),
              moment_blocking_name(from, bf).c_str());
}
// Whether a moment's storage changes: another format, or fp8 blocked otherwise.
bool moment_changes(StateFormat from, const MomentBlocking& bf, StateFormat to,
                    const MomentBlocking& bt) {
  if (from != to) return true;
  return state_format_blocked(to) &&
         (bf.block != bt.block || bf.scale != bt.scale || bf.expand != bt.expand);
}
std::string change_text_master(MasterFormat from, MasterFormat to) {
  return strf("precision.state.master=%s (the checkpoint's %s)", master_format_name(to),
              master_format_name(from));
}
}  // namespace

std::string moment_conversion_note(const CheckpointData& cd, const Config& cfg,
                                   const std::string& dir) {
  const StateFormat to_m = cfg.precision.state.adam_m, to_v = cfg.precision.state.adam_v;
  const MomentBlocking& from_b = cd.blocking;
  const MomentBlocking to_b = moment_blocking(cfg);
  const bool change_m = moment_changes(cd.m_format, from_b, to_m, to_b),
             change_v = moment_changes(cd.v_format, from_b, to_v, to_b);
  if (!change_m && !change_v) return "";
  std::string what;
  if (change_m) what = change_text("precision.state.adam_m", cd.m_format, from_b, to_m, to_b);
  if (change_v)
    what += (what.empty() ? "" : ", ") +
            change_text("precision.state.adam_v", cd.v_format, from_b, to_v, to_b);
  const bool lossless = state_format_lossless(cd.m_format, to_m, false) &&
                        state_format_lossless(cd.v_format, to_v, true);
  if (lossless)
    return strf("note: the checkpoint's Adam moments convert once, losing nothing: %s",
                what.c_str());
  if (!cfg.precision.state.allow_narrowing)
    throw UsageError(strf(
        "config keys 'precision.state.adam_m' / 'precision.state.adam_v': resuming checkpoint "
        "%s with %s would round its Adam moments (a narrower format loses information). "
        "Resume in the checkpoint's formats (precision.state.adam_m=%s "
        "precision.state.adam_v=%s), or set precision.state.allow_narrowing=true to round them "
        "once",
        dir.c_str(), what.c_str(), state_format_name(cd.m_format), state_format_name(cd.v_format)));
  return strf(
      "note: the checkpoint's Adam moments are rounded once, to nearest, into narrower formats "
      "(precision.state.allow_narrowing): %s",
      what.c_str());
}

namespace {
// bf16-sr's master is the bf16 weights: fp32 holds them, bf16-kahan with a zero compensation.
bool master_lossless(MasterFormat from, MasterFormat to) {
  return from == to || from == MasterFormat::BF16SR;
}
}  // namespace

std::string master_conversion_note(const CheckpointData& cd, const Config& cfg,
                                   const std::string& dir) {
  const MasterFormat to = cfg.precision.state.master;
  if (cd.master == to) return "";
  const std::string what = change_text_master(cd.master, to);
  if (master_lossless(cd.master, to))
    return strf("note: the checkpoint's master weights convert once, losing nothing: %s",
                what.c_str());
  if (!cfg.precision.state.allow_narrowing)
    throw UsageError(
        strf("config key 'precision.state.master': resuming checkpoint %s with %s would round its "
             "master weights (%s). Resume with precision.state.master=%s, or set "
             "precision.state.allow_narrowing=true to round them once",
             dir.c_str(), what.c_str(),
             cd.master == MasterFormat::BF16Kahan ? "the compensation is dropped or rounded away"
                                                  : "fp32 values rounded to bf16",
             master_format_name(cd.master)));
  return strf(
      "note: the checkpoint's master weights are rounded once, to nearest "
      "(precision.state.allow_narrowing): %s",
      what.c_str());
}

void merge_compensation(CheckpointData& cd, MasterFormat to, size_t begin) {
  if (cd.master != MasterFormat::BF16Kahan || to == MasterFormat::BF16Kahan) return;
  for (size_t i = 0; i < cd.comp.size() && begin + i < cd.params.size(); i++)
    cd.params[begin + i] += bf16_to_f32(cd.comp[i]);
}

bool moments_kept(const CheckpointData& cd, const Config& cfg, bool second) {
  const StateFormat to = second ? cfg.precision.state.adam_v : cfg.precision.state.adam_m;
  const StateFormat from = second ? cd.v_format : cd.m_format;
  const bool kept = !(second ? cd.v_codes : cd.m_codes).empty();
  return kept && !moment_changes(from, cd.blocking, to, moment_blocking(cfg));
}

std::vector<float> encode_moment_blocks(const std::vector<float>& x, const MomentFormat& f,
                                        std::vector<char>* codes) {
  codes->assign(x.size(), 0);
  std::vector<float> meta(moment_blocks(x.size(), f.block) * size_t(moment_meta_words(f)));
  moment_encode_blocks(x.data(), x.size(), f, reinterpret_cast<uint8_t*>(codes->data()),
                       meta.data());
  return meta;
}

std::vector<char> encode_moments(const std::vector<float>& x, const MomentFormat& f) {
  if (moment_is_blocked(f)) throw Error("encode_moments: fp8 moments have blocks");
  if (moment_is_plain(f)) {
    std::vector<char> out(4 * x.size());
    if (!x.empty()) memcpy(out.data(), x.data(), out.size());
    return out;
  }
  MomentFormat nearest = f;
  nearest.stochastic = false;
  std::vector<char> out(2 * x.size());
  for (size_t i = 0; i < x.size(); i++) {
    const uint16_t code = moment_encode16(x[i], nearest, 0);
    memcpy(out.data() + 2 * i, &code, 2);
  }
  return out;
}

}  // namespace tg
