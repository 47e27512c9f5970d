// wire_format.cpp: the rows of the gradient wire-format registry (src/numerics/wire_format.h),
// the one place a wire format's name is spelled, and the host encoding.
#include "wire_format.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "formats.h"
#include "src/base/common.h"

namespace tg {

namespace {
// clang-format off
constexpr WireFormatInfo kRows[] = {
    // format              name        bytes summary
    {WireFormat::FP32,    "fp32",     4,    "fp32 gradients on the wire"},
    {WireFormat::BF16,    "bf16",     2,    "bf16 gradients on the wire (summed in fp32)"},
    {WireFormat::FP8E4M3, "fp8-e4m3", 1,    "fp8-e4m3 gradients with an fp32 scale per 128 on the wire (summed in fp32)"},
};
// clang-format on
constexpr size_t kFormats = sizeof(kRows) / sizeof(kRows[0]);
static_assert(kWireBlock == 128, "fp8-e4m3's summary names the block size");

constexpr bool rows_in_enum_order() {
  for (size_t i = 0; i < kFormats; i++)
    if (size_t(kRows[i].format) != i) return false;
  return kFormats == size_t(WireFormat::FP8E4M3) + 1;
}
static_assert(rows_in_enum_order(), "kRows: one row per WireFormat, in the enum's order");

size_t wire_blocks(size_t n) { return (n + kWireBlock - 1) / kWireBlock; }

// One FP8 block: its descale (NaN when the block holds inf or NaN) and codes.
float encode_fp8_block(const float* x, size_t n, uint8_t* codes) {
  float amax = 0.f;
  for (size_t i = 0; i < n; i++) amax = std::fmax(amax, std::fabs(x[i]));
  bool finite = std::isfinite(amax);
  for (size_t i = 0; i < n && finite; i++) finite = !std::isnan(x[i]);
  const float s = fp8_scale_from_amax(amax, E4M3_MAX, 0);
  for (size_t i = 0; i < n; i++) codes[i] = f32_to_e4m3(x[i] * s, true);
  return finite ? 1.f / s : std::numeric_limits<float>::quiet_NaN();
}

// Calls f(i, value) for every decoded element.
template <typename F>
void for_each_decoded(const void* in, size_t n, WireFormat f, F&& each) {
  const char* p = static_cast<const char*>(in);
  switch (f) {
    case WireFormat::FP32:
      for (size_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, p + 4 * i, 4);
        each(i, v);
      }
      return;
    case WireFormat::BF16:
      for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        each(i, bf16_to_f32(h));
      }
      return;
    case WireFormat::FP8E4M3: {
      const size_t nb = wire_blocks(n);
      const uint8_t* codes = reinterpret_cast<const uint8_t*>(p + 4 * nb);
      for (size_t b = 0; b < nb; b++) {
        float descale;
        memcpy(&descale, p + 4 * b, 4);
        const size_t end = std::min(n, (b + 1) * kWireBlock);
        for (size_t i = b * kWireBlock; i < end; i++) each(i, e4m3_to_f32(codes[i]) * descale);
      }
      return;
    }
  }
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

size_t wire_bytes(size_t n, WireFormat f) {
  const size_t codes = n * size_t(wire_format_info(f).element_bytes);
  return f == WireFormat::FP8E4M3 ? codes + 4 * wire_blocks(n) : codes;
}

double wire_bytes_per_element(WireFormat f) {
  const double e = wire_format_info(f).element_bytes;
  return f == WireFormat::FP8E4M3 ? e + 4.0 / double(kWireBlock) : e;
}

void wire_encode(const float* x, size_t n, WireFormat f, void* out) {
  char* p = static_cast<char*>(out);
  switch (f) {
    case WireFormat::FP32: memcpy(p, x, n * 4); return;
    case WireFormat::BF16:
      for (size_t i = 0; i < n; i++) {
        const uint16_t h = f32_to_bf16(x[i]);
        memcpy(p + 2 * i, &h, 2);
      }
      return;
    case WireFormat::FP8E4M3: {
      const size_t nb = wire_blocks(n);
      uint8_t* codes = reinterpret_cast<uint8_t*>(p + 4 * nb);
      for (size_t b = 0; b < nb; b++) {
        const size_t lo = b * kWireBlock, len = std::min(kWireBlock, n - lo);
        const float descale = encode_fp8_block(x + lo, len, codes + lo);
        memcpy(p + 4 * b, &descale, 4);
      }
      return;
    }
  }
}

void wire_decode(const void* in, size_t n, WireFormat f, float* out) {
  for_each_decoded(in, n, f, [out](size_t i, float v) { out[i] = v; });
}

void wire_decode_add(const void* in, size_t n, WireFormat f, float* acc) {
  for_each_decoded(in, n, f, [acc](size_t i, float v) { acc[i] += v; });
}

}  // namespace tg
