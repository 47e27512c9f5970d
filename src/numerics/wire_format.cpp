// wire_format.cpp: the rows of the gradient wire-format registry (src/numerics/wire_format.h),
// the one place a wire format's name is spelled, and the host encoding.
#include "wire_format.h"

#include <algorithm>

#include "src/base/common.h"

namespace tg {

namespace {
// clang-format off
constexpr WireFormatInfo kRows[] = {
    // format              name        bytes summary
    {WireFormat::FP32,    "fp32",     4,    "fp32 gradients on the wire"},
    {WireFormat::BF16,    "bf16",     2,    "bf16 gradients on the wire (summed in fp32)"},
    {WireFormat::FP8E4M3, "fp8-e4m3", 1,    "fp8-e4m3 gradients with an fp32 scale per 128 on the wire (summed in fp32)"},
    {WireFormat::FP8E5M2, "fp8-e5m2", 1,    "fp8-e5m2 gradients with an fp32 scale per 128 on the wire (summed in fp32)"},
};
// clang-format on
constexpr size_t kFormats = sizeof(kRows) / sizeof(kRows[0]);
static_assert(kWireBlock == 128, "the fp8 rows' summaries name the block size");

constexpr bool rows_in_enum_order() {
  for (size_t i = 0; i < kFormats; i++)
    if (size_t(kRows[i].format) != i) return false;
  return kFormats == size_t(WireFormat::FP8E5M2) + 1;
}
static_assert(rows_in_enum_order(), "kRows: one row per WireFormat, in the enum's order");

// One FP8 block of n elements in format f: its codes at `codes`, and its descale.
float encode_fp8_block(const float* x, size_t n, WireFormat f, uint8_t* codes) {
  float amax = 0.f;
  bool finite = true;
  for (size_t i = 0; i < n; i++) {
    finite = finite && std::isfinite(x[i]);
    amax = std::fmax(amax, std::fabs(x[i]));
  }
  const float s = wire_fp8_scale(amax, f);
  for (size_t i = 0; i < n; i++) codes[i] = wire_fp8_code(x[i], s, f);
  return wire_fp8_descale(s, finite);
}
}  // namespace

const std::vector<WireFormatInfo>& wire_formats() {
  static const std::vector<WireFormatInfo> rows(kRows, kRows + kFormats);
  return rows;
}

const WireFormatInfo& wire_format_info(WireFormat f) { return kRows[size_t(f)]; }

const char* wire_format_name(WireFormat f) { return wire_format_info(f).name; }

WireFormat parse_wire_format(const std::string& name, const char* key) {
  for (const WireFormatInfo& r : wire_formats())
    if (name == r.name) return r.format;
  throw UsageError(strf("config key '%s': unknown wire format '%s'", key, name.c_str()));
}

std::vector<std::string> wire_format_names() {
  std::vector<std::string> out;
  for (const WireFormatInfo& r : wire_formats()) out.push_back(r.name);
  return out;
}

const std::array<const char*, 2> EnumNames<WeightComm>::names = {"compute", "fp8-e4m3"};

double wire_bytes_per_element(WireFormat f) {
  const double e = wire_format_info(f).element_bytes;
  return wire_is_fp8(f) ? e + 4.0 / double(kWireBlock) : e;
}

void wire_encode(const float* x, size_t n, WireFormat f, void* out) {
  uint8_t* p = static_cast<uint8_t*>(out);
  switch (f) {
    case WireFormat::FP32: memcpy(p, x, n * 4); return;
    case WireFormat::BF16:
      for (size_t i = 0; i < n; i++) {
        const uint16_t h = f32_to_bf16(x[i]);
        memcpy(p + 2 * i, &h, 2);
      }
      return;
    case WireFormat::FP8E4M3:
    case WireFormat::FP8E5M2: {
      const size_t nb = wire_blocks(n);
      uint8_t* codes = p + 4 * nb;
      for (size_t b = 0; b < nb; b++) {
        const size_t lo = b * kWireBlock, len = std::min(kWireBlock, n - lo);
        const float descale = encode_fp8_block(x + lo, len, f, codes + lo);
        memcpy(p + 4 * b, &descale, 4);
      }
      memset(codes + n, 0, wire_bytes(n, f) - 4 * nb - n);  // the row's padding
      return;
    }
  }
}

void wire_decode(const void* in, size_t n, WireFormat f, float* out) {
  const uint8_t* row = static_cast<const uint8_t*>(in);
  for (size_t i = 0; i < n; i++) out[i] = wire_add(row, n, i, f, -0.f);
}

void wire_decode_add(const void* in, size_t n, WireFormat f, float* acc) {
  const uint8_t* row = static_cast<const uint8_t*>(in);
  for (size_t i = 0; i < n; i++) acc[i] = wire_add(row, n, i, f, acc[i]);
}

}  // namespace tg
