// path_choices.h: the values of the config keys that choose a backend's path (cuda.attention,
// cpu.narrow_gemm). They live here, below both, because the config parses them (its key table,
// named_enum.h) and the backends act on them (attention_choice.h, cpu/gemm_bf16.h); the names
// are what config.json holds.
#pragma once
#include "named_enum.h"

namespace tg {

// cuda.attention: the path asked for (attention_choice.h says which runs and why); auto
// decides per compute type, head size and what cuDNN builds at the run's shape. Fused and flash
// named hand-written kernels that have gone (the single-pass forward, the flash kernels): they
// stay names so that old configs and checkpoints parse, and are read as cublas and cudnn
// (attention_choice.h's effective_attention).
enum class AttentionRequest { Auto, Cublas, Fused, Cudnn, Flash };
template <>
struct EnumNames<AttentionRequest> {
  static constexpr std::array names{"auto", "cublas", "fused", "cudnn", "flash"};
};

// cpu.narrow_gemm: how the narrow modes' CPU matmuls multiply (cpu/gemm_bf16.h's NarrowGemm,
// which auto resolves to the fastest the CPU has).
enum class NarrowGemmRequest { Auto, Exact, Avx512Bf16, AmxBf16 };
template <>
struct EnumNames<NarrowGemmRequest> {
  static constexpr std::array names{"auto", "exact", "avx512_bf16", "amx_bf16"};
};

}  // namespace tg
