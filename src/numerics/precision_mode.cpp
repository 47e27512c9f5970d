// precision_mode.cpp: the rows of the precision-mode registry (src/numerics/precision_mode.h), the
// one place a mode's name is spelled.
#include "precision_mode.h"

namespace tg {

namespace {
using R = ModeRecipe;
using P = PeakClass;
using L = LossScaling;
// Block-scaled and fp8 modes keep bf16 everywhere but the block linears; auto starts every
// linear in bf16 and chooses their formats while training.
// clang-format off
constexpr ModeInfo kRows[] = {
    // mode               name           storage      quantized loss scale  recipe          candidate peak
    {Mode::FP32,       "fp32",        DType::F32,  false,    L::None,    R::None,        false, P::Fp32},
    {Mode::BF16,       "bf16",        DType::BF16, false,    L::None,    R::None,        true,  P::Tensor16},
    {Mode::FP16,       "fp16",        DType::F16,  false,    L::Dynamic, R::None,        false, P::Tensor16},
    {Mode::FP8,        "fp8",         DType::BF16, true,     L::None,    R::Fp8Tensor,   true,  P::Tensor16},
    {Mode::FP8Rowwise, "fp8-rowwise", DType::BF16, true,     L::None,    R::BlockScaled, true,  P::Tensor16},
    {Mode::FP8Block,   "fp8-block",   DType::BF16, true,     L::None,    R::BlockScaled, true,  P::Tensor16},
    {Mode::MXFP8,      "mxfp8",       DType::BF16, true,     L::None,    R::BlockScaled, true,  P::Tensor16},
    {Mode::MXFP4,      "mxfp4",       DType::BF16, true,     L::None,    R::BlockScaled, true,  P::Tensor16},
    {Mode::NVFP4,      "nvfp4",       DType::BF16, true,     L::None,    R::BlockScaled, true,  P::Tensor16},
    {Mode::Auto,       "auto",        DType::BF16, true,     L::None,    R::Auto,        false, P::Tensor16},
};
// clang-format on
constexpr size_t kModes = sizeof(kRows) / sizeof(kRows[0]);

// The rows follow enum Mode's order, one per value, so that a mode indexes its own row.
constexpr bool rows_in_enum_order() {
  for (size_t i = 0; i < kModes; i++)
    if (size_t(kRows[i].mode) != i) return false;
  return kModes == size_t(Mode::Auto) + 1;
}
static_assert(rows_in_enum_order(), "kRows: one row per Mode, in the enum's order");
}  // namespace

const std::vector<ModeInfo>& precision_modes() {
  static const std::vector<ModeInfo> rows(kRows, kRows + kModes);
  return rows;
}

const ModeInfo& mode_info(Mode m) { return kRows[size_t(m)]; }

const char* mode_name(Mode m) { return mode_info(m).name; }

const ModeInfo* find_mode(const std::string& name) {
  for (const ModeInfo& r : precision_modes())
    if (name == r.name) return &r;
  return nullptr;
}

Mode parse_mode(const std::string& name, const char* key) {
  const ModeInfo* r = find_mode(name);
  if (!r) throw UsageError(strf("config key '%s': unknown mode '%s'", key, name.c_str()));
  return r->mode;
}

std::vector<std::string> mode_names() {
  std::vector<std::string> out;
  for (const ModeInfo& r : precision_modes()) out.push_back(r.name);
  return out;
}

std::vector<std::string> auto_candidate_names() {
  // Registry order runs from wide to narrow; candidates are listed narrowest first.
  std::vector<std::string> out;
  for (const ModeInfo& r : precision_modes())
    if (r.auto_candidate) out.insert(out.begin(), r.name);
  return out;
}

std::vector<Mode> parse_mode_list(const std::string& text, const char* key) {
  std::vector<Mode> out;
  for (size_t p = 0; p <= text.size();) {
    size_t q = text.find(',', p);
    if (q == std::string::npos) q = text.size();
    const std::string name = text.substr(p, q - p);
    if (!name.empty()) out.push_back(parse_mode(name, key));
    p = q + 1;
  }
  return out;
}

std::string mode_list_text(const std::vector<Mode>& modes) {
  std::string s;
  for (Mode m : modes) s += (s.empty() ? "" : ",") + std::string(mode_name(m));
  return s;
}

}  // namespace tg
