// attention_choice.h: which attention path a run takes for cuda.attention, as a pure function
// of what the build and the machine offer (no CUDA, so the CPU tests check every rule).
//
// The paths: cublas (batched GEMMs + softmax kernels, the T x T probabilities kept), fused (a
// single-pass forward over the same probabilities), flash (the hand-written kernels keeping the
// per-row logsumexp instead), cudnn (cuDNN's fused flash attention, the same lse contract as
// flash, so the model keeps lse and the CPU twin is the flash twin). `auto` takes cudnn where
// the build has it, libcudnn loads and cuDNN supports the compute type and head size, else
// cublas (the default before auto existed), and says why.
#pragma once
#include <string>

#include "src/base/common.h"
#include "src/base/path_choices.h"

namespace tg {

// What the CUDA backend found of cuDNN (gpu::cudnn_probe): built with the frontend, the
// library loaded, and one line naming the library (version, file) or why it is missing.
struct CudnnProbe {
  bool built_in = false;
  bool loaded = false;
  std::string detail;
};

enum class AttentionPath { Cublas, Fused, Flash, Cudnn };

struct AttentionChoice {
  AttentionPath path = AttentionPath::Cublas;
  bool lse = false;    // the model keeps lse(B,NH,T) instead of att(B,NH,T,T)
  std::string reason;  // why this path (the start-up line's parenthesis)
  std::string error;   // non-empty: the configured path cannot run (a usage error)
};

const char* attention_path_name(AttentionPath p);
// The cuda.attention value that asks for path p by name.
AttentionRequest attention_request(AttentionPath p);

// Whether cuDNN's SDPA takes this compute type and head size; *why says why not. bf16 and fp16
// only (cuDNN has no fp32 SDPA); head sizes multiples of 8 up to 128 (what cuDNN 9 serves on
// every architecture from sm_80).
bool cudnn_attention_supported(DType t, int head_size, std::string* why);

// The path for cuda.attention = `requested`, a model computing in `t` with heads of
// `head_size`, on a CUDA backend whose flash kernels take that head size when `flash_ok` and
// whose cuDNN is `cudnn`.
AttentionChoice choose_attention(AttentionRequest requested, const CudnnProbe& cudnn, DType t,
                                 int head_size, bool flash_ok);

}  // namespace tg
