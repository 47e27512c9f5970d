// native_emulated.cpp: the native block-scaled GEMM path of the GPU
// (src/backends/cuda/matmul_native.cu, quantize_codes in src/backends/cuda/quantize_blocks.cu) on
// the CPU, CUDA threads and cuBLASLt's scale modes emulated (tests/cuda/cublaslt_emulation.cpp
// decodes codes and scales by the cuBLAS documentation's layouts):
//   - the codes and scale tensors of every operand a native mode expresses (every preset and
//     its ingredients: pow2 scales, OCP / ceil E8M0, E5M2 gradients, stochastic rounding,
//     Hadamard-rotated operands, 16x16 NVFP4 weight tiles) decode, code times scale, to the
//     CPU quantizer's values bit for bit, with the same GEMM factor, on random and adversarial
//     operands (outliers, zero and subnormal-only blocks, huge values, rows that leave the
//     128-row scale tiles partial, K not in whole 4-block groups, an inf);
//   - the scaled linear's three GEMMs through the native path against the CPU backend's
//     (src/backends/cpu/matmul_scaled.cpp) within fp32 accumulation-order tolerance, the native
//     GEMM taken (counted) for each preset on an sm_90 (fp8-rowwise, fp8-block) or sm_100 (mxfp8,
//     mxfp4, nvfp4) device;
//   - the fallbacks: a heuristic without an algorithm and a native GEMM that gets the scales
//     wrong (the self-check catches it) both leave the portable path's results, bit for bit,
//     and the start-up line names the path and why;
//   - channel smoothing (precision.recipe.smooth) on both paths: the smoothed staged operands
//     and the quantized forward operands bit for bit the CPU's, outputs and gradients within
//     accumulation order, where ignored or swapped factors would miss by far.
// What it cannot see: the real cuBLASLt's reading of the layouts (the self-check does that on
// the GPU) and nvcc's compilation of the kernels.
#include "emulated_util.h"
// (first: it includes the emulation, which redefines the CUDA keywords the kernels use)
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "src/backends/cuda/scaled.h"
#include "src/numerics/recipe.h"
#include "src/precision/smoothing.h"

namespace emu_test {
extern bool lt_refuse_block_scaled;
extern bool lt_ignore_block_scales;
extern int lt_block_scaled_calls;
extern int device_major;  // runtime_emulation.cpp: what a new CudaBackend reads
float emu_block_scale(int32_t mode, const void* s, uint64_t rows, uint64_t K, uint64_t row,
                      uint64_t k);
}  // namespace emu_test

using namespace emu_test;

namespace {

// emu_ctx() as a GPU of compute capability `major`.0 for the scope (0: the tests' default,
// no native path).
struct DeviceMajor {
  int saved;
  explicit DeviceMajor(int major) : saved(emu_ctx().prop.major) {
    emu_ctx().prop.major = major;
    gpu::native_forget_checks();
  }
  ~DeviceMajor() {
    emu_ctx().prop.major = saved;
    gpu::native_forget_checks();
  }
};

std::vector<RecipeOptions> option_sets() {
  std::vector<RecipeOptions> opts(6);
  opts[1].pow2_scales = true;
  opts[2].scale_rule = tg::ScaleRuleChoice::Ocp;
  opts[3].scale_rule = tg::ScaleRuleChoice::Ceil;
  opts[4].grad_format = tg::GradFormat::E5M2;
  opts[5].stochastic_grads = false, opts[5].hadamard = false, opts[5].weight_2d = false;
  return opts;
}

const char* kModes[] = {"fp8-rowwise", "fp8-block", "mxfp8", "mxfp4", "nvfp4"};

int major_for(const char* mode) { return std::strncmp(mode, "fp8", 3) == 0 ? 9 : 10; }

// Every distinct operand recipe of the presets that a native scale mode expresses.
std::vector<OperandRecipe> native_operands() {
  std::vector<OperandRecipe> out;
  for (const char* mode : kModes)
    for (const RecipeOptions& o : option_sets()) {
      const QuantRecipe r = block_scaled_recipe(mode, o);
      for (const GemmRecipe& g : r.gemm)
        for (const OperandRecipe* x : {&g.a, &g.b}) {
          cublasLtMatmulMatrixScale_t m;
          if (!gpu::native_operand_mode(*x, &m).empty()) continue;
          bool seen = false;
          for (const OperandRecipe& y : out) seen |= std::memcmp(&y, x, sizeof y) == 0;
          if (!seen) out.push_back(*x);
        }
    }
  return out;
}

std::vector<TestOperand> operands() {
  Randn randn(11);
  std::vector<TestOperand> out;
  out.push_back({"random 128x256", 128, 256, randn(128, 256, 1.f)});
  // 144 rows: a partial 128-row scale tile; 320 = 2.5 x 128: partial 4-block groups of MX.
  out.push_back({"random 144x320", 144, 320, randn(144, 320, 0.3f)});
  {
    TestOperand o{"outliers, zero and subnormal-only blocks, huge values", 48, 512,
              randn(48, 512, 1e-2f)};
    for (int r = 0; r < 48; r += 5) o.x[size_t(r) * 512 + (r * 37) % 512] = 2.5e4f;
    for (int c = 0; c < 160; c++) o.x[size_t(3) * 512 + c] = 0.f;
    for (int r = 16; r < 32; r++)
      for (int c = 128; c < 256; c++) o.x[size_t(r) * 512 + c] = 0.f;
    for (int c = 256; c < 384; c++) o.x[size_t(6) * 512 + c] = float(c % 5 - 2) * 1e-41f;
    for (int c = 384; c < 512; c++) o.x[size_t(9) * 512 + c] = (c % 2 ? -2.f : 3.f) * 1e37f;
    out.push_back(o);
  }
  {
    TestOperand o{"an inf", 32, 128, randn(32, 128, 1.f)};
    o.x[200] = -INFINITY;
    out.push_back(o);
  }
  return out;
}

std::string describe_operand(const OperandRecipe& o) {
  return std::string(elem_format_name(o.elem)) + " " + gpu::describe_operand_scales(o) +
         (o.rounding == RoundMode::Stochastic ? ", stochastic" : ", nearest");
}

// Element i of codes (4-bit formats: two a byte, element 2k in the low nibble).
float decode(ElemFormat f, const uint8_t* codes, size_t i) {
  float v = NAN;
  dispatch_operand_format(f, [&](auto format) {
    constexpr ElemFormat F = decltype(format)::value;
    if constexpr (elem_bits(F) == 4)
      v = elem_to_f32<F>(uint8_t(i % 2 ? codes[i / 2] >> 4 : codes[i / 2] & 0xf));
    else
      v = elem_to_f32<F>(codes[i]);
  });
  return v;
}

}  // namespace

TEST_CASE("emulated: native codes x scales == the CPU quantizer's values, every native operand") {
  const std::vector<OperandRecipe> recipes = native_operands();
  // fp8-rowwise (OUTER_VEC), fp8-block (VEC128, BLK128x128), MX (VEC32) and NV (VEC16) 1-D
  // and 2-D operands, and their stochastic / E5M2 / pow2 / ceil variants.
  CHECK(recipes.size() >= 10);
  uint64_t seed = 500;
  for (const OperandRecipe& o : recipes) {
    INFO(describe_operand(o));
    cublasLtMatmulMatrixScale_t mode;
    REQUIRE(gpu::native_operand_mode(o, &mode).empty());
    for (const TestOperand& op : operands())
      for (bool transposed : {false, true}) {
        // fp32 as it is, and bf16 transposed (a backward operand, read where it lies)
        INFO(op.what << (transposed ? ", from a transposed bf16 tensor, rotated" : ", from fp32"));
        const int rows = op.rows, cols = op.cols;
        const size_t n = size_t(rows) * cols;
        std::vector<float> ref = op.x;
        std::vector<bf16> src_t;
        gpu::OperandSource src = gpu::fp32_operand(op.x.data());
        if (transposed) {
          src_t.resize(n);
          for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++) {
              const size_t i = size_t(r) * cols + c;
              src_t[size_t(c) * rows + r] = e<bf16>(op.x[i]);
              ref[i] = f(src_t[size_t(c) * rows + r]);
            }
          // read through a 16-point Hadamard rotation too (the FP4 presets' wgrad operands)
          src = {DType::BF16, src_t.data(), true, 16, 0x4ada16};
          cpu::hadamard_rows(ref.data(), rows, cols, 16, 0x4ada16, false);
        }
        const float post_ref = cpu::quantize_dequantize(ref.data(), rows, cols, o, ++seed);
        const size_t sbytes = gpu::native_scale_bytes(o, mode, rows, cols);
        Buf<uint8_t> codes(n), scale(sbytes);
        Buf<float> post(1);
        gpu::quantize_codes(emu_ctx(), o, mode, seed, src, rows, cols, codes.p, scale.p, post.p);
        check_emu();
        if (std::isnan(ref[0])) {  // a non-finite operand: NaN through the GEMM's factor
          CHECK(std::isnan(post[0]));
          continue;
        }
        CHECK(bits(post[0]) == bits(post_ref));
        size_t bad = 0, first = n;
        for (int r = 0; r < rows; r++)
          for (int c = 0; c < cols; c++) {
            const size_t i = size_t(r) * cols + c;
            const float s = emu_block_scale(int32_t(mode), scale.p, uint64_t(rows), uint64_t(cols),
                                            uint64_t(r), uint64_t(c));
            const float v = decode(o.elem, codes.p, i) * s;
            if (bits(v) != bits(ref[i])) {
              first = first < i ? first : i;
              bad++;
            }
          }
        INFO("first difference at " << first << ": cpu " << (first < n ? ref[first] : 0.f));
        CHECK(bad == 0);
      }
  }
}

namespace {

struct LinearResult {
  std::vector<float> out, dinp, dw;
};

// One forward and backward of the scaled linear on the emulated GPU (fp32 tensors).
LinearResult gpu_linear(const QuantRecipe& r, int N, int C, int OC, const std::vector<float>& inp,
                        const std::vector<float>& w, const std::vector<float>& dout,
                        uint64_t seed) {
  Buf<float> out(size_t(N) * OC), dinp(size_t(N) * C), dw(size_t(OC) * C, 0);
  std::memset(static_cast<void*>(dw.p), 0, dw.n * sizeof(float));
  gpu::scaled_linear_forward(emu_ctx(), DType::F32, out.p, inp.data(), w.data(), nullptr, N, C, OC,
                             r, seed);
  gpu::scaled_linear_backward(emu_ctx(), DType::F32, dinp.p, dw.p, nullptr, dout.data(), inp.data(),
                              w.data(), N, C, OC, r, seed);
  check_emu();
  return {std::vector<float>(out.p, out.p + out.n), std::vector<float>(dinp.p, dinp.p + dinp.n),
          std::vector<float>(dw.p, dw.p + dw.n)};
}

LinearResult cpu_linear(const QuantRecipe& r, int N, int C, int OC, std::vector<float> inp,
                        std::vector<float> w, std::vector<float> dout, uint64_t seed) {
  LinearResult x{std::vector<float>(size_t(N) * OC), std::vector<float>(size_t(N) * C),
                 std::vector<float>(size_t(OC) * C, 0.f)};
  std::vector<float> inp2 = inp, w2 = w;
  cpu::matmul_forward_scaled(x.out.data(), inp2.data(), w2.data(), nullptr, N, C, OC, r, seed);
  cpu::ScaledScratch s;
  cpu::matmul_backward_scaled(x.dinp.data(), x.dw.data(), dout.data(), inp.data(), w.data(), N, C,
                              OC, r, seed, s);
  return x;
}

double rel(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); i++) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

std::vector<float> randn(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, scale);
  std::vector<float> x(n);
  for (float& v : x) v = nd(rng);
  return x;
}

}  // namespace

TEST_CASE("emulated: native block-scaled linears == the CPU backend's, every preset") {
  // fp32 tensors: the products differ from the CPU's only in the order of the K-term sums
  // (fp64 in the emulated GEMM, fp32 on the CPU), relative 1e-6 at these K; 1e-5 as the
  // design's fp32 bound.
  const int N = 256, C = 256, OC = 128;
  const std::vector<float> inp = randn(size_t(N) * C, 1, 1.f), w = randn(size_t(OC) * C, 2, 0.05f),
                           dout = randn(size_t(N) * OC, 3, 1e-3f);
  // The ingredients that change the GEMMs' operand types or scale formats (the E8M0 rules
  // change codes only, which the test above covers): default, pow2, E5M2 gradients, and no
  // stochastic rounding / Hadamard / 2-D weights.
  const std::vector<RecipeOptions> all = option_sets();
  for (const char* mode : kModes)
    for (const RecipeOptions& o : {all[0], all[1], all[4], all[5]}) {
      const QuantRecipe r = block_scaled_recipe(mode, o);
      INFO(mode << ": " << describe(r));
      const LinearResult ref = cpu_linear(r, N, C, OC, inp, w, dout, 42);
      DeviceMajor dev(major_for(mode));
      const int calls = lt_block_scaled_calls;
      const LinearResult got = gpu_linear(r, N, C, OC, inp, w, dout, 42);
      // Each role natively (those the mode expresses), after one self-check per operand pair.
      int native_roles = 0;
      for (const GemmRecipe& g : r.gemm)
        native_roles += gpu::native_problem(emu_ctx(), g, 0, 0, 0).empty();
      CHECK(native_roles >= 2);
      CHECK(lt_block_scaled_calls - calls >= native_roles);
      CHECK(gpu::native_checks_failed() == 0);
      CHECK(rel(got.out, ref.out) < 1e-5);
      CHECK(rel(got.dinp, ref.dinp) < 1e-5);
      CHECK(rel(got.dw, ref.dw) < 1e-5);
    }
}

TEST_CASE("emulated: native path shapes outside the modes and partial scale tiles") {
  // 144 tokens and 48 outputs: rows that leave 128-row scale tiles partial (MX / NV), K = 144
  // for wgrad (not a multiple of the FP4 rows' 32: that role runs portably); fp8-block needs
  // whole 128-blocks and runs portably throughout.
  const int N = 144, C = 160, OC = 48;
  const std::vector<float> inp = randn(size_t(N) * C, 4, 1.f), w = randn(size_t(OC) * C, 5, 0.05f),
                           dout = randn(size_t(N) * OC, 6, 1e-3f);
  for (const char* mode : kModes) {
    const QuantRecipe r = block_scaled_recipe(mode, RecipeOptions{});
    INFO(mode);
    const LinearResult ref = cpu_linear(r, N, C, OC, inp, w, dout, 7);
    DeviceMajor dev(major_for(mode));
    const LinearResult got = gpu_linear(r, N, C, OC, inp, w, dout, 7);
    CHECK(gpu::native_checks_failed() == 0);
    CHECK(rel(got.out, ref.out) < 1e-5);
    CHECK(rel(got.dinp, ref.dinp) < 1e-5);
    CHECK(rel(got.dw, ref.dw) < 1e-5);
  }
  CHECK(
      !gpu::native_problem(emu_ctx(), block_scaled_recipe("fp8-block", {}).gemm[kForward], N, OC, C)
           .empty());
}

namespace {
// The portable path's results (no native GEMMs: an sm_80 device) and the native attempt's under
// a broken cuBLASLt, which must fall back to exactly the portable results.
void check_fallback(const char* mode, bool* hook) {
  const int N = 128, C = 256, OC = 128;
  const std::vector<float> inp = randn(size_t(N) * C, 8, 1.f), w = randn(size_t(OC) * C, 9, 0.05f),
                           dout = randn(size_t(N) * OC, 10, 1e-3f);
  const QuantRecipe r = block_scaled_recipe(mode, RecipeOptions{});
  LinearResult portable;
  {
    DeviceMajor dev(8);
    portable = gpu_linear(r, N, C, OC, inp, w, dout, 3);
  }
  DeviceMajor dev(major_for(mode));
  *hook = true;
  const int calls = lt_block_scaled_calls;
  const LinearResult got = gpu_linear(r, N, C, OC, inp, w, dout, 3);
  const int failed = gpu::native_checks_failed();
  const int native_calls = lt_block_scaled_calls - calls;
  // A second linear: the verdict stands, no further native attempt.
  const LinearResult again = gpu_linear(r, N, C, OC, inp, w, dout, 3);
  const int native_calls_again = lt_block_scaled_calls - calls - native_calls;
  *hook = false;
  CHECK(failed >= 1);
  CHECK(native_calls <= failed);  // at most the self-checks' own GEMMs
  CHECK(native_calls_again == 0);
  CHECK(bit_diffs(got.out.data(), portable.out.data(), got.out.size()) == 0);
  CHECK(bit_diffs(got.dinp.data(), portable.dinp.data(), got.dinp.size()) == 0);
  CHECK(bit_diffs(got.dw.data(), portable.dw.data(), got.dw.size()) == 0);
  CHECK(bit_diffs(again.out.data(), portable.out.data(), got.out.size()) == 0);
}
}  // namespace

TEST_CASE("emulated: no cuBLASLt algorithm for a scale mode -> the portable path, bit for bit") {
  for (const char* mode : kModes) {
    INFO(mode);
    check_fallback(mode, &lt_refuse_block_scaled);
  }
}

TEST_CASE("emulated: a native GEMM that misreads the scales fails its self-check -> portable") {
  for (const char* mode : kModes) {
    INFO(mode);
    check_fallback(mode, &lt_ignore_block_scales);
  }
}

TEST_CASE("emulated: the start-up line says which block-scaled path runs and why") {
  const QuantRecipe nv = block_scaled_recipe("nvfp4", RecipeOptions{});
  const QuantRecipe rw = block_scaled_recipe("fp8-rowwise", RecipeOptions{});
  const QuantRecipe blk = block_scaled_recipe("fp8-block", RecipeOptions{});
  {
    DeviceMajor dev(9);
    const std::string s = gpu::scaled_path_name(emu_ctx(), &nv);
    CHECK(s.find("portable") != std::string::npos);
    CHECK(s.find("needs sm_100") != std::string::npos);
    const std::string b = gpu::scaled_path_name(emu_ctx(), &blk);
    CHECK(b.find("native") != std::string::npos);
    CHECK(b.find("VEC128_32F") != std::string::npos);
    CHECK(b.find("BLK128x128_32F") != std::string::npos);
    CHECK(gpu::scaled_path_name(emu_ctx(), &rw).find("OUTER_VEC_32F") != std::string::npos);
  }
  {
    DeviceMajor dev(10);
    const std::string s = gpu::scaled_path_name(emu_ctx(), &nv);
    CHECK(s.find("native") != std::string::npos);
    CHECK(s.find("VEC16_UE4M3 x VEC16_UE4M3") != std::string::npos);
  }
  {
    DeviceMajor dev(8);
    const std::string s = gpu::scaled_path_name(emu_ctx(), &rw);
    CHECK(s.find("no native path") != std::string::npos);
    CHECK(s.find("needs sm_90") != std::string::npos);
  }
  CHECK(gpu::scaled_path_name(emu_ctx(), nullptr).find("recipe not known") != std::string::npos);
}

namespace {

// Channel smoothing (src/precision/smoothing.h) of the scaled linear's forward operands on the
// device. SmoothQuant's factors of an operand pair with an outlier input channel (not powers of
// two).
std::vector<float> outlier_factors(std::vector<float>* inp, const std::vector<float>& w, int N,
                                   int C, int OC, int outlier) {
  for (int n = 0; n < N; n++) (*inp)[size_t(n) * C + outlier] *= 40.f;
  auto column_amax = [](const std::vector<float>& x, int rows, int cols) {
    std::vector<float> a(size_t(cols), 0.f);
    for (int r = 0; r < rows; r++)
      for (int c = 0; c < cols; c++)
        a[size_t(c)] = std::max(a[size_t(c)], std::fabs(x[size_t(r) * cols + c]));
    return a;
  };
  return smoothing_factors(column_amax(*inp, N, C), column_amax(w, OC, C), 0.5);
}

// A cuBLASLt handle of its own in emu_ctx() for the scope: the wrapper
// (src/backends/cuda/cublaslt.cu) caches the heuristic's answers per handle, and check_fallback's
// refusing heuristic leaves "no algorithm" cached under emu_ctx()'s for the self-check's shapes.
struct FreshLtHandle {
  cublasLtHandle_t saved;
  FreshLtHandle() : saved(emu_ctx().lt) { cublasLtCreate(&emu_ctx().lt); }
  ~FreshLtHandle() {
    cublasLtDestroy(emu_ctx().lt);
    emu_ctx().lt = saved;
  }
};

uint64_t stream_of(uint64_t seed, int role, int operand) {  // matmul_scaled.cpp's
  return detail::splitmix64_mix(seed + uint64_t(role * 2 + operand + 1) * 0x9E3779B97F4A7C15ull);
}

// How many of `ref` (the CPU's quantize-dequantized forward operand, rows x cols) the device's
// GEMM operand of the last forward does not hold bit for bit: scratch slot q_slot as the
// portable path leaves it (fp32, or bf16 where exact), or, when `native`, its element codes
// times the block scales of scale_slot in mode's layout.
size_t operand_diffs(const std::vector<float>& ref, int rows, int cols, const OperandRecipe& o,
                     bool bf16_operand, bool native, gpu::ScratchSlot q_slot,
                     gpu::ScratchSlot scale_slot) {
  const void* q = emu_ctx().scratch(q_slot, 0);
  size_t bad = 0;
  cublasLtMatmulMatrixScale_t mode{};
  if (native) REQUIRE(gpu::native_operand_mode(o, &mode).empty());
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) {
      const size_t i = size_t(r) * cols + c;
      float v;
      if (native)
        v = decode(o.elem, static_cast<const uint8_t*>(q), i) *
            emu_block_scale(int32_t(mode), emu_ctx().scratch(scale_slot, 0), uint64_t(rows),
                            uint64_t(cols), uint64_t(r), uint64_t(c));
      else if (bf16_operand)
        v = bf16_to_f32(static_cast<const uint16_t*>(q)[i]);
      else
        v = static_cast<const float*>(q)[i];
      bad += bits(v) != bits(ref[i]);
    }
  return bad;
}

}  // namespace

TEST_CASE("emulated: smoothed linears: operands == the CPU's bit for bit, portable and native") {
  // precision.recipe.smooth: the forward quantizes X diag(1/s) and W diag(s), the backward the
  // unsmoothed operands. Per preset on the portable path (sm_80) and the native one (sm_90 for
  // fp8-rowwise / fp8-block, sm_100 for MX and NV): the staged smoothed operands and the
  // quantized GEMM operands (values, or codes times scales) bit for bit the CPU's, the tensor
  // factors equal, outputs and gradients within fp32 accumulation order (1e-5).
  const FreshLtHandle lt;
  const int N = 256, C = 256, OC = 128;
  std::vector<float> inp = randn(size_t(N) * C, 21, 1.f);
  const std::vector<float> w = randn(size_t(OC) * C, 22, 0.05f),
                           dout = randn(size_t(N) * OC, 23, 1e-3f);
  const std::vector<float> s = outlier_factors(&inp, w, N, C, OC, 37);
  int pow2 = 0;  // a power of two would scale without rounding: those hide little
  for (float f : s) {
    int e;
    pow2 += std::frexp(f, &e) == 0.5f;
  }
  CHECK(pow2 < C / 16);
  CHECK(s[37] > 4.f);
  // The CPU's forward operands: smoothed (one rounding per value), then quantized.
  std::vector<float> xs = inp, ws = w;
  cpu::smooth_columns(xs.data(), N, C, s, true);
  cpu::smooth_columns(ws.data(), OC, C, s, false);
  for (const std::string mode : kModes) {
    QuantRecipe r = block_scaled_recipe(mode, RecipeOptions{});
    const QuantRecipe plain = r;
    r.smooth = s;
    QuantRecipe swapped = r;  // the factors on the wrong operands: X diag(s), W diag(1/s)
    for (float& f : swapped.smooth) f = 1.f / f;
    const uint64_t seed = 77;
    const LinearResult ref = cpu_linear(r, N, C, OC, inp, w, dout, seed);
    // The checks below see a device that ignores the factors or swaps them: both change the
    // forward's output far beyond the tolerance (and leave the backward as it is).
    CHECK(rel(cpu_linear(plain, N, C, OC, inp, w, dout, seed).out, ref.out) > 1e-3);
    CHECK(rel(cpu_linear(swapped, N, C, OC, inp, w, dout, seed).out, ref.out) > 1e-3);
    const GemmRecipe& g = r.gemm[kForward];
    std::vector<float> qa = xs, qb = ws;
    const float pa = cpu::quantize_dequantize(qa.data(), N, C, g.a, stream_of(seed, kForward, 0));
    const float pb = cpu::quantize_dequantize(qb.data(), OC, C, g.b, stream_of(seed, kForward, 1));
    for (int major : {8, major_for(mode.c_str())}) {
      INFO(mode << " on sm_" << major << "0");
      DeviceMajor dev(major);
      const bool native = gpu::native_problem(emu_ctx(), g, N, OC, C).empty();
      CHECK(native == (major != 8));
      const int calls = lt_block_scaled_calls;
      Buf<float> out(size_t(N) * OC), dinp(size_t(N) * C), dw(size_t(OC) * C, 0);
      std::memset(static_cast<void*>(dw.p), 0, dw.n * sizeof(float));
      gpu::scaled_linear_forward(emu_ctx(), DType::F32, out.p, inp.data(), w.data(), nullptr, N, C,
                                 OC, r, seed);
      check_emu();
      CHECK((lt_block_scaled_calls > calls) == native);
      const auto* sa = static_cast<const float*>(emu_ctx().scratch(gpu::kScratchQStageA, 0));
      const auto* sb = static_cast<const float*>(emu_ctx().scratch(gpu::kScratchQStageB, 0));
      CHECK(bit_diffs(sa, xs.data(), xs.size()) == 0);
      CHECK(bit_diffs(sb, ws.data(), ws.size()) == 0);
      const bool bf16_ops = tg::dequantizes_to_bf16(g.a) && tg::dequantizes_to_bf16(g.b);
      CHECK(operand_diffs(qa, N, C, g.a, bf16_ops, native, gpu::kScratchQA, gpu::kScratchQScaleA) ==
            0);
      CHECK(operand_diffs(qb, OC, C, g.b, bf16_ops, native, gpu::kScratchQB,
                          gpu::kScratchQScaleB) == 0);
      const auto* post = static_cast<const float*>(emu_ctx().scratch(gpu::kScratchQWords, 0)) + 1;
      CHECK(bits(post[0]) == bits(pa));
      CHECK(bits(post[1]) == bits(pb));
      gpu::scaled_linear_backward(emu_ctx(), DType::F32, dinp.p, dw.p, nullptr, dout.data(),
                                  inp.data(), w.data(), N, C, OC, r, seed);
      check_emu();
      CHECK(gpu::native_checks_failed() == 0);
      CHECK(rel(std::vector<float>(out.p, out.p + out.n), ref.out) < 1e-5);
      CHECK(rel(std::vector<float>(dinp.p, dinp.p + dinp.n), ref.dinp) < 1e-5);
      CHECK(rel(std::vector<float>(dw.p, dw.p + dw.n), ref.dw) < 1e-5);
    }
  }
  // A factor list that does not fit the GEMM is an error, as on the CPU.
  QuantRecipe bad = block_scaled_recipe("mxfp8", RecipeOptions{});
  bad.smooth.assign(size_t(C) - 1, 1.f);
  Buf<float> out(size_t(N) * OC);
  CHECK_THROWS_WITH_AS(gpu::scaled_linear_forward(emu_ctx(), DType::F32, out.p, inp.data(),
                                                  w.data(), nullptr, N, C, OC, bad, 1),
                       doctest::Contains("input channels"), Error);
}

TEST_CASE("emulated: smoothed linears through a CudaBackend on sm_100 == the CPU backend's") {
  // CudaBackend::matmul_forward_scaled / backward with a recipe's factors, the device read as
  // sm_100 when the backend starts: MXFP8, MXFP4 and NVFP4 GEMMs run natively (counted).
  struct Sm100 {
    Sm100() {
      device_major = 10;
      gpu::native_forget_checks();
    }
    ~Sm100() {
      device_major = 9;
      gpu::native_forget_checks();
    }
  } sm100;
  const int N = 256, C = 256, OC = 128;
  std::vector<float> x = randn(size_t(N) * C, 31, 1.f);
  const std::vector<float> w = randn(size_t(OC) * C, 32, 0.05f),
                           dout = randn(size_t(N) * OC, 33, 1e-3f);
  const std::vector<float> s = outlier_factors(&x, w, N, C, OC, 101);
  tgc::Twin tw;
  QuantOptions o;
  tw.gpu->set_quant_options(o);
  for (const std::string mode : {"mxfp8", "mxfp4", "nvfp4"}) {
    INFO(mode);
    QuantRecipe r = block_scaled_recipe(mode, RecipeOptions{});
    r.smooth = s;
    const ScaledLinear q{&r, 19};
    const DType t = DType::F32;
    tgc::Pair inp = tw.make(t, x), wt = tw.make(t, w), g = tw.make(t, dout);
    tgc::Pair out = tw.poisoned(t, size_t(N) * OC), dinp = tw.poisoned(t, size_t(N) * C),
              dw = tw.make(t, std::vector<float>(size_t(OC) * C, 0.f));
    const int calls = lt_block_scaled_calls;
    tw.cpu->matmul_forward_scaled(out.cpu, inp.cpu, wt.cpu, Tensor{}, N, C, OC, q);
    tw.gpu->matmul_forward_scaled(out.gpu, inp.gpu, wt.gpu, Tensor{}, N, C, OC, q);
    tw.cpu->matmul_backward_scaled(dinp.cpu, dw.cpu, Tensor{}, g.cpu, inp.cpu, wt.cpu, N, C, OC, q);
    tw.gpu->matmul_backward_scaled(dinp.gpu, dw.gpu, Tensor{}, g.gpu, inp.gpu, wt.gpu, N, C, OC, q);
    check_emu();
    CHECK(lt_block_scaled_calls - calls >= 2);  // the forward and dgrad (wgrad where it fits)
    CHECK(gpu::native_checks_failed() == 0);
    CHECK(tw.err(out) < 1e-5);
    CHECK(tw.err(dinp) < 1e-5);
    CHECK(tw.err(dw) < 1e-5);
  }
}
