// test_smoothing.cpp: channel smoothing of the block linears' forward GEMM
// (src/precision/smoothing.h): the factors' formula, the unquantized product unchanged to rounding
// and the backward untouched, the quantization error it saves on an outlier channel, the
// measurement steps, bit-exact resume, auto's use of it, and the config keys (also
// precision.inject_outlier).
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "src/backends/cpu/ops.h"
#include "src/comm/comm.h"
#include "src/config/config.h"
#include "src/numerics/formats.h"
#include "src/numerics/recipe.h"
#include "src/precision/auto_precision.h"
#include "src/precision/smoothing.h"
#include "tests/test_util.h"

using nlohmann::json;
using tgt::read_metrics;
using tgt::run_binary;
using tgt::tiny_args;

namespace {

std::vector<float> randn_f(size_t n, uint64_t seed, double scale) {
  const std::vector<double> d = tgt::randn(n, seed);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; i++) x[i] = float(d[i] * scale);
  return x;
}

std::vector<float> forward(const std::vector<float>& x, const std::vector<float>& w, int N, int C,
                           int OC, const tg::QuantRecipe& r) {
  std::vector<float> a = x, b = w, out(size_t(N) * OC);
  tg::cpu::matmul_forward_scaled(out.data(), a.data(), b.data(), nullptr, N, C, OC, r, 11);
  return out;
}

}  // namespace

TEST_CASE("smoothing: s_c = amax_x^alpha / amax_w^(1-alpha), 1 where an amax is zero") {
  const std::vector<float> ax = {4, 0, 9, 2, NAN}, aw = {1, 2, 0, 8, 1};
  std::vector<float> s = tg::smoothing_factors(ax, aw, 0.5);
  CHECK(s[0] == doctest::Approx(2.0));
  CHECK(s[1] == 1.0f);  // a dead input channel
  CHECK(s[2] == 1.0f);  // a zero weight column
  CHECK(s[3] == doctest::Approx(0.5));
  CHECK(s[4] == 1.0f);                     // no finite measurement
  s = tg::smoothing_factors(ax, aw, 1.0);  // all of the activation's range into the weight
  CHECK(s[0] == doctest::Approx(4.0));
  CHECK(s[3] == doctest::Approx(2.0));
  s = tg::smoothing_factors(ax, aw, 0.0);  // all of the weight's range into the activation
  CHECK(s[3] == doctest::Approx(0.125));
  // Both smoothed operands of channel c end with the same amax, amax_x^(1-a) amax_w^a.
  s = tg::smoothing_factors({100, 1}, {0.01f, 1}, 0.5);
  CHECK(100 / s[0] == doctest::Approx(0.01 * s[0]));
  // A factor whose reciprocal would not be a normal float is left out.
  CHECK(tg::smoothing_factors({1e38f}, {1e-6f}, 0.5)[0] == doctest::Approx(1e22));
  CHECK(tg::smoothing_factors({1e38f}, {1e-6f}, 1.0)[0] == 1.0f);  // 1 / 1e38 is subnormal
}

TEST_CASE("smoothing: the unquantized forward is unchanged to rounding, the backward untouched") {
  const int N = 24, C = 64, OC = 12;
  std::vector<float> x = randn_f(size_t(N) * C, 1, 1.0), w = randn_f(size_t(OC) * C, 2, 0.1);
  for (int n = 0; n < N; n++) x[size_t(n) * C + 5] *= 60;  // an outlier channel
  tg::QuantRecipe wide = tg::candidate_recipe("bf16", tg::RecipeOptions{}, "test");
  tg::QuantRecipe smoothed = wide;
  smoothed.smooth =
      tg::smoothing_factors(tgt::column_amax(x, N, C), tgt::column_amax(w, OC, C), 0.5);
  REQUIRE(smoothed.smooth[5] > 4);
  const std::vector<float> a = forward(x, w, N, C, OC, wide), b = forward(x, w, N, C, OC, smoothed);
  int differ = 0;
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double mag = 0;  // sum |x w|: the scale of the product's rounding
      for (int c = 0; c < C; c++)
        mag += std::fabs(double(x[size_t(n) * C + c]) * w[size_t(o) * C + c]);
      const size_t i = size_t(n) * OC + o;
      // Rounding x / s and w s in fp32: one ulp each, a few ulps of sum |x w| in all.
      CHECK(std::fabs(double(a[i]) - b[i]) <= 4 * 0x1p-24 * mag);
      differ += a[i] != b[i];
    }
  CHECK(differ > 0);  // the factors were applied (the rounding shows somewhere)
  // The backward takes the unsmoothed operands: bit for bit the unsmoothed backward.
  const tg::QuantRecipe q = tg::candidate_recipe("mxfp8", tg::RecipeOptions{}, "test");
  tg::QuantRecipe qs = q;
  qs.smooth = smoothed.smooth;
  auto backward = [&](const tg::QuantRecipe& r) {
    std::vector<float> dout = randn_f(size_t(N) * OC, 3, 1.0), dinp(size_t(N) * C),
                       dw(size_t(OC) * C, 0.0f);
    tg::cpu::ScaledScratch s;
    tg::cpu::matmul_backward_scaled(dinp.data(), dw.data(), dout.data(), x.data(), w.data(), N, C,
                                    OC, r, 5, s);
    dinp.insert(dinp.end(), dw.begin(), dw.end());
    return dinp;
  };
  CHECK(backward(qs) == backward(q));
  // A factor list that does not fit the GEMM is an error, not a silent misuse.
  tg::QuantRecipe bad = wide;
  bad.smooth.assign(size_t(C) - 1, 1.0f);
  CHECK_THROWS_WITH_AS(forward(x, w, N, C, OC, bad), doctest::Contains("input channels"),
                       tg::Error);
}

TEST_CASE("smoothing: on an outlier channel it lowers the quantized forward error vs fp64") {
  const int N = 64, C = 128, OC = 32;
  std::vector<float> x = randn_f(size_t(N) * C, 7, 1.0), w = randn_f(size_t(OC) * C, 8, 0.05);
  for (int n = 0; n < N; n++) x[size_t(n) * C + 37] *= 50;  // a persistent outlier feature
  std::vector<double> ref(size_t(N) * OC, 0.0);
  double ref_sq = 0;
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double acc = 0;
      for (int c = 0; c < C; c++) acc += double(x[size_t(n) * C + c]) * w[size_t(o) * C + c];
      ref[size_t(n) * OC + o] = acc;
      ref_sq += acc * acc;
    }
  auto rel_err = [&](const std::vector<float>& y) {
    double e = 0;
    for (size_t i = 0; i < y.size(); i++) e += (y[i] - ref[i]) * (y[i] - ref[i]);
    return std::sqrt(e / ref_sq);
  };
  const std::vector<float> s =
      tg::smoothing_factors(tgt::column_amax(x, N, C), tgt::column_amax(w, OC, C), 0.5);
  // Where one scale spans the whole row (fp8-rowwise: per token) or a block of 16 with a
  // narrow element (nvfp4), the outlier costs the other channels most, and smoothing helps.
  // With 32-element E8M0 blocks (mxfp8, mxfp4) or 1x128 fp32 blocks (fp8-block) the outlier
  // already costs little (one block per row), and moving half its range into every row of
  // the weight costs about as much as it saves: measured, no better there.
  struct Expect {
    const char* name;
    double most;  // smoothed error / plain error at most
  };
  for (const Expect& e : {Expect{"fp8-rowwise", 0.5}, Expect{"nvfp4", 0.8}, Expect{"mxfp8", 1.25},
                          Expect{"mxfp4", 1.25}, Expect{"fp8-block", 1.25}}) {
    tg::QuantRecipe q = tg::candidate_recipe(e.name, tg::RecipeOptions{}, "test");
    tg::QuantRecipe qs = q;
    qs.smooth = s;
    const double plain = rel_err(forward(x, w, N, C, OC, q));
    const double smooth = rel_err(forward(x, w, N, C, OC, qs));
    const std::string line = std::string(e.name) + ": forward GEMM relative error vs fp64 " +
                             std::to_string(plain) + " plain, " + std::to_string(smooth) +
                             " smoothed (alpha 0.5)";
    INFO(line);
    MESSAGE(line);
    CHECK(smooth < e.most * plain);
  }
  // Without an outlier there is little to gain, and nothing breaks: no worse than 1.5x.
  std::vector<float> x0 = randn_f(size_t(N) * C, 7, 1.0);
  tg::QuantRecipe q = tg::candidate_recipe("mxfp8", tg::RecipeOptions{}, "test");
  tg::QuantRecipe qs = q;
  qs.smooth = tg::smoothing_factors(tgt::column_amax(x0, N, C), tgt::column_amax(w, OC, C), 0.5);
  std::vector<double> r0(size_t(N) * OC, 0.0);
  auto e0 = [&](const tg::QuantRecipe& r) {
    const std::vector<float> y = forward(x0, w, N, C, OC, r);
    double e = 0, t = 0;
    for (int n = 0; n < N; n++)
      for (int o = 0; o < OC; o++) {
        double acc = 0;
        for (int c = 0; c < C; c++) acc += double(x0[size_t(n) * C + c]) * w[size_t(o) * C + c];
        e += (y[size_t(n) * OC + o] - acc) * (y[size_t(n) * OC + o] - acc);
        t += acc * acc;
      }
    return std::sqrt(e / t);
  };
  CHECK(e0(qs) < 1.5 * e0(q));
}

TEST_CASE("smoothing: measured at step 1 and every N steps, factors saved and checked") {
  const tg::GPTConfig m = tg::gpt_config(2, 2, 16, 256, 32);
  tg::ChannelSmoothing sm(tg::SmoothOptions{0.5, 4}, m);
  CHECK(sm.due(1));
  CHECK(!sm.due(2));
  CHECK(!sm.due(3));
  CHECK(sm.due(4));
  CHECK(sm.due(8));
  CHECK(sm.factors(1, 2).empty());  // none before the first measurement
  const int N = 4, C = 16;
  std::vector<float> x(size_t(N) * C, 1.0f), w(size_t(3) * C, 0.25f);
  x[size_t(2) * C + 3] = -16;
  sm.begin(4);
  sm.take(1, 2, tg::kLinearInput, x.data(), N, C);
  sm.take(1, 2, tg::kLinearWeight, w.data(), 3, C);
  sm.take(1, 2, tg::kLinearGrad, x.data(), N, C);  // ignored
  auto single = tg::make_single_comm();
  sm.update(*single);
  REQUIRE(sm.factors(1, 2).size() == 16);
  CHECK(sm.factors(1, 2)[3] == doctest::Approx(8.0));  // sqrt(16) / sqrt(0.25)
  CHECK(sm.factors(1, 2)[0] == doctest::Approx(2.0));
  CHECK(sm.factors(0, 3).size() == 64);  // fcproj: 4C input channels, nothing seen: all 1
  CHECK(sm.factors(0, 3)[0] == 1.0f);
  CHECK(sm.updated_at() == 4);
  const json rec = sm.record();
  CHECK(rec["kind"] == "smooth");
  CHECK(rec["step"] == 4);
  CHECK(rec["max_factor"][1 * 4 + 2].get<double>() == doctest::Approx(8.0));
  // The state round-trips bit for bit and is checked on load.
  tg::ChannelSmoothing back(tg::SmoothOptions{0.5, 4}, m);
  back.from_json(json::parse(sm.to_json().dump()), "state.json");
  for (int l = 0; l < 2; l++)
    for (int lin = 0; lin < 4; lin++) CHECK(back.factors(l, lin) == sm.factors(l, lin));
  json bad = sm.to_json();
  bad["factors"][6][3] = -1.0;
  CHECK_THROWS_WITH_AS(back.from_json(bad, "s.json"), doctest::Contains("smoothing.factors"),
                       tg::Error);
  bad = sm.to_json();
  bad["factors"].erase(0);
  CHECK_THROWS_WITH_AS(back.from_json(bad, "s.json"), doctest::Contains("8 factor lists"),
                       tg::Error);
}

TEST_CASE("smoothing: auto measures the forward operands as the smoothed GEMM takes them") {
  tg::AutoOptions o;
  o.split_outliers = false;
  o.candidates = {tg::Mode::NVFP4, tg::Mode::BF16};
  const tg::GPTConfig m = tg::gpt_config(1, 2, 16, 256, 32);
  tg::AutoPrecision a(o, tg::auto_candidates(o, tg::RecipeOptions{}), m);
  tg::ChannelSmoothing sm(tg::SmoothOptions{0.5, 10}, m);
  const int N = 8, C = 16, OC = 64;
  std::vector<float> x = randn_f(size_t(N) * C, 4, 1.0), w = randn_f(size_t(OC) * C, 5, 0.1);
  for (int n = 0; n < N; n++) x[size_t(n) * C + 9] *= 40;
  auto measure = [&](int64_t step) {
    a.begin(step, 7);
    a.take(0, tg::LinearQuantizers::FC, tg::kLinearInput, x.data(), N, C);
    a.take(0, tg::LinearQuantizers::FC, tg::kLinearWeight, w.data(), OC, C);
    return a.record()["slots"]["sqnr_db"]["nvfp4"];
  };
  const json before = measure(1);
  sm.begin(1);
  sm.take(0, tg::LinearQuantizers::FC, tg::kLinearInput, x.data(), N, C);
  sm.take(0, tg::LinearQuantizers::FC, tg::kLinearWeight, w.data(), OC, C);
  sm.update(*tg::make_single_comm());
  a.set_smoothing(&sm);
  const json after = measure(2);
  const int slot = tg::auto_slot(0, tg::LinearQuantizers::FC, tg::kForward, 0);
  // What the forward GEMM quantizes: x diag(1/s) and w diag(s); the seeds are the slot's.
  std::vector<float> xs = x, ws = w;
  tg::cpu::smooth_columns(xs.data(), N, C, sm.factors(0, tg::LinearQuantizers::FC), true);
  tg::cpu::smooth_columns(ws.data(), OC, C, sm.factors(0, tg::LinearQuantizers::FC), false);
  const tg::AutoCandidate nv = tg::auto_candidates(o, tg::RecipeOptions{})[0];
  const uint64_t seed_a =
      tg::detail::splitmix64_mix(7 + uint64_t(slot * 64 + 1) * 0x9E3779B97F4A7C15ull);
  const uint64_t seed_b =
      tg::detail::splitmix64_mix(7 + uint64_t((slot + 1) * 64 + 1) * 0x9E3779B97F4A7C15ull);
  CHECK(after[slot].get<double>() ==
        doctest::Approx(tg::sqnr_db(
            tg::cpu::quant_error(xs.data(), N, C, nv.recipe.gemm[tg::kForward].a, seed_a))));
  CHECK(after[slot + 1].get<double>() ==
        doctest::Approx(tg::sqnr_db(
            tg::cpu::quant_error(ws.data(), OC, C, nv.recipe.gemm[tg::kForward].b, seed_b))));
  CHECK(after[slot] != before[slot]);
  // The backward slots measure the operands as they are: unchanged.
  const int wgrad_input = tg::auto_slot(0, tg::LinearQuantizers::FC, tg::kWeightGrad, 1);
  CHECK(after[wgrad_input] == before[wgrad_input]);
}

TEST_CASE("cli: smoothing with a fixed block-scaled mode: steps, effect, bit-exact resume") {
  tgt::TempDir plain, smooth, part;
  std::string out;
  const std::string args =
      " --model.n_layer=2 --train.steps=7 --eval.every=0 --precision.mode=nvfp4 "
      "--precision.inject_outlier=0:5:30";
  const std::string sm = " --precision.recipe.smooth=true --precision.recipe.smooth_every=3";
  REQUIRE(run_binary(tiny_args(plain.path) + args, &out) == 0);
  const int rc = run_binary(tiny_args(smooth.path) + args + sm, &out);
  const int rc1 = run_binary(tiny_args(part.path) + args + sm + " --train.stop_at_step=4", nullptr);
  const int rc2 =
      run_binary(tiny_args(part.path) + args + sm + " --checkpoint.resume=true", nullptr);
  INFO(out);
  REQUIRE(rc == 0);
  REQUIRE(rc1 == 0);
  REQUIRE(rc2 == 0);
  CHECK(out.find("smoothing: forward GEMMs") != std::string::npos);
  CHECK(out.find("smooth: step 1: channel factors") != std::string::npos);
  const auto recs = read_metrics(smooth / "metrics.jsonl", "smooth");
  REQUIRE(recs.size() == 3);
  CHECK(recs[0]["step"] == 1);
  CHECK(recs[1]["step"] == 3);
  CHECK(recs[2]["step"] == 6);
  // The injected outlier (layer 0's fc input, channel 5) gets the largest factor there.
  CHECK(recs[0]["max_factor"][2].get<double>() > 2 * recs[0]["max_factor"][6].get<double>());
  CHECK(read_metrics(plain / "metrics.jsonl", "smooth").empty());
  const auto a = read_metrics(plain / "metrics.jsonl", "train");
  const auto b = read_metrics(smooth / "metrics.jsonl", "train");
  const auto c = read_metrics(part / "metrics.jsonl", "train");
  REQUIRE(a.size() == 7);
  REQUIRE(b.size() == 7);
  REQUIRE(c.size() == 7);
  CHECK(a[0]["loss"] == b[0]["loss"]);  // step 1 runs before the first factors
  CHECK(a[6]["loss"] != b[6]["loss"]);  // then smoothing changes the quantized forward
  for (size_t i = 0; i < 7; i++) CHECK(c[i]["loss"].get<double>() == b[i]["loss"].get<double>());
  // The resumed run's smooth records continue from the checkpoint (step 4): step 6 only.
  const auto pr = read_metrics(part / "metrics.jsonl", "smooth");
  REQUIRE(pr.size() == 3);
  CHECK(pr[2] == recs[2]);
}

TEST_CASE("cli: auto with outliers=smooth measures the smoothed forward operands") {
  tgt::TempDir none, smooth;
  std::string out;
  const std::string args =
      " --model.n_layer=3 --train.steps=4 --eval.every=0 --precision.mode=auto "
      "--precision.auto.every=2 --precision.inject_outlier=1:5:30";
  REQUIRE(run_binary(tiny_args(none.path) + args + " --precision.auto.outliers=none", &out) == 0);
  const int rc =
      run_binary(tiny_args(smooth.path) + args + " --precision.auto.outliers=smooth", &out);
  INFO(out);
  REQUIRE(rc == 0);
  const auto a = read_metrics(none / "metrics.jsonl", "auto");
  const auto b = read_metrics(smooth / "metrics.jsonl", "auto");
  REQUIRE(a.size() == 3);
  REQUIRE(b.size() == 3);
  // Layer 1 fc forward input: the same at step 1 (no factors yet), better once smoothed.
  const size_t slot = size_t(tg::auto_slot(1, 2, tg::kForward, 0));
  CHECK(a[0]["slots"]["sqnr_db"]["nvfp4"][slot] == b[0]["slots"]["sqnr_db"]["nvfp4"][slot]);
  for (size_t b_ = 0; b_ < 2; b_++) {
    const double sa = a[1]["slots"]["sqnr_db"]["nvfp4"][slot + b_].get<double>();
    const double sb = b[1]["slots"]["sqnr_db"]["nvfp4"][slot + b_].get<double>();
    MESSAGE("auto, step 2, layer 1 fc forward " << std::string(b_ ? "weight" : "input")
                                                << ", nvfp4 SQNR: " << sa << " dB unsmoothed, "
                                                << sb << " dB smoothed");
    CHECK(sb != sa);  // measured on the smoothed operands
  }
  CHECK(b[1]["outliers"]["split"][1 * 4 + 2].empty());  // smoothing instead of the split
  const auto f = read_metrics(smooth / "metrics.jsonl", "smooth");
  REQUIRE(f.size() == 1);  // step 1 (precision.recipe.smooth_every: 10)
  // The injected channel (layer 1 fc, channel 5) takes the largest factor of that linear.
  CHECK(f[0]["max_factor"][1 * 4 + 2].get<double>() >
        2 * f[0]["max_factor"][2 * 4 + 2].get<double>());
  CHECK(read_metrics(none / "metrics.jsonl", "smooth").empty());
}

TEST_CASE("cli: smoothing and outlier injection config errors name their key") {
  tgt::TempDir d;
  std::string out;
  const std::string base = tiny_args(d.path) + " --train.steps=1";
  CHECK(run_binary(base + " --precision.mode=bf16 --precision.recipe.smooth=true", &out) == 2);
  CHECK(out.find("precision.recipe.smooth") != std::string::npos);
  CHECK(run_binary(base + " --precision.mode=mxfp8 --precision.recipe.smooth_alpha=1.5", &out) ==
        2);
  CHECK(out.find("precision.recipe.smooth_alpha") != std::string::npos);
  CHECK(run_binary(base + " --precision.mode=mxfp8 --precision.recipe.smooth_every=0", &out) == 2);
  CHECK(out.find("precision.recipe.smooth_every") != std::string::npos);
  CHECK(run_binary(base + " --precision.inject_outlier=1,5,30", &out) == 2);
  CHECK(out.find("precision.inject_outlier") != std::string::npos);
  CHECK(run_binary(base + " --precision.inject_outlier=0:5:3x", &out) == 2);
  CHECK(out.find("LAYER:CHANNEL:FACTOR") != std::string::npos);
  CHECK(run_binary(base + " --precision.inject_outlier=3:5:30", &out) == 2);  // 1 layer
  CHECK(out.find("no channel 5 in layer 3") != std::string::npos);
  CHECK(run_binary(base + " --precision.inject_outlier=0:5%4:30", &out) == 2);
  CHECK(out.find("channel 5 is not below the period 4") != std::string::npos);
  CHECK(run_binary(base + " --precision.inject_outlier=0:5:30,", &out) == 2);
  CHECK(out.find("precision.inject_outlier") != std::string::npos);
  CHECK(run_binary(base + " --precision.inject_outlier=*:20%32:30", &out) == 2);  // 16 channels
  CHECK(out.find("no channel 20 in layer *") != std::string::npos);
  CHECK(run_binary(base + " --precision.auto.outliers=smoothe", &out) == 2);
  CHECK(out.find("precision.auto.outliers") != std::string::npos);
}

TEST_CASE("config: precision.inject_outlier takes several entries, every layer and a period") {
  std::vector<tg::InjectedOutlier> e;
  std::string why;
  REQUIRE(tg::parse_inject_outlier("", &e, &why));
  CHECK(e.empty());
  REQUIRE(tg::parse_inject_outlier("1:5:30", &e, &why));
  REQUIRE(e.size() == 1);
  CHECK((e[0].layer == 1 && e[0].channel == 5 && e[0].period == 0 && e[0].factor == 30));
  REQUIRE(tg::parse_inject_outlier("*:5%16:20,0:3:-2.5", &e, &why));
  REQUIRE(e.size() == 2);
  CHECK((e[0].layer == -1 && e[0].channel == 5 && e[0].period == 16 && e[0].factor == 20));
  CHECK((e[1].layer == 0 && e[1].channel == 3 && e[1].period == 0 && e[1].factor == -2.5));
  for (const char* bad : {"1:5", "1:5:30:2", "x:5:30", "-1:5:30", "1:5%0:30", "1:5%:30", "1:%4:30",
                          "1:5:inf", "1:5:30,,2:1:3", ",1:5:30", "**:1:2"}) {
    INFO(bad);
    CHECK_FALSE(tg::parse_inject_outlier(bad, &e, &why));
    CHECK(!why.empty());
  }
}

TEST_CASE("cli: an injected outlier in every layer at every P-th channel is what auto finds") {
  tgt::TempDir d;
  std::string out;
  // 2 layers of 16 channels; channels 1, 5, 9, 13 of every fc input 30x the rest.
  const int rc = run_binary(tiny_args(d.path) +
                                " --model.n_layer=2 --train.steps=1 --eval.every=0 "
                                "--precision.mode=auto --precision.auto.outlier_k=4 "
                                "--precision.inject_outlier=*:1%4:30",
                            &out);
  INFO(out);
  REQUIRE(rc == 0);
  const auto recs = read_metrics(d / "metrics.jsonl", "auto");
  REQUIRE(!recs.empty());
  const auto& ch = recs[0]["outliers"]["channels"];
  for (int layer = 0; layer < 2; layer++) {
    INFO(layer);
    CHECK(ch[layer * tg::kAutoLinears + tg::LinearQuantizers::FC] == nlohmann::json({1, 5, 9, 13}));
    CHECK(ch[layer * tg::kAutoLinears + tg::LinearQuantizers::QKV].empty());
  }
}

TEST_CASE("mpi: smoothing factors agree over 2 ranks and equal one process with all the rows") {
  tgt::TempDir one, two;
  std::string out;
  const std::string args =
      " --model.n_layer=2 --train.steps=4 --eval.every=0 --precision.mode=mxfp8 "
      "--precision.recipe.smooth=true --precision.recipe.smooth_every=2 "
      "--precision.inject_outlier=0:5:30 --train.threads=1 --train.stop_at_step=1";
  REQUIRE(run_binary(tiny_args(one.path) + args + " --data.batch_size=8", &out) == 0);
  const int rc = tgt::run_shell(
      "ASAN_OPTIONS=detect_leaks=0 timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 " +
          tgt::binary() + " " + tiny_args(two.path) + args + " --data.batch_size=4",
      &out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("data parallel: MPI, 2 processes") != std::string::npos);
  // Per-channel amaxes maxed over the ranks are those of all the rows: step 1 (before any
  // update, whose gradient sums would differ in their last bits) gives the same factors, bit
  // for bit, as the checkpoints hold them (rank 0 writes; every rank runs rank 0's).
  const auto a = read_metrics(one / "metrics.jsonl", "smooth");
  const auto b = read_metrics(two / "metrics.jsonl", "smooth");
  REQUIRE(a.size() == 1);
  REQUIRE(b.size() == 1);
  CHECK(b[0] == a[0]);
  const json sa = json::parse(tgt::slurp(one / "ckpt_00000001/state.json"))["smoothing"];
  const json sb = json::parse(tgt::slurp(two / "ckpt_00000001/state.json"))["smoothing"];
  REQUIRE(sa["factors"].size() == 8);
  CHECK(sa["updated_at"] == 1);
  // The injected outlier channel (x30): about sqrt(30) x its neighbours' factor.
  CHECK(sa["factors"][2][5].get<double>() > 3 * sa["factors"][2][4].get<double>());
  CHECK(sb == sa);
}
