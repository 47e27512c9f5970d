// cpu_features: which of the narrow-precision instruction sets this CPU has, read once from
// CPUID (and XGETBV: the OS must save the registers too), for choosing the GEMM paths at run
// time and for the benchmark's header. x86-64 only; elsewhere every flag is false.
#pragma once
#include <string>

namespace tg::cpu {

struct CpuFeatures {
  bool avx512f = false;   // 512-bit registers (and the OS saves them)
  bool avx512bw = false;  // 16-bit lanes (packing bf16 codes)
  bool avx512dq = false;  // 64-bit multiplies (the stochastic-rounding hash in lanes)
  bool avx512vl = false;
  bool avx512_bf16 = false;  // vdpbf16ps: bf16 pair dot products into fp32
  bool avx512_fp16 = false;  // fp16 arithmetic
  bool amx_tile = false;     // the tile registers (and the OS saves them: XCR0 bits 17, 18)
  bool amx_bf16 = false;     // tile matrix multiply on bf16 (the process still has to ask
                             // Linux for the tile state: gemm_amx.h's amx_tiles_granted)
  bool amx_fp16 = false;
};

// The CPU's features, detected on the first call.
const CpuFeatures& cpu_features();
// The present ones as a space-separated list, e.g. "avx512f avx512_bf16" ("none" if none).
std::string cpu_isa_summary(const CpuFeatures& f);
std::string cpu_isa_summary();
// The CPU's brand string, e.g. "AMD EPYC" ("unknown CPU" when CPUID has none).
std::string cpu_model_name();

}  // namespace tg::cpu
