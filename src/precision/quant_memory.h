// quant_memory.h: the memory of the block linears' quantized operands, format by format.
//
// An operand of (rows, cols), cols along its GEMM's reduction dimension, stored as a recipe
// operand says takes its element codes (E2M1 two to a byte, E4M3 / E5M2 a byte each, bf16
// two bytes) and one scale per scale group (fp32 and power-of-two scales 4 bytes, E8M0 and
// UE4M3 1 byte), plus NVFP4's fp32 tensor scale: MXFP8 is 8 + 8/32 = 8.25 bits per element,
// MXFP4 4.25, NVFP4 4 + 8/16 = 4.5 and 32 bits per tensor, fp8-block's 1x128 blocks
// 8 + 32/128 = 8.25.
//
// What a native block-scaled path holds beside the bf16 plan (src/model/model.h's MemoryPlan) for
// the block linears of the quantized layers: each weight's quantized copies (the forward's,
// along C, and the dgrad's of W^T, along OC; one copy when both are the same 2-D tiles), and
// the inputs the backward needs, quantized in the forward as the wgrad GEMM takes them
// (input^T along the tokens), in place of their bf16 copies. The CPU emulation keeps the
// bf16 copies and quantizes on the fly; `train_gpt memory` shows both.
#pragma once
#include <cstddef>

#include "src/model/model.h"
#include "src/numerics/recipe.h"

namespace tg {

size_t quantized_operand_bytes(const OperandRecipe& o, size_t rows, size_t cols);
double quantized_bits(const OperandRecipe& o, size_t rows, size_t cols);

struct QuantMemoryPlan {
  size_t weight_copies = 0;           // quantized weights, forward and dgrad orientations
  size_t saved_inputs_bf16 = 0;       // the quantized linears' inputs as the bf16 plan keeps them
  size_t saved_inputs_quantized = 0;  // the same, quantized as wgrad's input^T operand
  // Bits per element of layer 0's fc (a representative shape): forward input and weight,
  // wgrad input (0 when no layer is quantized).
  double input_bits = 0, weight_bits = 0, wgrad_input_bits = 0;
  int quantized_layers = 0;
};
QuantMemoryPlan plan_quantized_linears(const GPTConfig& c, const QuantRecipe& r, int B, int T);

// A block-scaled mode's tensors on a native path: the bf16 plan p with the quantized weight
// copies beside it and the quantized saved inputs in place of their bf16 copies.
size_t native_path_bytes(const MemoryPlan& p, const QuantMemoryPlan& q);

// plan_memory for model mc in mode `mode` with cfg's state formats (precision.state.*: moments,
// master weights, gradient accumulation, the wires), B x T per micro-batch, over `ranks` ranks
// with ZeRO-1 over zero_ranks of them (1: none).
MemoryPlan plan_memory_of(const Config& cfg, Mode mode, const GPTConfig& mc, int B, int T,
                          int zero_ranks, int ranks, bool lse = false);
// plan_comm_bytes for model mc in cfg's mode and state formats over `ranks` ranks.
uint64_t planned_comm_bytes(const Config& cfg, const GPTConfig& mc, int ranks, bool zero);

// What a GPU run of cfg (its model mc, its precision.mode, its micro-batch) over `ranks`
// processes plans to hold per process: plan_memory's tensors in the mode's storage type
// (ZeRO-1 over the ranks where train.zero_stage is 1, the gradient wire's staging), and for a
// block-scaled mode the native path's tensors and GEMM scratch (sm_100, where cuBLASLt has the recipe's GEMMs; an H100 / H200's 132 multiprocessors
// for the statistics), and the backend's own scratch (cuda_scratch.h: cuBLASLt's workspace,
// attention's slots for cuda.attention's path, the partials, the token buckets). Not in it: the
// CUDA context and the allocator's slack.
size_t planned_gpu_bytes(const Config& cfg, const GPTConfig& mc, int ranks);
// What cfg keeps per process in weights, master weights, gradients and Adam moments for model
// mc, in its precision.mode and state formats, ZeRO-1 over zero_ranks (1: none): the part the
// state formats change (activations and staging apart).
size_t planned_state_bytes(const Config& cfg, const GPTConfig& mc, int zero_ranks);
// The multiprocessors a plan assumes for the operand statistics' per-block sums (H100, H200).
constexpr int kPlannedGpuSms = 132;

}  // namespace tg
