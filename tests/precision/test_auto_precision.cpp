// test_auto_precision.cpp: precision.mode=auto (src/precision/auto_precision.h): the SQNR
// measurement against a direct computation, the policy on synthetic statistics (threshold,
// hysteresis, budget, priors), the per-linear recipes it composes, and auto runs of the binary
// (training, decisions logged, bit-exact resume, config errors).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "src/backends/cpu/ops.h"
#include "src/model/linear_quantizers.h"
#include "src/precision/auto_precision.h"
#include "tests/test_util.h"

using nlohmann::json;
using tgt::read_metrics;
using tgt::run_binary;
using tgt::tiny_args;

namespace {

std::vector<float> random_operand(int rows, int cols, uint64_t seed) {
  const std::vector<double> d = tgt::randn(size_t(rows) * cols, seed);
  std::vector<float> x(d.begin(), d.end());
  for (size_t i = 0; i < x.size(); i += 37) x[i] *= 20;  // a few large values
  return x;
}

// SQNR written out: quantize a copy, sum the squares in double.
double direct_sqnr(const std::vector<float>& x, int rows, int cols, const tg::OperandRecipe& o,
                   uint64_t seed) {
  std::vector<float> q = x;
  const float post = tg::cpu::quantize_dequantize(q.data(), rows, cols, o, seed);
  double s = 0, n = 0;
  for (size_t i = 0; i < x.size(); i++) {
    s += double(x[i]) * x[i];
    const double d = double(x[i]) - double(q[i]) * post;
    n += d * d;
  }
  return 10 * std::log10(s / n);
}

const std::vector<std::string> kNames = {"nvfp4", "mxfp8", "bf16"};
const std::vector<bool> kLowBit = {true, true, false};
constexpr double kInf = INFINITY;

}  // namespace

TEST_CASE("auto: SQNR, underflow and saturation equal a direct computation") {
  const int rows = 12, cols = 96;
  const std::vector<float> x = random_operand(rows, cols, 7);
  const tg::RecipeOptions opt;
  for (const char* name : {"nvfp4", "mxfp4", "mxfp8", "fp8", "fp8-block", "fp8-rowwise"}) {
    const tg::QuantRecipe r = tg::candidate_recipe(name, opt, "test");
    const tg::OperandRecipe& o = r.gemm[tg::kForward].a;  // no transform in the forward
    const tg::QuantError e = tg::cpu::quant_error(x.data(), rows, cols, o, 99);
    INFO(name);
    CHECK(tg::sqnr_db(e) == doctest::Approx(direct_sqnr(x, rows, cols, o, 99)).epsilon(1e-12));
    CHECK(tg::sqnr_db(e) > 5);
    CHECK(e.values == rows * cols);
  }
  // The rotation of the wgrad operands is orthogonal: the signal is the operand's energy.
  const tg::QuantRecipe nv = tg::candidate_recipe("nvfp4", opt, "test");
  const tg::OperandRecipe& h = nv.gemm[tg::kWeightGrad].a;
  REQUIRE(h.transform == tg::Transform::Hadamard);
  const tg::QuantError eh = tg::cpu::quant_error(x.data(), rows, cols, h, 5);
  double energy = 0;
  for (float v : x) energy += double(v) * v;
  CHECK(eh.signal == doctest::Approx(energy).epsilon(1e-5));
  CHECK(std::isfinite(tg::sqnr_db(eh)));

  // One 32-value MXFP4 block (OCP scale rule): amax 7.9 gets scale 2^(2 - 2) = 1, so 7.9
  // saturates to 6 and 0.2 flushes to 0 (E2M1's smallest step is 0.5).
  tg::OperandRecipe mx = tg::candidate_recipe("mxfp4", opt, "test").gemm[tg::kForward].a;
  REQUIRE(mx.scale_rule == tg::ScaleRule::Ocp);
  std::vector<float> b(32, 1.0f);
  b[3] = 7.9f;
  b[5] = 0.2f;
  b[6] = -0.2f;
  b[7] = 0.0f;
  const tg::QuantError eb = tg::cpu::quant_error(b.data(), 1, 32, mx, 1);
  CHECK(eb.saturated == 1);
  CHECK(eb.underflow == 2);
  CHECK(eb.nonzero == 31);
  const double noise = (7.9 - 6.0) * (7.9 - 6.0) + 2 * 0.2 * 0.2;
  CHECK(eb.noise == doctest::Approx(noise).epsilon(1e-6));
  // bf16 operands are left as they are: nothing is lost.
  const tg::QuantError e16 = tg::cpu::quant_error(x.data(), rows, cols, tg::OperandRecipe{}, 1);
  CHECK(e16.noise == 0);
  CHECK(std::isinf(tg::sqnr_db(e16)));
  tg::QuantError bad;
  bad.signal = 1;
  bad.noise = NAN;
  CHECK(std::isnan(tg::sqnr_db(bad)));
}

TEST_CASE("auto: the policy takes the narrowest format above the threshold") {
  // One GEMM (two slots), candidates nvfp4 / mxfp8 / bf16.
  const std::vector<double> flops = {1.0};
  const tg::AutoPolicy p{20, 0, 0};
  std::vector<tg::AutoChange> ch;
  // slot 0: nvfp4 14.2 dB, mxfp8 31 dB; slot 1: nvfp4 22 dB.
  std::vector<double> q = {14.2, 31, kInf, 22, 30, kInf};
  std::vector<int> f = tg::choose_formats({0, 1}, q, kLowBit, flops, p, kNames, &ch);
  CHECK(f == std::vector<int>{1, 0});
  REQUIRE(ch.size() == 2);
  CHECK(tg::auto_slot_name(ch[0].slot) + ": " + ch[0].why ==
        "layer 0 qkv forward input: nvfp4 -> mxfp8, SQNR 14.2 dB < 20.0 dB");
  CHECK(ch[1].why == "mxfp8 -> nvfp4, SQNR 22.0 dB >= 20.0 + 0.0 dB");
  // Nothing meets the threshold (or the measurement is NaN): the widest, bf16.
  q = {3, NAN, kInf, NAN, NAN, kInf};
  CHECK(tg::choose_formats({0, 1}, q, kLowBit, flops, p, kNames, nullptr) ==
        std::vector<int>{2, 2});
  // A higher threshold widens what a lower one narrows.
  q = {25, 35, kInf, 25, 35, kInf};
  CHECK(tg::choose_formats({1, 1}, q, kLowBit, flops, p, kNames, nullptr) ==
        std::vector<int>{0, 0});
  CHECK(tg::choose_formats({1, 1}, q, kLowBit, flops, tg::AutoPolicy{30, 0, 0}, kNames, nullptr) ==
        std::vector<int>{1, 1});
  CHECK(tg::choose_formats({1, 1}, q, kLowBit, flops, tg::AutoPolicy{40, 0, 0}, kNames, nullptr) ==
        std::vector<int>{2, 2});
}

TEST_CASE("auto: hysteresis keeps a format from flapping") {
  const std::vector<double> flops = {1.0};
  const tg::AutoPolicy p{20, 3, 0};
  // In mxfp8, nvfp4 at 21 dB is above the threshold but not by the hysteresis: stay.
  std::vector<double> q = {21, 30, kInf, 21, 30, kInf};
  CHECK(tg::choose_formats({1, 1}, q, kLowBit, flops, p, kNames, nullptr) ==
        std::vector<int>{1, 1});
  // Already in nvfp4 at 21 dB: stay there (no need for the margin to remain).
  CHECK(tg::choose_formats({0, 0}, q, kLowBit, flops, p, kNames, nullptr) ==
        std::vector<int>{0, 0});
  // 23.5 dB clears threshold + hysteresis: narrow.
  q = {23.5, 30, kInf, 22.9, 30, kInf};
  std::vector<tg::AutoChange> ch;
  CHECK(tg::choose_formats({1, 1}, q, kLowBit, flops, p, kNames, &ch) == std::vector<int>{0, 1});
  REQUIRE(ch.size() == 1);
  CHECK(ch[0].why == "mxfp8 -> nvfp4, SQNR 23.5 dB >= 20.0 + 3.0 dB");
  // A sequence of measurements oscillating around the threshold moves the format once.
  std::vector<int> f = {1, 1};
  int moves = 0;
  for (int i = 0; i < 10; i++) {
    const double s = i % 2 ? 19.5 : 21.5;  // nvfp4 below, then just above, the threshold
    const std::vector<int> g =
        tg::choose_formats(f, {s, 30, kInf, s, 30, kInf}, kLowBit, flops, p, kNames, nullptr);
    moves += g != f;
    f = g;
  }
  CHECK(moves == 0);
  CHECK(tg::choose_formats(f, {19.5, 30, kInf, 19.5, 30, kInf}, kLowBit, flops,
                           tg::AutoPolicy{20, 0, 0}, kNames, nullptr) == std::vector<int>{1, 1});
}

TEST_CASE("auto: the FLOP budget narrows the best-measured GEMMs first") {
  // Two GEMMs of 1 and 3 FLOPs whose low-bit SQNRs are all below the threshold.
  const std::vector<double> flops = {1.0, 3.0};
  const std::vector<double> q = {10, 18, kInf, 11, 17, kInf,   // GEMM 0: best 17 dB (min)
                                 9,  15, kInf, 12, 16, kInf};  // GEMM 1: best 15 dB
  const std::vector<int> wide = {2, 2, 2, 2};
  CHECK(tg::choose_formats(wide, q, kLowBit, flops, tg::AutoPolicy{20, 0, 0}, kNames, nullptr) ==
        wide);
  std::vector<tg::AutoChange> ch;
  std::vector<int> f =
      tg::choose_formats(wide, q, kLowBit, flops, tg::AutoPolicy{20, 0, 0.2}, kNames, &ch);
  CHECK(f == std::vector<int>{1, 1, 2, 2});  // GEMM 0 (0.25 of the FLOPs) suffices
  CHECK(tg::low_bit_flop_share(f, kLowBit, flops) == 0.25);
  REQUIRE(ch.size() == 2);
  CHECK(ch[0].why == "bf16 -> mxfp8, budget: low-bit FLOP share 0.00 < 0.20, SQNR 18.0 dB");
  f = tg::choose_formats(wide, q, kLowBit, flops, tg::AutoPolicy{20, 0, 0.5}, kNames, nullptr);
  CHECK(f == std::vector<int>{1, 1, 1, 1});
  CHECK(tg::low_bit_flop_share(f, kLowBit, flops) == 1.0);
  // Hysteresis in the budget: GEMM 1, low-bit now (nvfp4), keeps its formats although GEMM 0
  // measures 2 dB better, less than the 3 dB hysteresis; with 4 dB better, GEMM 0 wins.
  const std::vector<double> flops2 = {1.0, 1.0};
  const tg::AutoPolicy bh{20, 3, 0.5};
  std::vector<double> q2 = {10, 17, kInf, 10, 17, kInf, 15, 12, kInf, 15, 12, kInf};
  CHECK(tg::choose_formats({2, 2, 0, 0}, q2, kLowBit, flops2, bh, kNames, nullptr) ==
        std::vector<int>{2, 2, 0, 0});
  q2 = {10, 19.5, kInf, 10, 19.5, kInf, 15, 12, kInf, 15, 12, kInf};
  CHECK(tg::choose_formats({2, 2, 0, 0}, q2, kLowBit, flops2, bh, kNames, nullptr) ==
        std::vector<int>{1, 1, 2, 2});
  // No low-bit candidate at all: the budget cannot be met and nothing changes.
  const std::vector<bool> none = {false, false, false};
  CHECK(tg::choose_formats(wide, q, none, flops, tg::AutoPolicy{20, 0, 0.5}, kNames, nullptr) ==
        wide);
}

TEST_CASE("auto: priors, composed recipes, and the recipe table") {
  tg::AutoOptions o;  // nvfp4, mxfp8, fp8, bf16
  const tg::GPTConfig m = tg::gpt_config(3, 2, 32, 256, 32);
  const auto cands = tg::auto_candidates(o, tg::RecipeOptions{});
  REQUIRE(cands.size() == 4);
  CHECK(cands[2].low_bit);
  CHECK(!cands[3].low_bit);
  const size_t per_layer = tg::kAutoLinears * tg::kSlotsPerLinear;
  {
    tg::AutoPrecision a(o, cands, m);
    REQUIRE(a.formats().size() == 3 * per_layer);
    for (size_t s = 0; s < a.formats().size(); s++) {
      const bool edge = s < per_layer || s >= 2 * per_layer;
      CHECK(a.formats()[s] == (edge ? 3 : 2));  // bf16 at the ends, fp8 (widest 8-bit) between
    }
    CHECK(a.flop_share() == doctest::Approx(1.0 / 3));
  }
  o.priors = false;
  tg::AutoPrecision a(o, cands, m);
  for (int f : a.formats()) CHECK(f == 2);
  CHECK(a.flop_share() == 1.0);

  // nvfp4's wgrad rotation survives only when both wgrad operands are nvfp4.
  int f[tg::kSlotsPerLinear] = {0, 0, 0, 0, 0, 0};
  tg::QuantRecipe r = tg::compose_linear_recipe(cands, f);
  CHECK(r.gemm[tg::kWeightGrad].a.transform == tg::Transform::Hadamard);
  CHECK(r.gemm[tg::kWeightGrad].b.transform == tg::Transform::Hadamard);
  f[5] = 3;  // wgrad input in bf16
  r = tg::compose_linear_recipe(cands, f);
  CHECK(r.gemm[tg::kWeightGrad].a.transform == tg::Transform::None);
  CHECK(r.gemm[tg::kWeightGrad].b.elem == tg::ElemFormat::BF16);
  CHECK(r.gemm[tg::kForward].a.elem == tg::ElemFormat::E2M1);
  // The table carries it to the linear, alone.
  tg::QuantRecipe start = tg::candidate_recipe("bf16", tg::RecipeOptions{}, "test");
  tg::LinearQuantizers st(start, 3);
  REQUIRE(st.block_scaled());
  st.set_linear_recipe(1, tg::LinearQuantizers::FC, r);
  CHECK(st.scaled(1, tg::LinearQuantizers::FC, false).recipe->gemm[tg::kForward].a.elem ==
        tg::ElemFormat::E2M1);
  CHECK(st.scaled(1, tg::LinearQuantizers::QKV, false).recipe->gemm[tg::kForward].a.elem ==
        tg::ElemFormat::BF16);
  CHECK(st.scaled(0, tg::LinearQuantizers::FC, false).recipe->gemm[tg::kForward].a.elem ==
        tg::ElemFormat::BF16);

  // The state round-trips through JSON; a damaged one is an error naming the field.
  tg::AutoPrecision b(o, cands, m);
  b.from_json(a.to_json(), "x");
  CHECK(b.to_json() == a.to_json());
  json bad = a.to_json();
  bad["formats"][4] = "fp4";
  CHECK(tgt::error_of([&] { b.from_json(bad, "state.json"); }).find("auto.formats") !=
        std::string::npos);
}

TEST_CASE("cli: an auto run trains, logs its decisions, and resumes bit-exactly") {
  tgt::TempDir full, part;
  std::string out;
  const std::string args =
      " --model.n_layer=3 --train.steps=12 --eval.every=0 --precision.mode=auto "
      "--precision.auto.every=4";
  REQUIRE(run_binary(tiny_args(full.path) + args, &out) == 0);
  INFO(out);
  CHECK(out.find("auto: candidates nvfp4,mxfp8,fp8,bf16") != std::string::npos);
  CHECK(out.find("auto: final formats") != std::string::npos);
  const auto train = read_metrics(full / "metrics.jsonl", "train");
  REQUIRE(train.size() == 12);
  CHECK(train.back()["loss"].get<double>() < train.front()["loss"].get<double>() - 0.1);
  const auto rec = read_metrics(full / "metrics.jsonl", "auto");
  REQUIRE(rec.size() == 4);  // steps 1, 4, 8, 12
  CHECK(rec[0]["step"] == 1);
  CHECK(rec[3]["step"] == 12);
  const size_t slots = 3 * 4 * 6;
  REQUIRE(rec[0]["slots"]["format"].size() == slots);
  REQUIRE(rec[0]["slots"]["sqnr_db"]["mxfp8"].size() == slots);
  // Real measurements: mxfp8 keeps more of every operand than nvfp4; bf16 loses nothing.
  for (size_t s = 0; s < slots; s++) {
    CHECK(rec[0]["slots"]["sqnr_db"]["mxfp8"][s].get<double>() >
          rec[0]["slots"]["sqnr_db"]["nvfp4"][s].get<double>());
    CHECK(rec[0]["slots"]["sqnr_db"]["bf16"][s].is_null());
  }
  REQUIRE(rec[0]["tensors"]["amax"].size() == 3 * 4 * 3);
  double share = 0;
  for (const auto& g : rec[0]["grad_share"]) share += g.get<double>();
  CHECK(share > 0);
  CHECK(share < 1);  // embeddings, biases and layernorms hold the rest
  size_t changes = 0;
  for (const auto& r : rec) changes += r["changes"].size();
  CHECK(changes > 0);
  CHECK(out.find("auto: step 1: layer 0 qkv forward input: bf16 -> ") != std::string::npos);
  const json summary = json::parse(tgt::slurp(full / "summary.json"));
  REQUIRE(summary["auto"]["formats"].size() == 3);
  CHECK(summary["auto"]["formats"][1]["fc"]["forward.input"] ==
        rec[3]["slots"]["format"][tg::auto_slot(1, 2, 0, 0)]);

  // Resume from step 6: the same losses and the same decisions.
  REQUIRE(run_binary(tiny_args(part.path) + args + " --train.stop_at_step=6", &out) == 0);
  REQUIRE(run_binary(tiny_args(part.path) + args + " --checkpoint.resume=true", &out) == 0);
  const auto train2 = read_metrics(part / "metrics.jsonl", "train");
  REQUIRE(train2.size() == 12);
  for (int i = 0; i < 12; i++)
    CHECK(train2[i]["loss"].get<double>() == train[i]["loss"].get<double>());
  const auto rec2 = read_metrics(part / "metrics.jsonl", "auto");
  REQUIRE(rec2.size() == 4);
  for (size_t i = 0; i < 4; i++) {
    CHECK(rec2[i]["slots"]["format"] == rec[i]["slots"]["format"]);
    CHECK(rec2[i]["slots"]["sqnr_db"] == rec[i]["slots"]["sqnr_db"]);
  }
  CHECK(json::parse(tgt::slurp(part / "summary.json"))["auto"] == summary["auto"]);
}

TEST_CASE("cli: auto config errors name the key") {
  tgt::TempDir d;
  std::string out;
  const std::string base = tiny_args(d.path) + " --train.steps=1 --precision.mode=auto";
  CHECK(run_binary(base + " --precision.auto.candidates=nvfp4,fp4", &out) == 2);
  CHECK(out.find("precision.auto.candidates") != std::string::npos);
  CHECK(run_binary(base + " --precision.auto.candidates=mxfp8,mxfp8", &out) == 2);
  CHECK(out.find("listed twice") != std::string::npos);
  CHECK(run_binary(base + " --precision.auto.every=0", &out) == 2);
  CHECK(out.find("precision.auto.every") != std::string::npos);
  CHECK(run_binary(base + " --precision.auto.budget=1.5", &out) == 2);
  CHECK(out.find("precision.auto.budget") != std::string::npos);
}

TEST_CASE("auto: the split GEMM equals the unsplit one in exact arithmetic") {
  const int N = 6, C = 40, OC = 5;
  // Small integers: every product and partial sum is exact in fp32, in any order.
  std::vector<float> x(size_t(N) * C), w(size_t(OC) * C);
  tg::Rng rng(3);
  for (float& v : x) v = float(int(rng.next() % 9) - 4);
  for (float& v : w) v = float(int(rng.next() % 7) - 3);
  x[size_t(2) * C + 7] = 300;  // an outlier in channel 7
  const std::vector<int> split = {7, 30};
  tg::QuantRecipe wide = tg::candidate_recipe("bf16", tg::RecipeOptions{}, "test");
  auto run = [&](const tg::QuantRecipe& r) {
    std::vector<float> a = x, b = w, out(size_t(N) * OC);
    tg::cpu::matmul_forward_scaled(out.data(), a.data(), b.data(), nullptr, N, C, OC, r, 1);
    return out;
  };
  tg::QuantRecipe wide_split = wide;
  wide_split.split_channels = split;
  CHECK(run(wide_split) == run(wide));
  // Quantized: Q(the rest, split channels zero) plus the split channels' exact product.
  tg::QuantRecipe q = tg::candidate_recipe("mxfp4", tg::RecipeOptions{}, "test");
  tg::QuantRecipe q_split = q;
  q_split.split_channels = split;
  std::vector<float> xr = x, wr = w;
  for (int c : split) {
    for (int n = 0; n < N; n++) xr[size_t(n) * C + c] = 0;
    for (int o = 0; o < OC; o++) wr[size_t(o) * C + c] = 0;
  }
  std::vector<float> rest(size_t(N) * OC);
  tg::cpu::matmul_forward_scaled(rest.data(), xr.data(), wr.data(), nullptr, N, C, OC, q, 1);
  const std::vector<float> got = run(q_split);
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      float exact = 0;
      for (int c : split) exact += x[size_t(n) * C + c] * w[size_t(o) * C + c];
      CHECK(got[size_t(n) * OC + o] == rest[size_t(n) * OC + o] + exact);
    }
  // And the outlier really hurts the unsplit quantized GEMM (it shares scale blocks).
  const std::vector<float> plain = run(q), ref = run(wide);
  double err_split = 0, err_plain = 0;
  for (size_t i = 0; i < ref.size(); i++) {
    err_split += std::fabs(got[i] - ref[i]);
    err_plain += std::fabs(plain[i] - ref[i]);
  }
  CHECK(err_split < err_plain);
}

TEST_CASE("cli: an injected outlier channel is found, split out, and changes the map") {
  tgt::TempDir plain, outlier, part;
  std::string out;
  const std::string args =
      " --model.n_layer=3 --train.steps=8 --eval.every=0 --precision.mode=auto "
      "--precision.auto.every=4";
  REQUIRE(run_binary(tiny_args(plain.path) + args, &out) == 0);
  const std::string inject = " --precision.inject_outlier=1:5:30";
  const int rc = run_binary(tiny_args(outlier.path) + args + inject, &out);
  // The split channels travel in checkpoints: a resumed run decides alike.
  const int rc1 =
      run_binary(tiny_args(part.path) + args + inject + " --train.stop_at_step=5", nullptr);
  const int rc2 =
      run_binary(tiny_args(part.path) + args + inject + " --checkpoint.resume=true", nullptr);
  INFO(out);
  REQUIRE(rc == 0);
  REQUIRE(rc1 == 0);
  REQUIRE(rc2 == 0);
  CHECK(out.find("auto: step 1: layer 1 fc forward input: outlier channels [5]") !=
        std::string::npos);
  const json a = json::parse(tgt::slurp(plain / "summary.json"))["auto"];
  const json b = json::parse(tgt::slurp(outlier / "summary.json"))["auto"];
  CHECK(a["formats"] != b["formats"]);
  CHECK(a["formats"][1]["fc"]["split_channels"].empty());
  CHECK(b["formats"][1]["fc"]["split_channels"] == json::array({5}));
  CHECK(b["formats"][0]["fc"]["split_channels"].empty());
  const auto rec = read_metrics(outlier / "metrics.jsonl", "auto");
  REQUIRE(!rec.empty());
  const size_t fc1 = 1 * 4 + 2;
  CHECK(rec[0]["outliers"]["count"][fc1] == 1);
  CHECK(rec[0]["outliers"]["max_ratio"][fc1].get<double>() > 8);
  const auto prec = read_metrics(plain / "metrics.jsonl", "auto");
  CHECK(prec[0]["outliers"]["count"][fc1] == 0);
  CHECK(json::parse(tgt::slurp(part / "summary.json"))["auto"] == b);
  const auto t1 = read_metrics(outlier / "metrics.jsonl", "train");
  const auto t2 = read_metrics(part / "metrics.jsonl", "train");
  REQUIRE(t1.size() == 8);
  REQUIRE(t2.size() == 8);
  for (size_t i = 0; i < 8; i++) CHECK(t2[i]["loss"].get<double>() == t1[i]["loss"].get<double>());

  // The report shows the final map (with the split) and draws it over the steps.
  tgt::TempDir rep;
  REQUIRE(run_binary("report " + outlier.path + " --out " + rep.path, &out) == 0);
  const std::string md = tgt::slurp(rep / "report.md");
  CHECK(md.find("auto: final formats") != std::string::npos);
  CHECK(md.find("split channels [5]") != std::string::npos);
  CHECK(md.find("auto_auto.png") != std::string::npos);
  CHECK(tgt::slurp(rep / "auto_auto.png").size() > 1000);
}

TEST_CASE("mpi: auto decisions agree over 2 ranks and match one process with all the rows") {
  tgt::TempDir one, two;
  std::string out;
  const std::string args =
      " --model.n_layer=3 --train.steps=8 --eval.every=0 --precision.mode=auto "
      "--precision.auto.every=4 --train.threads=1";
  REQUIRE(run_binary(tiny_args(one.path) + args + " --data.batch_size=8", &out) == 0);
  // Every rank checks its formats against rank 0's after each decision
  // (PrecisionRuntime::auto_decide).
  const int rc = tgt::run_shell(
      "ASAN_OPTIONS=detect_leaks=0 timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 " +
          tgt::binary() + " " + tiny_args(two.path) + args + " --data.batch_size=4",
      &out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("data parallel: MPI, 2 processes") != std::string::npos);
  const auto a = read_metrics(one / "metrics.jsonl", "auto");
  const auto b = read_metrics(two / "metrics.jsonl", "auto");
  REQUIRE(a.size() == 3);
  REQUIRE(b.size() == 3);
  for (size_t i = 0; i < 3; i++) {
    CHECK(b[i]["slots"]["format"] == a[i]["slots"]["format"]);
    // Block-scaled SQNRs are sums over rows, so 2 x 4 rows measure what 8 rows do: at step 1
    // (the same weights) up to the stochastic rounding's bits, which follow each rank's row
    // indices; later, the two runs' weights also differ by the all-reduce's order of sums.
    const auto& qa = a[i]["slots"]["sqnr_db"]["mxfp8"];
    const auto& qb = b[i]["slots"]["sqnr_db"]["mxfp8"];
    double worst = 0;
    for (size_t s = 0; s < qa.size(); s++)
      worst = std::max(worst, std::fabs(qa[s].get<double>() - qb[s].get<double>()));
    INFO("measurement " << i << ": largest SQNR difference " << worst << " dB");
    CHECK(worst < (i == 0 ? 0.5 : 1.0));  // measured: 0.21, 0.22, 0.52 dB
  }
}

TEST_CASE("auto: outlier channels are flagged above k x the median and leave below k/2") {
  tg::AutoOptions o;
  o.outlier_k = 8;
  const tg::GPTConfig m = tg::gpt_config(1, 2, 16, 256, 32);
  tg::AutoPrecision a(o, tg::auto_candidates(o, tg::RecipeOptions{}), m);
  const int N = 8, C = 16;
  auto measure = [&](float outlier) {
    std::vector<float> x(size_t(N) * C);
    for (int n = 0; n < N; n++)
      for (int c = 0; c < C; c++) x[size_t(n) * C + c] = (n + c) % 2 ? 1.0f : -0.5f;
    x[size_t(3) * C + 9] = outlier;  // channel 9, one token
    a.begin(1, 7);
    a.take(0, tg::LinearQuantizers::FC, tg::kLinearInput, x.data(), N, C);
    return a.decide();
  };
  std::vector<tg::AutoChange> ch = measure(20);
  CHECK(a.split_channels(0, tg::LinearQuantizers::FC) == std::vector<int>{9});
  CHECK(a.split_channels(0, tg::LinearQuantizers::QKV).empty());
  bool logged = false;
  for (const auto& c : ch)
    logged |= a.describe(c) ==
              "layer 0 fc forward input: outlier channels [9] (largest 20.0x the median) split "
              "out unquantized";
  CHECK(logged);
  CHECK(a.linear_recipe(0, tg::LinearQuantizers::FC).split_channels == std::vector<int>{9});
  CHECK(a.record()["outliers"]["count"][2] == 1);
  measure(6);  // below k, above k/2: stays split
  CHECK(a.split_channels(0, tg::LinearQuantizers::FC) == std::vector<int>{9});
  CHECK(a.record()["outliers"]["count"][2] == 0);
  measure(3);  // below k/2: back with the others
  CHECK(a.split_channels(0, tg::LinearQuantizers::FC).empty());
  measure(7);  // not above k: not split again
  CHECK(a.split_channels(0, tg::LinearQuantizers::FC).empty());
}
