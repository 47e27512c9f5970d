// matmul_scaled.cu: the block-scaled linears on the GPU, forward beside backward (scaled.h),
// the twin of src/backends/cpu/matmul_scaled.cpp:
//   forward  out(N,OC)  = Q(inp)(N,C) Q(W)(OC,C)^T + bias          (reduction over C)
//   dgrad    dinp(N,C)  = Q(dout)(N,OC) Q(W^T)(C,OC)^T              (reduction over OC)
//   wgrad    dW(OC,C)  += Q(H dout^T)(OC,N) Q(H inp^T)(C,N)^T       (reduction over N)
// Each operand is quantize-dequantized (quantize_blocks.cu) into bf16 or fp32 operands
// straight from the model's tensor, transposed for the backward as the recipe's blocks run
// along each GEMM's own reduction dimension (the quantizer reads the transpose in tiles: no
// copy), and multiplied by the GEMM wrapper. Where the operands have tensor factors (NVFP4's
// 1 / S) or the split channels' product joins, the GEMM writes fp32 products and one epilogue
// kernel applies the factors, accumulation, that product and the bias in the CPU's order and
// rounds once; otherwise the GEMM writes the output itself, accumulation as beta 1 and the bias
// in cuBLASLt's epilogue, the same fp32 operations rounded once (no fp32 product written and
// read back). The Hadamard rotation (H: the same signs for both operands of
// a role that has it, the wgrad in the presets) is part of that read for sizes up to 32
// points. Where a step changes an operand's values first, the operand is staged in fp32 and
// changed in place: a larger rotation, a recipe's smooth factors
// (src/precision/smoothing.h: the forward's X diag(1/s) and W diag(s), in the CPU's fp32
// operations) and the split channels (both before the forward's quantization; the backward reads
// the unsmoothed tensors afresh). Every GEMM role and operand draws its random bits from the CPU's
// stream of the linear's seed. Where the GPU has a native block-scaled GEMM for a role
// (matmul_native.cu), the product comes from it instead, on the same quantized values.
#include <vector>

#include "cublaslt.h"
#include "kernels/quantize_blocks.cuh"
#include "scaled.h"

namespace tg::gpu {

namespace {

constexpr int kThreads = 256;

// matmul_scaled.cpp's per-(role, operand) stream of the linear's seed.
uint64_t stream_of(uint64_t seed, int role, int operand) {
  return detail::splitmix64_mix(seed + uint64_t(role * 2 + operand + 1) * 0x9E3779B97F4A7C15ull);
}

float* scratch_f32(Ctx& c, ScratchSlot s, size_t n) {
  return static_cast<float*>(c.scratch(s, n * sizeof(float)));
}

}  // namespace

namespace {

// The GEMM operands' type: bf16 where both operands' values are exact in it, else fp32.
DType operand_type(const GemmRecipe& g) {
  return dequantizes_to_bf16(g.a) && dequantizes_to_bf16(g.b) ? DType::BF16 : DType::F32;
}

// Both operands quantize-dequantized into scratch: a (M,K) and b (N,K) of operand_type(g).
struct QuantizedPair {
  DType type;
  void* a;
  void* b;
};
QuantizedPair quantize_pair(Ctx& c, float* post, const OperandSource& A, const OperandSource& B,
                            int M, int N, int K, const GemmRecipe& g, uint64_t sa, uint64_t sb) {
  const DType qt = operand_type(g);
  const size_t qs = dtype_size(qt);
  QuantizedPair q{qt, c.scratch(kScratchQA, size_t(M) * K * qs),
                  c.scratch(kScratchQB, size_t(N) * K * qs)};
  quantize_dequantize(c, g.a, sa, A, M, K, qt, q.a, post);
  quantize_dequantize(c, g.b, sb, B, N, K, qt, q.b, post + 1);
  return q;
}

}  // namespace

void portable_scaled_products(Ctx& c, float* acc, float* post, const OperandSource& A,
                              const OperandSource& B, int M, int N, int K, const GemmRecipe& g,
                              uint64_t sa, uint64_t sb) {
  const QuantizedPair q = quantize_pair(c, post, A, B, M, N, K, g, sa, sb);
  gemm(c, false, true, M, N, K, q.type, q.a, K, q.b, K, DType::F32, acc, N, 0.f, nullptr);
}

Product portable_scaled_output(Ctx& c, const ScaledOut& o, float* post, const OperandSource& A,
                               const OperandSource& B, int M, int N, int K, const GemmRecipe& g,
                               uint64_t sa, uint64_t sb) {
  const DType qt = operand_type(g);
  // The GEMM wrapper writes its operands' type or fp32 (cuBLASLt's type combinations); device
  // scalars (the tensor factors) need cuBLASLt itself.
  if (!o.direct || (o.type != qt && o.type != DType::F32) || (o.factors && c.opt.gemm_fallback))
    return Product::kNone;
  const QuantizedPair q = quantize_pair(c, post, A, B, M, N, K, g, sa, sb);
  void* qa = q.a;
  void* qb = q.b;
  if (!o.factors) {
    gemm(c, false, true, M, N, K, qt, qa, K, qb, K, o.type, o.out, N, o.accumulate ? 1.f : 0.f,
         o.bias);
    return Product::kDirect;
  }
  // alpha = post_a post_b and beta on the device, after post (kScratchQWords' words 3 and 4):
  // D = alpha acc [+ beta out] [+ bias], the epilogue's fp32 operations.
  float* scalars = post + 2;
  launch(quant::gemm_scalars_kernel, 1, 1, 0, c.stream, scalars, static_cast<const float*>(post),
         o.accumulate);
  TG_LAUNCH_CHECK();
  // Row-major out(M,N) = A B^T: column-major out^T = B A^T (cuBLASLt's A is our B).
  const cudaDataType_t ct = lt_output_type(qt);
  LtGemm lt =
      lt_gemm_of(ct, ct, lt_output_type(o.type), true, false, N, M, K, qb, K, qa, K, o.out, N);
  lt.device_scalars = true;
  lt.alpha = scalars;
  lt.beta = scalars + 1;
  lt.bias = o.bias;
  lt.epilogue = o.bias ? LtEpilogue::kBias : LtEpilogue::kNone;
  if (lt_matmul(c.lt_context(), lt)) return Product::kDirect;
  // No algorithm for that: the fp32 product for the epilogue kernel, the operands as they are.
  gemm(c, false, true, M, N, K, qt, qa, K, qb, K, DType::F32, o.acc, N, 0.f, nullptr);
  return Product::kAcc;
}

namespace {

// The operand's fp32 copy in scratch slot s, for a step that changes it in place; none is made
// when x already is that slot's copy (the forward's smoothed or split operands).
float* staged_copy(Ctx& c, ScratchSlot s, const OperandSource& x, int rows, int cols) {
  float* dst = scratch_f32(c, s, size_t(rows) * cols);
  if (x.data != dst) stage_operand(c, dst, x.type, x.data, x.transposed, rows, cols);
  return dst;
}

// out(M,Nout) of type t = [out +] post_a post_b Q(A) Q(B)^T [+ extra] [+ bias], A (M,K) and B
// (Nout,K) read where they lie (staged and rotated first when the recipe says so).
void scaled_gemm(Ctx& c, DType t, void* out, OperandSource A, OperandSource B, int M, int Nout,
                 int K, const GemmRecipe& g, uint64_t seed, int role, bool accumulate,
                 const float* extra, const void* bias) {
  if (g.a.transform == Transform::Hadamard) {
    const uint64_t hs = stream_of(seed, role, 2);
    if (quant::rotates_in_warp(g.a.transform_size) && quant::rotates_in_warp(g.b.transform_size)) {
      // read through the rotation (the FP4 presets' 16 points)
      A.rotate = g.a.transform_size, A.rotate_seed = hs;
      B.rotate = g.b.transform_size, B.rotate_seed = hs;
    } else {
      if (A.transposed_amax_out || B.transposed_amax_out)
        throw Error(
            "cuda backend: the amax of a transpose is taken by an operand read as it lies");
      float* a = staged_copy(c, kScratchQStageA, A, M, K);
      float* b = staged_copy(c, kScratchQStageB, B, Nout, K);
      hadamard_rows(c, a, M, K, g.a.transform_size, hs);
      hadamard_rows(c, b, Nout, K, g.b.transform_size, hs);
      A = fp32_operand(a), B = fp32_operand(b);
    }
  }
  // [0]: the quantizer's tensor amax bits; [1], [2]: the operands' tensor factors; [3], [4]:
  // a direct GEMM's device alpha and beta (portable_scaled_output).
  float* post = static_cast<float*>(c.scratch(kScratchQWords, 64)) + 1;
  ScaledOut o;
  o.acc = scratch_f32(c, kScratchQAcc, size_t(M) * Nout);
  // Where no split channels' product joins, the GEMM writes the output itself (f acc [+ out]
  // [+ bias] in fp32, rounded once: the epilogue kernel's operations, the CPU's) and no fp32
  // product of M x Nout is written and read back: natively where the tensor factors f are 1
  // (all but UE4M3 scales, NVFP4's 1 / S), on the portable path with f as cuBLASLt's alpha.
  o.direct = !extra;
  o.factors = g.a.scale == ScaleFormat::E4M3 || g.b.scale == ScaleFormat::E4M3;
  o.type = t, o.out = out, o.accumulate = accumulate, o.bias = bias;
  const uint64_t sa = stream_of(seed, role, 0), sb = stream_of(seed, role, 1);
  const Product p = native_scaled_products(c, o, post, A, B, M, Nout, K, g, sa, sb);
  if (p == Product::kDirect) return;
  if (p == Product::kNone) {
    // (the native path's self-check may have grown the scratch: take the pointers afresh)
    post = static_cast<float*>(c.scratch(kScratchQWords, 64)) + 1;
    o.acc = scratch_f32(c, kScratchQAcc, size_t(M) * Nout);
    const Product q = portable_scaled_output(c, o, post, A, B, M, Nout, K, g, sa, sb);
    if (q == Product::kDirect) return;
    if (q == Product::kNone) portable_scaled_products(c, o.acc, post, A, B, M, Nout, K, g, sa, sb);
  }
  const float* acc = o.acc;
  const size_t n = size_t(M) * Nout;
  dispatch("scaled_gemm", t, [&](auto tag) {
    using E = decltype(tag);
    launch(quant::scaled_epilogue_kernel<E>, c.grid(n, kThreads), kThreads, 0, c.stream,
           static_cast<E*>(out), static_cast<const float*>(acc), static_cast<const float*>(post),
           extra, static_cast<const E*>(bias), accumulate, M, Nout);
    TG_LAUNCH_CHECK();
  });
}

// The recipe's smoothing factors and split channels fit a GEMM of C input channels: checked
// before any work is queued, so a refused call leaves nothing running.
void check_channel_args(const QuantRecipe& r, int C) {
  if (!r.smooth.empty() && int(r.smooth.size()) != C)
    throw Error(strf("cuda backend: smoothing: %zu factors for a GEMM with %d input channels",
                     r.smooth.size(), C));
  for (int x : r.split_channels)
    if (x < 0 || x >= C) throw Error(strf("cuda backend: split channel %d of %d", x, C));
}

// Channel smoothing of the staged forward operands: a(N,C) <- a diag(1/s), b(OC,C) <-
// b diag(s), s the recipe's C factors (matmul_scaled.cpp's smooth_columns: the same correctly
// rounded x / s and w s, so the operands are bit-identical to the CPU's).
void smooth_operands(Ctx& c, float* a, float* b, int N, int C, int OC,
                     const std::vector<float>& s) {
  // A slot of its own, grown once to the widest linear's C: no allocation per call. The
  // factors go through pinned staging, so the recipe may change once upload returns.
  float* f = scratch_f32(c, kScratchQSmooth, size_t(C));
  upload(c, f, s.data(), size_t(C) * sizeof(float));
  launch(quant::smooth_columns_kernel, c.grid(size_t(N) * C, kThreads), kThreads, 0, c.stream, a, N,
         C, static_cast<const float*>(f), true);
  TG_LAUNCH_CHECK();
  launch(quant::smooth_columns_kernel, c.grid(size_t(OC) * C, kThreads), kThreads, 0, c.stream, b,
         OC, C, static_cast<const float*>(f), false);
  TG_LAUNCH_CHECK();
}

// The split channels' product xo wo^T (N,OC) in fp32, their columns zeroed in the staged a
// (N,C) and b (OC,C) so that they set no scale.
const float* split_product(Ctx& c, float* a, float* b, int N, int C, int OC,
                           const std::vector<int>& ch) {
  const int k = int(ch.size());
  float* xo = scratch_f32(c, kScratchQSplitA, size_t(N) * k);
  float* wo = scratch_f32(c, kScratchQSplitB, size_t(OC) * k + size_t(k));
  int* dch = reinterpret_cast<int*>(wo + size_t(OC) * k);
  upload(c, dch, ch.data(), k * sizeof(int));
  launch(quant::take_columns_kernel, c.grid(size_t(N) * k, kThreads), kThreads, 0, c.stream, xo, a,
         N, C, static_cast<const int*>(dch), k);
  TG_LAUNCH_CHECK();
  launch(quant::take_columns_kernel, c.grid(size_t(OC) * k, kThreads), kThreads, 0, c.stream, wo, b,
         OC, C, static_cast<const int*>(dch), k);
  TG_LAUNCH_CHECK();
  float* prod = scratch_f32(c, kScratchQSplitAcc, size_t(N) * OC);
  gemm(c, false, true, N, OC, k, DType::F32, xo, k, wo, k, DType::F32, prod, OC, 0.f, nullptr);
  return prod;
}

}  // namespace

namespace {
// A quantized operand read as its tensor lies (no rotation, no staged copy), so that the amax
// its quantizer takes is that tensor's.
bool read_as_it_lies(const OperandRecipe& o) {
  return is_low_bit(o.elem) && o.transform == Transform::None;
}

// Operand x of a linear with a slot (q.tensor.slot >= 0: a per-tensor recipe, or NVFP4's tensor
// scale): read at the scale the host gave when its recipe takes delayed scales, else at its own
// amax's with the margin, and, read as it lies, its amax into amax_out (when given). Others are
// read as they are.
OperandSource tensor_scaled(OperandSource x, const ScaledLinear& q, const OperandRecipe& o,
                            int operand, unsigned* amax_out) {
  if (q.tensor.slot < 0) return x;
  if (o.source == ScaleSource::Delayed) x.tensor_scale = q.tensor.scale[operand];
  x.margin = q.tensor.margin;
  if (read_as_it_lies(o)) x.amax_out = amax_out;
  return x;
}

// Whether linear q's quantizer of o draws a current scale from the amax of the tensor as it
// lies (a per-tensor scale, NVFP4's tensor scale), so that an amax taken before of the same
// values serves it: it then reads the operand once, the two passes' scales bit for bit.
bool at_current_amax(const ScaledLinear& q, const OperandRecipe& o) {
  return q.tensor.slot >= 0 && read_as_it_lies(o) && scales_from_tensor_amax(o) &&
         o.source == ScaleSource::Current;
}

// The same for an operand read through a rotation in the quantizer's read (NVFP4's wgrad
// operands): the amax of its values as rotated serves it, which the quantizer of the other
// GEMM that reads the same tensor as it lies takes on the way (TransposedAmax).
bool rotated_at_current_amax(const ScaledLinear& q, const OperandRecipe& o) {
  return q.tensor.slot >= 0 && is_low_bit(o.elem) && o.transform == Transform::Hadamard &&
         quant::rotates_in_warp(o.transform_size) && scales_from_tensor_amax(o) &&
         o.source == ScaleSource::Current;
}

// x (read as it lies) also takes the amax of its transpose as role's operand o reads it
// (rotated, rotated_at_current_amax), into word.
void take_transposed_amax(OperandSource& x, const ScaledLinear& q, const OperandRecipe& o,
                          int role, unsigned* word) {
  x.transposed_amax_out = word;
  x.transposed_rotate = o.transform_size;
  x.transposed_rotate_seed = stream_of(q.seed, role, 2);  // scaled_gemm's rotation
}
}  // namespace

bool forward_amax_kept(const ScaledLinear& q) {
  const QuantRecipe& r = *q.recipe;
  const GemmRecipe &f = r.gemm[kForward], &wg = r.gemm[kWeightGrad], &dg = r.gemm[kInputGrad];
  return q.tensor.slot >= 0 && r.smooth.empty() && r.split_channels.empty() &&
         read_as_it_lies(f.a) && read_as_it_lies(f.b) &&
         (at_current_amax(q, wg.b) || at_current_amax(q, dg.b) ||
          rotated_at_current_amax(q, wg.b));
}

void scaled_linear_forward(Ctx& c, DType t, void* out, const void* inp, const void* w,
                           const void* bias, int N, int C, int OC, const ScaledLinear& q,
                           unsigned* amax_slot, unsigned* kept, const unsigned* input_amax,
                           const unsigned* weight_amax) {
  const QuantRecipe& r = *q.recipe;
  const GemmRecipe& g = r.gemm[kForward];
  OperandSource a = tensor_scaled({t, inp, false}, q, g.a, kTensorInput,
                                  amax_slot ? amax_slot + kTensorInput : nullptr);
  if (input_amax && takes_input_amax(q)) a.amax_in = input_amax;  // one pass, not two
  OperandSource b = tensor_scaled({t, w, false}, q, g.b, kTensorWeight,
                                  amax_slot ? amax_slot + kTensorWeight : nullptr);
  if (weight_amax && takes_weight_amax(q)) b.amax_in = weight_amax;
  const bool keep = kept && amax_slot && forward_amax_kept(q);  // (no smoothing, no split)
  if (keep && rotated_at_current_amax(q, r.gemm[kWeightGrad].b))  // the wgrad's H inp^T
    take_transposed_amax(a, q, r.gemm[kWeightGrad].b, kWeightGrad, kept + kKeptRotatedInput);
  const float* extra = nullptr;
  check_channel_args(r, C);
  if (!r.smooth.empty() || !r.split_channels.empty()) {
    float* sa = staged_copy(c, kScratchQStageA, a, N, C);
    float* sb = staged_copy(c, kScratchQStageB, b, OC, C);
    if (!r.smooth.empty()) smooth_operands(c, sa, sb, N, C, OC, r.smooth);
    if (!r.split_channels.empty()) extra = split_product(c, sa, sb, N, C, OC, r.split_channels);
    a = fp32_operand(sa), b = fp32_operand(sb);
  }
  scaled_gemm(c, t, out, a, b, N, OC, C, g, q.seed, kForward, false, extra, bias);
  static_assert(kKeptWeight == kKeptInput + 1, "the input's and weight's words adjoin");
  if (keep)  // for the backward (scaled.h)
    TG_CUDA_CHECK(cudaMemcpyAsync(kept + kKeptInput, amax_slot + kTensorInput,
                                  2 * sizeof(unsigned), cudaMemcpyDeviceToDevice, c.stream));
}

void scaled_linear_backward(Ctx& c, DType t, void* dinp, void* dw, void* dbias, const void* dout,
                            const void* inp, const void* w, int N, int C, int OC,
                            const ScaledLinear& q, unsigned* amax_slot, const unsigned* kept) {
  const QuantRecipe& r = *q.recipe;
  const GemmRecipe &wg = r.gemm[kWeightGrad], &dg = r.gemm[kInputGrad];
  unsigned* gamax = amax_slot ? amax_slot + kTensorGrad : nullptr;
  // dbias from the unquantized gradient; the kernel that reads it for that takes its amax too,
  // where a quantizer of it draws a current scale from that amax, so that each reads it once.
  const bool bias_amax =
      dbias && gamax && (at_current_amax(q, wg.a) || at_current_amax(q, dg.a));
  if (bias_amax) TG_CUDA_CHECK(cudaMemsetAsync(gamax, 0, sizeof(unsigned), c.stream));
  if (dbias) bias_backward(c, t, dbias, dout, N, OC, bias_amax ? gamax : nullptr);
  if (!forward_amax_kept(q)) kept = nullptr;
  // dgrad first: dout (N,OC) and W^T (C,OC), blocks along the output channels. Its quantizer
  // of dout, read as it lies, leaves dout's amax in gamax (the same bias_backward took) for the
  // wgrad's, and where the wgrad reads dout^T through a rotation, takes that one's amax too.
  OperandSource g = tensor_scaled({t, dout, false}, q, dg.a, kTensorGrad, gamax);
  if (bias_amax && at_current_amax(q, dg.a)) g.amax_in = gamax;
  unsigned* rotated_dout = nullptr;  // (kScratchQWords' word 8: launch.h)
  if (g.amax_out && rotated_at_current_amax(q, wg.a)) {
    rotated_dout = static_cast<unsigned*>(c.scratch(kScratchQWords, 64)) + 8;
    take_transposed_amax(g, q, wg.a, kWeightGrad, rotated_dout);
  }
  OperandSource wt = tensor_scaled({t, w, true}, q, dg.b, kTensorWeight, nullptr);
  if (kept && at_current_amax(q, dg.b)) wt.amax_in = kept + kKeptWeight;
  scaled_gemm(c, t, dinp, g, wt, N, C, OC, dg, q.seed, kInputGrad, false, nullptr, nullptr);
  // wgrad: dout^T (OC,N) and inp^T (C,N), blocks along the tokens. A per-tensor scale is the
  // same in both orientations, so the input is quantized to the forward's values again (at a
  // current scale from the amax its forward kept, where kept; rotated, at the rotated amax the
  // forward's quantizer of inp took).
  // (dout's amax is in gamax already where the dgrad's quantizer left it: no second copy)
  OperandSource d =
      tensor_scaled({t, dout, true}, q, wg.a, kTensorGrad, g.amax_out ? nullptr : gamax);
  if ((bias_amax || g.amax_out) && at_current_amax(q, wg.a)) d.amax_in = gamax;
  if (rotated_dout) d.amax_in = rotated_dout;
  OperandSource x = tensor_scaled({t, inp, true}, q, wg.b, kTensorInput, nullptr);
  if (kept && at_current_amax(q, wg.b)) x.amax_in = kept + kKeptInput;
  if (kept && rotated_at_current_amax(q, wg.b)) x.amax_in = kept + kKeptRotatedInput;
  scaled_gemm(c, t, dw, d, x, OC, C, N, wg, q.seed, kWeightGrad, true, nullptr, nullptr);
}

}  // namespace tg::gpu
