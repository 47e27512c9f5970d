// Precision recipes as data (src/numerics/recipe.h): today's presets, what the FP8 linears read
// from them, and recipes they cannot run refused by name.
#include <doctest/doctest.h>

#include "src/base/common.h"
#include "src/model/linear_quantizers.h"
#include "src/numerics/formats.h"
#include "src/numerics/recipe.h"
#include "tests/test_util.h"

using namespace tg;

TEST_CASE("recipe: fp8 and fp8-current are two instances of one description") {
  const QuantRecipe d = fp8_tensor_recipe(ScaleSource::Delayed, 16, 1, {0, -1});
  const QuantRecipe c = fp8_tensor_recipe(ScaleSource::Current, 16, 0, {});
  for (const QuantRecipe* r : {&d, &c}) {
    CHECK(r->gemm[kForward].a.elem == ElemFormat::E4M3);
    CHECK(r->gemm[kForward].b.elem == ElemFormat::E4M3);
    CHECK(r->gemm[kInputGrad].a.elem == ElemFormat::E5M2);
    CHECK(r->gemm[kInputGrad].b.elem == ElemFormat::E4M3);
    CHECK(r->gemm[kWeightGrad].a.elem == ElemFormat::E5M2);
    CHECK(r->gemm[kWeightGrad].b.elem == ElemFormat::E4M3);
    for (int g = 0; g < kGemmRoles; g++) {
      CHECK(r->gemm[g].a.granularity == Granularity::Tensor);
      CHECK(r->gemm[g].a.scale == ScaleFormat::FP32);
      CHECK(r->gemm[g].b.rounding == RoundMode::Nearest);
    }
  }
  CHECK(d.gemm[kForward].a.source == ScaleSource::Delayed);
  CHECK(c.gemm[kWeightGrad].a.source == ScaleSource::Current);
  CHECK(d.name == "fp8-delayed");
  CHECK(describe(d) ==
        "fwd E4M3 x E4M3, dgrad E5M2 x E4M3, wgrad E5M2 x E4M3, per-tensor fp32 scales, "
        "delayed (history 16, margin 1)");
  CHECK(elem_format_max(ElemFormat::E4M3) == E4M3_MAX);
  CHECK(elem_format_max(ElemFormat::E5M2) == E5M2_MAX);
  // The keys map onto the presets.
  CHECK(fp8_recipe(Fp8Config{ScaleSource::Current, 8, 2, {}}).gemm[kForward].b.source ==
        ScaleSource::Current);
  CHECK(fp8_recipe(Fp8Config{ScaleSource::Delayed, 8, 2, {}}).history_len == 8);
}

TEST_CASE("recipe: the FP8 state reads formats and sources from the recipe") {
  QuantRecipe r = fp8_tensor_recipe(ScaleSource::Delayed, 4, 0, {});
  LinearQuantizers s(r, 2);
  s.record(0, LinearQuantizers::QKV, LinearQuantizers::INP, 2.0f);
  s.record(0, LinearQuantizers::QKV, LinearQuantizers::GRAD, 2.0f);
  CHECK(s.scale(0, LinearQuantizers::QKV, LinearQuantizers::INP) ==
        fp8_scale_from_amax(2.0f, E4M3_MAX, 0));
  CHECK(s.scale(0, LinearQuantizers::QKV, LinearQuantizers::GRAD) ==
        fp8_scale_from_amax(2.0f, E5M2_MAX, 0));
  // What a linear hands the backend: its slot, the margin, the delayed scales; the backward
  // keeps the forward's input and weight scales while the histories move in between.
  const ScaledLinear f = s.scaled(0, LinearQuantizers::QKV, false);
  CHECK(f.recipe->gemm[kForward].a.elem == ElemFormat::E4M3);
  CHECK(f.recipe->gemm[kInputGrad].a.elem == ElemFormat::E5M2);
  CHECK(f.tensor.slot == LinearQuantizers::QKV);
  CHECK(f.tensor.scale[kTensorInput] == fp8_scale_from_amax(2.0f, E4M3_MAX, 0));
  CHECK(f.tensor.scale[kTensorGrad] == fp8_scale_from_amax(2.0f, E5M2_MAX, 0));
  s.record(0, LinearQuantizers::QKV, LinearQuantizers::INP, 100.0f);
  const ScaledLinear b = s.scaled(0, LinearQuantizers::QKV, true);
  CHECK(b.tensor.scale[kTensorInput] == f.tensor.scale[kTensorInput]);
  CHECK(s.scaled(1, LinearQuantizers::FC, false).tensor.slot == 4 + LinearQuantizers::FC);
  CHECK(s.scale(0, LinearQuantizers::QKV, LinearQuantizers::INP) ==
        fp8_scale_from_amax(100.0f, E4M3_MAX, 0));
  LinearQuantizers cur(fp8_tensor_recipe(ScaleSource::Current, 4, 0, {}), 2);
  CHECK(cur.scale(1, LinearQuantizers::FC, LinearQuantizers::WEIGHT) == 1.0f);
  CHECK(cur.scaled(1, LinearQuantizers::FC, false).recipe->gemm[kForward].b.source ==
        ScaleSource::Current);
  // Block-scaled recipes have no slot: their scales come from the operands alone; but NVFP4's,
  // whose tensor scale over its groups takes amax words (quantized layers only), not per-tensor
  // scaled for all that (the CPU's per-tensor path is not theirs).
  LinearQuantizers blk(block_scaled_recipe("mxfp8", RecipeOptions{}), 2);
  CHECK(blk.scaled(0, LinearQuantizers::QKV, false).tensor.slot == -1);
  LinearQuantizers nv(block_scaled_recipe("nvfp4", RecipeOptions{}), 2);  // the last layer wide
  const ScaledLinear n0 = nv.scaled(0, LinearQuantizers::FC, false);
  CHECK(n0.tensor.slot == LinearQuantizers::FC);
  CHECK(!per_tensor_scaled(n0));
  CHECK(per_tensor_scaled(f));
  CHECK(nv.input_amax(0, LinearQuantizers::FC).slot == LinearQuantizers::FC);
  CHECK(nv.input_amax(1, LinearQuantizers::FC).slot == -1);
  CHECK(nv.weight_amax_wanted(LinearQuantizers::QKV));
  CHECK(!blk.weight_amax_wanted(LinearQuantizers::QKV));
}

TEST_CASE("recipe: recipes the FP8 linears do not implement are refused by name") {
  auto refused = [](QuantRecipe r) {
    r.name = "test-recipe";
    return tgt::error_of([&] { LinearQuantizers s(r, 1); });
  };
  QuantRecipe r = fp8_tensor_recipe(ScaleSource::Delayed, 4, 0, {});
  QuantRecipe fp4 = r;
  fp4.gemm[kForward].a.elem = ElemFormat::E2M1;
  CHECK(refused(fp4).find("test-recipe") != std::string::npos);
  QuantRecipe block = r;
  block.gemm[kWeightGrad].b.granularity = Granularity::Block;
  block.gemm[kWeightGrad].b.block = 128;
  CHECK(refused(block).find("per-tensor") != std::string::npos);
  QuantRecipe sr = r;
  sr.gemm[kInputGrad].a.rounding = RoundMode::Stochastic;
  CHECK(!refused(sr).empty());
  QuantRecipe mixed = r;
  mixed.gemm[kInputGrad].b.elem = ElemFormat::E5M2;
  CHECK(refused(mixed).find("reuse the forward") != std::string::npos);
}
