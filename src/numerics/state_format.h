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

namespace tg {

enum class StateFormat { FP32, BF16, BF16SR, FP16 };

struct StateFormatInfo {
  StateFormat format;
  const char* name;   // the config value
  DType storage;      // element type of the stored moments
  bool stochastic;    // the store rounds stochastically (seeded per step, moment, element)
  int32_t file_code;  // in the optimizer files' header (src/training/checkpoint.h)
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

// The first (second = false) or second (second = true) Adam moment stored in format f.
MomentFormat moment_format(StateFormat f, bool second);
MomentFormats moment_formats(StateFormat m, StateFormat v);
inline size_t state_format_bytes(StateFormat f) { return dtype_size(state_format_info(f).storage); }

// Whether moments stored in `from` convert into `to` without losing anything: every value
// `from` holds is one `to` holds exactly (fp32 holds them all; bf16 and bf16-sr store the
// same codes). tests/numerics/test_state_format.cpp checks this against every 16-bit code.
bool state_format_lossless(StateFormat from, StateFormat to, bool second);

}  // namespace tg
