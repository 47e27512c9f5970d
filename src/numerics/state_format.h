// state_format.h: the registry of optimizer-state storage formats, one row per value of
// precision.state.adam_m and precision.state.adam_v (docs/precision.md, "State precision: Adam
// moments").
//
// A format is carried through the code as the typed value `StateFormat`, parsed once from its
// name (the config keys, a checkpoint's config); everything a format means is a column of its
// row: the element type the moments are stored in, whether the store rounds stochastically,
// and the code that names it in a checkpoint's optimizer files. What each format does to a
// moment (fp16's sqrt and scale) is its MomentFormat (src/numerics/moment_format.h), made here.
// The names are spelled in state_format.cpp only; they are what config.json and state.json hold,
// so a name, once written, must keep parsing (and a file code keep its meaning).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "moment_format.h"
#include "src/base/common.h"
#include "src/base/named_enum.h"

namespace tg {

enum class StateFormat { FP32, BF16, BF16SR, FP16, FP8E4M3, FP8E5M2 };

struct StateFormatInfo {
  StateFormat format;
  const char* name;   // the config value
  DType storage;      // element type of the stored moments (FP8: with a scale per block)
  bool stochastic;    // the store rounds stochastically (seeded per step, moment, element)
  int32_t file_code;  // in the optimizer files' header (src/io/checkpoint.h)
};

// Every row, in the order `--help` lists them.
const std::vector<StateFormatInfo>& state_formats();
const StateFormatInfo& state_format_info(StateFormat f);
const char* state_format_name(StateFormat f);
// The format named `name`; UsageError "config key '<key>': unknown state format '<name>'".
StateFormat parse_state_format(const std::string& name, const char* key);
// The format whose optimizer-file code is `code`, or nullptr.
const StateFormatInfo* find_state_format_code(int32_t code);
std::vector<std::string> state_format_names();

// precision.state.moment_scale: an FP8 block's normalizer is its amax (fp32) or the power
// of two at or above it (e8m0). precision.state.moment_expand: COAT's dynamic range
// expansion (coat) or none. The names (named_enum.h) are spelled in state_format.cpp only (a
// storage type's name is the registries'); config.json and a checkpoint's state.json hold them.
enum class MomentScale { FP32, E8M0 };
enum class MomentExpand { None, Coat };
template <>
struct EnumNames<MomentScale> {
  static const std::array<const char*, 2> names;
};
template <>
struct EnumNames<MomentExpand> {
  static const std::array<const char*, 2> names;
};

// How FP8 moments are cut into blocks and scaled (precision.state.moment_block,
// moment_scale, moment_expand; src/numerics/moment_block.h); other formats ignore it.
struct MomentBlocking {
  int block = 128;  // elements per scale block, a power of two in 16 .. 1024
  MomentScale scale = MomentScale::FP32;
  MomentExpand expand = MomentExpand::None;
};
// "fp8-e4m3/128/fp32", "+coat" when expanding: the blocking a report names.
std::string moment_blocking_name(StateFormat f, const MomentBlocking& b);

// The first (second = false) or second (second = true) Adam moment stored in format f.
MomentFormat moment_format(StateFormat f, bool second, const MomentBlocking& b = {});
MomentFormats moment_formats(StateFormat m, StateFormat v, const MomentBlocking& b = {});
inline bool state_format_blocked(StateFormat f) {
  return dtype_size(state_format_info(f).storage) == 1;
}
// Bytes per element of a moment in format f: its element type's, plus an FP8 block's meta
// shared by its elements.
double state_format_bytes(StateFormat f, const MomentBlocking& b = {});
// Bytes of `count` elements as the optimizer stores them (moment_block.h for FP8).
size_t moment_storage_bytes(size_t count, const MomentFormat& f);

// What precision.state.grads accumulates a step's gradients in (over its micro-steps) in the
// 16-bit modes: the compute type itself (each micro-step's sum rounded to it) or an fp32 buffer
// beside the gradients, rounded once to the compute type when the step's micro-steps are done.
// The names are spelled in state_format.cpp only.
enum class GradAccum { Compute, FP32 };
template <>
struct EnumNames<GradAccum> {
  static const std::array<const char*, 2> names;
};

// Whether moments stored in `from` convert into `to` without losing anything: every value
// `from` holds is one `to` holds exactly (fp32 holds them all; bf16 and bf16-sr store the
// same codes). tests/numerics/test_state_format.cpp checks this against every 16-bit code.
bool state_format_lossless(StateFormat from, StateFormat to, bool second);

}  // namespace tg
