// cuda_scratch.h: what the CUDA backend allocates beside the model's tensors and the
// block-scaled linears' scratch (scaled_scratch.h), planned on the host (no CUDA types): the
// cuBLASLt workspace, the small results buffer, and the scratch slots of attention, the
// reduction partials, the encoder's token buckets and the GEMM fallback, each at its
// high-water mark over one training step.
//
// The backend grows a slot to the largest request it sees and keeps it (CudaBackend::scratch),
// so a slot's size is the maximum over the step's calls; the sizes below follow the launchers:
//   src/backends/cuda/attention.cu   the materialised path (cuda.attention=cublas, and fused
//                                    read as cublas): q, k, v, y (B, NH, T, hs), the scores / dP
//                                    (B, NH, T, T) and dS (B, NH, T, T), all in the compute
//                                    type, dq, dk, dv
//   src/backends/cuda/attention_cudnn.cu  cuDNN's workspace (kScratchCudnn), the largest its
//                                    graphs ask for: planned as the frontend's backward asks
//                                    (an fp32 dQ accumulator (B, NH, T, hs) and fp32 row sums
//                                    (B, NH, T)); the engine's own part, known only on the GPU,
//                                    is not in the plan (none for SDPA on cuDNN 9 so far)
//   src/backends/cuda/layernorm.cu   dw and db partials, one row of C per chunk of rows
//   src/backends/cuda/matmul.cu      the bias gradient's partials (PartialA, OC per chunk);
//                                    cuda.gemm=fallback's fp32 products (Acc)
//   src/backends/cuda/global_norm.cu 512 partial sums in each of PartialA and PartialB
//   src/backends/cuda/encoder.cu     the token buckets: 2 nb + 1 + B T int32 for nb distinct
//                                    tokens (planned for every token distinct, the most)
// A mirror, not the launchers' own arithmetic: tests/cuda/cuda_scratch_emulated.cpp checks
// every slot against the emulated CUDA backend after a training step, byte for byte.
#pragma once
#include <cstddef>
#include <string>

#include "src/backends/attention_choice.h"
#include "src/model/model.h"

namespace tg {

// The slots planned here, in src/backends/cuda/launch.h's order from kScratchPartialA.
enum CudaSlot {
  kCudaPartialA,
  kCudaPartialB,
  kCudaResult,
  kCudaQ,
  kCudaK,
  kCudaV,
  kCudaY,
  kCudaS,
  kCudaDS,
  kCudaDQ,
  kCudaDK,
  kCudaDV,
  kCudaWideA,
  kCudaWideB,
  kCudaWideC,
  kCudaWideOut,
  kCudaAcc,
  kCudaBuckets,
  kCudaSlots
};
const char* cuda_slot_name(int slot);

// cuBLASLt's workspace (src/backends/cuda/backend.cu: 32 MiB, what NVIDIA advises for Hopper).
constexpr size_t kCudaLtWorkspace = size_t(32) << 20;
// The results buffer the host reads back small values from.
constexpr size_t kCudaResultBuffer = 64;

struct CudaScratchPlan {
  size_t slot[kCudaSlots] = {};  // each slot's largest request, in bytes
  size_t workspace = kCudaLtWorkspace, results = kCudaResultBuffer;
  size_t cudnn = 0;  // cuDNN's attention workspace (cuda.attention=cudnn)
  // Attention's slots (q .. dv) and cuDNN's workspace.
  size_t attention() const;
  // Everything, each allocation rounded up to 64 bytes as the backend allocates.
  size_t total() const;
};

// The attention path planned for cuda.attention = `attention` (its name, or `auto`), compute
// type t and head size hs: the path that runs where it can (cudnn, and flash read as cudnn,
// where cuDNN takes t and hs, attention_choice.h's rules; fused is read as cublas), and auto
// as cublas, the larger of its two outcomes (the run itself knows which it took:
// Trainer::check_memory plans that one).
AttentionPath planned_attention(AttentionRequest attention, DType t, int hs);

// The plan of one training step of model c in compute type t at B x T; `attention` is
// cuda.attention (auto | cublas | fused | cudnn | flash), `gemm_fallback` cuda.gemm=fallback.
CudaScratchPlan plan_cuda_scratch(const GPTConfig& c, DType t, int B, int T,
                                  AttentionRequest attention, bool gemm_fallback);

}  // namespace tg
