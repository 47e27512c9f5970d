// scaled_scratch.h: the scratch memory of the CUDA backend's block-scaled linears, planned on
// the host (no CUDA types): the bytes of each scratch slot (src/backends/cuda/launch.h's
// kScratchQStageA .. kScratchStatsArgs) at its high-water mark over one training step.
//
// The CUDA backend grows a slot to the largest request it sees and keeps it (CudaBackend::
// scratch; the bytes count in bytes_in_use / peak_bytes), so a slot's size is the maximum over
// the block linears' shapes and the three GEMMs of each. The sizes below follow the launchers
// request by request:
//   src/backends/cuda/matmul_scaled.cu   operands staged in fp32 (StageA / StageB) only where a
//   step
//                               changes them before quantization (a role's Hadamard rotation,
//                               the forward's smoothing or split; the quantizers read the
//                               model's tensors, transposed or not, where they lie), their
//                               quantize-dequantized copies (QA / QB, bf16 when
//                               both operands are exact in bf16, else fp32), the fp32 product
//                               (Acc), the tensor factors (Words), the split channels (Split*),
//                               channel smoothing's factors (Smooth)
//   src/backends/cuda/quantize_blocks.cu per (row, column group) amax (Amax), per group scale pairs
//                               (Scales), the tensor amax bits (Words)
//   src/backends/cuda/matmul_native.cu   native path: element codes in QA / QB, the scale tensors
//   in
//                               cuBLASLt's layouts (ScaleA / ScaleB: twice the layout and 4 KiB),
//                               the self-check's operands and two products (Check, CheckAcc) at
//                               its own problem size, and the portable products it compares with
//   src/backends/cuda/operand_stats.cu   operand statistics (quantization telemetry,
//   precision.mode=auto):
//                               per measured operand a staged fp32 copy (StageB), its
//                               quantize-dequantized copy (QA, fp32), a rotated copy (Acc) when
//                               the recipe rotates, and the Stats* slots
// The native decision mirrors matmul_native.cu's plan_of (scale mode per operand, pairing,
// compute capability, shape), with cuBLASLt assumed new enough (12.9); which path a GPU takes
// is decided at run time, so the plan shows both. A mirror, not the launchers' own arithmetic:
// tests/cuda/scratch_plan_emulated.cpp checks every slot against the emulated CUDA backend
// (sm_80 and sm_100, and a training step with telemetry) byte for byte, and
// tests/cuda/test_scratch_plan.cu against a GPU's backend on its own path.
#pragma once
#include <cstddef>

#include "src/model/model.h"
#include "src/numerics/recipe.h"

namespace tg {

// The block-scaled slots, in src/backends/cuda/launch.h's order (ScratchSlot kScratchQStageA + i).
enum ScaledSlot {
  kSlotStageA,
  kSlotStageB,
  kSlotQA,
  kSlotQB,
  kSlotAmax,
  kSlotScales,
  kSlotWords,
  kSlotAcc,
  kSlotSplitA,
  kSlotSplitB,
  kSlotSplitAcc,
  kSlotSmooth,
  kSlotScaleA,
  kSlotScaleB,
  kSlotCheck,
  kSlotCheckAcc,
  kSlotStatsAmax,
  kSlotStatsScales,
  kSlotStatsSums,
  kSlotStatsWords,
  kSlotStatsArgs,
  kScaledSlots
};
const char* scaled_slot_name(int slot);  // "QStageA", ... as in launch.h without kScratch

// Bytes per slot; grow() keeps the larger, as the backend's slots do.
struct ScaledScratch {
  size_t bytes[kScaledSlots] = {};
  void grow(int slot, size_t n) {
    if (n > bytes[slot]) bytes[slot] = n;
  }
  void grow(const ScaledScratch& o) {
    for (int s = 0; s < kScaledSlots; s++) grow(s, o.bytes[s]);
  }
  size_t total() const;
  size_t sum(int first, int last) const;  // slots first..last
};

// Whether the native path runs g's GEMM (M,N,K) on a GPU of compute capability `major`.x
// (matmul_native.cu's plan_of); major 0: never.
bool native_gemm_runs(const GemmRecipe& g, int major, int M, int N, int K);

// One GEMM of a block-scaled linear, acc(M,N) = Q(A)(M,K) Q(B)(N,K)^T (scaled_gemm), natively
// where native_gemm_runs(g, major, ...) says so (with its self-check), else portably.
void scaled_gemm_scratch(ScaledScratch& s, const GemmRecipe& g, int M, int N, int K, int major);
// One linear's forward, wgrad and dgrad (scaled_linear_forward / _backward) of N tokens, C
// inputs, OC outputs; split channels from r.split_channels.
void scaled_linear_scratch(ScaledScratch& s, const QuantRecipe& r, int N, int C, int OC, int major);
// The operand statistics of one linear's operands as quantization telemetry measures them
// (each operand of each GEMM that r quantizes, in that GEMM's orientation; 16-bit tensors, no
// smoothing or split channels), on a GPU of `sms` multiprocessors (the per-block partial sums);
// column_amax: the input's column maxima too (precision.mode=auto, channel smoothing).
void operand_stats_scratch(ScaledScratch& s, const QuantRecipe& r, int N, int C, int OC, int sms,
                           bool column_amax);

// The whole model's block linears (the four shapes, the layers r quantizes) over one step of
// B x T tokens: the linears alone (major 0: the portable path; 10: sm_100, where every
// preset's native modes exist), and with their operand statistics.
struct ScaledScratchPlan {
  ScaledScratch portable, native;  // the linears
  ScaledScratch stats;             // the statistics alone (they reuse slots of the linears)
  int quantized_layers = 0;
};
ScaledScratchPlan plan_scaled_scratch(const GPTConfig& c, const QuantRecipe& r, int B, int T,
                                      int sms);

}  // namespace tg
