// matmul_native.cu: the native block-scaled GEMM of one scaled linear's role (scaled.h):
//   acc(M,N) = Q(A)(M,K) Q(B)(N,K)^T in fp32, Q() the recipe's operands as element codes and
//   block scales, multiplied by cuBLASLt's block-scaled kernels (CUBLASLT_MATMUL_DESC_A_SCALE_MODE
//   / B_SCALE_MODE) instead of being dequantized into bf16 / fp32 first.
//
// Which operands map onto which scale mode (operand_mode), on which GPUs (cc) and cuBLASLt
// versions:
//   fp8-rowwise   E4M3/E5M2, fp32 (or power-of-two) scale per row  OUTER_VEC_32F    sm_90+, 12.9+
//   fp8-block     1 x 128 blocks, fp32 scales                       VEC128_32F       sm_90+, 12.9+
//                 128 x 128 weight tiles, fp32 scales                BLK128x128_32F   sm_90+, 12.9+
//   mxfp8, mxfp4  E4M3/E5M2 (E2M1), E8M0 per 32                     VEC32_UE8M0      sm_100+, 12.8+
//   nvfp4         E2M1, UE4M3 per 16 (a 16 x 16 weight tile: its    VEC16_UE4M3      sm_100+, 12.8+
//                 scale replicated over its 16 rows)
// The rest of a recipe stays where the portable path has it: channel smoothing, the
// Hadamard rotation and the split channels act on the staged fp32 operands before
// quantization, stochastic rounding is in the quantizer, NVFP4's fp32 tensor scales (1 / S
// per operand) and the split channels' product in matmul_scaled.cu's epilogue, which reads this
// GEMM's fp32 product like the portable one. Where that epilogue would only add (fp32 scale
// tensors: fp8, fp8-rowwise, fp8-block), the GEMM writes the linear's output itself instead,
// accumulation as beta 1 and the bias in its epilogue (ScaledOut, scaled.h).
// The codes and scales are quantize_blocks.cu's quantize_codes: the very values the portable
// path multiplies (element times block scale), bit for bit.
//
// Layout: our row-major out(M,N) = A(M,K) B(N,K)^T is cuBLASLt's column-major
// D(N,M) = op(B') op(A'), B' our B as a K x N column-major matrix with op T and A' our A as
// K x M with op N (the TN form FP8 kernels want): cuBLASLt's "A" is our B.
//
// Safety (nobody could run this on a GPU while writing it): a (recipe operand pair, shape class)
// runs natively only after a self-check on the GPU, its first use, has multiplied a small random
// problem of that class both ways and found them equal within kCheckTolerance; otherwise, or
// when cuBLASLt has no algorithm or refuses the call, one printed line says why and the portable
// path runs those GEMMs for the rest of the run.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cublaslt.h"
#include "scaled.h"

namespace tg::gpu {

namespace {

// Relative error ||native - portable|| / ||portable|| the self-check accepts. Both multiply the
// same quantized values (element times scale, exact in fp32: at most 4 + 4 significant bits
// for each, times a power of two or, for fp32 scales, one rounding per factor), so they differ
// only by the order and the fp32 rounding of the K-term sums: relative error of order
// sqrt(K) 2^-24 for random data, at most K 2^-24 ~ 1e-4 at the check's K <= 1280; Hopper's
// FP8 accumulators (about 22 significant bits, promoted to fp32 periodically) stay below 1e-5
// there. A layout error instead applies some block's scale to another block: the check's
// operands have block scales that differ by powers of two from block to block and row to row,
// so such a mix-up costs a relative error of order 1. 1e-3 sits far from both.
constexpr double kCheckTolerance = 1e-3;

struct OperandMode {
  cublasLtMatmulMatrixScale_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  cudaDataType_t type = CUDA_R_8F_E4M3;
  int kblock = 1;     // elements per scale along K (the check's problem sizes)
  int min_major = 9;  // compute capability
  int min_lt = 0;     // cublasLtGetVersion()
};

const char* mode_name(cublasLtMatmulMatrixScale_t m) {
  switch (m) {
    case CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F: return "OUTER_VEC_32F";
    case CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F: return "VEC128_32F";
    case CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F: return "BLK128x128_32F";
    case CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0: return "VEC32_UE8M0";
    case CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3: return "VEC16_UE4M3";
    default: return "SCALAR_32F";
  }
}

bool fp32_scale(ScaleFormat s) { return s == ScaleFormat::FP32 || s == ScaleFormat::Pow2; }
bool is_32f(cublasLtMatmulMatrixScale_t m) {
  return m == CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F ||
         m == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F ||
         m == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
}

// The scale mode that expresses o exactly, or why there is none ("" when there is).
std::string operand_mode(const OperandRecipe& o, OperandMode* m) {
  // cuBLASLt's own name of each format (the one per-format list here: CUDA's types are not
  // src/numerics's to know).
  switch (o.elem) {
    case ElemFormat::E4M3: m->type = CUDA_R_8F_E4M3; break;
    case ElemFormat::E5M2: m->type = CUDA_R_8F_E5M2; break;
    case ElemFormat::E2M1: m->type = CUDA_R_4F_E2M1; break;
    case ElemFormat::BF16:
    case ElemFormat::E8M0:
    case ElemFormat::UE4M3: return strf("a %s operand", elem_format_name(o.elem));
  }
  const bool fp8 = elem_bits(o.elem) == 8;
  const Granularity g = o.granularity;
  if (fp8 && fp32_scale(o.scale) && g == Granularity::Tensor) {
    // The per-tensor recipes: cuBLASLt's plain FP8 GEMM with one scale per operand.
    *m = {CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F, m->type, 1, 9, 0};
  } else if (fp8 && fp32_scale(o.scale) && g == Granularity::Row) {
    *m = {CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, m->type, 1, 9, 120900};
  } else if (fp8 && fp32_scale(o.scale) && g == Granularity::Block && o.block == 128) {
    *m = {CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, m->type, 128, 9, 120900};
  } else if (fp8 && fp32_scale(o.scale) && g == Granularity::Tile && o.block == 128) {
    *m = {CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, m->type, 128, 9, 120900};
  } else if (o.scale == ScaleFormat::E8M0 && g == Granularity::Block && o.block == 32) {
    *m = {CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0, m->type, 32, 10, 120800};
  } else if (!fp8 && o.scale == ScaleFormat::E4M3 &&
             (g == Granularity::Block || g == Granularity::Tile) && o.block == 16) {
    *m = {CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3, m->type, 16, 10, 120800};
  } else {
    return strf("no cuBLASLt scale mode for %s elements with %s", elem_format_name(o.elem),
                describe_operand_scales(o).c_str());
  }
  return "";
}

struct Plan {
  OperandMode a, b;
  std::string why;  // "" when the GEMM can run natively
};

// Whether g's GEMM of this shape can run natively on c's GPU (shape checks skipped when M = 0).
Plan plan_of(const Ctx& c, const GemmRecipe& g, int M, int N, int K) {
  Plan p;
  std::string wa = operand_mode(g.a, &p.a), wb = operand_mode(g.b, &p.b);
  if (!wa.empty() || !wb.empty()) {
    p.why = !wa.empty() ? wa : wb;
    return p;
  }
  const bool f32a = is_32f(p.a.mode), f32b = is_32f(p.b.mode);
  if (f32a != f32b || (f32a && (p.a.mode == CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F) !=
                                   (p.b.mode == CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F))) {
    p.why =
        strf("operand scale modes %s x %s do not pair", mode_name(p.a.mode), mode_name(p.b.mode));
    return p;
  }
  if (!f32a && p.a.mode != p.b.mode) {
    p.why = strf("operand scale modes %s x %s differ", mode_name(p.a.mode), mode_name(p.b.mode));
    return p;
  }
  if (p.a.mode == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F &&
      p.b.mode == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F) {
    p.why = "two 128x128-tiled operands (cuBLASLt pairs a tile with 1x128 blocks only)";
    return p;
  }
  if ((p.a.type == CUDA_R_4F_E2M1) != (p.b.type == CUDA_R_4F_E2M1)) {
    p.why = "an FP4 operand with an FP8 one";
    return p;
  }
  if (p.a.type == CUDA_R_8F_E5M2 && p.b.type == CUDA_R_8F_E5M2) {
    p.why = "E5M2 x E5M2 (FP8 GEMMs take one E5M2 operand at most)";
    return p;
  }
  const int major = std::max(p.a.min_major, p.b.min_major);
  if (c.prop.major < major) {
    p.why = strf("needs sm_%d0 or newer (this GPU is sm_%d%d)", major, c.prop.major, c.prop.minor);
    return p;
  }
  const int lt = std::max(p.a.min_lt, p.b.min_lt);
  if (int(cublasLtGetVersion()) < lt) {
    p.why = strf("needs cuBLASLt %d.%d or newer (installed: %d)", lt / 10000, lt / 100 % 100,
                 int(cublasLtGetVersion()));
    return p;
  }
  if (M == 0) return p;
  // What the modes and the kernels' 16-byte alignment ask of the shapes: FP8 rows of 16
  // elements, packed FP4 rows of 32, whole 128-blocks and tiles for the 32F block modes (the
  // layouts of partial ones are not documented), rows padded by the 128x4 layout otherwise.
  const bool blk32 = p.a.mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F ||
                     p.a.mode == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  const int mk = blk32 ? 128 : p.a.type == CUDA_R_4F_E2M1 ? 32 : 16;
  const int mmn = blk32 ? 128 : 16;
  if (M % mmn || N % mmn || K % mk)
    p.why = strf("shape %dx%dx%d (needs M and N multiples of %d, K of %d)", M, N, K, mmn, mk);
  return p;
}

uint8_t* scratch_bytes(Ctx& c, ScratchSlot s, size_t n) {
  return static_cast<uint8_t*>(c.scratch(s, n));
}

// Where a native GEMM writes: fp32 acc (beta 0, no bias), or the linear's output (ScaledOut's
// direct form: beta 1 when accumulating, the bias in cuBLASLt's epilogue).
struct Target {
  cudaDataType_t type = CUDA_R_32F;
  void* d = nullptr;
  bool accumulate = false;
  const void* bias = nullptr;
};

// Q(A) Q(B)^T through cuBLASLt's block-scaled GEMM into the first of the n targets cuBLASLt
// runs (the direct form, with acc after it should cuBLASLt have no algorithm for that output);
// *post, post[1] the operands' tensor factors (NaN for an operand that held a non-finite
// value). Returns 1 + the index of the target written, 0 when cuBLASLt has no algorithm or
// refuses every call (nothing written then).
int run_native(Ctx& c, const Target* targets, int n, float* post, const OperandSource& A,
               const OperandSource& B, int M, int N, int K, const GemmRecipe& g, const Plan& p,
               uint64_t sa, uint64_t sb) {
  const int per = p.a.type == CUDA_R_4F_E2M1 ? 2 : 1;
  uint8_t* ca = scratch_bytes(c, kScratchQA, size_t(M) * K / per);
  uint8_t* cb = scratch_bytes(c, kScratchQB, size_t(N) * K / per);
  // Twice the layout's size and 4 KiB more: should cuBLASLt expect more padding than the
  // documentation as read here, it reads wrong scales (which the self-check catches) rather
  // than past an allocation (which would end the run).
  const size_t bxa = native_scale_bytes(g.a, p.a.mode, M, K);
  const size_t bxb = native_scale_bytes(g.b, p.b.mode, N, K);
  void* xa = c.scratch(kScratchQScaleA, 2 * bxa + 4096);
  void* xb = c.scratch(kScratchQScaleB, 2 * bxb + 4096);
  quantize_codes(c, g.a, p.a.mode, sa, A, M, K, ca, xa, post);
  quantize_codes(c, g.b, p.b.mode, sb, B, N, K, cb, xb, post + 1);
  static const float one = 1.0f, zero = 0.0f;
  for (int i = 0; i < n; i++) {
    const Target& t = targets[i];
    LtGemm lt = lt_gemm_of(p.b.type, p.a.type, t.type, true, false, N, M, K, cb, K, ca, K, t.d, N);
    lt.a_scale = xb;
    lt.a_scale_mode = int32_t(p.b.mode);
    lt.b_scale = xa;
    lt.b_scale_mode = int32_t(p.a.mode);
    lt.alpha = &one;
    lt.beta = t.accumulate ? &one : &zero;
    lt.bias = t.bias;
    lt.epilogue = t.bias ? LtEpilogue::kBias : LtEpilogue::kNone;
    if (lt_matmul(c.lt_context(), lt)) return i + 1;
  }
  return 0;
}

enum class Verdict { kUnchecked, kNative, kPortable };

std::mutex g_mu;
std::map<std::string, Verdict> g_verdicts;
// The direct forms (key, output type, accumulation, bias) cuBLASLt had no algorithm for: their
// GEMMs write acc for the rest of the run.
std::set<std::string> g_direct_refused;

// The shape class of a GEMM: whether its rows fill whole 128-row scale tiles and its K whole
// 4-block column groups of the 128x4 layouts (the padding cases of the layouts).
struct ShapeClass {
  bool m128, n128, k4;
};
ShapeClass class_of(const Plan& p, int M, int N, int K) {
  const int kb = std::max(p.a.kblock, p.b.kblock);
  return {M % 128 == 0, N % 128 == 0, K % (4 * kb) == 0};
}

std::string key_of(const GemmRecipe& g, const ShapeClass& s) {
  std::string k(reinterpret_cast<const char*>(&g.a), sizeof g.a);
  k.append(reinterpret_cast<const char*>(&g.b), sizeof g.b);
  k += char('0' + s.m128), k += char('0' + s.n128), k += char('0' + s.k4);
  return k;
}

// The check's operand (rows, K): normal values times 2^e with e varying from row to row, from
// K block to K block and along the 16-element sub-blocks, so that every group of every scale
// layout gets a different scale and a misplaced scale shows.
std::vector<float> check_operand(int rows, int K, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(size_t(rows) * K);
  for (int r = 0; r < rows; r++)
    for (int k = 0; k < K; k++)
      x[size_t(r) * K + k] = std::ldexp(nd(rng), (r * 3 + k / 16 + (k / 128) * 2) % 9 - 4);
  return x;
}

// Runs the self-check of g at class s; returns "" when the native GEMM agrees, else why not.
std::string self_check(Ctx& c, const GemmRecipe& g, const Plan& p, const ShapeClass& s) {
  const int kb = std::max(p.a.kblock, p.b.kblock) >= 16 ? std::max(p.a.kblock, p.b.kblock) : 32;
  const int M = s.m128 ? 128 : 144, N = s.n128 ? 128 : 144, K = 8 * kb + (s.k4 ? 0 : 2 * kb);
  const std::vector<float> ha = check_operand(M, K, 1), hb = check_operand(N, K, 2);
  float* a = static_cast<float*>(c.scratch(kScratchQCheck, (ha.size() + hb.size()) * 4));
  float* b = a + ha.size();
  float* acc = static_cast<float*>(c.scratch(kScratchQCheckAcc, size_t(2) * M * N * 4));
  float* post = static_cast<float*>(c.scratch(kScratchQWords, 64)) + 1;
  upload(c, a, ha.data(), ha.size() * 4);
  upload(c, b, hb.data(), hb.size() * 4);
  const uint64_t sa = 0x5eed0001ull, sb = 0x5eed0002ull;
  const Target t{CUDA_R_32F, acc, false, nullptr};
  if (!run_native(c, &t, 1, post, fp32_operand(a), fp32_operand(b), M, N, K, g, p, sa, sb))
    return strf("cuBLASLt has no algorithm for %s x %s (or refused the call): %s",
                mode_name(p.b.mode), mode_name(p.a.mode), lt_last_refusal().c_str());
  // Both paths write the tensor factors to `post`: the native one's is read back before the
  // portable one overwrites it (a wait; the self-check runs once per shape class).
  float pn[2], pp[2];
  download(c, pn, post, sizeof pn);
  portable_scaled_products(c, acc + size_t(M) * N, post, fp32_operand(a), fp32_operand(b), M, N, K,
                           g, sa, sb);
  download(c, pp, post, sizeof pp);
  std::vector<float> h(size_t(2) * M * N);
  download(c, h.data(), acc, h.size() * 4);
  double num = 0, den = 0;
  for (size_t i = 0; i < size_t(M) * N; i++) {
    const double d = double(h[i]) - double(h[i + size_t(M) * N]);
    num += d * d;
    den += double(h[i + size_t(M) * N]) * h[i + size_t(M) * N];
  }
  const double rel = std::sqrt(num / (den > 0 ? den : 1));
  if (std::memcmp(pn, pp, sizeof pn) != 0) return "the operands' tensor factors differ";
  if (!(rel <= kCheckTolerance))
    return strf("relative error %.3g on a %dx%dx%d check problem (tolerance %.0e)", rel, M, N, K,
                kCheckTolerance);
  return "";
}

std::string gemm_label(const GemmRecipe& g, const Plan& p, const ShapeClass& s) {
  return strf("%s %s x %s %s (shape class: M %s, N %s, K %s)", elem_format_name(g.a.elem),
              mode_name(p.a.mode), elem_format_name(g.b.elem), mode_name(p.b.mode),
              s.m128 ? "%128 = 0" : "%128 != 0", s.n128 ? "%128 = 0" : "%128 != 0",
              s.k4 ? "in whole 4-block groups" : "not in whole 4-block groups");
}

// Whether the (operand pair, shape class) `key` runs natively: its self-check, on first use.
bool native_verdict(Ctx& c, const GemmRecipe& g, const Plan& p, const ShapeClass& s,
                    const std::string& key) {
  Verdict v;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    v = g_verdicts[key];
  }
  if (v == Verdict::kUnchecked) {
    const std::string why = self_check(c, g, p, s);
    v = why.empty() ? Verdict::kNative : Verdict::kPortable;
    if (why.empty())
      printf(
          "block-scaled GEMM %s: native cuBLASLt path, self-check against the portable path "
          "passed\n",
          gemm_label(g, p, s).c_str());
    else
      printf(
          "block-scaled GEMM %s: native cuBLASLt path failed its self-check (%s); the portable "
          "path runs these GEMMs for the rest of the run\n",
          gemm_label(g, p, s).c_str(), why.c_str());
    std::lock_guard<std::mutex> lock(g_mu);
    g_verdicts[key] = v;
  }
  return v == Verdict::kNative;
}

}  // namespace

cudaDataType_t lt_output_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
    default: throw Error(strf("cuda backend: no scaled linear writes %s", dtype_name(t)));
  }
}

std::string describe_operand_scales(const OperandRecipe& o) {
  const char* scale = o.scale == ScaleFormat::FP32   ? dtype_name(DType::F32)
                      : o.scale == ScaleFormat::Pow2 ? "power-of-two"
                      : o.scale == ScaleFormat::E8M0 ? "E8M0"
                                                     : "UE4M3";
  switch (o.granularity) {
    case Granularity::Tensor: return strf("a per-tensor %s scale", scale);
    case Granularity::Row: return strf("%s scales per row", scale);
    case Granularity::Block: return strf("%s scales per 1x%d block", scale, o.block);
    case Granularity::Tile: return strf("%s scales per %dx%d tile", scale, o.block, o.block);
  }
  return scale;
}

std::string native_operand_mode(const OperandRecipe& o, cublasLtMatmulMatrixScale_t* mode) {
  OperandMode m;
  const std::string why = operand_mode(o, &m);
  *mode = m.mode;
  return why;
}

std::string native_problem(const Ctx& c, const GemmRecipe& g, int M, int N, int K) {
  return plan_of(c, g, M, N, K).why;
}

Product native_scaled_products(Ctx& c, const ScaledOut& o, float* post, const OperandSource& A,
                               const OperandSource& B, int M, int N, int K, const GemmRecipe& g,
                               uint64_t sa, uint64_t sb) {
  if (c.opt.gemm_fallback) return Product::kNone;  // cuda.gemm=fallback: no cuBLASLt at all
  const Plan p = plan_of(c, g, M, N, K);
  if (!p.why.empty()) return Product::kNone;
  const ShapeClass s = class_of(p, M, N, K);
  const std::string key = key_of(g, s);
  if (!native_verdict(c, g, p, s, key)) return Product::kNone;
  // The direct form where the scales are fp32 tensors, whose NaN for a non-finite operand
  // makes the product NaN without the epilogue's factor.
  const std::string dkey =
      key + char('a' + int(o.type)) + char('0' + o.accumulate) + char('0' + (o.bias != nullptr));
  bool direct = o.direct && !o.factors && fp32_scale(g.a.scale) && fp32_scale(g.b.scale);
  if (direct) {
    std::lock_guard<std::mutex> lock(g_mu);
    direct = !g_direct_refused.count(dkey);
  }
  const Target targets[2] = {{lt_output_type(o.type), o.out, o.accumulate, o.bias},
                             {CUDA_R_32F, o.acc, false, nullptr}};
  const int ran = run_native(c, direct ? targets : targets + 1, direct ? 2 : 1, post, A, B, M, N, K,
                             g, p, sa, sb);
  if (direct && ran == 2) {
    printf(
        "block-scaled GEMM %s: cuBLASLt has no algorithm for the %s output%s (%s); the fp32 "
        "product and the epilogue kernel run instead for the rest of the run\n",
        gemm_label(g, p, s).c_str(), dtype_name(o.type),
        o.bias         ? " with the bias epilogue"
        : o.accumulate ? " accumulated"
                       : "",
        lt_last_refusal().c_str());
    std::lock_guard<std::mutex> lock(g_mu);
    g_direct_refused.insert(dkey);
  }
  if (ran) return direct && ran == 1 ? Product::kDirect : Product::kAcc;
  printf(
      "block-scaled GEMM %s (%dx%dx%d): cuBLASLt has no algorithm or refused the call (%s); "
      "the portable path runs these GEMMs for the rest of the run\n",
      gemm_label(g, p, s).c_str(), M, N, K, lt_last_refusal().c_str());
  std::lock_guard<std::mutex> lock(g_mu);
  g_verdicts[key] = Verdict::kPortable;
  return Product::kNone;
}

int native_checks_failed() {
  std::lock_guard<std::mutex> lock(g_mu);
  int n = 0;
  for (const auto& kv : g_verdicts) n += kv.second == Verdict::kPortable;
  return n;
}

void native_forget_checks() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_verdicts.clear();
  g_direct_refused.clear();
}

std::string scaled_path_name(const Ctx& c, const QuantRecipe* r) {
  const std::string portable =
      "portable: quantize-dequantize kernels, operands in bf16 where exact (E8M0, power-of-two, "
      "UE4M3 scales) else fp32, cuBLASLt GEMMs with fp32 accumulation";
  if (!r) return "block-scaled, " + portable + " (no native path: recipe not known)";
  if (c.opt.gemm_fallback) return "block-scaled, " + portable + " (cuda.gemm=fallback)";
  static const char* roles[kGemmRoles] = {"fwd", "dgrad", "wgrad"};
  std::string native, rest;
  for (int role = 0; role < kGemmRoles; role++) {
    const GemmRecipe& g = r->gemm[role];
    const Plan p = plan_of(c, g, 0, 0, 0);
    if (p.why.empty())
      native += strf("%s%s %s x %s", native.empty() ? "" : ", ", roles[role], mode_name(p.a.mode),
                     mode_name(p.b.mode));
    else
      rest += strf("%s%s: %s", rest.empty() ? "" : "; ", roles[role], p.why.c_str());
  }
  if (native.empty()) return "block-scaled, " + portable + " (no native path: " + rest + ")";
  return "block-scaled, native cuBLASLt block-scaled GEMMs (" + native +
         ") where the shape allows, each (operand pair, shape class) self-checked on first use "
         "against the portable path; " +
         (rest.empty() ? "" : rest + "; ") + "else " + portable;
}

}  // namespace tg::gpu
