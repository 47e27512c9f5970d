// quant_memory.cpp: bytes of quantized operands and of a native path's block linears (see
// quant_memory.h).
#include "quant_memory.h"

#include <algorithm>

#include "cuda_scratch.h"
#include "precision.h"
#include "scaled_scratch.h"
#include "src/model/linear_quantizers.h"

namespace tg {

namespace {

// E8M0 and UE4M3 scales take their formats' bytes (elem_format.h's table); fp32 ones four.
size_t scale_bytes(ScaleFormat s) {
  if (s == ScaleFormat::E8M0) return size_t(elem_bits(ElemFormat::E8M0)) / 8;
  if (s == ScaleFormat::E4M3) return size_t(elem_bits(ElemFormat::UE4M3)) / 8;
  return sizeof(float);
}

size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

size_t scale_groups(const OperandRecipe& o, size_t rows, size_t cols) {
  switch (o.granularity) {
    case Granularity::Tensor: return 1;
    case Granularity::Row: return rows;
    case Granularity::Block: return rows * ceil_div(cols, size_t(o.block));
    case Granularity::Tile:
      return ceil_div(rows, size_t(o.block)) * ceil_div(cols, size_t(o.block));
  }
  return 1;
}

// Whether the dgrad's W^T operand can reuse the forward's W copy: the same 2-D tiles (a
// tile's scale is the same in both orientations) of the same format.
bool shares_weight_copy(const QuantRecipe& r) {
  const OperandRecipe &f = r.gemm[kForward].b, &d = r.gemm[kInputGrad].b;
  return f.granularity == Granularity::Tile && d.granularity == Granularity::Tile &&
         f.block == d.block && f.elem == d.elem && f.scale == d.scale &&
         f.rounding == RoundMode::Nearest && d.rounding == RoundMode::Nearest;
}

}  // namespace

size_t quantized_operand_bytes(const OperandRecipe& o, size_t rows, size_t cols) {
  const size_t n = rows * cols;
  if (!is_low_bit(o.elem)) return 2 * n;  // left as it is: the model's bf16
  size_t bytes = ceil_div(n * size_t(elem_bits(o.elem)), 8) +
                 scale_groups(o, rows, cols) * scale_bytes(o.scale);
  if (o.scale == ScaleFormat::E4M3) bytes += 4;  // NVFP4's fp32 tensor scale
  return bytes;
}

double quantized_bits(const OperandRecipe& o, size_t rows, size_t cols) {
  return 8.0 * double(quantized_operand_bytes(o, rows, cols)) / double(rows * cols);
}

QuantMemoryPlan plan_quantized_linears(const GPTConfig& c, const QuantRecipe& r, int B, int T) {
  const LinearQuantizers layers(r, c.n_layer);  // which layers the recipe quantizes
  const size_t N = size_t(B) * T, C = size_t(c.n_embd);
  const struct {
    size_t in, out;
  } linears[] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};  // qkv attproj fc fcproj
  QuantMemoryPlan p;
  const bool shared = shares_weight_copy(r);
  for (int l = 0; l < c.n_layer; l++) {
    if (!layers.layer_in_fp8(l)) continue;
    if (p.quantized_layers++ == 0) {
      p.input_bits = quantized_bits(r.gemm[kForward].a, N, C);
      p.weight_bits = quantized_bits(r.gemm[kForward].b, 4 * C, C);
      p.wgrad_input_bits = quantized_bits(r.gemm[kWeightGrad].b, C, N);
    }
    for (const auto& lin : linears) {
      p.weight_copies += quantized_operand_bytes(r.gemm[kForward].b, lin.out, lin.in);
      if (!shared)
        p.weight_copies += quantized_operand_bytes(r.gemm[kInputGrad].b, lin.in, lin.out);
      p.saved_inputs_bf16 += 2 * N * lin.in;
      p.saved_inputs_quantized += quantized_operand_bytes(r.gemm[kWeightGrad].b, lin.in, N);
    }
  }
  return p;
}

size_t native_path_bytes(const MemoryPlan& p, const QuantMemoryPlan& q) {
  return p.total() + q.weight_copies + q.saved_inputs_quantized - q.saved_inputs_bf16;
}

MemoryPlan plan_memory_of(const Config& cfg, Mode mode, const GPTConfig& mc, int B, int T,
                          int zero_ranks, int ranks, bool lse) {
  const auto& st = cfg.precision.state;
  return plan_memory(mc, mode_dtype(mode), B, T, zero_ranks, lse, ranks,
                     moment_formats(st.adam_m, st.adam_v, moment_blocking(cfg)),
                     mode_master(cfg, mode), st.grad_comm, st.grads == GradAccum::FP32,
                     st.weight_comm == WeightComm::FP8E4M3);
}

uint64_t planned_comm_bytes(const Config& cfg, const GPTConfig& mc, int ranks, bool zero) {
  const auto& st = cfg.precision.state;
  return plan_comm_bytes(mc, mode_dtype(cfg.precision.mode), ranks, zero,
                         moment_formats(st.adam_m, st.adam_v, moment_blocking(cfg)), st.grad_comm,
                         st.weight_comm == WeightComm::FP8E4M3);
}

size_t planned_gpu_bytes(const Config& cfg, const GPTConfig& mc, int world) {
  const Mode mode = cfg.precision.mode;
  const int B = cfg.data.batch_size, T = cfg.data.seq_len;
  const int ranks = std::max(1, world);
  const AttentionPath path =
      planned_attention(cfg.cuda.attention, mode_dtype(mode), mc.n_embd / mc.n_head);
  const bool lse = path == AttentionPath::Cudnn;
  const MemoryPlan p =
      plan_memory_of(cfg, mode, mc, B, T, cfg.train.zero_stage == 1 ? ranks : 1, ranks, lse);
  const size_t scratch = plan_cuda_scratch(mc, mode_dtype(mode), B, T, cfg.cuda.attention,
                                           cfg.cuda.gemm == CudaGemm::Fallback)
                             .total();
  if (!is_block_scaled(mode)) return p.total() + scratch;
  const QuantRecipe r = block_scaled_recipe(mode, recipe_options(cfg));
  return native_path_bytes(p, plan_quantized_linears(mc, r, B, T)) +
         plan_scaled_scratch(mc, r, B, T, kPlannedGpuSms).native.total() + scratch;
}

size_t planned_state_bytes(const Config& cfg, const GPTConfig& mc, int zero_ranks) {
  const int ranks = std::max(1, zero_ranks);
  const MemoryPlan p = plan_memory_of(cfg, cfg.precision.mode, mc, 1, 1, ranks, ranks);
  return p.weights + p.master + p.grads + p.optimizer;
}

}  // namespace tg
