// test_quant_memory.cpp: the bits of each block-scaled format with its scales
// (src/quant_memory.h) and the native-path plan of the block linears, against sums written
// out by hand.
#include <doctest/doctest.h>

#include <string>

#include "src/quant_memory.h"
#include "src/recipe.h"
#include "test_util.h"

namespace {
tg::QuantRecipe preset(const char* name, int bf16_last = -1) {
  tg::RecipeOptions o;
  o.bf16_last = bf16_last;
  return tg::block_scaled_recipe(name, o);
}
}  // namespace

TEST_CASE("quant memory: bits per element include the scales") {
  const size_t rows = 256, cols = 512, n = rows * cols;
  const tg::QuantRecipe mx8 = preset("mxfp8"), mx4 = preset("mxfp4"), nv = preset("nvfp4");
  const tg::QuantRecipe blk = preset("fp8-block"), row = preset("fp8-rowwise");
  using tg::kForward;
  CHECK(tg::quantized_bits(mx8.gemm[kForward].a, rows, cols) == 8.25);  // 8 + 8/32
  CHECK(tg::quantized_bits(mx4.gemm[kForward].a, rows, cols) == 4.25);  // 4 + 8/32
  // NVFP4: 4 + 8/16 and the fp32 tensor scale; the 16x16 weight tiles 4 + 8/256.
  CHECK(tg::quantized_bits(nv.gemm[kForward].a, rows, cols) == doctest::Approx(4.5 + 32.0 / n));
  CHECK(tg::quantized_bits(nv.gemm[kForward].b, rows, cols) ==
        doctest::Approx(4 + 8.0 / 256 + 32.0 / n));
  // fp8-block: 1x128 blocks with fp32 scales, 128x128 weight tiles.
  CHECK(tg::quantized_bits(blk.gemm[kForward].a, rows, cols) == 8.25);
  CHECK(tg::quantized_bits(blk.gemm[kForward].b, rows, cols) == 8 + 32.0 / (128 * 128));
  // fp8-rowwise: one fp32 scale per row of 512.
  CHECK(tg::quantized_bits(row.gemm[kForward].a, rows, cols) == 8 + 32.0 / cols);
  // Partial groups at the edges are groups of their own: 33 columns of MXFP8 are 2 blocks.
  CHECK(tg::quantized_operand_bytes(mx8.gemm[kForward].a, 1, 33) == 33 + 2);
  // E2M1 packs two to a byte, rounded up.
  CHECK(tg::quantized_operand_bytes(mx4.gemm[kForward].a, 1, 3) == 2 + 1);
  CHECK(tg::quantized_operand_bytes(tg::OperandRecipe{}, rows, cols) == 2 * n);  // bf16
}

TEST_CASE("quant memory: the native plan of the block linears, written out") {
  const tg::GPTConfig c = tg::gpt_config(3, 2, 64, 256, 32);
  const int B = 4, T = 32;
  const size_t N = size_t(B) * T, C = 64;
  const size_t in[4] = {C, C, C, 4 * C}, out[4] = {3 * C, C, 4 * C, C};
  // MXFP8: two weight copies (forward along C, dgrad along OC), 1 E8M0 byte per 32.
  const tg::QuantMemoryPlan p = tg::plan_quantized_linears(c, preset("mxfp8"), B, T);
  size_t w = 0, saved = 0, bf16 = 0;
  for (int i = 0; i < 4; i++) {
    w += 2 * (in[i] * out[i] + in[i] * out[i] / 32);
    saved += N * in[i] + N * in[i] / 32;
    bf16 += 2 * N * in[i];
  }
  CHECK(p.quantized_layers == 3);
  CHECK(p.weight_copies == 3 * w);
  CHECK(p.saved_inputs_quantized == 3 * saved);
  CHECK(p.saved_inputs_bf16 == 3 * bf16);
  // NVFP4: the last layer stays bf16 (default), one shared copy of the 16x16-tiled weights.
  const tg::QuantMemoryPlan q = tg::plan_quantized_linears(c, preset("nvfp4"), B, T);
  size_t wq = 0;
  for (int i = 0; i < 4; i++) wq += in[i] * out[i] / 2 + in[i] * out[i] / 256 + 4;
  CHECK(q.quantized_layers == 2);
  CHECK(q.weight_copies == 2 * wq);
  CHECK(q.weight_bits == doctest::Approx(4 + 8.0 / 256 + 32.0 / (4 * C * C)));
}

TEST_CASE("cli: memory shows the block-scaled modes' native plan") {
  std::string out;
  REQUIRE(tgt::run_binary("memory --preset gpt2 --modes bf16,mxfp8,nvfp4", &out) == 0);
  INFO(out);
  CHECK(out.find("Block-scaled modes on a native path") != std::string::npos);
  CHECK(out.find("| mxfp8 | 12/12 | 8.250 | 8.250 | 8.250 |") != std::string::npos);
  CHECK(out.find("| nvfp4 | 11/12 | 4.500 |") != std::string::npos);
}
