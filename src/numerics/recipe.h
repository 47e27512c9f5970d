// recipe.h: a low-precision recipe as data.
//
// For each GEMM role of a block linear (forward, input gradient, weight gradient) and each
// of its two operands, a recipe says: the element format, the scaling granularity (whole
// tensor, row, 1 x N block, N x N tile), the scale's own format (fp32, power of two, E8M0,
// E4M3 with an fp32 tensor scale), where the scale comes from (a delayed amax history or the
// tensor's current amax), the rounding (nearest, stochastic) and any transform applied first
// (a random Hadamard rotation). Blocks always run along the GEMM's reduction dimension.
// precision.mode names a preset; the code that quantizes reads the recipe, never the mode.
//
// Operands per role: forward   out = input x weight^T      (a = input,       b = weight)
//                    dgrad     dinp = dout x weight         (a = output grad, b = weight)
//                    wgrad     dW = dout^T x input          (a = output grad, b = input)
//
// Each operand is quantized along its own GEMM's reduction dimension: the forward quantizes
// the input's and the weight's rows (over C), dgrad the gradient's rows (over OC) and the
// transposed weight (over OC), wgrad the transposed gradient and transposed input (over the
// N tokens). So the backward GEMMs re-quantize the transposed operands afresh from their
// high-precision copies, as the hardware's block-scaled GEMMs need (scales run along K), and
// not from the forward's quantized copies (that would put the blocks across K). A Tile
// scale is the same in both orientations, which is why weights may use one.
#pragma once
#include <string>
#include <vector>

#include "elem_format.h"
#include "precision_mode.h"
#include "src/base/named_enum.h"

namespace tg {

// Element formats (ElemFormat) and their facts: elem_format.h's table.
enum class Granularity { Tensor, Row, Block, Tile };
enum class ScaleFormat { FP32, Pow2, E8M0, E4M3 };
// precision.fp8.recipe's values name the per-tensor FP8 scale's source: an amax history
// (delayed) or the tensor's own amax (current).
enum class ScaleSource { Delayed, Current };
template <>
struct EnumNames<ScaleSource> {
  static constexpr std::array names{"delayed", "current"};
};
enum class RoundMode { Nearest, Stochastic };
enum class Transform { None, Hadamard };
// How an E8M0 block scale follows from the block's amax: OCP MX v1.0 2^(floor(log2 amax) -
// emax_elem) (values above the element max saturate), or NVIDIA's MXFP8 rule (arXiv
// 2506.08027) 2^ceil(log2(amax / max_elem)), which never saturates.
enum class ScaleRule { Ocp, Ceil };
// precision.recipe.scale_rule: a ScaleRule, or auto (mxfp8 ceil, mxfp4 ocp).
enum class ScaleRuleChoice { Auto, Ocp, Ceil };
template <>
struct EnumNames<ScaleRuleChoice> {
  static constexpr std::array names{"auto", "ocp", "ceil"};
};
// precision.recipe.grad_format: the element format of mxfp8's output gradients (auto: E4M3).
enum class GradFormat { Auto, E4M3, E5M2 };
template <>
struct EnumNames<GradFormat> {
  static constexpr std::array names{"auto", "e4m3", "e5m2"};
};

// Scale formats: FP32 s = max_elem / amax (q = x s, dequantized q / s); Pow2 the same rounded
// down to a power of two; E8M0 a power of two by scale_rule; E4M3 (NVFP4) an unsigned-E4M3
// decode scale amax_block / max_elem per block, stored relative to an fp32 tensor scale.
struct OperandRecipe {
  ElemFormat elem = ElemFormat::BF16;
  Granularity granularity = Granularity::Tensor;
  int block = 0;  // elements per block (Block) or tile side (Tile)
  ScaleFormat scale = ScaleFormat::FP32;
  ScaleRule scale_rule = ScaleRule::Ocp;  // E8M0 only
  int transform_size = 0;                 // Hadamard points (a power of two)
  ScaleSource source = ScaleSource::Delayed;
  RoundMode rounding = RoundMode::Nearest;
  Transform transform = Transform::None;
};

enum GemmRole { kForward, kInputGrad, kWeightGrad, kGemmRoles };

struct GemmRecipe {
  OperandRecipe a, b;
};

struct QuantRecipe {
  std::string name;  // the preset's name, e.g. "fp8-delayed"
  GemmRecipe gemm[kGemmRoles];
  int history_len = 16;        // of delayed scale sources
  int margin = 0;              // scale = (fmax / amax) / 2^margin
  std::vector<int> keep_bf16;  // layers left in bf16 (negative: from the last)
  // Outlier channels (precision.mode=auto): input channels of the forward GEMM that run
  // unquantized beside the rest, out = X_o W_o^T + Q(X_r) Q(W_r)^T, so that they do not set
  // the scales of the channels they share scale groups with. Sorted, distinct.
  std::vector<int> split_channels;
  // Channel smoothing (src/precision/smoothing.h): one factor s_c per input channel of the forward
  // GEMM, out = (X diag(1/s)) (W diag(s))^T, applied before the split and the quantization; empty:
  // none. The backward GEMMs take the unsmoothed operands.
  std::vector<float> smooth;
};

// Today's presets: per-tensor FP8, E4M3 for the forward operands and the weights and
// inputs of the backward GEMMs, E5M2 for the output gradient; the scale from an amax
// history of `history_len` steps (delayed) or from each tensor's own amax (current).
QuantRecipe fp8_tensor_recipe(ScaleSource source, int history_len, int margin,
                              const std::vector<int>& keep_bf16);

// The block-scaled presets (src/config/config.h's precision.recipe.* keys select the options):
//   fp8-rowwise  E4M3, fp32 scale per row of each operand (per token of activations and
//                gradients, per output channel of the weight in the forward), torchao rowwise
//   fp8-block    E4M3, fp32 scales; 1x128 blocks for activations and gradients, 128x128 tiles
//                for the weight (DeepSeek-V3)
//   mxfp8        E4M3 (E5M2 gradients as an option), E8M0 scale per 32 elements
//   mxfp4        E2M1, E8M0 per 32; stochastic rounding of the gradients and a random
//                Hadamard transform of the wgrad operands as options
//   nvfp4        E2M1, UE4M3 per 16 with an fp32 tensor scale, 16x16 weight tiles,
//                stochastic rounding of gradients, 16-point random Hadamard on the wgrad
//                operands, the last layer in bf16
// Every operand takes its scale from its current amax (no history).
struct RecipeOptions {
  bool pow2_scales = false;
  ScaleRuleChoice scale_rule = ScaleRuleChoice::Auto;
  GradFormat grad_format = GradFormat::Auto;
  bool stochastic_grads = true;
  bool hadamard = true;
  int hadamard_size = 16;
  bool weight_2d = true;
  int bf16_last = -1;          // -1: the preset's
  std::vector<int> keep_bf16;  // precision.fp8.keep_bf16, merged with bf16_last
};
// The preset of a block-scaled mode (is_block_scaled, src/numerics/precision_mode.h); UsageError
// for any other mode. The overload by name looks the name up in the registry (tests, tools).
QuantRecipe block_scaled_recipe(Mode mode, const RecipeOptions& o);
QuantRecipe block_scaled_recipe(const std::string& mode, const RecipeOptions& o);
// Per-tensor fp32 scales on every operand, all of them FP8 (today's fp8 linears), as opposed
// to the above and to recipes that leave some operands in bf16 (precision.mode=auto).
bool is_per_tensor(const QuantRecipe& r);

// The recipes precision.mode=auto chooses among (the registry's auto_candidate rows): bf16
// (no operand quantized), fp8 (per-tensor E4M3 / E5M2 gradients, current scales: auto
// re-chooses formats, so no amax history) and the block-scaled presets above with every layer
// quantized (which layers stay wide is the policy's choice, not the preset's). UsageError
// naming `key` otherwise. The overload by name looks the name up in the registry.
QuantRecipe candidate_recipe(Mode mode, const RecipeOptions& o, const char* key);
QuantRecipe candidate_recipe(const std::string& name, const RecipeOptions& o, const char* key);
// Whether an operand (a recipe's forward operands) is stored in 8 bits or fewer.
bool is_low_bit(const OperandRecipe& o);
// Whether the operand's quantization draws a scale from its whole tensor's amax: a per-tensor
// fp32 scale, or NVFP4's fp32 tensor scale S over its UE4M3 group scales (group_scale.h).
bool scales_from_tensor_amax(const OperandRecipe& o);
// Whether some low-bit operand of r has a tensor scale over its group scales (NVFP4's UE4M3
// groups under an fp32 S): a block-scaled linear of r takes a slot for its amax words.
bool has_tensor_scale_over_groups(const QuantRecipe& r);
// Whether every dequantized value x' = q d of the operand is a bf16 value (8 significant bits,
// exponent >= -126), so that a GEMM may take it in bf16 and lose nothing: an operand format's
// element (E4M3 4 significant bits, E5M2 3, E2M1 2; its row's mantissa bits + 1) times an E8M0
// or power-of-two scale (2^e), or times a UE4M3 block scale (4 more bits: at most 8; NVFP4's
// fp32 tensor scale 1/S stays outside the GEMM, post), |x'| >= 2^-9 x 2^-9 (the smallest
// subnormals), a normal bf16 value. The exception: a value below 2^-126 (a block whose scale is
// that small) becomes a bf16 subnormal or zero (the CPU's vdpbf16ps reads those as zero,
// src/backends/cpu/matmul_scaled.cpp; src/backends/cuda/scaled.h says what the GPU keeps).
// fp32 scales (fp8-rowwise, fp8-block, the per-tensor recipes) are not exact: q (1/s) has up
// to 24 bits.
bool dequantizes_to_bf16(const OperandRecipe& o);

// One line for the start-up log, e.g. "fwd E4M3 x E4M3, dgrad E5M2 x E4M3, wgrad E5M2 x E4M3,
// per-tensor fp32 scales, delayed (history 16, margin 0)".
std::string describe(const QuantRecipe& r);

}  // namespace tg
