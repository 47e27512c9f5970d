// master_format.cpp: the rows of the master-weight format registry
// (src/numerics/master_format.h), the one place a master format's name is spelled.
#include "master_format.h"

#include "src/base/common.h"

namespace tg {

namespace {
// clang-format off
constexpr MasterFormatInfo kRows[] = {
    // format                   name          bytes code summary
    {MasterFormat::FP32,      "fp32",       4,    0,   "fp32 master weights"},
    {MasterFormat::BF16SR,    "bf16-sr",    0,    1,   "bf16 master weights (the compute weights, stochastic rounding)"},
    {MasterFormat::BF16Kahan, "bf16-kahan", 2,    2,   "bf16 master weights with a bf16 compensation buffer"},
};
// clang-format on
constexpr size_t kFormats = sizeof(kRows) / sizeof(kRows[0]);

constexpr bool rows_in_enum_order() {
  for (size_t i = 0; i < kFormats; i++)
    if (size_t(kRows[i].format) != i) return false;
  return kFormats == size_t(MasterFormat::BF16Kahan) + 1;
}
static_assert(rows_in_enum_order(), "kRows: one row per MasterFormat, in the enum's order");
}  // namespace

const std::vector<MasterFormatInfo>& master_formats() {
  static const std::vector<MasterFormatInfo> rows(kRows, kRows + kFormats);
  return rows;
}

const MasterFormatInfo& master_format_info(MasterFormat f) { return kRows[size_t(f)]; }

const char* master_format_name(MasterFormat f) { return master_format_info(f).name; }

MasterFormat parse_master_format(const std::string& name, const char* key) {
  for (const MasterFormatInfo& r : master_formats())
    if (name == r.name) return r.format;
  throw UsageError(strf("config key '%s': unknown master format '%s'", key, name.c_str()));
}

const MasterFormatInfo* find_master_format_code(int32_t code) {
  for (const MasterFormatInfo& r : master_formats())
    if (code == r.file_code) return &r;
  return nullptr;
}

std::vector<std::string> master_format_names() {
  std::vector<std::string> out;
  for (const MasterFormatInfo& r : master_formats()) out.push_back(r.name);
  return out;
}

}  // namespace tg
