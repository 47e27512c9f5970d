// wire_format.h: the registry of the formats gradients travel in between ranks, one row per
// value of precision.state.grad_comm (docs/distributed.md, "Gradients on the wire"), and the
// encoding itself.
//
// Data parallelism sums every rank's gradients. With a wire format other than fp32 each rank
// cuts its gradients into one part per rank, encodes every part, and sends part r to rank r
// (an all-to-all); rank r decodes what it received and sums it in fp32, in rank order, so every
// rank computes the same sum bit for bit. Without ZeRO-1 the sums are encoded again and
// all-gathered (a second rounding); with ZeRO-1 each rank keeps only its shard's sum (one
// rounding). The formats:
//   fp32      4 bytes per element: MPI's / NCCL's own fp32 all-reduce and reduce-scatter.
//   bf16      2 bytes, rounded to nearest even. Lossless for gradients computed in bf16 (the
//             bf16 and quantized modes), so those runs follow fp32's wire bit for bit at
//             half the bytes.
//   fp8-e4m3  1 byte plus a 4-byte fp32 descale per block of kWireBlock elements. A row of n
//             elements: the descales, then the codes padded to whole 4-byte words (so that
//             the next row's descales are aligned). Each block's amax is mapped to E4M3's
//             largest value (fp8_scale_from_amax), elements rounded to nearest and saturated.
//             A block holding inf or NaN decodes as NaN throughout, so the loss scaler still
//             sees the overflow.
//   fp8-e5m2  the same rows in E5M2 (2 mantissa bits instead of 3, 32x more range below the
//             block's amax: the small gradients of a block keep more of their value, the
//             large ones less; the format FP8 recipes use for gradients).
// Encoding is deterministic (no random bits): a resumed run sends what the first would have.
// The element arithmetic below is shared, __host__ __device__, by the CPU (wire_format.cpp)
// and the CUDA kernels (kernels/wire.cuh); decoding adds with one fused multiply-add, spelled
// out, so that both give the same bits.
// The names are spelled in wire_format.cpp only; they are what config.json holds.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "formats.h"
#include "src/base/named_enum.h"

namespace tg {

enum class WireFormat { FP32, BF16, FP8E4M3, FP8E5M2 };

struct WireFormatInfo {
  WireFormat format;
  const char* name;     // the config value
  int element_bytes;    // per element, before any scale
  const char* summary;  // for `--help` and the start line
};

// Elements per FP8 scale block on the wire (counted from the start of each row).
inline constexpr size_t kWireBlock = 128;

// Every row, in the order `--help` lists them.
const std::vector<WireFormatInfo>& wire_formats();
const WireFormatInfo& wire_format_info(WireFormat f);
const char* wire_format_name(WireFormat f);
// The format named `name`; UsageError "config key '<key>': unknown wire format '<name>'".
WireFormat parse_wire_format(const std::string& name, const char* key);
std::vector<std::string> wire_format_names();

// precision.state.weight_comm: ZeRO-1's all-gather of the updated weights in the compute type
// (compute) or encoded in fp8-e4m3 like the gradients (every rank, this one included, then
// computes with the decoded weights). The names are spelled in wire_format.cpp only.
enum class WeightComm { Compute, FP8E4M3 };
template <>
struct EnumNames<WeightComm> {
  static const std::array<const char*, 2> names;
};

TG_HD inline bool wire_is_fp8(WireFormat f) {
  return f == WireFormat::FP8E4M3 || f == WireFormat::FP8E5M2;
}
TG_HD inline size_t wire_blocks(size_t n) { return (n + kWireBlock - 1) / kWireBlock; }
// Bytes of a row of n elements encoded in format f.
TG_HD inline size_t wire_bytes(size_t n, WireFormat f) {
  if (f == WireFormat::FP32) return 4 * n;
  if (f == WireFormat::BF16) return 2 * n;
  return 4 * wire_blocks(n) + (n + 3) / 4 * 4;
}
// Bytes per element on average for long rows (what `memory` and reports quote).
double wire_bytes_per_element(WireFormat f);

// ---- FP8 blocks (f one of the fp8 rows): the scale from the block's amax, the descale sent,
// the codes ----
TG_HD inline float wire_fp8_scale(float amax, WireFormat f) {
  return fp8_scale_from_amax(amax, f == WireFormat::FP8E5M2 ? E5M2_MAX : E4M3_MAX, 0);
}
// `finite`: no element of the block is inf or NaN; else NaN (and so is every decoded element).
TG_HD inline float wire_fp8_descale(float scale, bool finite) {
  return finite ? 1.f / scale : bits_f32(0x7fc00000u);
}
TG_HD inline uint8_t wire_fp8_code(float x, float scale, WireFormat f) {
  return f == WireFormat::FP8E5M2 ? f32_to_e5m2(x * scale, true) : f32_to_e4m3(x * scale, true);
}
TG_HD inline float wire_fp8_value(uint8_t code, WireFormat f) {
  return f == WireFormat::FP8E5M2 ? e5m2_to_f32(code) : e4m3_to_f32(code);
}

// acc + element i of a row of n elements encoded in format f (FP8: fmaf(code, descale, acc),
// rounded once). With acc = -0.f (the identity of fp32 addition), the element itself.
TG_HD inline float wire_add(const uint8_t* row, size_t n, size_t i, WireFormat f, float acc) {
  if (f == WireFormat::FP32) {
    float v;
    memcpy(&v, row + 4 * i, 4);
    return acc + v;
  }
  if (f == WireFormat::BF16) {
    uint16_t h;
    memcpy(&h, row + 2 * i, 2);
    return acc + bf16_to_f32(h);
  }
  float descale;
  memcpy(&descale, row + 4 * (i / kWireBlock), 4);
  // A NaN in (a non-finite block, or a sum already NaN) is one NaN out, spelt out: which of an
  // FMA's NaN operands comes through (sign, payload) is the instruction's operand order, the
  // compiler's choice on the host and another rule on a GPU.
  if (descale != descale || acc != acc) return bits_f32(0x7fc00000u);
  return fmaf(wire_fp8_value(row[4 * wire_blocks(n) + i], f), descale, acc);
}

// Host rows (the CPU backend; the CUDA kernels are their twins):
// Encodes x[0, n) into out (wire_bytes(n, f) bytes).
void wire_encode(const float* x, size_t n, WireFormat f, void* out);
// out[0, n) = the elements `in` encodes (n elements encoded by wire_encode).
void wire_decode(const void* in, size_t n, WireFormat f, float* out);
// acc[i] = wire_add(in, n, i, f, acc[i]) for i in [0, n). A sum over ranks starts from -0.f,
// so that one rank's part comes back bit for bit (sign of zero too).
void wire_decode_add(const void* in, size_t n, WireFormat f, float* acc);

}  // namespace tg
