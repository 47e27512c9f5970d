// state_format.cpp: the rows of the optimizer-state format registry
// (src/numerics/state_format.h), the one place a state format's name is spelled.
#include "state_format.h"

#include "moment_block.h"

namespace tg {

namespace {
// clang-format off
constexpr StateFormatInfo kRows[] = {
    // format               name       storage      stochastic file code
    {StateFormat::FP32,   "fp32",    DType::F32,  false,     0},
    {StateFormat::BF16,   "bf16",    DType::BF16, false,     1},
    {StateFormat::BF16SR, "bf16-sr", DType::BF16, true,      2},
    {StateFormat::FP16,   "fp16",    DType::F16,  false,     3},
    {StateFormat::FP8E4M3, "fp8-e4m3", DType::E4M3, false,   4},
    {StateFormat::FP8E5M2, "fp8-e5m2", DType::E5M2, false,   5},
};
// clang-format on
constexpr size_t kFormats = sizeof(kRows) / sizeof(kRows[0]);

constexpr bool rows_in_enum_order() {
  for (size_t i = 0; i < kFormats; i++)
    if (size_t(kRows[i].format) != i) return false;
  return kFormats == size_t(StateFormat::FP8E5M2) + 1;
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

const std::array<const char*, 2> EnumNames<MomentScale>::names = {"fp32", "e8m0"};
const std::array<const char*, 2> EnumNames<MomentExpand>::names = {"none", "coat"};
const std::array<const char*, 2> EnumNames<GradAccum>::names = {"compute", "fp32"};

std::string moment_blocking_name(StateFormat f, const MomentBlocking& b) {
  if (!state_format_blocked(f)) return state_format_name(f);
  return strf("%s/%d/%s%s", state_format_name(f), b.block, enum_name(b.scale),
              b.expand == MomentExpand::Coat ? "+coat" : "");
}

MomentFormat moment_format(StateFormat f, bool second, const MomentBlocking& b) {
  const StateFormatInfo& r = state_format_info(f);
  MomentFormat mf;
  mf.dtype = r.storage;
  mf.stochastic = r.stochastic;
  // fp16's window moved to the moments' range, v as its square root (moment_format.h says why).
  if (r.storage == DType::F16) {
    mf.scale = kF16MomentScale;
    mf.sqrt = second;
  }
  // FP8: v as its square root too, scaled per block (moment_block.h).
  if (state_format_blocked(f)) {
    mf.sqrt = second;
    mf.block = b.block;
    mf.pow2 = b.scale == MomentScale::E8M0;
    mf.expand = b.expand == MomentExpand::Coat;
  }
  return mf;
}

MomentFormats moment_formats(StateFormat m, StateFormat v, const MomentBlocking& b) {
  return {moment_format(m, false, b), moment_format(v, true, b)};
}

double state_format_bytes(StateFormat f, const MomentBlocking& b) {
  const double elem = double(dtype_size(state_format_info(f).storage));
  if (!state_format_blocked(f)) return elem;
  return elem + double(moment_meta_words(moment_format(f, false, b))) * 4.0 / b.block;
}

size_t moment_storage_bytes(size_t count, const MomentFormat& f) {
  if (moment_is_blocked(f)) return moment_blocked_bytes(count, f);
  return count * dtype_size(f.dtype);
}

bool state_format_lossless(StateFormat from, StateFormat to, bool second) {
  const MomentFormat a = moment_format(from, second), b = moment_format(to, second);
  if (b.dtype == DType::F32) return true;
  // FP8 blocks are re-scaled from decoded values: not code for code (moment_block.h).
  if (moment_is_blocked(a) || moment_is_blocked(b)) return false;
  // The same codes with the same meaning: only the rounding of future stores differs.
  return a.dtype == b.dtype && a.sqrt == b.sqrt && a.scale == b.scale;
}

}  // namespace tg
