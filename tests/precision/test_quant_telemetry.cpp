// test_quant_telemetry.cpp: the scale-group statistics of quant_error
// (src/backends/cpu/quant_error.cpp) on hand-made blocks whose outcome is known, and the
// block-scaled modes' per-operand telemetry (src/precision/quant_telemetry.h) in a run of the
// binary, its summary and its report.
#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "src/backends/cpu/ops.h"
#include "src/numerics/recipe.h"
#include "tests/test_util.h"

using nlohmann::json;
using tgt::run_binary;
using tgt::tiny_args;

namespace {
tg::OperandRecipe forward_a(const char* name) {
  return tg::candidate_recipe(name, tg::RecipeOptions{}, "test").gemm[tg::kForward].a;
}
}  // namespace

TEST_CASE("quant telemetry: saturating and underflowing scale groups are counted as defined") {
  // MXFP4, OCP rule, four 32-value blocks: block 0 holds 7.9 (scale 2^(2-2) = 1, so 7.9 is
  // clipped to 6: saturated); block 1 is all zeros (neither); block 2 holds values of 2^-140
  // (floor(log2) - 2 = -142 is below E8M0's least code 2^-127: the scale underflows); block
  // 3 is ordinary (amax 4 = 1 x 2^2 maps to 4, no clipping).
  const tg::OperandRecipe mx = forward_a("mxfp4");
  REQUIRE(mx.block == 32);
  std::vector<float> x(128, 0.0f);
  for (int i = 0; i < 32; i++) x[i] = 1.0f;
  x[3] = 7.9f;
  for (int i = 64; i < 96; i++) x[i] = std::ldexp(1.0f, -140);
  for (int i = 96; i < 128; i++) x[i] = (i % 2 ? 1.0f : -1.0f) * (1 + (i % 4));
  const tg::QuantError e = tg::cpu::quant_error(x.data(), 1, 128, mx, 1);
  CHECK(e.groups == 4);
  CHECK(e.groups_saturated == 1);
  CHECK(e.groups_underflow == 1);
  // Zeros: block 1's 32, and block 2's 32 (2^-140 at scale 2^-127 is below E2M1's 0.5 step).
  CHECK(e.zeros == 64);
  CHECK(e.underflow == 32);

  // NVFP4: the tensor scale maps the largest block to E4M3's 448; a block 2^-12 times smaller
  // gets a decode scale of about 448 x 2^-12 = 0.11 (normal), one 2^-20 times smaller
  // 448 x 2^-20 = 4.3e-4, below UE4M3's least normal 2^-6: underflow. Blocks of 16.
  const tg::OperandRecipe nv = forward_a("nvfp4");
  REQUIRE(nv.scale == tg::ScaleFormat::E4M3);
  REQUIRE(nv.block == 16);
  std::vector<float> y(48);
  for (int i = 0; i < 16; i++) y[i] = 6.0f * (i + 1) / 16;
  for (int i = 16; i < 32; i++) y[i] = std::ldexp(y[i - 16], -12);
  for (int i = 32; i < 48; i++) y[i] = std::ldexp(y[i - 32], -20);
  const tg::QuantError f = tg::cpu::quant_error(y.data(), 1, 48, nv, 1);
  CHECK(f.groups == 3);
  CHECK(f.groups_underflow == 1);
  // The largest block's decode scale is exactly 448 / 448 x 6 / 6: its amax maps to 6, no clip.
  CHECK(f.groups_saturated == 0);

  // fp32 row scales: a row of tiny values (amax 1e-40, 448 / 1e-40 overflows fp32) gets its
  // scale clamped to the largest float: underflow; an ordinary row does not.
  const tg::OperandRecipe rw = forward_a("fp8-rowwise");
  REQUIRE(rw.granularity == tg::Granularity::Row);
  std::vector<float> z = {1e-40f, -1e-40f, 0.0f, 1e-40f, 1.0f, 2.0f, -3.0f, 0.5f};
  const tg::QuantError g = tg::cpu::quant_error(z.data(), 2, 4, rw, 1);
  CHECK(g.groups == 2);
  CHECK(g.groups_underflow == 1);
  CHECK(g.groups_saturated == 0);
}

TEST_CASE("cli: a block-scaled run records its recipe's quantization error per operand") {
  tgt::TempDir d;
  std::string out;
  // Two layers; nvfp4 keeps the last in bf16, so only layer 0's operands are listed.
  const std::string args = tiny_args(d.path) +
                           " --model.n_layer=2 --train.steps=4 --eval.every=0 "
                           "--precision.mode=nvfp4 --precision.telemetry_every=2";
  REQUIRE(run_binary(args, &out) == 0);
  INFO(out);
  const std::vector<json> recs = tgt::read_metrics(d / "metrics.jsonl", "quant");
  REQUIRE(recs.size() == 2);
  CHECK(recs[0]["step"] == 2);
  CHECK(recs[1]["step"] == 4);
  const json& s = recs[1]["slots"];
  REQUIRE(s["layer"].size() == 4 * 6);  // 4 linears x 3 GEMMs x 2 operands of layer 0
  std::set<std::string> seen;
  for (size_t i = 0; i < s["layer"].size(); i++) {
    CHECK(s["layer"][i] == 0);
    CHECK(s["format"][i] == "E2M1");
    seen.insert(s["role"][i].get<std::string>() + " " + s["operand"][i].get<std::string>());
    const double db = s["sqnr_db"][i].get<double>();
    CHECK(db > 10);  // E2M1 with fine scales: about 20 dB on these operands
    CHECK(db < 30);
    for (const char* k : {"zero_frac", "underflow_frac", "saturated_frac", "block_saturated_frac",
                          "block_underflow_frac"}) {
      CHECK(s[k][i].get<double>() >= 0);
      CHECK(s[k][i].get<double>() <= 1);
    }
  }
  CHECK(seen == std::set<std::string>{"forward input", "forward weight", "dgrad grad",
                                      "dgrad weight", "wgrad grad", "wgrad input"});
  // The forward weight and dgrad weight share NVFP4's 16x16 tiles: the same error (summed in
  // the other orientation).
  for (size_t i = 0; i + 1 < s["layer"].size(); i++)
    if (s["role"][i] == "forward" && s["operand"][i] == "weight")
      for (size_t j = 0; j < s["layer"].size(); j++)
        if (s["linear"][j] == s["linear"][i] && s["role"][j] == "dgrad" &&
            s["operand"][j] == "weight")
          CHECK(s["sqnr_db"][j].get<double>() ==
                doctest::Approx(s["sqnr_db"][i].get<double>()).epsilon(1e-12));
  const json sum = json::parse(tgt::slurp(d / "summary.json"));
  REQUIRE(sum.contains("quant"));
  CHECK(sum["quant"]["step"] == 4);
  CHECK(sum["quant"]["operands"].size() == 6);
  CHECK(sum["quant"]["operands"]["wgrad grad"]["slots"] == 4);
  // Telemetry off: no quant records. bf16: none either.
  tgt::TempDir off, wide;
  REQUIRE(run_binary(tiny_args(off.path) + " --train.steps=2 --precision.mode=mxfp8", &out) == 0);
  REQUIRE(run_binary(tiny_args(wide.path) +
                         " --train.steps=2 --precision.mode=bf16 --precision.telemetry_every=1",
                     &out) == 0);
  for (const tgt::TempDir* t : {&off, &wide}) {
    CHECK(tgt::read_metrics(*t / "metrics.jsonl", "quant").empty());
    CHECK(tgt::read_metrics(*t / "metrics.jsonl", "train").size() == 2);
  }
  // The report shows the table.
  REQUIRE(run_binary("report " + d.path + " --out " + (d / "rep"), &out) == 0);
  const std::string md = tgt::slurp(d / "rep/report.md");
  CHECK(md.find("Quantization error of each block-scaled recipe") != std::string::npos);
  CHECK(md.find("| nvfp4 | 4 |") != std::string::npos);
}
