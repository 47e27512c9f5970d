// ops.h: the CPU reference ops, one per file in src/backends/cpu/, templated on the element type.
//
// T is the storage type: float (fp32), bf16 or f16 (16-bit codes, see storage.h), or double
// for the fp64 gradient checks. Math runs in acc_t<T> (float, or double for double) and each
// stored value is rounded once. Conventions are those of backend.h. Loops are OpenMP-parallel
// with static schedules and no atomics, so results are bit-identical run to run for a given
// thread count.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "quant_error.h"
#include "src/backends/backend.h"
#include "src/numerics/group_scale.h"
#include "storage.h"

namespace tg::cpu {

template <typename T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int T_,
                     int C);
template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int T_, int C);

template <typename T>
void layernorm_forward(T* out, acc_t<T>* mean, acc_t<T>* rstd, const T* inp, const T* w, const T* b,
                       int N, int C);
template <typename T>
void layernorm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w,
                        const acc_t<T>* mean, const acc_t<T>* rstd, int N, int C);

// float and double only: the backend widens 16-bit operands to fp32 first.
template <typename T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int C, int OC);
template <typename T>
void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w, int N,
                     int C, int OC);

// matmul_backward<float> (dbias none) from a 16-bit dout (bf16 / f16 codes) whose rows lie ld
// apart: the lm_head's backward from the classifier's dlogits on the exact path. dout is
// widened (exactly) a block of rows or columns at a time, never as a whole fp32 copy.
template <typename G>
void matmul_backward_narrow_dout(float* dinp, float* dw, const G* dout, size_t ld, const float* inp,
                                 const float* w, int N, int C, int OC);

// dbias += column sums of dout(N, OC), in a fixed order
template <typename T>
void bias_backward(T* dbias, const T* dout, int N, int OC);
void bias_backward(float* dbias, const bf16* dout, int N, int OC);

struct PackQuant;  // gemm_bf16.h

// The hardware path of cpu.narrow_gemm (gemm_bf16.h; only while narrow_gemm_hardware()):
// bf16 operands, fp32 results. Forward: out = scale (inp W^T) + bias. Backward: dinp =
// dinp_scale (dout W) (overwrites; skipped when null), dW += dw_scale (dout^T inp); dout's rows
// lie ld_dout apart (0: OC, contiguous).
void matmul_forward_bf16(float* out, const bf16* inp, const bf16* w, const float* bias, float scale,
                         int N, int C, int OC);
void matmul_backward_bf16(float* dinp, float* dw, const bf16* dout, const bf16* inp, const bf16* w,
                          int N, int C, int OC, float dinp_scale = 1.0f, float dw_scale = 1.0f,
                          size_t ld_dout = 0);
// The same with the fp8 mode's inp and W quantized to FP8 codes as the GEMMs pack them (qi,
// qw: gemm_bf16.h's PackQuant, its scale and format in, the largest |x| out; null: taken as
// they are, codes already), the same bits as quantize_tensor_fp8's codes passed in. Where a
// value was not finite (amax_bits >= 0x7f800000) the results are meaningless and the caller
// recomputes them from NaN codes: the forward's out, the backward's dinp (w) or dW (inp),
// which the backward then leaves as it was. The backward's qi needs dw_scale != 1.
void matmul_forward_fp8(float* out, const bf16* inp, const bf16* w, const float* bias, float scale,
                        int N, int C, int OC, PackQuant* qi, PackQuant* qw);
void matmul_backward_fp8(float* dinp, float* dw, const bf16* dout, const bf16* inp, const bf16* w,
                         int N, int C, int OC, float dinp_scale, float dw_scale, PackQuant* qi,
                         PackQuant* qw);

template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int T_, int C, int NH);
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int T_, int C,
                        int NH);

// The lse twin of cuDNN's attention (Backend::attention_forward_lse): lse(B,NH,T) = m +
// log(sum) of each row's scaled scores, in the accumulation type, instead of att; the backward
// recomputes p = exp(s - lse) and takes D_t = dout_t . out_t from the stored out.
template <typename T>
void attention_forward_lse(T* out, acc_t<T>* lse, const T* qkv, int B, int T_, int C, int NH);
template <typename T>
void attention_backward_lse(T* dqkv, const T* dout, const T* qkv, const T* out, const acc_t<T>* lse,
                            int B, int T_, int C, int NH);

// The scalar loops attention.cpp replaced (attention_reference.cpp), which it must equal bit for
// bit: the tests compare the two. attention_lanes<T>() says whether attention.cpp runs its own
// (vectorised) passes for T in this build, or these.
template <typename T>
bool attention_lanes();
template <typename T>
void attention_forward_reference(T* out, T* att, const T* qkv, int B, int T_, int C, int NH);
template <typename T>
void attention_backward_reference(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int T_,
                                  int C, int NH);
template <typename T>
void attention_forward_lse_reference(T* out, acc_t<T>* lse, const T* qkv, int B, int T_, int C,
                                     int NH);
template <typename T>
void attention_backward_lse_reference(T* dqkv, const T* dout, const T* qkv, const T* out,
                                      const acc_t<T>* lse, int B, int T_, int C, int NH);

template <typename T>
void gelu_forward(T* out, const T* inp, size_t n);
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n);
// The formulas evaluated per element, which bf16 and fp16's tables and fp32's blocks (gelu.cpp)
// must equal.
template <typename T>
void gelu_forward_reference(T* out, const T* inp, size_t n);
template <typename T>
void gelu_backward_reference(T* dinp, const T* inp, const T* dout, size_t n);

template <typename T>
void residual_forward(T* out, const T* a, const T* b, size_t n);

// Logits and losses T: float or double, never narrower than fp32. The gradient (when dloss != 0)
// goes to dlogits, row n at dlogits + n * ld, in G: T itself (in place when dlogits is the
// logits), or bf16 / f16 for float logits (Backend::classifier, dlogits_view).
template <typename T, typename G>
void classifier(const T* logits, T* losses, const int32_t* targets, G* dlogits, size_t ld,
                float dloss, int N, int V, int Vp);

template <typename T>
double sum_squares(const T* x, size_t n);

template <typename T>
TensorStats tensor_stats(const T* x, size_t n);

// AdamW on master weights M (float or double); grads G and params P in any storage type; the
// moments stored as M itself (SM, SV = M) or as 16-bit codes (uint16_t) per a.m_format /
// a.v_format.
template <typename P, typename G, typename M, typename SM = M, typename SV = M>
void adamw(P* params, M* master, const G* grads, SM* m, SV* v, size_t n, const AdamWArgs& a);
// AdamW with the bf16 weights as the master: comp == nullptr for bf16-sr (a.rounding is
// stochastic), the compensation buffer for bf16-kahan.
template <typename SM, typename SV>
void adamw_bf16_master(bf16* params, bf16* comp, const bf16* grads, SM* m, SV* v, size_t n,
                       const AdamWArgs& a);

// A moment as the FP8-block AdamW reads it: its storage (fp32, 16-bit codes or FP8 codes), the
// FP8 blocks' meta, its format and its stochastic rounding seed.
struct MomentSpan {
  void* data = nullptr;
  float* meta = nullptr;
  MomentFormat format;
  uint64_t seed = 0;
};
// AdamW when either moment is stored in FP8 blocks (src/numerics/moment_block.h): fp32 master
// weights, or (the second form) the bf16 weights as the master as adamw_bf16_master.
template <typename P>
void adamw_blocked(P* params, float* master, const P* grads, const MomentSpan& m,
                   const MomentSpan& v, size_t n, const AdamWArgs& a);
void adamw_bf16_master_blocked(bf16* params, bf16* comp, const bf16* grads, const MomentSpan& m,
                               const MomentSpan& v, size_t n, const AdamWArgs& a);

// dst = src rounded to D: to nearest even, or stochastically (bf16/fp16 destinations) with
// random bits sr_hash(seed, offset + i).
template <typename D, typename S>
void convert(D* dst, const S* src, size_t n, const Rounding& r);

// Elementwise loops over fewer values than this run on one thread (quantize, matmul_scaled).
inline constexpr size_t kParallelMin = size_t(1) << 15;

// quantize.cpp (fp32 only). x(rows, cols) row-major, cols along the GEMM's reduction
// dimension, quantized and dequantized in place per the operand recipe o; seed: the bits of
// stochastic rounding. Returns the factor the GEMM output takes for this operand (1 / the
// fp32 tensor scale of UE4M3-scaled operands, else 1). *saturated (when given) += the values
// clipped to the element format's largest. A bf16 operand is left as it is.
float quantize_dequantize(float* x, int rows, int cols, const OperandRecipe& o, uint64_t seed,
                          size_t* saturated = nullptr);
// Random Hadamard rotation H D of every run of n (a power of two) values along each row;
// inverse: its transpose D H.
void hadamard_rows(float* x, int rows, int cols, int n, uint64_t seed, bool inverse);
// The same quantization with the codes and the scales kept apart: x gets the codes q (values
// of the element format, exact in bf16) and *dec every scale group's multiplier, group-major
// (group_shape's groups; x' = q dec is quantize_dequantize's value bit for bit). A bf16
// operand is left as it is with dec empty. Returns the tensor factor as above.
float quantize_to_codes(float* x, int rows, int cols, const OperandRecipe& o, uint64_t seed,
                        std::vector<float>* dec, bf16* narrow = nullptr);
// quantize_dequantize (no saturation count) that also writes narrow = x rounded to bf16 (as
// convert does) row by row while each row is in cache, for the bf16 GEMM of operands whose
// values are exact in bf16; quantize_to_codes' narrow likewise holds its codes.
float quantize_dequantize_narrow(float* x, bf16* narrow, int rows, int cols, const OperandRecipe& o,
                                 uint64_t seed);
// The scalar loops of both (quantize.cpp without its AVX-512 lanes, quantize_lanes.h), which
// the above must equal bit for bit.
float quantize_dequantize_reference(float* x, int rows, int cols, const OperandRecipe& o,
                                    uint64_t seed, size_t* saturated = nullptr);
void hadamard_rows_reference(float* x, int rows, int cols, int n, uint64_t seed, bool inverse);
// One operand of a per-tensor-scaled linear (TensorScaling, src/backends/backend.h): its
// format, and its scale: `scale`, or (fmax / amax) / 2^margin of x itself when `current`.
struct TensorQuant {
  float scale = 1.0f;
  bool current = false;
  int margin = 0;
  ElemFormat format = ElemFormat::E4M3;
};
// The per-tensor quantize-dequantize through q.format (E4M3 or E5M2) at q's scale; returns the
// scale, sets *amax. A non-finite amax (an overflowed gradient) turns x into NaN so that the
// step is skipped.
float qdq_tensor_fp8(float* x, size_t n, const TensorQuant& q, float* amax);
// The same, quantized but not scaled back: codes[i] = the FP8 value round(x[i] s) as a bf16
// code (exact), for the bf16 GEMMs of the hardware path, which multiply the result by 1 / s.
float quantize_tensor_fp8(bf16* codes, const float* x, size_t n, const TensorQuant& q, float* amax);
// The same from bf16 values (the codes and amax of their exact fp32 widening).
float quantize_tensor_fp8(bf16* codes, const bf16* x, size_t n, const TensorQuant& q, float* amax);
// The codes of n bf16 values x at scale s in f (E4M3 or E5M2) on this thread, in place when
// codes == x: what quantize_tensor_fp8 writes, without its NaN rule. Returns max |x| as fp32
// bits. For quantizing GEMM operands as they are packed (gemm_bf16.h's PackQuant).
uint32_t fp8_codes_serial(uint16_t* codes, const uint16_t* x, size_t n, float s, ElemFormat f);

// linear_fp8.cpp: the fp8 mode's per-tensor-scaled linears on the bf16 GEMMs (hardware path)
// from bf16 inp and W at given (delayed) scales qa, qb, quantized as the GEMMs pack them.
// Forward: out = (Q(inp) Q(W)^T) / (s_a s_b) + bias, the amaxes out; false when a value was
// not finite (out and the amaxes meaningless: the caller quantizes again and gets the NaN
// codes). Backward from dout's codes and 1 / s_g: dinp = dout Q(W) (overwrites; returns its
// scale inv_g / s_b, for the caller to apply as it rounds dinp), dW += (dout^T Q(inp)) inv_g /
// s_a; codes_a, codes_b: scratch for the codes where the GEMMs cannot quantize as they pack (a
// non-finite value, dW's scale 1). Both equal the GEMMs of quantize_tensor_fp8's codes bit for
// bit.
bool linear_forward_fp8(float* out, const bf16* inp, const bf16* w, const float* bias, int N, int C,
                        int OC, const TensorQuant& qa, const TensorQuant& qb, float* amax_a,
                        float* amax_b);
float linear_backward_fp8(float* dinp, float* dw, const bf16* dout_codes, float inv_g,
                          const bf16* inp, const bf16* w, int N, int C, int OC,
                          const TensorQuant& qa, const TensorQuant& qb, std::vector<bf16>& codes_a,
                          std::vector<bf16>& codes_b);

// matmul_scaled.cpp: the block-scaled linears (Backend::matmul_*_scaled) in fp32. inp and w
// (forward) and dout (backward) are scratch copies, quantized in place; dw accumulates. The
// backward reads inp and w in fp32 or bf16 (transposed and widened in one pass).
struct ScaledScratch {
  std::vector<float> a, b, tmp;  // grown, never shrunk: regrowing would zero-fill them
};
void matmul_forward_scaled(float* out, float* inp, float* w, const float* bias, int N, int C,
                           int OC, const QuantRecipe& r, uint64_t seed);
void matmul_backward_scaled(float* dinp, float* dw, float* dout, const float* inp, const float* w,
                            int N, int C, int OC, const QuantRecipe& r, uint64_t seed,
                            ScaledScratch& s);
void matmul_backward_scaled(float* dinp, float* dw, float* dout, const bf16* inp, const bf16* w,
                            int N, int C, int OC, const QuantRecipe& r, uint64_t seed,
                            ScaledScratch& s);
// x(rows, cols) <- x diag(1/s) (divide) or x diag(s), s one factor per column: the operands
// of a smoothed forward GEMM (QuantRecipe::smooth).
void smooth_columns(float* x, int rows, int cols, const std::vector<float>& s, bool divide);

// quantize.cpp's scale groups (also read by quant_error.cpp's block statistics): the extent
// of one group; each group's scale is src/numerics/group_scale.h's group_scale (shared with the
// CUDA kernels).
void group_shape(const OperandRecipe& o, int rows, int cols, int* gr, int* gc);

// quant_error.cpp (QuantError, quant_error): in quant_error.h, which needs no backend.

}  // namespace tg::cpu
