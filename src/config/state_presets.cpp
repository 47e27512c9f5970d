// state_presets.cpp: the rows of precision.state.preset (state_presets.h). Formats are named
// through their registries (src/numerics/*_format.h), never spelled here.
#include "state_presets.h"

#include "src/numerics/master_format.h"
#include "src/numerics/state_format.h"
#include "src/numerics/wire_format.h"

namespace tg {

namespace {

// What a preset stores, beyond fp32 state.
struct StateChoice {
  MasterFormat master = MasterFormat::FP32;
  StateFormat m = StateFormat::FP32, v = StateFormat::FP32;
  MomentBlocking blocking = {};
  WireFormat grad_comm = WireFormat::FP32;
  GradAccum grads = GradAccum::Compute;
  WeightComm weight_comm = WeightComm::Compute;
};

KeyValues keys_of(const StateChoice& s) {
  return {{"precision.state.master", master_format_name(s.master)},
          {"precision.state.grad_comm", wire_format_name(s.grad_comm)},
          {"precision.state.grads", enum_name(s.grads)},
          {"precision.state.weight_comm", enum_name(s.weight_comm)},
          {"precision.state.adam_m", state_format_name(s.m)},
          {"precision.state.adam_v", state_format_name(s.v)},
          {"precision.state.moment_block", std::to_string(s.blocking.block)},
          {"precision.state.moment_scale", enum_name(s.blocking.scale)},
          {"precision.state.moment_expand", enum_name(s.blocking.expand)}};
}

StatePreset preset(std::string name, const char* what, StateChoice s) {
  return {std::move(name), what, keys_of(s)};
}

// fp32 state with gradients on the wire in f.
StateChoice wire(WireFormat f) {
  StateChoice s;
  s.grad_comm = f;
  return s;
}
// fp32 state with a step's gradients summed in fp32 (grads) or ZeRO-1's weights gathered in
// fp8 (weights).
StateChoice fp32_grads() {
  StateChoice s;
  s.grads = GradAccum::FP32;
  return s;
}
StateChoice fp8_weights() {
  StateChoice s;
  s.weight_comm = WeightComm::FP8E4M3;
  return s;
}

std::vector<StatePreset> make_presets() {
  using MF = MasterFormat;
  using SF = StateFormat;
  using WF = WireFormat;
  const MomentBlocking coat{128, MomentScale::FP32, MomentExpand::Coat};
  // clang-format off
  return {
      preset(state_format_name(SF::FP32), "fp32 master weights and Adam moments", {}),
      preset("moments-bf16", "Adam moments in bf16 (nearest)", {MF::FP32, SF::BF16, SF::BF16}),
      preset("moments-bf16sr", "Adam moments in bf16 with stochastic rounding",
             {MF::FP32, SF::BF16SR, SF::BF16SR}),
      preset("moments-fp16", "Adam moments in fp16 (m and sqrt(v) scaled by 2^12)",
             {MF::FP32, SF::FP16, SF::FP16}),
      preset("master-bf16sr", "the bf16 weights as master weights, stochastic rounding (no fp32 copy)",
             {MF::BF16SR}),
      preset("master-kahan", "the bf16 weights plus a bf16 compensation as master weights",
             {MF::BF16Kahan}),
      preset("bf16sr-all", "bf16-sr master weights and bf16-sr Adam moments",
             {MF::BF16SR, SF::BF16SR, SF::BF16SR}),
      preset("moments-fp8", "Adam moments in fp8 e4m3, a scale per 128 (m and sqrt(v))",
             {MF::FP32, SF::FP8E4M3, SF::FP8E4M3}),
      preset("moments-fp8-coat", "Adam moments in fp8 e4m3, a scale per 128, COAT's range expansion",
             {MF::FP32, SF::FP8E4M3, SF::FP8E4M3, coat}),
      preset("moments-fp8m-fp16v", "m in fp8 e4m3 (a scale per 128), v in fp16 (FP8-LM's split)",
             {MF::FP32, SF::FP8E4M3, SF::FP16}),
      preset("bf16sr-fp8", "bf16-sr master weights, fp8 e4m3 Adam moments with COAT's expansion",
             {MF::BF16SR, SF::FP8E4M3, SF::FP8E4M3, coat}),
      // Gradients on the wire (several ranks).
      preset("wire-bf16", "gradients sent between ranks in bf16, summed in fp32",
             wire(WF::BF16)),
      preset("wire-fp8", "gradients sent between ranks in fp8 e4m3 (a scale per 128), summed in fp32",
             wire(WF::FP8E4M3)),
      preset("wire-e5m2", "gradients sent between ranks in fp8 e5m2 (a scale per 128), summed in fp32",
             wire(WF::FP8E5M2)),
      preset("grads-fp32", "a step's micro-step gradients summed in an fp32 buffer, rounded once",
             fp32_grads()),
      // ZeRO-1's weight all-gather (train.zero_stage=1).
      preset("weights-fp8", "ZeRO-1's weight all-gather in fp8 e4m3 (a scale per 128)",
             fp8_weights()),
      preset("zero-fp8", "ZeRO-1 with gradients and weights in fp8 e4m3 on the wire, fp8 Adam moments",
             {MF::FP32, SF::FP8E4M3, SF::FP8E4M3, {}, WF::FP8E4M3, GradAccum::Compute,
              WeightComm::FP8E4M3}),
      preset("lean", "bf16-sr master weights, fp8 e4m3 Adam moments, bf16 gradients on the wire",
             {MF::BF16SR, SF::FP8E4M3, SF::FP8E4M3, {}, WF::BF16}),
  };
  // clang-format on
}

}  // namespace

const std::vector<StatePreset>& state_presets() {
  static const std::vector<StatePreset> all = make_presets();
  return all;
}

const StatePreset* find_state_preset(const std::string& name) {
  for (const StatePreset& p : state_presets())
    if (name == p.name) return &p;
  return nullptr;
}

std::string state_preset_names_text() {
  std::string all;
  for (const StatePreset& p : state_presets()) all += (all.empty() ? "" : ", ") + p.name;
  return all;
}

const char* no_state_preset() { return "none"; }

}  // namespace tg
