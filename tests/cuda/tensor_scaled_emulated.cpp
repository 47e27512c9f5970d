// tensor_scaled_emulated.cpp: the per-tensor recipes' operands (the fp8 mode: E4M3 inputs and
// weights, E5M2 gradients, one fp32 scale per tensor, delayed or current) through the GPU's
// quantizer (src/backends/cuda/quantize_blocks.cu with an OperandSource's tensor_scale, margin
// and amax_out) on the CPU, CUDA threads emulated, against the CPU backend's per-tensor
// quantize-dequantize (src/backends/cpu/quantize_tensor.cpp's qdq_tensor_fp8, what the fp8
// regression fixture runs) bit for bit in every value and in the amax: given delayed scales (saturating
// ones too), current scales with margins 0 to 2, bf16 and fp32 sources read where they lie
// (plain and transposed), adversarial tensors (outliers, zeros, tiny and huge values) and an
// inf or a NaN that poisons the operand (amax +inf).
#include "emulated_util.h"
// (first: it includes the emulation, which redefines the CUDA keywords the kernels use)
#include <string>
#include <vector>

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
void check_tensor(ElemFormat fmt, const TestOperand& op, bool transposed, float given,
                  int margin) {
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
