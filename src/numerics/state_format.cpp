// state_format.cpp: the rows of the optimizer-state format registry
// (src/numerics/state_format.h), the one place a state format's name is spelled.
#include "state_format.h"

namespace tg {

namespace {
// clang-format off
constexpr StateFormatInfo kRows[] = {
    // format               name       storage      stochastic file code
    {StateFormat::FP32,   "fp32",    DType::F32,  false,     0},
    {StateFormat::BF16,   "bf16",    DType::BF16, false,     1},
    {StateFormat::BF16SR, "bf16-sr", DType::BF16, true,      2},
    {StateFormat::FP16,   "fp16",    DType::F16,  false,     3},
};
// clang-format on
constexpr size_t kFormats = sizeof(kRows) / sizeof(kRows[0]);

constexpr bool rows_in_enum_order() {
  for (size_t i = 0; i < kFormats; i++)
    if (size_t(kRows[i].format) != i) return false;
  return kFormats == size_t(StateFormat::FP16) + 1;
}
static_assert(rows_in_enum_order(), "kRows: one row per StateFormat, in the enum's order");
}  // namespace

const std::vector<StateFormatInfo>& state_formats() {
  static const std::vector<StateFormatInfo> rows(kRows, kRows + kFormats);
  return rows;
}

const StateFormatInfo& state_format_info(StateFormat f) { return kRows[size_t(f)]; }

const char* state_format_name(StateFormat f) { return state_format_info(f).name; }

StateFormat parse_state_format(const std::string& name, const char* key) {
  for (const StateFormatInfo& r : state_formats())
    if (name == r.name) return r.format;
  throw UsageError(strf("config key '%s': unknown state format '%s'", key, name.c_str()));
}

const StateFormatInfo* find_state_format_code(int32_t code) {
  for (const StateFormatInfo& r : state_formats())
    if (code == r.file_code) return &r;
  return nullptr;
}

std::vector<std::string> state_format_names() {
  std::vector<std::string> out;
  for (const StateFormatInfo& r : state_formats()) out.push_back(r.name);
  return out;
}

MomentFormat moment_format(StateFormat f, bool second) {
  const StateFormatInfo& r = state_format_info(f);
  MomentFormat mf;
  mf.dtype = r.storage;
  mf.stochastic = r.stochastic;
  // fp16's window moved to the moments' range, v as its square root (moment_format.h says why).
  if (r.storage == DType::F16) {
    mf.scale = kF16MomentScale;
    mf.sqrt = second;
  }
  return mf;
}

MomentFormats moment_formats(StateFormat m, StateFormat v) {
  return {moment_format(m, false), moment_format(v, true)};
}

bool state_format_lossless(StateFormat from, StateFormat to, bool second) {
  const MomentFormat a = moment_format(from, second), b = moment_format(to, second);
  if (b.dtype == DType::F32) return true;
  // The same codes with the same meaning: only the rounding of future stores differs.
  return a.dtype == b.dtype && a.sqrt == b.sqrt && a.scale == b.scale;
}

}  // namespace tg
