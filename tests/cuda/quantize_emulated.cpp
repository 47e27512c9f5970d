// quantize_emulated.cpp: the block-scaled operand quantizer of the GPU (src/backends/cuda/
// quantize_blocks.cu, kernels/quantize_blocks.cuh) on the CPU, CUDA threads emulated, against
// the CPU's quantizer (src/backends/cpu/quantize.cpp) bit for bit in every quantized value and in
// the GEMM factor it returns (one pass, kernels/quantize_tile.cuh, where it applies; the last case
// also against the two passes forced, codes and scale tensors included): every operand of every block-scaled preset and of their switchable
// ingredients (pow2 scales, OCP / ceil E8M0 rules, E5M2 gradients, stochastic rounding,
// Hadamard sizes, 1-D weights), plus every scale format at tensor, row, block and tile
// granularity, on random and adversarial tensors (outliers, all-zero blocks, subnormal-only
// blocks, huge values, partial edge blocks and tiles, an inf or NaN that poisons the operand),
// staged from fp32 and bf16, plain and transposed. The bf16 operands the GEMMs take where
// scaled.h says they are exact hold exactly those values. The Hadamard rotation is checked
// against the CPU's bit for bit too. What it cannot see: nvcc's compilation of these kernels.
#include "emulated_util.h"
// (first: it includes the emulation, which redefines the CUDA keywords the kernels use)
#include <cstring>
#include <string>
#include <vector>

#include "kernels/quantize_tile.cuh"
#include "src/backends/cuda/quant_params.h"
#include "src/backends/cuda/scaled.h"
#include "src/numerics/recipe.h"

using namespace emu_test;

namespace {

// Every distinct operand recipe of the presets with their options, and a hand-made set that
// covers each scale format at each granularity.
std::vector<OperandRecipe> all_operand_recipes() {
  std::vector<OperandRecipe> out;
  auto add = [&](const OperandRecipe& o) {
    for (const OperandRecipe& x : out)
      if (std::memcmp(&x, &o, sizeof o) == 0) return;
    out.push_back(o);
  };
  std::vector<RecipeOptions> opts(7);
  opts[1].pow2_scales = true;
  opts[2].scale_rule = tg::ScaleRuleChoice::Ocp;
  opts[3].scale_rule = tg::ScaleRuleChoice::Ceil;
  opts[4].grad_format = tg::GradFormat::E5M2;
  opts[5].stochastic_grads = false, opts[5].hadamard = false, opts[5].weight_2d = false;
  opts[6].hadamard_size = 32;
  for (const char* mode : {"fp8-rowwise", "fp8-block", "mxfp8", "mxfp4", "nvfp4"})
    for (const RecipeOptions& o : opts) {
      const QuantRecipe r = block_scaled_recipe(mode, o);
      for (const GemmRecipe& g : r.gemm) add(g.a), add(g.b);
    }
  const ElemFormat elems[] = {ElemFormat::E4M3, ElemFormat::E5M2, ElemFormat::E2M1};
  const ScaleFormat scales[] = {ScaleFormat::FP32, ScaleFormat::Pow2, ScaleFormat::E8M0,
                                ScaleFormat::E4M3};
  const Granularity grans[] = {Granularity::Tensor, Granularity::Row, Granularity::Block,
                               Granularity::Tile};
  for (ElemFormat e : elems)
    for (ScaleFormat s : scales)
      for (Granularity g : grans) {
        // Stochastic rounding and the ceil rule on half of them, by a checkerboard.
        const bool sr = (int(e) + int(s) + int(g)) % 2;
        {
          OperandRecipe o;
          o.elem = e, o.scale = s, o.granularity = g, o.source = ScaleSource::Current;
          o.block = g == Granularity::Tile ? 16 : 32;
          o.rounding = sr ? RoundMode::Stochastic : RoundMode::Nearest;
          o.scale_rule = sr ? ScaleRule::Ceil : ScaleRule::Ocp;
          add(o);
        }
      }
  // Groups of widths that are neither 16 nor a multiple of 32 (the amax pass's per-lane
  // reduction): 1 x 24 blocks and 24 x 24 tiles.
  for (Granularity g : {Granularity::Block, Granularity::Tile}) {
    OperandRecipe o;
    o.elem = ElemFormat::E4M3, o.scale = ScaleFormat::FP32, o.granularity = g, o.block = 24;
    o.source = ScaleSource::Current;
    add(o);
  }
  return out;
}

// Test operands (rows, cols): random normal values with adversarial regions.
struct Operand {
  std::string what;
  int rows, cols;
  std::vector<float> x;
};

std::vector<Operand> operands() {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<Operand> out;
  auto randn = [&](int rows, int cols, float scale) {
    std::vector<float> x(size_t(rows) * cols);
    for (float& v : x) v = nd(rng) * scale;
    return x;
  };
  out.push_back({"random 48x160", 48, 160, randn(48, 160, 1.f)});
  // Partial blocks (cols % 16, 32, 128 != 0) and partial tiles (rows % 16 != 0).
  out.push_back({"random 37x100 (partial blocks and tiles)", 37, 100, randn(37, 100, 0.3f)});
  {
    Operand o{"outliers, zero blocks, subnormal-only blocks, huge values", 40, 192,
              randn(40, 192, 1e-2f)};
    for (int r = 0; r < 40; r += 7) o.x[size_t(r) * 192 + (r * 13) % 192] = 3.0e4f;  // outliers
    for (int c = 0; c < 64; c++) o.x[size_t(3) * 192 + c] = 0.f;                     // zero blocks
    for (int r = 16; r < 32; r++)  // a zero 16x16 tile
      for (int c = 16; c < 32; c++) o.x[size_t(r) * 192 + c] = 0.f;
    for (int c = 64; c < 160; c++)  // subnormal-only blocks of row 5
      o.x[size_t(5) * 192 + c] = float(int(c % 7) - 3) * 1.0e-41f;
    for (int c = 0; c < 32; c++) o.x[size_t(9) * 192 + c] = 1.0e-38f * float(c + 1);  // tiny
    for (int c = 128; c < 192; c++)  // huge values of row 11
      o.x[size_t(11) * 192 + c] = (c % 2 ? -1.f : 1.f) * 3.0e38f / float(c - 127);
    out.push_back(o);
  }
  out.push_back({"all zero 16x64", 16, 64, std::vector<float>(16 * 64, 0.f)});
  out.push_back({"tiny tensor 20x48", 20, 48, randn(20, 48, 1e-36f)});
  {
    Operand o{"an inf", 24, 64, randn(24, 64, 1.f)};
    o.x[100] = INFINITY;
    out.push_back(o);
  }
  {
    Operand o{"a NaN", 24, 64, randn(24, 64, 1.f)};
    o.x[777] = NAN;
    out.push_back(o);
  }
  return out;
}

std::string describe_operand(const OperandRecipe& o) {
  QuantRecipe r;
  for (GemmRecipe& g : r.gemm) g.a = g.b = o;
  return describe(r) + " rounding=" + (o.rounding == RoundMode::Stochastic ? "sr" : "nearest") +
         " block=" + std::to_string(o.block) + " gran=" + std::to_string(int(o.granularity)) +
         " scale=" + std::to_string(int(o.scale));
}

// src in type E, (rows, cols) or transposed (cols, rows), holding x's values rounded to E.
template <typename E>
std::vector<E> source_of(const std::vector<float>& x, int rows, int cols, bool transposed) {
  std::vector<E> s(x.size());
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++)
      s[transposed ? size_t(c) * rows + r : size_t(r) * cols + c] = e<E>(x[size_t(r) * cols + c]);
  return s;
}

// One operand through both quantizers; counts differing values. The GPU reads the source
// where it lies (transposed or not: the quantizer's fused path) and, when `staged`, also from
// an fp32 copy staged first (the path of operands that a step changes before quantization).
template <typename E>
void check_one(const OperandRecipe& o, const Operand& op, bool transposed, uint64_t seed,
               bool staged) {
  const int rows = op.rows, cols = op.cols;
  const size_t n = size_t(rows) * cols;
  const std::vector<E> src = source_of<E>(op.x, rows, cols, transposed);
  // CPU: the fp32 values of the source, quantized in place.
  std::vector<float> ref(n);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++)
      ref[size_t(r) * cols + c] = f(src[transposed ? size_t(c) * rows + r : size_t(r) * cols + c]);
  const float post_ref = cpu::quantize_dequantize(ref.data(), rows, cols, o, seed);
  gpu::Ctx& ctx = emu_ctx();
  Buf<float> stage(n), out(n), post(2);
  std::vector<gpu::OperandSource> sources = {{dtype_of<E>(), src.data(), transposed}};
  if (staged) {
    gpu::stage_operand(ctx, stage.p, dtype_of<E>(), src.data(), transposed, rows, cols);
    sources.push_back(gpu::fp32_operand(stage.p));
  }
  for (const gpu::OperandSource& x : sources) {
    INFO((x.data == stage.p ? "from the staged fp32 copy" : "read where it lies"));
    gpu::quantize_dequantize(ctx, o, seed, x, rows, cols, DType::F32, out.p, post.p);
    check_emu();
    size_t bad = 0, first = n;
    for (size_t i = 0; i < n; i++) {
      const bool same = std::isnan(ref[i]) ? std::isnan(out[i]) : bits(ref[i]) == bits(out[i]);
      if (!same && first == n) first = i;
      bad += !same;
    }
    INFO("transposed=" << transposed << " first difference at " << first << ": cpu "
                       << (first < n ? ref[first] : 0.f) << " gpu "
                       << (first < n ? out[first] : 0.f));
    CHECK(bad == 0);
    CHECK(bits(post[0]) == bits(post_ref));
    // The bf16 GEMM operand: the same values, where scaled.h says bf16 holds them exactly.
    if (tg::dequantizes_to_bf16(o)) {
      Buf<bf16> ob(n);
      gpu::quantize_dequantize(ctx, o, seed, x, rows, cols, DType::BF16, ob.p, post.p + 1);
      check_emu();
      size_t inexact = 0, differ = 0;
      for (size_t i = 0; i < n; i++) {
        if (std::isnan(ref[i])) {
          differ += !std::isnan(f(ob[i]));
          continue;
        }
        differ += ob[i].bits != f32_to_bf16(ref[i]);
        // Exact unless below bf16's subnormal grid (scaled.h's exception): |x| < 2^-126.
        if (f(ob[i]) != ref[i]) inexact += std::fabs(ref[i]) >= 0x1p-126f;
      }
      CHECK(differ == 0);
      CHECK(inexact == 0);
      CHECK(bits(post[1]) == bits(post_ref));
    }
  }
}

}  // namespace

TEST_CASE("emulated: block quantizer == the CPU's, every preset operand and ingredient") {
  const std::vector<OperandRecipe> recipes = all_operand_recipes();
  const std::vector<Operand> ops = operands();
  MESSAGE(recipes.size() << " operand recipes x " << ops.size() << " operands");
  uint64_t seed = 1000;
  for (const OperandRecipe& o : recipes) {
    INFO(describe_operand(o));
    for (const Operand& op : ops) {
      INFO(op.what);
      // fp32 as it is, bf16 transposed (the backward's operands, also through a staged
      // copy), fp16 as it is
      check_one<float>(o, op, false, ++seed, false);
      check_one<bf16>(o, op, true, seed, true);
      check_one<f16>(o, op, false, seed, false);
    }
  }
}

TEST_CASE("emulated: a quantized operand is NaN everywhere after an inf or NaN, 1 as factor") {
  OperandRecipe o;
  o.elem = ElemFormat::E2M1, o.granularity = Granularity::Block, o.block = 16;
  o.scale = ScaleFormat::E4M3;
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    std::vector<float> x(32 * 48, 0.25f);
    x[5 * 48 + 17] = bad;
    Buf<float> out(x.size()), post(1);
    gpu::quantize_dequantize(emu_ctx(), o, 1, gpu::fp32_operand(x.data()), 32, 48, DType::F32,
                             out.p, post.p);
    check_emu();
    size_t nan = 0;
    for (size_t i = 0; i < x.size(); i++) nan += std::isnan(out[i]);
    CHECK(nan == x.size());
    CHECK(post[0] == 1.0f);
  }
}

TEST_CASE("emulated: Hadamard rotation of rows == the CPU's (sizes 2..256, tails kept)") {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int n : {2, 4, 16, 32, 128, 256})
    for (int cols : {n, 3 * n + 5, 700}) {
      CAPTURE(n);
      CAPTURE(cols);
      const int rows = 9;
      std::vector<float> ref(size_t(rows) * cols);
      for (float& v : ref) v = nd(rng);
      Buf<float> x(ref.size());
      std::memcpy(x.p, ref.data(), ref.size() * sizeof(float));
      const uint64_t seed = 77 + uint64_t(n) * 1000 + uint64_t(cols);
      cpu::hadamard_rows(ref.data(), rows, cols, n, seed, false);
      gpu::hadamard_rows(emu_ctx(), x.p, rows, cols, n, seed);
      check_emu();
      size_t bad = 0;
      for (size_t i = 0; i < ref.size(); i++) bad += bits(ref[i]) != bits(x[i]);
      CHECK(bad == 0);
    }
}

TEST_CASE("emulated: staging, plain and transposed, every type, full and partial tiles") {
  std::mt19937 rng(5);
  for (int rows : {1, 31, 32, 77})
    for (int cols : {1, 33, 64, 100}) {
      std::vector<float> x(size_t(rows) * cols);
      for (float& v : x) v = std::normal_distribution<float>(0.f, 1.f)(rng);
      FOR_TYPES({
        for (bool t : {false, true}) {
          const std::vector<E> src = source_of<E>(x, rows, cols, t);
          Buf<float> dst(x.size());
          gpu::stage_operand(emu_ctx(), dst.p, dtype_of<E>(), src.data(), t, rows, cols);
          check_emu();
          size_t bad = 0;
          for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++)
              bad += bits(dst[size_t(r) * cols + c]) != bits(f(e<E>(x[size_t(r) * cols + c])));
          CHECK(bad == 0);
        }
      })
    }
}

TEST_CASE(
    "emulated: the quantizer reading through the Hadamard rotation == rotate, then quantize") {
  // The FP4 presets' wgrad operands, an 8-bit one, and an unquantized (bf16) operand of
  // precision.mode=auto, whose copy is rotated too; sizes 2 .. 32 (read through the rotation),
  // full and partial runs (100 and 37 columns), outliers and an inf.
  std::vector<OperandRecipe> recipes;
  for (const char* mode : {"nvfp4", "mxfp4"}) {
    const QuantRecipe r = block_scaled_recipe(mode, RecipeOptions{});
    recipes.push_back(r.gemm[kWeightGrad].a);
    recipes.push_back(r.gemm[kWeightGrad].b);
  }
  recipes.push_back(block_scaled_recipe("mxfp8", RecipeOptions{}).gemm[kWeightGrad].a);
  OperandRecipe unquantized;
  unquantized.elem = ElemFormat::BF16;
  recipes.push_back(unquantized);
  const std::vector<Operand> all = operands();
  const std::vector<Operand> ops = {all[0], all[1], all[2], all[5]};
  uint64_t seed = 9000;
  for (const OperandRecipe& o : recipes)
    for (int n : {2, 4, 16, 32})
      for (const Operand& op : ops)
        for (bool transposed : {false, true}) {
          INFO(describe_operand(o) << ", " << n << " points, " << op.what
                                   << (transposed ? ", transposed bf16" : ", fp32"));
          const int rows = op.rows, cols = op.cols;
          const size_t nel = size_t(rows) * cols;
          const uint64_t hs = 0x4ada00 + uint64_t(n);
          std::vector<float> ref(nel);
          std::vector<bf16> src_t;
          gpu::OperandSource src = gpu::fp32_operand(op.x.data());
          if (transposed) {
            src_t = source_of<bf16>(op.x, rows, cols, true);
            for (int r = 0; r < rows; r++)
              for (int c = 0; c < cols; c++)
                ref[size_t(r) * cols + c] = f(src_t[size_t(c) * rows + r]);
            src = {DType::BF16, src_t.data(), true};
          } else {
            ref = op.x;
          }
          src.rotate = n, src.rotate_seed = hs;
          cpu::hadamard_rows(ref.data(), rows, cols, n, hs, false);
          const float post_ref = cpu::quantize_dequantize(ref.data(), rows, cols, o, ++seed);
          Buf<float> out(nel), post(1);
          gpu::quantize_dequantize(emu_ctx(), o, seed, src, rows, cols, DType::F32, out.p, post.p);
          check_emu();
          size_t bad = 0;
          for (size_t i = 0; i < nel; i++)
            bad += std::isnan(ref[i]) ? !std::isnan(out[i]) : bits(ref[i]) != bits(out[i]);
          CHECK(bad == 0);
          CHECK(bits(post[0]) == bits(post_ref));
        }
}

namespace {

// Both quantizers of one operand through one path (true: the two passes forced): the
// dequantized fp32 values, the codes and the native scale tensor (where the recipe has a native
// mode), and each one's factor.
struct Quantized {
  std::vector<float> values, post;
  std::vector<uint8_t> codes, scales;
};
Quantized quantize_both(const OperandRecipe& o, const gpu::OperandSource& x, int rows, int cols,
                        uint64_t seed, bool two_pass) {
  const size_t n = size_t(rows) * cols;
  gpu::force_two_pass_quantizer(two_pass);
  Quantized q;
  Buf<float> out(n), post(2);
  gpu::quantize_dequantize(emu_ctx(), o, seed, x, rows, cols, DType::F32, out.p, post.p);
  cublasLtMatmulMatrixScale_t mode;
  if (gpu::native_operand_mode(o, &mode).empty() && cols % 2 == 0) {
    Buf<uint8_t> codes(n), scale(gpu::native_scale_bytes(o, mode, rows, cols));
    gpu::quantize_codes(emu_ctx(), o, mode, seed, x, rows, cols, codes.p, scale.p, post.p + 1);
    check_emu();
    q.codes.assign(codes.p, codes.p + n * size_t(elem_bits(o.elem)) / 8);
    q.scales.assign(scale.p, scale.p + scale.n);
  }
  check_emu();
  gpu::force_two_pass_quantizer(false);
  q.values.assign(out.p, out.p + n);
  q.post.assign(post.p, post.p + 2);
  return q;
}

size_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  size_t bad = a.size() != b.size();
  for (size_t i = 0; i < a.size() && i < b.size(); i++)
    bad += std::isnan(a[i]) ? !std::isnan(b[i]) : bits(a[i]) != bits(b[i]);
  return bad;
}

}  // namespace

TEST_CASE("emulated: the one-pass quantizer == the two passes and the CPU, values, codes, scales") {
  // The operands one pass covers: fp8-block's 1 x 128 activations and 128 x 128 weights, mxfp8's
  // 1 x 32, mxfp4's wgrad operand (stochastic rounding, read through a 32-point rotation), E4M3
  // 16 x 16 tiles with E8M0 scales, a delayed per-tensor E4M3 scale (given, no amax), and
  // NVFP4's 1 x 16 activations, 16 x 16 weights and stochastically rounded gradients at their
  // amax taken before (amax_given: a device word, from which each block draws the tensor scale).
  struct Case {
    OperandRecipe o;
    int rotate;
    float tensor_scale;
    bool amax_given = false;
  };
  std::vector<Case> cases;
  const QuantRecipe block = block_scaled_recipe("fp8-block", RecipeOptions{});
  cases.push_back({block.gemm[kForward].a, 0, 0});
  cases.push_back({block.gemm[kForward].b, 0, 0});
  cases.push_back({block_scaled_recipe("mxfp8", RecipeOptions{}).gemm[kForward].a, 0, 0});
  OperandRecipe fp4 = block_scaled_recipe("mxfp4", RecipeOptions{}).gemm[kWeightGrad].a;
  fp4.rounding = RoundMode::Stochastic;
  cases.push_back({fp4, 32, 0});
  OperandRecipe tile;
  tile.elem = ElemFormat::E4M3, tile.scale = ScaleFormat::E8M0, tile.granularity = Granularity::Tile;
  tile.block = 16, tile.source = ScaleSource::Current;
  cases.push_back({tile, 0, 0});
  OperandRecipe delayed;
  delayed.elem = ElemFormat::E4M3, delayed.granularity = Granularity::Tensor;
  delayed.source = ScaleSource::Delayed;
  cases.push_back({delayed, 0, 24.0f});
  const QuantRecipe nv = block_scaled_recipe("nvfp4", RecipeOptions{});
  cases.push_back({nv.gemm[kForward].a, 0, 0, true});
  cases.push_back({nv.gemm[kForward].b, 0, 0, true});
  cases.push_back({nv.gemm[kInputGrad].a, 0, 0, true});
  // Edge super-tiles both ways (150 x 260: rows and columns past whole 32 and 128 spans), the
  // presets' partial blocks (37 x 100), and an inf and a NaN (all NaN, codes 0, NaN scales).
  std::vector<Operand> ops = operands();
  {
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.f, 1.f);
    Operand big{"150x260 (edge super-tiles)", 150, 260, std::vector<float>(150 * 260)};
    for (float& v : big.x) v = nd(rng) * 2.0f;
    big.x[7 * 260 + 200] = 900.0f;  // an outlier sets one group's scale
    ops.push_back(big);
  }
  uint64_t seed = 7000;
  for (const Case& k : cases) {
    INFO(describe_operand(k.o) << " rotate " << k.rotate << " tensor scale " << k.tensor_scale
                               << " amax given " << k.amax_given);
    for (const Operand& op : ops)
      for (bool transposed : {false, true}) {
        INFO(op.what << std::string(transposed ? ", transposed bf16" : ", fp32"));
        const int rows = op.rows, cols = op.cols;
        std::vector<bf16> src_t = source_of<bf16>(op.x, rows, cols, true);
        gpu::OperandSource x = transposed ? gpu::OperandSource{DType::BF16, src_t.data(), true}
                                          : gpu::fp32_operand(op.x.data());
        x.rotate = k.rotate, x.rotate_seed = 0x4ada32;
        x.tensor_scale = k.tensor_scale;
        // the amax of the values as read: the bf16 source's, or the fp32 one's
        unsigned given[2] = {0, 0};
        for (size_t i = 0; i < op.x.size(); i++)
          given[0] = std::max(given[0], bits(transposed ? f(src_t[i]) : op.x[i]) & 0x7fffffffu);
        given[1] = bits(2.0f * bits_f32(given[0]));  // a wrong word: other scales
        if (k.amax_given) x.amax_in = given;
        gpu::quant::QuantParams p = gpu::params_of(k.o, rows, cols);
        p.tensor_enc = k.tensor_scale;
        p.tensor_amax = x.amax_in;
        gpu::quant::TilePlan plan;
        const int max_span =
            one_pass_max_span(elem_bits(k.o.elem), k.o.rounding == RoundMode::Stochastic);
        REQUIRE(gpu::quant::plan_one_pass(p, rows, cols, max_span, &plan));  // the path under test
        const Quantized one = quantize_both(k.o, x, rows, cols, ++seed, false);
        const Quantized two = quantize_both(k.o, x, rows, cols, seed, true);
        CHECK(differing(one.values, two.values) == 0);
        CHECK(differing(one.post, two.post) == 0);
        CHECK(one.codes == two.codes);
        CHECK(one.scales == two.scales);
        const float amax = bits_f32(given[0]);
        if (k.amax_given && amax > 1e-20f && amax < 1e20f) {  // the word is read (S unclamped)
          x.amax_in = given + 1;
          CHECK(differing(quantize_both(k.o, x, rows, cols, seed, false).post, one.post) > 0);
          x.amax_in = given;
        }
        if (k.tensor_scale > 0) continue;  // the CPU's delayed path: tensor_scaled_emulated.cpp
        std::vector<float> ref(size_t(rows) * cols);
        for (int r = 0; r < rows; r++)
          for (int c = 0; c < cols; c++)
            ref[size_t(r) * cols + c] =
                transposed ? f(src_t[size_t(c) * rows + r]) : op.x[size_t(r) * cols + c];
        if (k.rotate) cpu::hadamard_rows(ref.data(), rows, cols, k.rotate, 0x4ada32, false);
        const float post_ref = cpu::quantize_dequantize(ref.data(), rows, cols, k.o, seed);
        CHECK(differing(one.values, ref) == 0);
        CHECK(bits(one.post[0]) == bits(post_ref));
      }
  }
}

TEST_CASE("emulated: the rotated transpose's amax a quantizer takes on the way is its reader's") {
  // NVFP4's wgrad reads inp^T and dout^T through its 16-point rotation, and draws its tensor
  // scale from the amax of that; the forward's quantizer of inp and the dgrad's of dout, which
  // read the same tensors as they lie, take it on the way (TransposedAmax), one pass or two.
  // The word is the CPU's rotated transpose's amax (the quantizer's values unchanged by the
  // asking), and the wgrad's quantizer reading once at it is its two passes, bit for bit.
  const QuantRecipe nv = block_scaled_recipe("nvfp4", RecipeOptions{});
  const OperandRecipe& reader = nv.gemm[kInputGrad].a;  // dout as it lies, rounded stochastically
  const OperandRecipe& rotated = nv.gemm[kWeightGrad].a;  // H dout^T
  REQUIRE(rotated.transform_size == 16);
  constexpr uint64_t kSeed = 0x5eed16;
  uint64_t seed = 9000;
  for (const Operand& op : operands())
    for (bool transposed : {false, true}) {
      INFO(op.what << std::string(transposed ? ", transposed bf16" : ", fp32"));
      const int rows = op.rows, cols = op.cols;
      std::vector<bf16> src_t = source_of<bf16>(op.x, rows, cols, true);
      // the values as read, (rows, cols), and their rotated transpose (cols, rows): the CPU's
      std::vector<float> v(size_t(rows) * cols), t(v.size());
      for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
          const size_t at = size_t(r) * cols + c;
          v[at] = transposed ? f(src_t[size_t(c) * rows + r]) : op.x[at];
          t[size_t(c) * rows + r] = v[at];
        }
      cpu::hadamard_rows(t.data(), cols, rows, 16, kSeed, false);
      unsigned want = 0, amax = 0;
      for (size_t i = 0; i < v.size(); i++) {
        want = std::max(want, bits(t[i]) & 0x7fffffffu);
        amax = std::max(amax, bits(v[i]) & 0x7fffffffu);
      }
      gpu::OperandSource x = transposed ? gpu::OperandSource{DType::BF16, src_t.data(), true}
                                        : gpu::fp32_operand(op.x.data());
      const Quantized plain = quantize_both(reader, x, rows, cols, ++seed, false);
      unsigned word[2] = {0xdeadbeefu, 0};  // the quantizer zeroes it first
      x.transposed_amax_out = word;
      x.transposed_rotate = 16, x.transposed_rotate_seed = kSeed;
      x.amax_in = &amax;  // (one pass where not forced into two)
      for (bool two_pass : {false, true}) {
        INFO("the reader's " << (two_pass ? "two passes" : "one pass"));
        const Quantized q = quantize_both(reader, x, rows, cols, seed, two_pass);
        CHECK(differing(q.values, plain.values) == 0);
        CHECK(q.codes == plain.codes);
        if (want < 0x7f800000u)
          CHECK(word[0] == want);
        else  // (a NaN's bits are the hardware's)
          CHECK(word[0] >= 0x7f800000u);
      }
      // The wgrad's operand: the transpose (cols, rows), read rotated, once at the word.
      gpu::OperandSource y = transposed ? gpu::OperandSource{DType::BF16, src_t.data(), false}
                                        : gpu::OperandSource{DType::F32, op.x.data(), true};
      y.rotate = 16, y.rotate_seed = kSeed;
      gpu::OperandSource y_at = y;
      y_at.amax_in = word;
      gpu::quant::QuantParams p = gpu::params_of(rotated, cols, rows);
      p.tensor_amax = word;
      gpu::quant::TilePlan plan;
      REQUIRE(gpu::quant::plan_one_pass(p, cols, rows, one_pass_max_span(4, true), &plan));
      const Quantized one = quantize_both(rotated, y_at, cols, rows, ++seed, false);
      const Quantized two = quantize_both(rotated, y, cols, rows, seed, true);
      CHECK(differing(one.values, two.values) == 0);
      CHECK(differing(one.post, two.post) == 0);
      CHECK(one.codes == two.codes);
      CHECK(one.scales == two.scales);
    }
}
