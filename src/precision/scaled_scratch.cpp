// scaled_scratch.cpp: the CUDA block-scaled linears' scratch, slot by slot (see
// scaled_scratch.h); each function below names the launcher whose requests it follows.
#include "scaled_scratch.h"

#include <algorithm>

#include "src/model/linear_quantizers.h"
#include "src/numerics/one_pass.h"

namespace tg {

namespace {

size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

// quant_params.h's params_of: the scale groups of o over a (rows, cols) operand, clipped.
struct Groups {
  size_t ngr = 1, ngc = 1;
  size_t gr = 1, gc = 1;
};
Groups groups_of(const OperandRecipe& o, size_t rows, size_t cols) {
  size_t gr = rows, gc = cols;
  switch (o.granularity) {
    case Granularity::Tensor: break;
    case Granularity::Row: gr = 1; break;
    case Granularity::Block: gr = 1, gc = size_t(o.block); break;
    case Granularity::Tile: gr = gc = size_t(o.block); break;
  }
  gr = std::max<size_t>(1, std::min(gr, rows));
  gc = std::max<size_t>(1, std::min(gc, cols));
  return {ceil_div(rows, gr), ceil_div(cols, gc), gr, gc};
}

constexpr size_t kScale2 = 8;  // quant::Scale2 (GroupScale): enc, dec
constexpr size_t kWords = 64;  // kScratchQWords, as every launcher asks for it
// operand_stats.cu's StatsWords: 2 words, post, pad, 6 counts, 2 totals.
constexpr size_t kStatsWords = 2 * 4 + 4 + 4 + 6 * 8 + 2 * 8;

// quantize_blocks.cu's group_scales over x(rows, cols) quantized as o says, where the operand
// takes the two passes (one_pass.h; the block-scaled recipes' scales are their operands' own).
void group_scales(ScaledScratch& s, const OperandRecipe& o, size_t rows, size_t cols) {
  const Groups g = groups_of(o, rows, cols);
  s.grow(kSlotWords, kWords);  // the amax bits and the factor, either way
  OnePassPlan plan;
  const int max_span = one_pass_max_span(elem_bits(o.elem), o.rounding == RoundMode::Stochastic);
  if (one_pass_plan(int(rows), int(cols), int(g.gr), int(g.gc), int(g.ngr), int(g.ngc),
                    o.scale == ScaleFormat::E4M3, false, false, max_span, &plan))
    return;
  s.grow(kSlotAmax, rows * g.ngc * 4);
  s.grow(kSlotScales, g.ngr * g.ngc * kScale2);
  s.grow(kSlotWords, kWords);
}

// quantize_dequantize: a bf16 (or empty) operand is only copied.
void quantize_dequantize(ScaledScratch& s, const OperandRecipe& o, size_t rows, size_t cols) {
  if (rows > 0 && cols > 0 && is_low_bit(o.elem)) group_scales(s, o, rows, cols);
}

// matmul_scaled.cu's portable_scaled_products.
void portable_products(ScaledScratch& s, const GemmRecipe& g, size_t M, size_t N, size_t K) {
  const size_t qs = dequantizes_to_bf16(g.a) && dequantizes_to_bf16(g.b) ? 2 : 4;
  s.grow(kSlotQA, M * K * qs);
  s.grow(kSlotQB, N * K * qs);
  quantize_dequantize(s, g.a, M, K);
  quantize_dequantize(s, g.b, N, K);
}

// matmul_native.cu's OperandMode, its cuBLASLt scale modes by name.
enum Mode { kNone, kScalar32F, kOuterVec32F, kVec128_32F, kBlk128_32F, kVec32UE8M0, kVec16UE4M3 };
struct NativeOperand {
  Mode mode = kNone;
  int kblock = 1, major = 9;
  bool fp4 = false, e5m2 = false;
};

NativeOperand native_operand(const OperandRecipe& o) {
  NativeOperand m;
  if (!is_operand_format(o.elem)) return m;
  m.fp4 = elem_bits(o.elem) == 4;
  m.e5m2 = o.elem == ElemFormat::E5M2;  // cuBLASLt takes no E5M2 x E5M2 product
  const bool f32 = o.scale == ScaleFormat::FP32 || o.scale == ScaleFormat::Pow2;
  const Granularity g = o.granularity;
  if (!m.fp4 && f32 && g == Granularity::Tensor)
    m.mode = kScalar32F, m.kblock = 1, m.major = 9;
  else if (!m.fp4 && f32 && g == Granularity::Row)
    m.mode = kOuterVec32F, m.kblock = 1, m.major = 9;
  else if (!m.fp4 && f32 && g == Granularity::Block && o.block == 128)
    m.mode = kVec128_32F, m.kblock = 128, m.major = 9;
  else if (!m.fp4 && f32 && g == Granularity::Tile && o.block == 128)
    m.mode = kBlk128_32F, m.kblock = 128, m.major = 9;
  else if (o.scale == ScaleFormat::E8M0 && g == Granularity::Block && o.block == 32)
    m.mode = kVec32UE8M0, m.kblock = 32, m.major = 10;
  else if (m.fp4 && o.scale == ScaleFormat::E4M3 &&
           (g == Granularity::Block || g == Granularity::Tile) && o.block == 16)
    m.mode = kVec16UE4M3, m.kblock = 16, m.major = 10;
  return m;
}

bool is_32f(Mode m) { return m == kOuterVec32F || m == kVec128_32F || m == kBlk128_32F; }

// plan_of without the cuBLASLt version; M = 0 leaves the shape out.
bool native_pair(const NativeOperand& a, const NativeOperand& b, int major, int M, int N, int K) {
  if (a.mode == kNone || b.mode == kNone) return false;
  if (is_32f(a.mode) != is_32f(b.mode)) return false;
  if (is_32f(a.mode) && (a.mode == kOuterVec32F) != (b.mode == kOuterVec32F)) return false;
  if (!is_32f(a.mode) && a.mode != b.mode) return false;
  if (a.mode == kBlk128_32F && b.mode == kBlk128_32F) return false;
  if (a.fp4 != b.fp4 || (a.e5m2 && b.e5m2)) return false;
  if (major < std::max(a.major, b.major)) return false;
  if (M == 0) return true;
  const bool blk32 = a.mode == kVec128_32F || a.mode == kBlk128_32F;
  const int mk = blk32 ? 128 : a.fp4 ? 32 : 16, mmn = blk32 ? 128 : 16;
  return M % mmn == 0 && N % mmn == 0 && K % mk == 0;
}

// quantize_blocks.cu's native_scale_bytes (kernels/quantize_blocks.cuh's native_scale_count).
size_t native_scale_bytes(const OperandRecipe& o, Mode m, size_t rows, size_t cols) {
  const Groups g = groups_of(o, rows, cols);
  const size_t njp = ceil_div(g.ngc, 4) * 4;
  size_t n = 0;
  switch (m) {
    case kScalar32F: n = 1; break;
    case kOuterVec32F: n = rows; break;
    case kVec128_32F: n = rows * g.ngc; break;
    case kBlk128_32F: n = g.ngr * njp; break;
    default: n = ceil_div(rows, 128) * 128 * njp;
  }
  return n * (m == kVec32UE8M0 || m == kVec16UE4M3 ? 1 : 4);
}

// matmul_native.cu's run_native: codes, scale tensors, and quantize_codes' group scales.
void native_products(ScaledScratch& s, const GemmRecipe& g, const NativeOperand& a,
                     const NativeOperand& b, size_t M, size_t N, size_t K) {
  const size_t per = a.fp4 ? 2 : 1;
  s.grow(kSlotQA, M * K / per);
  s.grow(kSlotQB, N * K / per);
  s.grow(kSlotScaleA, 2 * native_scale_bytes(g.a, a.mode, M, K) + 4096);
  s.grow(kSlotScaleB, 2 * native_scale_bytes(g.b, b.mode, N, K) + 4096);
  group_scales(s, g.a, M, K);
  group_scales(s, g.b, N, K);
}

// matmul_native.cu's self_check for the shape class of (M, N, K): its own problem, run both
// ways.
void self_check(ScaledScratch& s, const GemmRecipe& g, const NativeOperand& a,
                const NativeOperand& b, int M, int N, int K) {
  const int kmax = std::max(a.kblock, b.kblock), kb = kmax >= 16 ? kmax : 32;
  const size_t Mc = M % 128 == 0 ? 128 : 144, Nc = N % 128 == 0 ? 128 : 144;
  const size_t Kc = size_t(8 * kb + (K % (4 * kmax) == 0 ? 0 : 2 * kb));
  s.grow(kSlotCheck, (Mc * Kc + Nc * Kc) * 4);
  s.grow(kSlotCheckAcc, 2 * Mc * Nc * 4);
  s.grow(kSlotWords, kWords);
  native_products(s, g, a, b, Mc, Nc, Kc);
  portable_products(s, g, Mc, Nc, Kc);
}

// operand_stats.cu's quant_error of one (rows, cols) operand of 16-bit values.
void measure(ScaledScratch& s, const OperandRecipe& o, size_t rows, size_t cols, int sms) {
  const size_t n = rows * cols;
  if (!is_low_bit(o) || n == 0) return;
  s.grow(kSlotStageB, n * 4);  // the staged variant
  if (o.transform == Transform::Hadamard && o.transform_size >= 2 &&
      cols >= size_t(o.transform_size))
    s.grow(kSlotAcc, n * 4);  // its rotated copy
  s.grow(kSlotStatsWords, kStatsWords);
  s.grow(kSlotQA, n * 4);  // quantize-dequantized in fp32
  group_scales(s, o, rows, cols);
  const Groups g = groups_of(o, rows, cols);
  s.grow(kSlotStatsAmax, rows * g.ngc * 4);
  s.grow(kSlotStatsScales, g.ngr * g.ngc * kScale2);
  // Ctx::grid(n, 256): grid_stride_blocks with 32 blocks per multiprocessor.
  const size_t blocks = std::max<size_t>(1, std::min(ceil_div(n, 256), size_t(sms) * 32));
  s.grow(kSlotStatsSums, blocks * 2 * 8);
}

}  // namespace

const char* scaled_slot_name(int slot) {
  static const char* names[kScaledSlots] = {
      "QStageA", "QStageB",   "QA",        "QB",          "QAmax",     "QScales",    "QWords",
      "QAcc",    "QSplitA",   "QSplitB",   "QSplitAcc",   "QSmooth",   "QScaleA",    "QScaleB",
      "QCheck",  "QCheckAcc", "StatsAmax", "StatsScales", "StatsSums", "StatsWords", "StatsArgs"};
  return slot >= 0 && slot < kScaledSlots ? names[slot] : "?";
}

size_t ScaledScratch::total() const { return sum(0, kScaledSlots - 1); }

size_t ScaledScratch::sum(int first, int last) const {
  size_t t = 0;
  for (int i = first; i <= last; i++) t += bytes[i];
  return t;
}

bool native_gemm_runs(const GemmRecipe& g, int major, int M, int N, int K) {
  return major > 0 && native_pair(native_operand(g.a), native_operand(g.b), major, M, N, K);
}

void scaled_gemm_scratch(ScaledScratch& s, const GemmRecipe& g, int M, int N, int K, int major) {
  // kernels/quantize_blocks.cuh's rotates_in_warp: rotations of up to 32 points are read
  // through; larger ones rotate fp32 copies
  auto in_warp = [](int n) { return n >= 2 && n <= 32 && (n & (n - 1)) == 0; };
  if (g.a.transform == Transform::Hadamard &&
      !(in_warp(g.a.transform_size) && in_warp(g.b.transform_size))) {
    s.grow(kSlotStageA, size_t(M) * K * 4);
    s.grow(kSlotStageB, size_t(N) * K * 4);
  }
  s.grow(kSlotWords, kWords);
  s.grow(kSlotAcc, size_t(M) * N * 4);
  if (native_gemm_runs(g, major, M, N, K)) {
    const NativeOperand a = native_operand(g.a), b = native_operand(g.b);
    self_check(s, g, a, b, M, N, K);
    native_products(s, g, a, b, M, N, K);
  } else {
    portable_products(s, g, M, N, K);
  }
}

void scaled_linear_scratch(ScaledScratch& s, const QuantRecipe& r, int N, int C, int OC,
                           int major) {
  const size_t n = size_t(N), c = size_t(C), oc = size_t(OC), k = r.split_channels.size();
  // forward: inp (N,C) and W (OC,C), reduction over C; staged in fp32 only when smoothing or
  // the split changes them first (the quantizers read the model's tensors where they lie)
  if (k || !r.smooth.empty()) {
    s.grow(kSlotStageA, n * c * 4);
    s.grow(kSlotStageB, oc * c * 4);
  }
  if (k) {
    s.grow(kSlotSplitA, n * k * 4);
    s.grow(kSlotSplitB, (oc * k + k) * 4);  // their columns of W, then the channel numbers
    s.grow(kSlotSplitAcc, n * oc * 4);
  }
  if (!r.smooth.empty()) s.grow(kSlotSmooth, c * 4);  // channel smoothing's factors
  scaled_gemm_scratch(s, r.gemm[kForward], N, OC, C, major);
  // wgrad: dout^T (OC,N) and inp^T (C,N), reduction over the tokens
  scaled_gemm_scratch(s, r.gemm[kWeightGrad], OC, C, N, major);
  // dgrad: dout (N,OC) and W^T (C,OC), reduction over the output channels
  scaled_gemm_scratch(s, r.gemm[kInputGrad], N, C, OC, major);
}

void operand_stats_scratch(ScaledScratch& s, const QuantRecipe& r, int N, int C, int OC, int sms,
                           bool column_amax) {
  const size_t n = size_t(N), c = size_t(C), oc = size_t(OC);
  if (column_amax) {
    s.grow(kSlotStatsWords, kStatsWords);  // auto's amax of each operand
    s.grow(kSlotStatsAmax, c * 4);
  }
  measure(s, r.gemm[kForward].a, n, c, sms);      // inp
  measure(s, r.gemm[kForward].b, oc, c, sms);     // W
  measure(s, r.gemm[kInputGrad].a, n, oc, sms);   // dout
  measure(s, r.gemm[kInputGrad].b, c, oc, sms);   // W^T
  measure(s, r.gemm[kWeightGrad].a, oc, n, sms);  // dout^T
  measure(s, r.gemm[kWeightGrad].b, c, n, sms);   // inp^T
}

ScaledScratchPlan plan_scaled_scratch(const GPTConfig& c, const QuantRecipe& r, int B, int T,
                                      int sms) {
  const LinearQuantizers layers(r, c.n_layer);  // which layers the recipe quantizes
  const int N = B * T, C = c.n_embd;
  const int shapes[4][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};  // qkv attproj fc fcproj
  ScaledScratchPlan p;
  for (int l = 0; l < c.n_layer; l++) {
    if (!layers.layer_in_fp8(l)) continue;
    p.quantized_layers++;
    for (const auto& sh : shapes) {
      scaled_linear_scratch(p.portable, r, N, sh[0], sh[1], 0);
      scaled_linear_scratch(p.native, r, N, sh[0], sh[1], 10);
      operand_stats_scratch(p.stats, r, N, sh[0], sh[1], sms, false);
    }
  }
  return p;
}

}  // namespace tg
