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
//   fp8-e4m3  1 byte plus a 4-byte fp32 descale per block of kWireBlock elements (the
//             descales first, then the codes): each block's
//             amax is mapped to E4M3's largest value (fp8_scale_from_amax), elements rounded
//             to nearest and saturated. A block holding inf or NaN decodes as NaN throughout,
//             so the loss scaler still sees the overflow.
// Encoding is deterministic (no random bits): a resumed run sends what the first would have.
// The names are spelled in wire_format.cpp only; they are what config.json holds.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tg {

enum class WireFormat { FP32, BF16, FP8E4M3 };

struct WireFormatInfo {
  WireFormat format;
  const char* name;     // the config value
  int element_bytes;    // per element, before any scale
  const char* summary;  // for `--help` and the start line
};

// Elements per FP8 scale block on the wire (counted from the start of each rank's part).
inline constexpr size_t kWireBlock = 128;

// Every row, in the order `--help` lists them.
const std::vector<WireFormatInfo>& wire_formats();
const WireFormatInfo& wire_format_info(WireFormat f);
const char* wire_format_name(WireFormat f);
// The format named `name`; UsageError "config key '<key>': unknown wire format '<name>'".
WireFormat parse_wire_format(const std::string& name, const char* key);
std::vector<std::string> wire_format_names();

// Bytes of n elements encoded in format f (FP8: the codes, then one fp32 descale per block).
size_t wire_bytes(size_t n, WireFormat f);
// Bytes per element on average for long parts (what `memory` and reports quote).
double wire_bytes_per_element(WireFormat f);
// Encodes x[0, n) into out (wire_bytes(n, f) bytes).
void wire_encode(const float* x, size_t n, WireFormat f, void* out);
// out[0, n) = the elements `in` encodes (n elements encoded by wire_encode).
void wire_decode(const void* in, size_t n, WireFormat f, float* out);
// acc[i] += decoded element i of `in`, for i in [0, n). A sum over ranks starts from -0.f, the
// identity of fp32 addition, so that one rank's part comes back bit for bit (sign of zero too).
void wire_decode_add(const void* in, size_t n, WireFormat f, float* acc);

}  // namespace tg
