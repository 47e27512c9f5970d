// test_quantize.cpp: the block-scaled recipes' quantizer, Hadamard transform and emulated
// GEMMs (src/backends/cpu/quantize.cpp, src/backends/cpu/matmul_scaled.cpp) and the presets
// (src/numerics/recipe.cpp).
//
// The reference quantizer below is written from the recipe definitions, differently from the
// op: it walks each scale group as a rectangle, takes the amax in double, derives E8M0 scales
// with frexp, and rounds elements by searching the table of representable values (ties to the
// even code). Its results must equal the op's bit for bit. The GEMMs are checked against an
// fp64 product of the reference's dequantized operands.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "src/backends/cpu/host_operand_view.h"
#include "src/backends/cpu/ops.h"
#include "src/backends/cpu/parallel.h"
#include "src/numerics/formats.h"
#include "src/numerics/recipe.h"

using tg::ElemFormat;
using tg::Granularity;
using tg::OperandRecipe;
using tg::RoundMode;
using tg::ScaleFormat;
using tg::ScaleRule;

namespace {

// ---- reference ----

// Every non-negative finite value of format f, from its row's widths (E2M1: 0, 0.5, 1, 1.5, 2,
// 3, 4, 6).
std::vector<double> elem_table(ElemFormat f) {
  std::vector<double> t;
  const tg::ElemFormatInfo row = tg::elem_format_info(f);
  const int M = row.mantissa_bits, bias = row.bias, maxc = int(row.max_code);
  for (int c = 0; c <= maxc; c++) {
    const int e = c >> M, m = c & ((1 << M) - 1);
    t.push_back(e == 0 ? std::ldexp(m, 1 - bias - M) : std::ldexp((1 << M) + m, e - bias - M));
  }
  return t;
}

// Nearest representable value to v (ties to the even code), saturating.
double ref_round(double v, const std::vector<double>& t) {
  const double a = std::fabs(v);
  size_t i = 0;
  if (a >= t.back()) return std::copysign(t.back(), v);
  while (t[i + 1] <= a) i++;
  double r;
  if (t[i] == a) {
    r = t[i];
  } else {
    const double mid = (t[i] + t[i + 1]) / 2;
    r = a < mid ? t[i] : a > mid ? t[i + 1] : (i % 2 == 0 ? t[i] : t[i + 1]);
  }
  return std::copysign(r, v);
}

double ref_fmax(ElemFormat f) { return elem_table(f).back(); }
int ref_emax(ElemFormat f) {
  int e;
  std::frexp(ref_fmax(f), &e);
  return e - 1;
}

// Nearest UE4M3 value (nonnegative input).
double ref_ue4m3(double v) { return ref_round(v, elem_table(ElemFormat::E4M3)); }

// quantize-dequantize by the definitions; returns the GEMM factor (1/S for UE4M3 scales).
float ref_qdq(std::vector<float>& x, int rows, int cols, const OperandRecipe& o) {
  int gr = 1, gc = cols;
  if (o.granularity == Granularity::Tensor) gr = rows;
  if (o.granularity == Granularity::Block) gc = o.block;
  if (o.granularity == Granularity::Tile) gr = gc = o.block;
  for (float v : x)
    if (!std::isfinite(v)) {
      for (float& y : x) y = NAN;
      return 1;
    }
  const std::vector<double> t = elem_table(o.elem);
  const float fmax = float(ref_fmax(o.elem));
  double tensor_amax = 0;
  for (float v : x) tensor_amax = std::max(tensor_amax, std::fabs(double(v)));
  float S = 1;
  const float kMax = std::numeric_limits<float>::max();
  if (o.scale == ScaleFormat::E4M3 && tensor_amax > 0)
    S = std::min(kMax, (448.0f * fmax) / float(tensor_amax));
  std::vector<float> out(x.size());
  for (int r0 = 0; r0 < rows; r0 += gr)
    for (int c0 = 0; c0 < cols; c0 += gc) {
      const int r1 = std::min(rows, r0 + gr), c1 = std::min(cols, c0 + gc);
      double amax = 0;
      for (int r = r0; r < r1; r++)
        for (int c = c0; c < c1; c++)
          amax = std::max(amax, std::fabs(double(x[size_t(r) * cols + c])));
      float enc = 1, dec = 1;
      const float am = float(amax);
      if (o.scale == ScaleFormat::FP32 || o.scale == ScaleFormat::Pow2) {
        if (am > 0) {
          enc = fmax / am;
          if (std::isinf(enc)) enc = std::numeric_limits<float>::max();
        }
        if (o.scale == ScaleFormat::Pow2) {
          int e;
          std::frexp(double(enc), &e);
          enc = float(std::ldexp(1.0, e - 1));
        }
        dec = 1.0f / enc;
      } else if (o.scale == ScaleFormat::E8M0) {
        int k = 0;
        if (am > 0) {
          int e;
          if (o.scale_rule == ScaleRule::Ocp) {
            std::frexp(double(am), &e);
            k = (e - 1) - ref_emax(o.elem);  // floor(log2 amax) - emax_elem
          } else {
            const double q = double(am / fmax);  // the quotient in fp32
            const double m = std::frexp(q, &e);
            k = q == 0 ? -127 : (m == 0.5 ? e - 1 : e);  // ceil(log2 q)
          }
          k = std::max(-127, std::min(127, k));
        }
        dec = float(std::ldexp(1.0, k));
        enc = float(std::ldexp(1.0, -k));
      } else {  // UE4M3 with the tensor scale S
        dec = float(ref_ue4m3(double(am / fmax * S)));
        enc = dec > 0 ? std::min(kMax, S / dec) : 0.0f;
      }
      for (int r = r0; r < r1; r++)
        for (int c = c0; c < c1; c++) {
          const size_t i = size_t(r) * cols + c;
          out[i] = float(ref_round(double(x[i] * enc), t)) * dec;
        }
    }
  x = out;
  return o.scale == ScaleFormat::E4M3 ? 1.0f / S : 1.0f;
}

OperandRecipe op(ElemFormat e, Granularity g, int block, ScaleFormat s,
                 ScaleRule rule = ScaleRule::Ocp) {
  OperandRecipe o;
  o.elem = e;
  o.granularity = g;
  o.block = block;
  o.scale = s;
  o.scale_rule = rule;
  o.source = tg::ScaleSource::Current;
  return o;
}

// Every operand recipe the presets use, and a few more.
std::vector<OperandRecipe> operand_recipes() {
  using E = ElemFormat;
  using G = Granularity;
  using S = ScaleFormat;
  return {op(E::E4M3, G::Tensor, 0, S::FP32),
          op(E::E4M3, G::Row, 0, S::FP32),
          op(E::E4M3, G::Row, 0, S::Pow2),
          op(E::E5M2, G::Row, 0, S::FP32),
          op(E::E4M3, G::Block, 128, S::FP32),
          op(E::E4M3, G::Tile, 128, S::FP32),
          op(E::E4M3, G::Block, 32, S::E8M0),
          op(E::E4M3, G::Block, 32, S::E8M0, ScaleRule::Ceil),
          op(E::E5M2, G::Block, 32, S::E8M0),
          op(E::E2M1, G::Block, 32, S::E8M0),
          op(E::E2M1, G::Block, 32, S::E8M0, ScaleRule::Ceil),
          op(E::E2M1, G::Block, 16, S::E4M3),
          op(E::E2M1, G::Tile, 16, S::E4M3),
          op(E::E4M3, G::Tile, 16, S::E8M0)};
}

std::string name(const OperandRecipe& o) {
  return std::string(tg::elem_format_name(o.elem)) + " g" + std::to_string(int(o.granularity)) +
         " b" + std::to_string(o.block) + " s" + std::to_string(int(o.scale)) + " r" +
         std::to_string(int(o.scale_rule));
}

// Random and adversarial matrices (rows x cols).
std::vector<std::vector<float>> test_matrices(int rows, int cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0, 1);
  std::vector<std::vector<float>> m;
  std::vector<float> x(size_t(rows) * cols);
  for (auto& v : x) v = nd(rng);
  m.push_back(x);                                          // plain normal
  for (size_t i = 0; i < x.size(); i += 37) x[i] *= 1000;  // outliers
  m.push_back(x);
  for (auto& v : x) v = nd(rng) * std::exp2(float(int(rng() % 60)) - 30);  // wide range
  m.push_back(x);
  for (int r = 0; r < rows; r++)  // all-zero blocks / rows next to normal ones
    for (int c = 0; c < cols; c++)
      if ((c / 16 + r) % 3 == 0) x[size_t(r) * cols + c] = 0;
  m.push_back(x);
  for (auto& v : x) v = nd(rng) * 1e-40f;  // fp32 subnormals only
  m.push_back(x);
  for (auto& v : x) v = nd(rng) * 3e37f;  // near fp32's top
  m.push_back(x);
  for (auto& v : x) v = float(int(rng() % 13) - 6) * 0.5f;  // exact grid points and ties
  m.push_back(x);
  return m;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

}  // namespace

TEST_CASE("quantize: every operand recipe equals the per-block reference bit for bit") {
  tg::cpu::set_parallelism(2, 2);
  for (const OperandRecipe& o : operand_recipes())
    for (auto [rows, cols] : {std::pair{40, 96}, std::pair{130, 200}, std::pair{7, 33}}) {
      int mism = 0, cases = 0;
      for (auto x : test_matrices(rows, cols, 11 + rows)) {
        std::vector<float> ref = x, got = x;
        const float fr = ref_qdq(ref, rows, cols, o);
        const float fg = tg::cpu::quantize_dequantize(got.data(), rows, cols, o, 5);
        CHECK(bits(fr) == bits(fg));
        for (size_t i = 0; i < x.size(); i++)
          if (bits(ref[i]) != bits(got[i]) && mism++ < 3)
            FAIL_CHECK(name(o) << " " << rows << "x" << cols << " case " << cases << " [" << i
                               << "] x=" << x[i] << " got " << got[i] << " want " << ref[i]);
        cases++;
      }
      CHECK_MESSAGE(mism == 0, name(o) << ": " << mism << " mismatches");
    }
}

TEST_CASE("quantize: codes with their scales apart give the dequantized values bit for bit") {
  // quantize_to_codes is what the factored GEMMs (fp32 scales) multiply: codes of the element
  // format, each group's multiplier apart, q dec the quantizer's value exactly.
  tg::cpu::set_parallelism(2, 2);
  for (OperandRecipe o : operand_recipes())
    for (bool sr : {false, true})
      for (auto [rows, cols] : {std::pair{40, 96}, std::pair{130, 300}, std::pair{7, 33}}) {
        o.rounding = sr ? RoundMode::Stochastic : RoundMode::Nearest;
        int gr = 0, gc = 0;
        tg::cpu::group_shape(o, rows, cols, &gr, &gc);
        gr = std::min(gr, rows), gc = std::min(gc, cols);
        const int ngc = (cols + gc - 1) / gc, ngr = (rows + gr - 1) / gr;
        int mism = 0, not_codes = 0, cases = 0;
        for (auto x : test_matrices(rows, cols, 31 + rows)) {
          std::vector<float> deq = x, q = x, dec;
          const float fd = tg::cpu::quantize_dequantize(deq.data(), rows, cols, o, 9);
          const float fq = tg::cpu::quantize_to_codes(q.data(), rows, cols, o, 9, &dec);
          CHECK(bits(fd) == bits(fq));
          REQUIRE(dec.size() == size_t(ngr) * ngc);
          const std::vector<double> t = elem_table(o.elem);
          for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++) {
              const size_t i = size_t(r) * cols + c;
              const float v = q[i] * dec[size_t(r / gr) * ngc + c / gc];
              mism += bits(v) != bits(deq[i]) && !(std::isnan(v) && std::isnan(deq[i]));
              not_codes += std::isfinite(q[i]) && ref_round(q[i], t) != double(q[i]);
            }
          cases++;
        }
        CHECK_MESSAGE(mism == 0, name(o) << " sr " << sr << " " << rows << "x" << cols << ": "
                                         << mism << " values differ");
        CHECK_MESSAGE(not_codes == 0, name(o) << ": " << not_codes << " codes off the grid");
      }
}

TEST_CASE("quantize: non-finite values poison the operand; zeros stay zeros") {
  for (const OperandRecipe& o : operand_recipes()) {
    for (float bad : {INFINITY, -INFINITY, NAN}) {
      std::vector<float> x(64 * 64, 1.0f);
      x[100] = bad;
      tg::cpu::quantize_dequantize(x.data(), 64, 64, o, 1);
      bool all_nan = true;
      for (float v : x) all_nan = all_nan && std::isnan(v);
      CHECK_MESSAGE(all_nan, name(o));
    }
    std::vector<float> z(64 * 64, 0.0f);
    CHECK(tg::cpu::quantize_dequantize(z.data(), 64, 64, o, 1) == 1.0f);
    for (float v : z) CHECK(v == 0.0f);
  }
}

TEST_CASE("quantize: tile scales are the same in both orientations") {
  // What lets the weight's one quantized copy serve the forward and dgrad GEMMs.
  for (const OperandRecipe& o : {op(ElemFormat::E2M1, Granularity::Tile, 16, ScaleFormat::E4M3),
                                 op(ElemFormat::E4M3, Granularity::Tile, 128, ScaleFormat::FP32)}) {
    const int R = 48, C = 272;
    auto x = test_matrices(R, C, 3)[1];
    std::vector<float> xt(x.size());
    for (int r = 0; r < R; r++)
      for (int c = 0; c < C; c++) xt[size_t(c) * R + r] = x[size_t(r) * C + c];
    tg::cpu::quantize_dequantize(x.data(), R, C, o, 0);
    tg::cpu::quantize_dequantize(xt.data(), C, R, o, 0);
    int diff = 0;
    for (int r = 0; r < R; r++)
      for (int c = 0; c < C; c++) diff += bits(xt[size_t(c) * R + r]) != bits(x[size_t(r) * C + c]);
    CHECK(diff == 0);
  }
}

TEST_CASE("quantize: stochastic rounding lands on a neighbour, is seeded and unbiased") {
  OperandRecipe o = op(ElemFormat::E2M1, Granularity::Block, 16, ScaleFormat::E4M3);
  const int R = 16, C = 64;
  auto x = test_matrices(R, C, 9)[0];
  // UE4M3-scaled values come back times the tensor scale S; the GEMM undoes it (post = 1/S).
  std::vector<float> nearest = x;
  const float post = tg::cpu::quantize_dequantize(nearest.data(), R, C, o, 0);
  for (auto& v : nearest) v *= post;
  o.rounding = RoundMode::Stochastic;
  std::vector<double> mean(x.size(), 0.0);
  const int n = 2000;
  for (int s = 0; s < n; s++) {
    std::vector<float> y = x;
    CHECK(tg::cpu::quantize_dequantize(y.data(), R, C, o, uint64_t(s)) == post);
    for (size_t i = 0; i < x.size(); i++) mean[i] += double(y[i]) * post / n;
    if (s == 0) {
      std::vector<float> y2 = x;
      tg::cpu::quantize_dequantize(y2.data(), R, C, o, 0);
      CHECK(y2 == y);  // the same seed, the same bits
    }
  }
  // The mean over seeds approaches x (the scales do not depend on the rounding); the nearest
  // rounding's error is much larger than the stochastic mean's.
  double err_sr = 0, err_rn = 0, norm = 0;
  for (size_t i = 0; i < x.size(); i++) {
    err_sr += (mean[i] - x[i]) * (mean[i] - x[i]);
    err_rn += (double(nearest[i]) - x[i]) * (double(nearest[i]) - x[i]);
    norm += double(x[i]) * x[i];
  }
  CHECK(std::sqrt(err_sr / norm) < 0.02);
  CHECK(std::sqrt(err_sr) < 0.25 * std::sqrt(err_rn));
}

TEST_CASE("quantize: the random Hadamard transform is orthogonal and undone") {
  for (int n : {2, 4, 16, 32, 64}) {
    // Columns of H D from unit vectors: H D (H D)^T = I (exactly for powers of 4: entries
    // +-2^-k; within fp32 rounding of 1/sqrt(n) otherwise).
    std::vector<float> m(size_t(n) * n, 0.0f);
    for (int i = 0; i < n; i++) m[size_t(i) * n + i] = 1;
    tg::cpu::hadamard_rows(m.data(), n, n, n, 77, false);  // row i = (H D e_i)^T
    double worst = 0;
    for (int i = 0; i < n; i++)
      for (int j = 0; j < n; j++) {
        double d = 0;
        for (int k = 0; k < n; k++) d += double(m[size_t(i) * n + k]) * m[size_t(j) * n + k];
        worst = std::max(worst, std::fabs(d - (i == j)));
      }
    const bool pow4 = (n & 0x55555555) != 0;
    INFO("n=" << n);
    CHECK(worst <= (pow4 ? 0.0 : 1e-6));
    // Forward then inverse gives back x: exactly for small integers with n a power of 4,
    // within a few ulps otherwise. The tail past the last full run is untouched.
    const int R = 5, C = 3 * n + 3, full = C / n * n;
    std::mt19937 rng(n);
    std::vector<float> x(size_t(R) * C), y;
    for (auto& v : x)
      v = pow4 ? float(int(rng() % 17) - 8) : std::normal_distribution<float>()(rng);
    y = x;
    tg::cpu::hadamard_rows(y.data(), R, C, n, 5, false);
    for (int r = 0; r < R; r++)
      for (int c = full; c < C; c++) CHECK(y[size_t(r) * C + c] == x[size_t(r) * C + c]);
    tg::cpu::hadamard_rows(y.data(), R, C, n, 5, true);
    double e = 0;
    for (size_t i = 0; i < x.size(); i++) e = std::max(e, double(std::fabs(y[i] - x[i])));
    CHECK(e <= (pow4 ? 0.0 : 1e-5));
  }
  // The rotation spreads an outlier over its run (what makes 4-bit blocks work for them).
  std::vector<float> x(16, 0.0f);
  x[3] = 8;
  tg::cpu::hadamard_rows(x.data(), 1, 16, 16, 1, false);
  for (float v : x) CHECK(std::fabs(v) == 2.0f);
}

namespace {

// out(M,N) = A(M,K) B(N,K)^T in fp64.
std::vector<double> gemm64(const std::vector<float>& A, const std::vector<float>& B, int M, int N,
                           int K) {
  std::vector<double> o(size_t(M) * N, 0.0);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double s = 0;
      for (int k = 0; k < K; k++) s += double(A[size_t(i) * K + k]) * B[size_t(j) * K + k];
      o[size_t(i) * N + j] = s;
    }
  return o;
}
std::vector<float> transposed(const std::vector<float>& x, int rows, int cols) {
  std::vector<float> t(x.size());
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) t[size_t(c) * rows + r] = x[size_t(r) * cols + c];
  return t;
}
double rel_err(const std::vector<float>& got, const std::vector<double>& want) {
  double e = 0, n = 0;
  for (size_t i = 0; i < got.size(); i++) {
    e += (got[i] - want[i]) * (got[i] - want[i]);
    n += want[i] * want[i];
  }
  return std::sqrt(e / n);
}

}  // namespace

TEST_CASE("quantize: emulated block-scaled GEMMs equal fp64 products of the dequantized operands") {
  tg::cpu::set_parallelism(2, 2);
  const int N = 96, C = 80, OC = 48;
  std::mt19937_64 rng(4);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> inp(size_t(N) * C), w(size_t(OC) * C), dout(size_t(N) * OC), bias(OC);
  for (auto& v : inp) v = nd(rng);
  for (auto& v : w) v = 0.1f * nd(rng);
  for (auto& v : dout) v = 1e-3f * nd(rng);
  for (auto& v : bias) v = nd(rng);
  for (const char* mode : {"fp8-rowwise", "fp8-block", "mxfp8", "mxfp4", "nvfp4"}) {
    tg::RecipeOptions opt;
    opt.stochastic_grads = false;  // the reference rounds to nearest
    opt.hadamard = false;          // tested on its own above
    const tg::QuantRecipe r = tg::block_scaled_recipe(mode, opt);
    INFO(mode);
    // forward
    std::vector<float> a = inp, b = w, out(size_t(N) * OC);
    tg::cpu::matmul_forward_scaled(out.data(), a.data(), b.data(), bias.data(), N, C, OC, r, 1);
    std::vector<float> qa = inp, qb = w;
    float post =
        ref_qdq(qa, N, C, r.gemm[tg::kForward].a) * ref_qdq(qb, OC, C, r.gemm[tg::kForward].b);
    std::vector<double> want = gemm64(qa, qb, N, OC, C);
    for (int n = 0; n < N; n++)
      for (int j = 0; j < OC; j++)
        want[size_t(n) * OC + j] = want[size_t(n) * OC + j] * post + bias[j];
    CHECK(rel_err(out, want) < 1e-5);
    // backward: dgrad over OC, wgrad over N, each from fresh transposed copies
    std::vector<float> g = dout, dinp(size_t(N) * C), dw(size_t(OC) * C, 0.5f);
    tg::cpu::ScaledScratch s;
    tg::cpu::matmul_backward_scaled(dinp.data(), dw.data(), g.data(), inp.data(), w.data(), N, C,
                                    OC, r, 1, s);
    std::vector<float> qg = dout, qwt = transposed(w, OC, C);
    post = ref_qdq(qg, N, OC, r.gemm[tg::kInputGrad].a) *
           ref_qdq(qwt, C, OC, r.gemm[tg::kInputGrad].b);
    want = gemm64(qg, qwt, N, C, OC);
    for (auto& v : want) v *= post;
    CHECK(rel_err(dinp, want) < 1e-5);
    std::vector<float> qgt = transposed(dout, N, OC), qit = transposed(inp, N, C);
    post = ref_qdq(qgt, OC, N, r.gemm[tg::kWeightGrad].a) *
           ref_qdq(qit, C, N, r.gemm[tg::kWeightGrad].b);
    want = gemm64(qgt, qit, OC, C, N);
    for (auto& v : want) v = 0.5 + v * post;
    CHECK(rel_err(dw, want) < 1e-5);
    // and close to the unquantized products (the recipe's own error, loosely)
    std::vector<double> exact = gemm64(inp, w, N, OC, C);
    for (int n = 0; n < N; n++)
      for (int j = 0; j < OC; j++) exact[size_t(n) * OC + j] += bias[j];
    CHECK(rel_err(out, exact) < (r.gemm[0].a.elem == ElemFormat::E2M1 ? 0.25 : 0.08));
  }
}

TEST_CASE("quantize: fp32-scaled GEMMs over several K chunks and over groups that do not nest") {
  // fp8-block's operands enter the GEMM as codes, the fp32 scales applied per 128 along K
  // (three chunks here, the last short); operands whose groups do not nest fall back to
  // dequantized values. Both equal the fp64 product of the dequantized operands. N x OC is
  // above kParallelMin, so the scaling loops run on both threads.
  tg::cpu::set_parallelism(2, 2);
  const int N = 256, C = 300, OC = 160;
  std::mt19937_64 rng(8);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> inp(size_t(N) * C), w(size_t(OC) * C);
  for (auto& v : inp) v = nd(rng) * (rng() % 17 == 0 ? 50.0f : 1.0f);  // outliers: scales vary
  for (auto& v : w) v = 0.1f * nd(rng);
  tg::RecipeOptions opt;
  opt.stochastic_grads = false;
  opt.hadamard = false;
  tg::QuantRecipe block = tg::block_scaled_recipe("fp8-block", opt);
  tg::QuantRecipe odd = block;  // 96-wide blocks against 128-wide tiles: no common chunk
  odd.gemm[tg::kForward].a.block = 96;
  tg::QuantRecipe mixed = block;  // rowwise against an nvfp4 weight: codes x dequantized
  mixed.gemm[tg::kForward].a = tg::block_scaled_recipe("fp8-rowwise", opt).gemm[tg::kForward].a;
  mixed.gemm[tg::kForward].b = tg::block_scaled_recipe("nvfp4", opt).gemm[tg::kForward].b;
  for (const tg::QuantRecipe* r : {&block, &odd, &mixed}) {
    const tg::GemmRecipe& g = r->gemm[tg::kForward];
    std::vector<float> a = inp, b = w, out(size_t(N) * OC);
    tg::cpu::matmul_forward_scaled(out.data(), a.data(), b.data(), nullptr, N, C, OC, *r, 1);
    std::vector<float> qa = inp, qb = w;
    const float post = ref_qdq(qa, N, C, g.a) * ref_qdq(qb, OC, C, g.b);
    std::vector<double> want = gemm64(qa, qb, N, OC, C);
    for (auto& v : want) v *= post;
    CHECK(rel_err(out, want) < 1e-5);
  }
}

TEST_CASE("quantize: the wgrad GEMM with a random Hadamard transform keeps its product") {
  // H cancels: rotating both operands alike leaves their fp64 product unchanged (to fp32
  // rounding), and the rotated nvfp4 wgrad's error against the exact product stays at the
  // quantization's level. (Whether the rotation lowers that error depends on the data: on
  // these Gaussian values with sparse outliers it does not; see the README.)
  const int N = 128, C = 32, OC = 24;
  std::mt19937_64 rng(8);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> inp(size_t(N) * C), w(size_t(OC) * C), dout(size_t(N) * OC);
  for (auto& v : inp) v = nd(rng);
  for (auto& v : w) v = nd(rng);
  for (auto& v : dout) v = nd(rng);
  for (size_t i = 0; i < dout.size(); i += 97) dout[i] *= 50;  // outliers the rotation spreads
  const std::vector<double> exact =
      gemm64(transposed(dout, N, OC), transposed(inp, N, C), OC, C, N);
  {
    std::vector<float> gt = transposed(dout, N, OC), it = transposed(inp, N, C);
    tg::cpu::hadamard_rows(gt.data(), OC, N, 16, 42, false);
    tg::cpu::hadamard_rows(it.data(), C, N, 16, 42, false);
    std::vector<float> rot(size_t(OC) * C);
    const std::vector<double> r64 = gemm64(gt, it, OC, C, N);
    for (size_t i = 0; i < rot.size(); i++) rot[i] = float(r64[i]);
    CHECK(rel_err(rot, exact) < 1e-6);
  }
  double err[2];
  for (int h = 0; h < 2; h++) {
    tg::RecipeOptions opt;
    opt.stochastic_grads = false;
    opt.hadamard = h == 1;
    const tg::QuantRecipe r = tg::block_scaled_recipe("nvfp4", opt);
    std::vector<float> g = dout, dinp(size_t(N) * C), dw(size_t(OC) * C, 0.0f);
    tg::cpu::ScaledScratch s;
    tg::cpu::matmul_backward_scaled(dinp.data(), dw.data(), g.data(), inp.data(), w.data(), N, C,
                                    OC, r, 3, s);
    err[h] = rel_err(dw, exact);
  }
  MESSAGE("nvfp4 wgrad error vs exact: plain " << err[0] << ", with RHT " << err[1]);
  CHECK(err[0] < 0.2);
  CHECK(err[1] < 0.2);
}

TEST_CASE("recipe: presets and their switches") {
  tg::RecipeOptions o;
  auto nv = tg::block_scaled_recipe("nvfp4", o);
  CHECK(nv.gemm[tg::kForward].a.block == 16);
  CHECK(nv.gemm[tg::kForward].b.granularity == Granularity::Tile);
  CHECK(nv.gemm[tg::kWeightGrad].a.rounding == RoundMode::Stochastic);
  CHECK(nv.gemm[tg::kWeightGrad].b.rounding == RoundMode::Nearest);
  CHECK(nv.gemm[tg::kWeightGrad].a.transform == tg::Transform::Hadamard);
  CHECK(nv.gemm[tg::kInputGrad].a.transform == tg::Transform::None);
  CHECK(nv.keep_bf16 == std::vector<int>{-1});
  o.weight_2d = false;
  o.stochastic_grads = false;
  o.hadamard = false;
  o.bf16_last = 0;
  nv = tg::block_scaled_recipe("nvfp4", o);
  CHECK(nv.gemm[tg::kForward].b.granularity == Granularity::Block);
  CHECK(nv.gemm[tg::kWeightGrad].a.rounding == RoundMode::Nearest);
  CHECK(nv.gemm[tg::kWeightGrad].a.transform == tg::Transform::None);
  CHECK(nv.keep_bf16.empty());
  tg::RecipeOptions d;
  auto mx8 = tg::block_scaled_recipe("mxfp8", d);
  CHECK(mx8.gemm[tg::kForward].a.scale_rule == ScaleRule::Ceil);
  CHECK(mx8.gemm[tg::kWeightGrad].a.elem == ElemFormat::E4M3);
  d.grad_format = tg::GradFormat::E5M2;
  d.scale_rule = tg::ScaleRuleChoice::Ocp;
  mx8 = tg::block_scaled_recipe("mxfp8", d);
  CHECK(mx8.gemm[tg::kInputGrad].a.elem == ElemFormat::E5M2);
  CHECK(mx8.gemm[tg::kInputGrad].b.elem == ElemFormat::E4M3);
  CHECK(mx8.gemm[tg::kForward].a.scale_rule == ScaleRule::Ocp);
  auto blk = tg::block_scaled_recipe("fp8-block", tg::RecipeOptions{});
  CHECK(blk.gemm[tg::kForward].b.granularity == Granularity::Tile);
  CHECK(blk.gemm[tg::kWeightGrad].b.granularity == Granularity::Block);  // the input, over N
  CHECK(tg::describe(blk).find("fwd [E4M3 1x128 fp32] x [E4M3 128x128 fp32]") != std::string::npos);
  CHECK(!tg::is_per_tensor(blk));
  CHECK_THROWS(tg::block_scaled_recipe("fp8", tg::RecipeOptions{}));
}

TEST_CASE("quantize: the fast E2M1 round trip equals encode + decode from formats.h") {
  long bad = 0;
  auto check = [&](float x) {
    if (!std::isfinite(x)) return;
    const float want = tg::e2m1_to_f32(tg::f32_to_e2m1(x)), got = tg::cpu::e2m1_round_trip(x);
    if (bits(got) != bits(want) && bad++ < 5)
      FAIL_CHECK("x=" << x << " got " << got << " want " << want);
  };
  for (uint32_t hi = 0; hi < 0x10000u; hi++)
    for (uint32_t lo : {0x0u, 0x1u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      float x;
      const uint32_t u = hi << 16 | lo;
      std::memcpy(&x, &u, sizeof x);
      check(x);
    }
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> u(-8, 8);
  for (int i = 0; i < 2000000; i++) check(u(rng));
  CHECK(bad == 0);
  // Stochastic: every input above with several random words, and the words 0 and all ones.
  long bad_sr = 0;
  auto check_sr = [&](float x, uint32_t b) {
    if (!std::isfinite(x)) return;
    const float want = tg::e2m1_to_f32(tg::f32_to_e2m1_sr(x, b));
    const float got = tg::cpu::e2m1_sr_round_trip(x, b);
    if (bits(got) != bits(want) && bad_sr++ < 5)
      FAIL_CHECK("x=" << x << " bits=" << b << " got " << got << " want " << want);
  };
  for (uint32_t hi = 0; hi < 0x10000u; hi++) {
    float x;
    const uint32_t v = hi << 16 | (hi * 2654435761u >> 16);
    std::memcpy(&x, &v, sizeof x);
    for (uint32_t b : {0u, 0xffffffffu, uint32_t(rng()), uint32_t(rng()), 0x200000u, 0x1fffffu})
      check_sr(x, b);
  }
  for (int i = 0; i < 2000000; i++) check_sr(u(rng), uint32_t(rng()));
  CHECK(bad_sr == 0);
}
