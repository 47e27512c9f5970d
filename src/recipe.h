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
#pragma once
#include <string>
#include <vector>

namespace tg {

enum class ElemFormat { BF16, E4M3, E5M2, E2M1 };
enum class Granularity { Tensor, Row, Block, Tile };
enum class ScaleFormat { FP32, Pow2, E8M0, E4M3 };
enum class ScaleSource { Delayed, Current };
enum class RoundMode { Nearest, Stochastic };
enum class Transform { None, Hadamard };

struct OperandRecipe {
  ElemFormat elem = ElemFormat::BF16;
  Granularity granularity = Granularity::Tensor;
  int block = 0;  // elements per block (Block) or tile side (Tile)
  ScaleFormat scale = ScaleFormat::FP32;
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
};

// Today's presets: per-tensor FP8, E4M3 for the forward operands and the weights and
// inputs of the backward GEMMs, E5M2 for the output gradient; the scale from an amax
// history of `history_len` steps (delayed) or from each tensor's own amax (current).
QuantRecipe fp8_tensor_recipe(ScaleSource source, int history_len, int margin,
                              const std::vector<int>& keep_bf16);

// The largest finite value of an element format.
float elem_format_max(ElemFormat f);
const char* elem_format_name(ElemFormat f);
const char* scale_source_name(ScaleSource s);

// One line for the start-up log, e.g. "fwd E4M3 x E4M3, dgrad E5M2 x E4M3, wgrad E5M2 x E4M3,
// per-tensor fp32 scales, delayed (history 16, margin 0)".
std::string describe(const QuantRecipe& r);

}  // namespace tg
