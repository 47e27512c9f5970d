// scaled.h: the block-scaled linears on the GPU (precision.mode = fp8-rowwise, fp8-block,
// mxfp8, mxfp4, nvfp4 and auto's choices; recipes as data, src/numerics/recipe.h): the operand
// quantizer (quantize_blocks.cu, kernels/quantize_blocks.cuh) and the linear's three GEMMs
// (matmul_scaled.cu), the device twins of src/backends/cpu/quantize.cpp and
// src/backends/cpu/matmul_scaled.cpp.
//
// Paths: the native one below where the GPU has block-scaled GEMMs for the recipe, else
// the portable one (every compute capability): each operand is quantize-dequantized
// into a GEMM operand that holds exactly the values a block-scaled GEMM multiplies (element
// times its block scale), and the existing GEMM wrapper multiplies them with fp32
// accumulation; the operands' tensor factors (NVFP4's 1 / S) and the bias follow in one fp32
// epilogue that rounds the output once, or, where there are no such factors, the GEMM writes
// the output itself (bias, accumulation and the one rounding in cuBLASLt's epilogue). The operands
// are bf16 when both are exact in bf16 (dequantizes_to_bf16), else fp32 (CUBLAS_COMPUTE_32F, no
// TF32).
#pragma once
#include <cstdint>
#include <string>

#include "launch.h"
#include "src/numerics/recipe.h"

namespace tg::gpu {

// A bf16 GEMM operand (dequantizes_to_bf16, src/numerics/recipe.h) keeps a value below bf16's
// smallest normal, 2^-126, on bf16's subnormal grid (spacing 2^-133), so E4M3 (E5M2) elements
// of a block whose power-of-two scale is below 2^-124 (2^-117), i.e. a block amax under about
// 2^-116 (2^-102), lose their last bits; E2M1 and UE4M3-scaled values never do.

// A GEMM operand (rows, cols), blocks along cols, as a view of where it lies: `data` of type
// `type` (F32, BF16 or F16), row-major (rows, cols), or (cols, rows) when `transposed` (the
// backward GEMMs' operands are the transposes of the forward's tensors). The quantizers read
// it in place, so the transpose and the conversion are fused into their passes.
// `rotate` > 0: each row's runs of `rotate` columns are read through the random Hadamard
// rotation (hadamard_rows' values, signs from rotate_seed), fused into the read; only for
// sizes quantize_blocks.cuh's rotates_in_warp takes (powers of two up to 32).
// Per-tensor recipes (TensorScaling, src/backends/backend.h) read the operand at their own
// scale: `tensor_scale` > 0 a delayed scale the host gave, else (fmax / amax) / 2^margin of
// the operand; `amax_out` (device, when given) receives the operand's amax bits (|x| as fp32
// bits, 0x7f800000 and above for a non-finite value) for the host's amax history. `amax_in`
// (device, when given): those bits of this operand's values as read (rotated, where they are),
// taken before (by a kernel that read them, or an earlier quantizer's amax_out of the same
// tensor, or its transposed_amax_out): a current per-tensor scale, or NVFP4's tensor scale, is
// drawn from it on the device and the operand read once (kernels/quantize_tile.cuh), not twice.
// `transposed_amax_out` (device, when given): the quantizer also takes the amax bits of this
// operand's transpose as read through a rotation of `transposed_rotate` points (seed
// transposed_rotate_seed) along this operand's rows, another GEMM's operand (TransposedAmax in
// kernels/quantize_blocks.cuh); only for an operand read as it lies, a low-bit one.
struct OperandSource {
  DType type = DType::F32;
  const void* data = nullptr;
  bool transposed = false;
  int rotate = 0;
  uint64_t rotate_seed = 0;
  float tensor_scale = 0;
  int margin = 0;
  unsigned* amax_out = nullptr;
  const unsigned* amax_in = nullptr;
  unsigned* transposed_amax_out = nullptr;
  int transposed_rotate = 0;
  uint64_t transposed_rotate_seed = 0;
};
// An fp32 (rows, cols) row-major operand, e.g. one staged by stage_operand.
inline OperandSource fp32_operand(const float* x) { return {DType::F32, x, false}; }

// The operand's fp32 (rows, cols) copy in dst from src (type t): src is (rows, cols)
// row-major, or (cols, rows) when `transposed` (dst = src^T). Needed only where a step changes
// the values before they are quantized (the Hadamard rotation, smoothing, the split).
void stage_operand(Ctx& c, float* dst, DType t, const void* src, bool transposed, int rows,
                   int cols);
// x <- H D x on each full run of n values of every row (src/backends/cpu/quantize.cpp's
// hadamard_rows, forward direction, the same signs and order of operations); n < 2 does nothing.
void hadamard_rows(Ctx& c, float* x, int rows, int cols, int n, uint64_t seed);
// out (rows, cols, type out_type: F32 or BF16) = x quantize-dequantized as `o` says along
// its rows (src/backends/cpu/quantize.cpp's quantize_dequantize of x's fp32 values, bit for bit in
// every value; all NaN if x holds a non-finite value), and *post (device) = the factor the
// GEMM's output takes (1 / S for UE4M3 scales, else 1). A BF16 operand is copied as it is
// (out_type F32 then).
void quantize_dequantize(Ctx& c, const OperandRecipe& o, uint64_t seed, const OperandSource& x,
                         int rows, int cols, DType out_type, void* out, float* post);
// Both quantizers (quantize_dequantize, quantize_codes) read the source once where every scale
// group fits a block's super-tile or the scale is given (kernels/quantize_tile.cuh), else in two
// passes (kernels/quantize_blocks.cuh), the same values either way. Tests: true forces the two
// passes everywhere, so that the paths can be compared bit for bit.
void force_two_pass_quantizer(bool two_pass);

// The block-scaled linear (Backend::matmul_forward_scaled / matmul_backward_scaled), every
// tensor of type t:
//   forward  out(N,OC) = Q(inp) Q(W)^T + bias (+ the split channels' fp32 product), with a
//            recipe's smooth factors (src/precision/smoothing.h) inp diag(1/s) and W diag(s) first,
//            staged as the CPU's fp32 values bit for bit, before the split and Q (both paths)
//   backward dW(OC,C) += Q(H dout^T) Q(H inp^T)^T, dinp(N,C) = Q(dout) Q(W^T)^T,
//            dbias += column sums of the unquantized dout (when given)
// with the operands, roles and random streams of src/backends/cpu/matmul_scaled.cpp.
// A linear with a slot (q.tensor.slot >= 0: per-tensor scaled, or NVFP4's tensor scale) reads
// its operands at q.tensor's scales and leaves the amax bits of those read as they lie in
// amax_slot[kTensorOperands] (device; forward: input, weight; backward: gradient). At current
// scales an operand whose amax was taken before is read once, not twice
// (kernels/quantize_tile.cuh): the gradient at the amax bias_backward took as it summed dout
// (given dbias), else the wgrad's at the one the dgrad's quantizer (run first) left in the
// slot; and where forward_amax_kept(q), the forward also leaves its input's and weight's amax
// bits in kept[kKeptInput], kept[kKeptWeight] (device, when given), from which the backward
// given the same words reads the input and the weight again. A wgrad operand read through a
// rotation (NVFP4's H dout^T, H inp^T) reads at the rotated operand's amax, which the dgrad's
// quantizer of dout and the forward's of inp take on the way (TransposedAmax; the input's in
// kept[kKeptRotatedInput]).
// The caller passes the backward those words only when its inp and w are the tensors that
// forward read, unchanged (the model's order: a micro-batch's forward, then its backward).
// input_amax (device, when given): inp's amax bits, taken by the op that wrote inp (Backend's
// InputAmax); where takes_input_amax(q), the forward reads its input once at that amax, not
// twice. The caller passes it only for the tensor that op wrote, unchanged since. weight_amax
// the same of w, taken by AdamW as it wrote w (Backend's WeightAmax), read where
// takes_weight_amax(q).
// The words of `kept`, a linear's (AmaxWords keeps kKeptWords a slot).
enum KeptWord { kKeptInput = kTensorInput, kKeptWeight = kTensorWeight, kKeptRotatedInput,
                kKeptWords };
void scaled_linear_forward(Ctx& c, DType t, void* out, const void* inp, const void* w,
                           const void* bias, int N, int C, int OC, const ScaledLinear& q,
                           unsigned* amax_slot, unsigned* kept = nullptr,
                           const unsigned* input_amax = nullptr,
                           const unsigned* weight_amax = nullptr);
void scaled_linear_backward(Ctx& c, DType t, void* dinp, void* dw, void* dbias, const void* dout,
                            const void* inp, const void* w, int N, int C, int OC,
                            const ScaledLinear& q, unsigned* amax_slot,
                            const unsigned* kept = nullptr);
// Whether q's forward keeps its input's and weight's amaxes for its backward: a slot, the
// forward's operands read as their tensors lie (no smoothing, split channels or rotation), and
// the backward's input or weight at a current scale drawn from that amax, read so too.
bool forward_amax_kept(const ScaledLinear& q);
// The same for a recipe of current scales alone (no slot), e.g. the block-scaled ones.
inline void scaled_linear_forward(Ctx& c, DType t, void* out, const void* inp, const void* w,
                                  const void* bias, int N, int C, int OC, const QuantRecipe& r,
                                  uint64_t seed) {
  scaled_linear_forward(c, t, out, inp, w, bias, N, C, OC, ScaledLinear{&r, seed, {}}, nullptr);
}
inline void scaled_linear_backward(Ctx& c, DType t, void* dinp, void* dw, void* dbias,
                                   const void* dout, const void* inp, const void* w, int N, int C,
                                   int OC, const QuantRecipe& r, uint64_t seed) {
  scaled_linear_backward(c, t, dinp, dw, dbias, dout, inp, w, N, C, OC, ScaledLinear{&r, seed, {}},
                         nullptr);
}

// bias_backward (launch.h) that also takes dout's amax as it reads it: the max of |dout|'s fp32
// bits into *amax (device; must start at 0), what a per-tensor quantizer of dout reads as its
// amax_in (defined in matmul.cu).
void bias_backward(Ctx& c, DType t, void* dbias, const void* dout, int N, int OC, unsigned* amax);

// ---- the native path (matmul_native.cu; quantize_codes in quantize_blocks.cu) ----
// Where the GPU and the installed cuBLASLt have a block-scaled GEMM that multiplies a role's
// two operands exactly as the recipe quantizes them (matmul_native.cu's table: fp8-rowwise,
// fp8-block on sm_90+, MXFP8 / MXFP4 / NVFP4 on sm_100+), the GEMM runs on their codes and
// block scales instead of their dequantized copies; everything else about the linear stays.

// x(rows, cols) quantized as `o` says (quantize_dequantize's values, bit for bit: code times
// scale) into element codes (E4M3 / E5M2 bytes, or E2M1 nibble pairs, row-major) and a scale
// tensor in cuBLASLt's layout for `mode` (kernels/quantize_blocks.cuh documents both), and
// *post (device) = the GEMM's factor (1 / S for UE4M3 scales, else 1; NaN when x holds a
// non-finite value). scale holds native_scale_bytes(o, mode, rows, cols) bytes.
size_t native_scale_bytes(const OperandRecipe& o, cublasLtMatmulMatrixScale_t mode, int rows,
                          int cols);
void quantize_codes(Ctx& c, const OperandRecipe& o, cublasLtMatmulMatrixScale_t mode, uint64_t seed,
                    const OperandSource& x, int rows, int cols, uint8_t* codes, void* scale,
                    float* post);

// Where a scaled GEMM's product goes: `acc`, fp32 (M,N), which the epilogue kernel reads back;
// or, where that epilogue would only add (scaled_gemm in matmul_scaled.cu says when) and
// `direct` is set, the linear's output itself: out(M,N) of type `type` = [out +] product
// [+ bias(N)], summed in fp32 and rounded once by the GEMM (cuBLASLt's beta 1 and bias
// epilogue, in the CPU's order of operations), so no fp32 product is written and read back.
struct ScaledOut {
  float* acc = nullptr;
  bool direct = false;
  bool factors = false;  // the operands have tensor factors (UE4M3 scales' 1 / S): alpha
                         // = their product, a device scalar, in the direct form
  DType type = DType::BF16;
  void* out = nullptr;
  bool accumulate = false;
  const void* bias = nullptr;
};
enum class Product { kNone, kAcc, kDirect };  // nothing enqueued, acc written, out written

// The product with post[0..1] the operands' tensor factors, with seeds sa, sb for the
// operands' random streams:
//   portable_scaled_products  acc = Q(A)(M,K) Q(B)(N,K)^T: quantize-dequantize and an ordinary
//                             GEMM (every GPU)
//   portable_scaled_output    the same GEMM writing o.out (o.direct; kDirect), or acc should
//                             cuBLASLt have no algorithm for that with o.factors (kAcc); kNone
//                             (nothing enqueued) where the GEMM cannot write o.type from the
//                             operands' type (fp32 operands into a 16-bit output)
//   native_scaled_products    codes and scales into cuBLASLt's block-scaled GEMM, writing out
//                             where o.direct and the operands' scales are fp32 tensors (a
//                             non-finite operand's scales are NaN then: the all-NaN product
//                             the epilogue's NaN factor gives otherwise), else acc; kNone (and
//                             nothing enqueued) when that GEMM cannot run natively: not
//                             expressible, not on this GPU, cuBLASLt without an algorithm, or
//                             its (operand pair, shape class) failed the self-check (printed)
void portable_scaled_products(Ctx& c, float* acc, float* post, const OperandSource& A,
                              const OperandSource& B, int M, int N, int K, const GemmRecipe& g,
                              uint64_t sa, uint64_t sb);
Product portable_scaled_output(Ctx& c, const ScaledOut& o, float* post, const OperandSource& A,
                               const OperandSource& B, int M, int N, int K, const GemmRecipe& g,
                               uint64_t sa, uint64_t sb);
// cuBLASLt's name of a linear's output type (the model's tensors: fp32, bf16 or fp16).
cudaDataType_t lt_output_type(DType t);
Product native_scaled_products(Ctx& c, const ScaledOut& o, float* post, const OperandSource& A,
                               const OperandSource& B, int M, int N, int K, const GemmRecipe& g,
                               uint64_t sa, uint64_t sb);
// The scale mode that expresses operand o exactly in *mode, or why none does ("" when one does).
std::string native_operand_mode(const OperandRecipe& o, cublasLtMatmulMatrixScale_t* mode);
// Why g's GEMM of this shape cannot run natively on c's GPU ("" when it can, pending the
// self-check); M = 0 leaves the shape out.
std::string native_problem(const Ctx& c, const GemmRecipe& g, int M, int N, int K);
// How many (operand pair, shape class) self-checks or runs sent GEMMs to the portable path,
// and forgetting every verdict (tests).
int native_checks_failed();
void native_forget_checks();
// "E8M0 scales per 1x32 block" and the like.
std::string describe_operand_scales(const OperandRecipe& o);

// The start-up line's path of these linears for recipe r (null: not known), and why.
std::string scaled_path_name(const Ctx& c, const QuantRecipe* r);

}  // namespace tg::gpu
