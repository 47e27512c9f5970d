// tensor_scaled_emulated.cpp: the per-tensor recipes' operands (the fp8 mode: E4M3 inputs and
// weights, E5M2 gradients, one fp32 scale per tensor, delayed or current) through the GPU's
// quantizer (src/backends/cuda/quantize_blocks.cu with an OperandSource's tensor_scale, margin
// and amax_out) on the CPU, CUDA threads emulated, against the CPU backend's per-tensor
// quantize-dequantize (src/backends/cpu/quantize_tensor.cpp's qdq_tensor_fp8, what the fp8
// regression fixture runs) bit for bit in every value and in the amax: given delayed scales
// (saturating ones too), current scales with margins 0 to 2, bf16 and fp32 sources read where they
// lie (plain and transposed), adversarial tensors (outliers, zeros, tiny and huge values) and an
// inf or a NaN that poisons the operand (amax +inf). The words amaxes are handed in (an earlier
// kernel's, a producer's: Backend's InputAmax) give one pass the two passes' bits.
#include "emulated_util.h"
// (first: it includes the emulation, which redefines the CUDA keywords the kernels use)
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/quantize_tile.cuh"
#include "src/backends/cuda/launch.h"
#include "src/backends/cuda/quant_params.h"
#include "src/backends/cuda/scaled.h"
#include "src/numerics/recipe.h"

using namespace emu_test;

namespace {

std::vector<TestOperand> fp8_operands() {
  Randn randn(11);
  std::vector<TestOperand> out;
  out.push_back({"random 48x80", 48, 80, randn(48, 80, 1.f)});
  out.push_back({"gradient-sized 37x100", 37, 100, randn(37, 100, 1e-4f)});
  {
    TestOperand o{"outliers, zeros, tiny and huge values", 40, 64, randn(40, 64, 1e-2f)};
    for (int r = 0; r < 40; r += 7) o.x[size_t(r) * 64 + (r * 13) % 64] = 3.0e4f;
    for (int c = 0; c < 64; c++) o.x[size_t(3) * 64 + c] = 0.f;
    for (int c = 0; c < 32; c++) o.x[size_t(9) * 64 + c] = 1.0e-38f * float(c + 1);
    out.push_back(o);
  }
  out.push_back({"all zero 16x32", 16, 32, std::vector<float>(16 * 32, 0.f)});
  for (float bad : {INFINITY, NAN}) {
    TestOperand o{bad != bad ? "a NaN" : "an inf", 24, 64, randn(24, 64, 1.f)};
    o.x[100] = bad;
    out.push_back(o);
  }
  return out;
}

// One operand through both quantizers at scale `given` (0: current, with the margin).
template <typename E>
void check_tensor(ElemFormat fmt, const TestOperand& op, bool transposed, float given, int margin) {
  const int rows = op.rows, cols = op.cols;
  const size_t n = size_t(rows) * cols;
  std::vector<E> src(n);
  std::vector<float> ref(n);  // the source's fp32 values, row-major
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) {
      const E v = e<E>(op.x[size_t(r) * cols + c]);
      src[transposed ? size_t(c) * rows + r : size_t(r) * cols + c] = v;
      ref[size_t(r) * cols + c] = f(v);
    }
  cpu::TensorQuant q{given, given == 0, margin, fmt};
  float amax_ref = 0;
  cpu::qdq_tensor_fp8(ref.data(), n, q, &amax_ref);
  // The recipe's operand: what fp8_tensor_recipe gives that format.
  const QuantRecipe r =
      fp8_tensor_recipe(given > 0 ? ScaleSource::Delayed : ScaleSource::Current, 4, margin, {});
  const OperandRecipe& o = fmt == ElemFormat::E4M3 ? r.gemm[kForward].a : r.gemm[kInputGrad].a;
  REQUIRE(o.elem == fmt);
  gpu::OperandSource x{dtype_of<E>(), src.data(), transposed};
  x.tensor_scale = given;
  x.margin = margin;
  Buf<unsigned> amax(1, 0);
  x.amax_out = amax.p;
  Buf<float> out(n), post(1);
  gpu::quantize_dequantize(emu_ctx(), o, 1, x, rows, cols, DType::F32, out.p, post.p);
  check_emu();
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += std::isnan(ref[i]) ? !std::isnan(out[i]) : bits(ref[i]) != bits(out[i]);
  CHECK(bad == 0);
  CHECK(post[0] == 1.0f);  // per-tensor fp32 scales stay inside the operand
  const float amax_gpu = amax[0] < 0x7f800000u ? bits_f32(amax[0]) : INFINITY;
  CHECK(bits(amax_gpu) == bits(amax_ref));
}

// The max of |x|'s bits over the values as stored (what an earlier quantizer's amax_out holds:
// a NaN's bits above inf's).
template <typename E>
unsigned amax_bits(const std::vector<E>& src) {
  unsigned m = 0;
  for (const E& v : src) m = std::max(m, bits(f(v)) & 0x7fffffffu);
  return m;
}

// One current-scaled operand read once at the amax given in a device word (amax_in): the one
// pass runs (plan_one_pass), and its values, codes, native scale and factor are the two
// passes' without the word, bit for bit (the CPU's: check_tensor).
template <typename E>
void check_given_amax(ElemFormat fmt, const TestOperand& op, bool transposed, int margin) {
  const int rows = op.rows, cols = op.cols;
  const size_t n = size_t(rows) * cols;
  std::vector<E> src(n);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++)
      src[transposed ? size_t(c) * rows + r : size_t(r) * cols + c] =
          e<E>(op.x[size_t(r) * cols + c]);
  const QuantRecipe r = fp8_tensor_recipe(ScaleSource::Current, 4, margin, {});
  const OperandRecipe& o = fmt == ElemFormat::E4M3 ? r.gemm[kForward].a : r.gemm[kInputGrad].a;
  // [0] the operand's amax, [2] twice it (the word is read: other codes), [1] none (two passes)
  Buf<unsigned> given(3);
  given[0] = amax_bits(src);
  given[2] = bits(2.0f * bits_f32(given[0]));
  struct Out {
    std::vector<float> values, post;
    std::vector<uint8_t> codes, scale;
  } got[3];
  cublasLtMatmulMatrixScale_t mode{};
  REQUIRE(gpu::native_operand_mode(o, &mode).empty());
  for (int k = 0; k < 3; k++) {
    gpu::OperandSource x{dtype_of<E>(), src.data(), transposed};
    x.margin = margin;
    if (k != 1) {
      x.amax_in = given.p + k;
      gpu::quant::QuantParams p = gpu::params_of(o, rows, cols);
      p.tensor_amax = x.amax_in;
      gpu::quant::TilePlan plan;
      REQUIRE(gpu::quant::plan_one_pass(p, rows, cols, one_pass_max_span(8, false), &plan));
    }
    gpu::force_two_pass_quantizer(k == 1);
    Buf<float> out(n), post(2);
    Buf<uint8_t> codes(n), scale(gpu::native_scale_bytes(o, mode, rows, cols));
    gpu::quantize_dequantize(emu_ctx(), o, 1, x, rows, cols, DType::F32, out.p, post.p);
    gpu::quantize_codes(emu_ctx(), o, mode, 1, x, rows, cols, codes.p, scale.p, post.p + 1);
    check_emu();
    gpu::force_two_pass_quantizer(false);
    got[k] = {{out.p, out.p + n},
              {post.p, post.p + 2},
              {codes.p, codes.p + n},
              {scale.p, scale.p + scale.n}};
  }
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    const float a = got[0].values[i], b = got[1].values[i];
    bad += std::isnan(b) ? !std::isnan(a) : bits(a) != bits(b);
  }
  CHECK(bad == 0);
  CHECK(got[0].codes == got[1].codes);
  CHECK(got[0].scale == got[1].scale);  // the one fp32 scale (NaN for a non-finite operand)
  for (int k = 0; k < 2; k++) CHECK(bits(got[0].post[k]) == bits(got[1].post[k]));
  const float amax = bits_f32(given[0]);
  if (amax > 0 && amax < 1e30f) CHECK(got[2].codes != got[1].codes);  // (finite, not all zero)
}

}  // namespace

TEST_CASE("emulated: per-tensor FP8 operands equal the CPU's qdq bit for bit, amax too") {
  for (ElemFormat fmt : {ElemFormat::E4M3, ElemFormat::E5M2})
    for (const TestOperand& op : fp8_operands())
      for (bool transposed : {false, true}) {
        INFO(elem_format_name(fmt) << ", " << op.what << ", transposed=" << transposed);
        // delayed: a scale near the tensor's, one that saturates its outliers, one far below
        for (float given : {97.3f, 2100.5f, 3.1e7f, 0.25f}) {
          INFO("delayed scale " << given);
          check_tensor<float>(fmt, op, transposed, given, 0);
          check_tensor<bf16>(fmt, op, transposed, given, 0);
        }
        for (int margin : {0, 1, 2}) {
          INFO("current, margin " << margin);
          check_tensor<float>(fmt, op, transposed, 0.f, margin);
          check_tensor<bf16>(fmt, op, transposed, 0.f, margin);
        }
      }
}

TEST_CASE("emulated: a current per-tensor scale from a given amax word: one pass, the same bits") {
  for (ElemFormat fmt : {ElemFormat::E4M3, ElemFormat::E5M2})
    for (const TestOperand& op : fp8_operands())
      for (bool transposed : {false, true})
        for (int margin : {0, 2}) {
          INFO(elem_format_name(fmt)
               << ", " << op.what << ", transposed=" << transposed << ", margin " << margin);
          check_given_amax<bf16>(fmt, op, transposed, margin);
          check_given_amax<float>(fmt, op, transposed, margin);
        }
}

TEST_CASE(
    "emulated: a current-scaled linear's backward at the amaxes kept == the two passes, bit for "
    "bit") {
  // The backward reads its input and weight at the amaxes the forward kept, the wgrad's
  // gradient at the one bias_backward took and the dgrad's at the one the wgrad's quantizer
  // left (one pass each): every output the same bits as with every quantizer's two passes; a
  // non-finite gradient poisons both alike.
  const int N = 64, C = 96, OC = 160;
  const QuantRecipe r = fp8_tensor_recipe(ScaleSource::Current, 4, 1, {});
  const ScaledLinear q{&r, 3, {0, {1, 1, 1}, 1}};
  REQUIRE(gpu::forward_amax_kept(q));
  std::mt19937 rng(17);
  std::vector<bf16> inp(size_t(N) * C), w(size_t(OC) * C), dout(size_t(N) * OC);
  fill(inp.data(), inp.size(), rng, 1.f);
  fill(w.data(), w.size(), rng, 0.05f);
  fill(dout.data(), dout.size(), rng, 1e-3f);
  for (float bad : {0.f, INFINITY}) {
    INFO("gradient " << (bad == 0 ? "finite" : "with an inf"));
    if (bad != 0) dout[123] = e<bf16>(bad);
    std::vector<std::vector<uint32_t>> got[2];
    for (int k = 0; k < 2; k++) {
      Buf<unsigned> slot(kTensorOperands, 0), kept(gpu::kKeptWords, 0);
      Buf<bf16> out(size_t(N) * OC), dinp(size_t(N) * C), dw(size_t(OC) * C, 0), db(OC, 0);
      unsigned* keep = k == 0 ? kept.p : nullptr;
      gpu::force_two_pass_quantizer(k == 1);
      gpu::scaled_linear_forward(emu_ctx(), DType::BF16, out.p, inp.data(), w.data(), nullptr, N, C,
                                 OC, q, slot.p, keep);
      gpu::scaled_linear_backward(emu_ctx(), DType::BF16, dinp.p, dw.p, db.p, dout.data(),
                                  inp.data(), w.data(), N, C, OC, q, slot.p, keep);
      check_emu();
      gpu::force_two_pass_quantizer(false);
      for (const Buf<bf16>* b : {&out, &dinp, &dw, &db}) {
        got[k].emplace_back();
        for (size_t i = 0; i < b->n; i++) got[k].back().push_back(bits((*b)[i]));
      }
      got[k].emplace_back(slot.p, slot.p + kTensorOperands);
    }
    CHECK(got[0] == got[1]);
    if (bad != 0) CHECK(got[0][4][kTensorGrad] >= 0x7f800000u);
  }
}

TEST_CASE("emulated: bias_backward takes dout's amax bits as it sums, non-finite values too") {
  // OC 160: 16-byte runs of bf16; OC 150: one column a thread.
  std::mt19937 rng(23);
  for (int OC : {160, 150})
    for (float bad : {0.f, INFINITY, NAN}) {
      INFO("OC " << OC << ", " << bad);
      const int N = 200;
      std::vector<bf16> d(size_t(N) * OC);
      fill(d.data(), d.size(), rng, 0.3f);
      d[size_t(N / 2) * OC + 7] = e<bf16>(5.5f);  // the amax, in a middle chunk
      if (bad != 0) d[size_t(N - 1) * OC + OC - 1] = e<bf16>(bad);
      Buf<bf16> db(OC, 0), db_plain(OC, 0);
      Buf<unsigned> amax(1, 0);
      gpu::bias_backward(emu_ctx(), DType::BF16, db.p, d.data(), N, OC, amax.p);
      gpu::bias_backward(emu_ctx(), DType::BF16, db_plain.p, d.data(), N, OC);
      check_emu();
      CHECK(amax[0] == amax_bits(d));
      CHECK(std::memcmp(db.p, db_plain.p, size_t(OC) * sizeof(bf16)) == 0);  // the same sums
    }
}

namespace {

// The ops that write a per-tensor-scaled linear's input (Backend's InputAmax), at B 2 x T 16,
// C 64 (4 heads): out (N, C) from their sources, taking out's amax into *amax where given.
struct Producers {
  static constexpr int B = 2, T = 16, C = 64, NH = 4, N = B * T;
  std::vector<bf16> a, b, lw, lb, qkv;
  Producers() : a(size_t(N) * C), b(size_t(N) * C), lw(C), lb(C), qkv(size_t(N) * 3 * C) {
    std::mt19937 rng(29);
    fill(a.data(), a.size(), rng, 1.f);
    fill(b.data(), b.size(), rng, 1.f);
    fill(lw.data(), lw.size(), rng, 1.f);
    fill(lb.data(), lb.size(), rng, 0.1f);
    fill(qkv.data(), qkv.size(), rng, 1.f);
  }
  void run(const std::string& op, bf16* out, unsigned* amax) {
    gpu::Ctx& c = emu_ctx();
    Buf<float> mean(N), rstd(N);
    Buf<bf16> res(size_t(N) * C), att(size_t(B) * NH * T * T);
    if (op == "layernorm")
      gpu::layernorm_forward(c, DType::BF16, out, mean.p, rstd.p, a.data(), lw.data(), lb.data(),
                             N, C, amax);
    else if (op == "residual layernorm")
      gpu::residual_layernorm_forward(c, DType::BF16, res.p, out, mean.p, rstd.p, a.data(),
                                      b.data(), lw.data(), lb.data(), N, C, amax);
    else if (op == "gelu")
      gpu::gelu_forward(c, DType::BF16, out, a.data(), size_t(N) * C, amax);
    else
      gpu::attention_forward(c, DType::BF16, out, att.p, qkv.data(), B, T, C, NH, amax);
    check_emu();
  }
};

}  // namespace

TEST_CASE(
    "emulated: a current-scaled linear's forward at the amaxes its input's producer and AdamW "
    "took == the two passes, bit for bit") {
  // Each producer's output is the same with the word as without, the word the max of its |x|
  // bits; the forward reading its input once at that word and its weight once at the word AdamW
  // took (Backend's WeightAmax: that kernel's test in kernels_emulated.cpp) writes the two
  // passes' output and amax words, on the portable path and on sm_90's native one, finite and
  // non-finite inputs.
  const int N = Producers::N, C = Producers::C, OC = 96;
  const QuantRecipe r = fp8_tensor_recipe(ScaleSource::Current, 4, 1, {});
  const ScaledLinear q{&r, 5, {0, {1, 1, 1}, 1}};
  REQUIRE(takes_input_amax(q));
  REQUIRE(takes_weight_amax(q));
  std::mt19937 rng(31);
  std::vector<bf16> w(size_t(OC) * C);
  fill(w.data(), w.size(), rng, 0.05f);
  Buf<unsigned> wword(1);
  wword[0] = amax_bits(w);
  const int saved_major = emu_ctx().prop.major;
  for (const char* op : {"layernorm", "residual layernorm", "gelu", "attention"})
    for (float bad : {0.f, INFINITY, NAN}) {
      INFO(op << ", source " << (bad == 0 ? "finite" : bad != bad ? "with a NaN" : "with an inf"));
      Producers pr;
      if (bad != 0) pr.a[77] = pr.qkv[77] = e<bf16>(bad);
      Buf<bf16> x(size_t(N) * C), plain(size_t(N) * C);
      Buf<unsigned> word(1, 0);
      pr.run(op, x.p, word.p);
      pr.run(op, plain.p, nullptr);
      CHECK(std::memcmp(x.p, plain.p, size_t(N) * C * sizeof(bf16)) == 0);
      const std::vector<bf16> xs(x.p, x.p + size_t(N) * C);
      CHECK(word[0] == amax_bits(xs));
      CHECK((bad == 0) == (word[0] < 0x7f800000u));
      for (int major : {saved_major, 9}) {
        INFO("compute capability major " << major);
        emu_ctx().prop.major = major;
        gpu::native_forget_checks();
        std::vector<std::vector<uint32_t>> got[2];
        for (int k = 0; k < 2; k++) {
          Buf<unsigned> slot(kTensorOperands, 0);
          Buf<bf16> out(size_t(N) * OC);
          gpu::force_two_pass_quantizer(k == 1);
          gpu::scaled_linear_forward(emu_ctx(), DType::BF16, out.p, x.p, w.data(), nullptr, N, C,
                                     OC, q, slot.p, nullptr, k == 0 ? word.p : nullptr,
                                     k == 0 ? wword.p : nullptr);
          check_emu();
          gpu::force_two_pass_quantizer(false);
          got[k].emplace_back();
          for (size_t i = 0; i < out.n; i++) got[k].back().push_back(bits(out[i]));
          got[k].emplace_back(slot.p, slot.p + kTensorOperands);
        }
        CHECK(got[0] == got[1]);
        CHECK(got[0][1][kTensorInput] == word[0]);
        CHECK(got[0][1][kTensorWeight] == wword[0]);
      }
      emu_ctx().prop.major = saved_major;
      gpu::native_forget_checks();
    }
}
