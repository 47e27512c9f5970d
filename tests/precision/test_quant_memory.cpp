// test_quant_memory.cpp: the bits of each block-scaled format with its scales
// (src/precision/quant_memory.h) and the native-path plan of the block linears, against sums
// written out by hand.
#include <doctest/doctest.h>

#include <string>

#include "src/numerics/recipe.h"
#include "src/precision/quant_memory.h"
#include "src/precision/scaled_scratch.h"
#include "tests/test_util.h"

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

TEST_CASE("scaled scratch: one mxfp8 linear's CUDA scratch slots, written out") {
  // 128 tokens, C = OC = 64; E8M0 per 32 along each GEMM's reduction dimension.
  const tg::QuantRecipe r = preset("mxfp8");
  using S = tg::ScaledScratch;
  S portable, native;
  tg::scaled_linear_scratch(portable, r, 128, 64, 64, 0);
  tg::scaled_linear_scratch(native, r, 128, 64, 64, 10);
  S want;
  // No staged fp32 operands: the quantizers read inp, W, dout and their transposes where they
  // lie (StageA / StageB serve only smoothing, the split and rotations over 32 points).
  // Portable: bf16 quantize-dequantized operands (E8M0 scales are exact in bf16), the
  // largest 128 x 64 (forward / dgrad A) and 64 x 128 (wgrad); no amax or scale pairs in
  // scratch (1 x 32 groups: the one-pass quantizer, src/numerics/one_pass.h, keeps them in
  // shared memory); fp32 products.
  want.bytes[tg::kSlotQA] = 128 * 64 * 2;
  want.bytes[tg::kSlotQB] = 64 * 128 * 2;
  want.bytes[tg::kSlotWords] = 64;
  want.bytes[tg::kSlotAcc] = 128 * 64 * 4;
  for (int s = 0; s < tg::kScaledSlots; s++) {
    INFO("portable " << std::string(tg::scaled_slot_name(s)));
    CHECK(portable.bytes[s] == want.bytes[s]);
  }
  // Native (sm_100, VEC32_UE8M0): one byte per code; the self-checks' problems are larger than
  // the linear's: forward and dgrad (M = 128, N = 64, K = 64: a partial N tile, K not in whole
  // 4-block groups) check 128 x 144 x 320, wgrad (64 x 64 x 128) 144 x 144 x 256. Each check
  // quantizes both ways: codes of its 144 x 320 operand, then its bf16 copy 2 x 144 x 320.
  want.bytes[tg::kSlotQA] = 128 * 320 * 2;
  want.bytes[tg::kSlotQB] = 144 * 320 * 2;
  // Scale tensors: 128-row tiles of 4 scale columns (padded), one byte each, allocated twice
  // over with 4 KiB more: the 144 x 256 check operand has 256 rows x 8 columns (A), the
  // 144 x 320 one 256 x 12 (B).
  want.bytes[tg::kSlotScaleA] = 2 * (256 * 8) + 4096;
  want.bytes[tg::kSlotScaleB] = 2 * (256 * 12) + 4096;
  want.bytes[tg::kSlotCheck] = (128 * 320 + 144 * 320) * 4;
  want.bytes[tg::kSlotCheckAcc] = 2 * 144 * 144 * 4;
  for (int s = 0; s < tg::kScaledSlots; s++) {
    INFO("native " << std::string(tg::scaled_slot_name(s)));
    CHECK(native.bytes[s] == want.bytes[s]);
  }
  // fp8-block's 128 x 128 weight tiles need whole 128-blocks: this shape runs portably (fp32
  // operands: fp32 scales are not exact in bf16) even on sm_100.
  S blk;
  tg::scaled_linear_scratch(blk, preset("fp8-block"), 128, 64, 64, 10);
  CHECK(blk.bytes[tg::kSlotQA] == 128 * 64 * 4);
  CHECK(blk.bytes[tg::kSlotCheck] == 0);
  CHECK(!tg::native_gemm_runs(preset("fp8-block").gemm[tg::kForward], 10, 128, 64, 64));
  CHECK(tg::native_gemm_runs(preset("fp8-block").gemm[tg::kForward], 9, 128, 128, 128));
  CHECK(!tg::native_gemm_runs(preset("mxfp8").gemm[tg::kForward], 9, 128, 128, 128));
}

TEST_CASE("cli: memory shows the CUDA block-scaled GEMM scratch, portable and native") {
  std::string out;
  REQUIRE(tgt::run_binary("memory --preset gpt2 --modes bf16,fp8-block,nvfp4", &out) == 0);
  INFO(out);
  CHECK(out.find("CUDA block-scaled GEMM scratch, portable / native") != std::string::npos);
  for (const char* row : {"| fp8-block | portable |", "| fp8-block | native (sm_100) |",
                          "| nvfp4 | portable |", "| nvfp4 | native (sm_100) |"})
    CHECK(out.find(row) != std::string::npos);
}
