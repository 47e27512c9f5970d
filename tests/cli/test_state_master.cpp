// End-to-end tests of precision.state.master (src/numerics/master_format.h): bf16 master
// weights train, plan and allocate their bytes, checkpoint and resume bit-exactly (alone and
// under ZeRO-1), convert between formats only where nothing is lost unless asked, and are
// refused by name where the mode has no bf16 weights.
#include <doctest/doctest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "src/base/fileio.h"
#include "src/io/checkpoint.h"
#include "tests/cli/cli_helpers.h"
#include "tests/test_util.h"

using json = nlohmann::json;
using tgt::check_same_losses;
using tgt::has;
using tgt::run_binary;
using tgt::run_mpi;
using tgt::slurp;
using tgt::tiny_args;

namespace {
std::string master_arg(const std::string& f) { return " --precision.state.master=" + f; }
const std::string kBf16 = " --precision.mode=bf16 --sample.tokens=0";
}  // namespace

TEST_CASE("cli: bf16 master weights: planned bytes allocated, training converges, resume bit-exact") {
  const size_t n = 7920;  // the tiny model's parameters
  std::string out;
  tgt::TempDir base;
  REQUIRE(run_binary(tiny_args(base.path) + kBf16 + " --train.steps=12", &out) == 0);
  const json sb = json::parse(slurp(base / "summary.json"));
  for (const char* f : {"bf16-sr", "bf16-kahan"}) {
    tgt::TempDir full, part;
    const std::string args = kBf16 + " --train.steps=12" + master_arg(f);
    REQUIRE(run_binary(tiny_args(full.path) + args, &out) == 0);
    INFO(f << "\n" << out);
    CHECK(has(out, std::string("bf16 master weights")));
    REQUIRE(run_binary(tiny_args(part.path) + args + " --train.stop_at_step=5", &out) == 0);
    REQUIRE(run_binary(tiny_args(part.path) + args + " --checkpoint.resume=true", &out) == 0);
    CHECK_FALSE(has(out, "convert"));
    check_same_losses(full.path, part.path, 12);
    const std::string a = full / "ckpt_00000012", b = part / "ckpt_00000012";
    CHECK(slurp(a + "/model.bin") == slurp(b + "/model.bin"));
    CHECK(slurp(a + "/optim.bin") == slurp(b + "/optim.bin"));
    // fp32 moments, and bf16-kahan's 2-byte compensation after them.
    const bool kahan = std::string(f) == "bf16-kahan";
    CHECK(slurp(a + "/optim.bin").size() == 1024 + (kahan ? 10 : 8) * n);
    // model.bin holds the bf16 weights (fp32 values with 16 zero low bits).
    tg::CheckpointData cd = tg::load_checkpoint(a, tg::gpt_config(1, 2, 16, 256, 32));
    size_t wide = 0;
    for (float w : cd.params) wide += tg::f32_to_bf16(w) != 0 && tg::bf16_to_f32(tg::f32_to_bf16(w)) != w;
    CHECK(wide == 0);
    CHECK(cd.master == (kahan ? tg::MasterFormat::BF16Kahan : tg::MasterFormat::BF16SR));
    CHECK(cd.comp.size() == (kahan ? n : 0));
    // The plan counts the master as the format does (4 bytes per parameter less for bf16-sr,
    // 2 less for bf16-kahan), and the CPU backend allocates exactly that.
    const json s = json::parse(slurp(full / "summary.json"));
    const double plan = s["planned_memory_bytes"].get<double>();
    CHECK(sb["planned_memory_bytes"].get<double>() - plan == doctest::Approx((kahan ? 2 : 4) * n));
    CHECK(s["peak_memory_bytes"].get<double>() >= plan);
    CHECK(s["peak_memory_bytes"].get<double>() <= plan + 32 * 64);
    CHECK(s["final_val_loss"].get<double>() < s["initial_val_loss"].get<double>());
    CHECK(s["final_val_loss"].get<double>() ==
          doctest::Approx(sb["final_val_loss"].get<double>()).epsilon(0.02));
  }
}

TEST_CASE("cli: resuming with another master format converts what keeps every value, refuses the rest") {
  std::string out;
  tgt::TempDir sr, fp32, kahan;
  const std::string steps = kBf16 + " --train.steps=8";
  // bf16-sr -> fp32 and -> bf16-kahan: the bf16 weights are held exactly.
  REQUIRE(run_binary(tiny_args(sr.path) + steps + master_arg("bf16-sr") + " --train.stop_at_step=4",
                     &out) == 0);
  REQUIRE(run_binary(tiny_args(sr.path) + steps + " --train.stop_at_step=6 --checkpoint.resume=true",
                     &out) == 0);
  CHECK(has(out, "master weights convert once, losing nothing: precision.state.master=fp32 "
                 "(the checkpoint's bf16-sr)"));
  // fp32 -> bf16-kahan would round the fp32 weights: refused, naming the key and the way out.
  const std::string before = slurp(sr / "metrics.jsonl");
  CHECK(run_binary(tiny_args(sr.path) + steps + master_arg("bf16-kahan") +
                       " --checkpoint.resume=true",
                   &out) == 2);
  CHECK(has(out, "precision.state.master"));
  CHECK(has(out, "precision.state.master=fp32, or set precision.state.allow_narrowing=true"));
  CHECK(slurp(sr / "metrics.jsonl") == before);
  REQUIRE(run_binary(tiny_args(sr.path) + steps + master_arg("bf16-kahan") +
                         " --checkpoint.resume=true --precision.state.allow_narrowing=true",
                     &out) == 0);
  CHECK(has(out, "master weights are rounded once, to nearest"));
  // bf16-kahan -> bf16-sr drops the compensation: refused likewise.
  REQUIRE(run_binary(tiny_args(kahan.path) + steps + master_arg("bf16-kahan") +
                         " --train.stop_at_step=4",
                     &out) == 0);
  CHECK(run_binary(tiny_args(kahan.path) + steps + master_arg("bf16-sr") +
                       " --checkpoint.resume=true",
                   &out) == 2);
  CHECK(has(out, "the compensation is dropped or rounded away"));
}

TEST_CASE("cli: a bf16 master needs bf16 weights; bf16-kahan and stochastic rounding exclude each other") {
  std::string out;
  tgt::TempDir d;
  for (const char* mode : {"fp32", "fp16"}) {
    CHECK(run_binary(tiny_args(d.path) + " --precision.mode=" + mode + master_arg("bf16-sr"),
                     &out) == 2);
    INFO(out);
    CHECK(has(out, "config key 'precision.state.master': bf16-sr keeps the master weights in "
                   "the bf16 weights, but precision.mode=" +
                       std::string(mode)));
  }
  CHECK(run_binary(tiny_args(d.path) + kBf16 + master_arg("bf16-kahan") +
                       " --precision.stochastic_rounding=true",
                   &out) == 2);
  CHECK(has(out, "config key 'precision.stochastic_rounding'"));
  CHECK(run_binary(tiny_args(d.path) + kBf16 + master_arg("bf16"), &out) == 2);
  CHECK(has(out, "'precision.state.master' on the command line: 'bf16' is not allowed"));
}

TEST_CASE("cli: memory plans the master weights in their format") {
  std::string out;
  const std::string args =
      "memory --preset gpt2 --data.batch_size=4 --data.seq_len=1024 "
      "--model.max_seq_len=1024 --modes=bf16,fp32";
  // GPT-2 124M: 124475904 parameters; the master column 4, 0 and 2 bytes each in bf16 (fp32
  // keeps none beside its weights).
  REQUIRE(run_binary(args, &out) == 0);
  CHECK(has(out, "| bf16 | 237.4 MiB | 474.8 MiB | 237.4 MiB |"));
  REQUIRE(run_binary(args + master_arg("bf16-sr"), &out) == 0);
  INFO(out);
  CHECK(has(out, "| bf16 | 237.4 MiB | 0.0 MiB | 237.4 MiB |"));
  CHECK(has(out, "| fp32 | 474.8 MiB | 0.0 MiB |"));
  CHECK(has(out, "precision.state.master=bf16-sr in the modes with bf16 weights"));
  REQUIRE(run_binary(args + master_arg("bf16-kahan") + " --zero_ranks=2", &out) == 0);
  CHECK(has(out, "| bf16 | 237.4 MiB | 118.7 MiB | 237.4 MiB |"));
}

TEST_CASE("mpi: ZeRO-1 with bf16 master weights trains like unsharded and resumes bit-exactly") {
  tgt::TempDir plain, zero, part;
  std::string out;
  for (const char* f : {"bf16-sr", "bf16-kahan"}) {
    for (tgt::TempDir* d : {&plain, &zero, &part}) tg::remove_tree(d->path);
    const std::string args = " --train.steps=10 --data.batch_size=4" + kBf16 + master_arg(f);
    REQUIRE(run_mpi(2, tiny_args(plain.path) + args, &out) == 0);
    int rc = run_mpi(2, tiny_args(zero.path) + args + " --train.zero_stage=1", &out);
    INFO(f << "\n" << out);
    REQUIRE(rc == 0);
    check_same_losses(plain.path, zero.path, 10);
    const std::string ca = plain / "ckpt_00000010", cb = zero / "ckpt_00000010";
    CHECK(slurp(ca + "/model.bin") == slurp(cb + "/model.bin"));
    tg::GPTConfig mc = tg::gpt_config(1, 2, 16, 256, 32);
    CHECK(tg::load_checkpoint(ca, mc).comp == tg::load_checkpoint(cb, mc).comp);
    // Sharded, stopped and resumed sharded or not: bit-exact.
    for (const char* second : {"1", "0"}) {
      tg::remove_tree(part.path);
      REQUIRE(run_mpi(2,
                      tiny_args(part.path) + args + " --train.zero_stage=1 --train.stop_at_step=4",
                      &out) == 0);
      rc = run_mpi(2,
                   tiny_args(part.path) + args +
                       " --checkpoint.resume=true --train.zero_stage=" + second,
                   &out);
      INFO("resumed with zero_stage " << second << "\n" << out);
      REQUIRE(rc == 0);
      check_same_losses(plain.path, part.path, 10);
    }
  }
}

TEST_CASE("cli: compare runs state choices with every mode that can keep them") {
  tgt::TempDir out_dir;
  std::string out;
  const std::string cmd = tgt::tiny_compare_args() +
                          "--train.steps=6 --checkpoint.every=6 --modes fp32,bf16 "
                          "--states fp32,master-kahan,bf16sr-all,weights-fp8 --seeds 2 --out " +
                          out_dir.path;
  int rc = run_binary(cmd, &out);
  INFO(out);
  REQUIRE(rc == 0);
  // fp32 keeps no bf16 master: those two combinations are skipped, said; 4 x 2 runs remain.
  CHECK(has(out, "compare: fp32+master-kahan skipped"));
  CHECK(has(out, "compare: fp32+bf16sr-all skipped"));
  // Skipped with the run's own refusal: the fp8 weight gather needs ZeRO-1.
  CHECK(has(out, "compare: bf16+weights-fp8 skipped: state preset 'weights-fp8' "
                 "(precision.state.preset): config key 'precision.state.weight_comm': "
                 "fp8-e4m3 gathers ZeRO-1's weight shards, and train.zero_stage is 0"));
  CHECK(has(out, "compare: run 8/8 done"));
  // fp32 state is the plain mode's run (its directory and name).
  CHECK(tg::file_exists(out_dir / "bf16/seed1338/summary.json"));
  CHECK(tg::file_exists(out_dir / "bf16+master-kahan/seed1337/summary.json"));
  json cmp = json::parse(slurp(out_dir / "compare.json"));
  std::vector<std::string> names;
  for (const auto& m : cmp["modes"]) names.push_back(m["name"]);
  CHECK(names ==
        std::vector<std::string>{"fp32", "bf16", "bf16+master-kahan", "bf16+bf16sr-all"});
  const std::string report = slurp(out_dir / "report.md");
  CHECK(has(report, "| bf16+master-kahan |"));
  CHECK(has(report, "the bf16 weights plus a bf16 compensation as master weights"));
  // The state's master weights replace the mode's fp32 ones in the description.
  CHECK(has(report, "**bf16+master-kahan**: bf16 weights, activations and gradients; the bf16 "
                    "weights plus"));
  // `report` over the same runs names the groups alike.
  tgt::TempDir again;
  REQUIRE(run_binary("report " + out_dir.path + " --out " + again.path, &out) == 0);
  CHECK(has(slurp(again / "report.md"), "| bf16+bf16sr-all |"));
}

TEST_CASE("cli: state telemetry shows the updates a bf16 master loses, per parameter and layer") {
  std::string out;
  std::map<std::string, json> last;  // the last "state" record per master format
  for (const char* f : {"fp32", "bf16-sr"}) {
    tgt::TempDir d;
    REQUIRE(run_binary(tiny_args(d.path) + kBf16 + master_arg(f) +
                           " --train.steps=8 --precision.telemetry_every=4",
                       &out) == 0);
    const auto recs = tgt::read_metrics(d / "metrics.jsonl", "state");
    REQUIRE(recs.size() == 2);
    CHECK(recs[0]["step"] == 4);
    CHECK(recs[0]["master"] == f);
    last[f] = recs.back();
    const json s = json::parse(slurp(d / "summary.json"));
    CHECK(s["state"]["master"] == f);
    CHECK(s["state"]["bytes_per_parameter"] == (std::string(f) == "fp32" ? 12 : 8));
    // The telemetry reads the state on the host: no scratch beyond the plan.
    CHECK(s["peak_memory_bytes"].get<double>() <= s["planned_memory_bytes"].get<double>() + 32 * 64);
  }
  // The layernorm gains sit near 1, where bf16's step (2^-7) is several times an update at
  // this learning rate: a bf16-sr master keeps most of them where they were (they move with the
  // probability the update's share of a step gives), an fp32 master moves every one.
  const json& ln_fp32 = last["fp32"]["layers"]["ln1w"];
  const json& ln_sr = last["bf16-sr"]["layers"]["ln1w"];
  REQUIRE(ln_fp32["stagnation"].size() == 1);  // one layer
  CHECK(ln_fp32["stagnation"][0].get<double>() < 0.01);
  CHECK(ln_sr["stagnation"][0].get<double>() > 0.3);
  CHECK(ln_sr["update_ratio"][0].get<double>() > 0);
  // fp32 moments neither underflow nor saturate.
  for (const char* k : {"m_underflow", "v_underflow", "m_saturation", "v_saturation"})
    CHECK(last["fp32"]["layers"]["qkvw"][k][0].get<double>() == 0);
}

TEST_CASE("cli: precision.state.preset=lean trains with every key it names, and is refused by name "
          "where the mode cannot keep it") {
  tgt::TempDir d, keys;
  std::string out;
  const std::string args = kBf16 + " --train.steps=6";
  REQUIRE(run_binary(tiny_args(d.path) + args + " --precision.state.preset=lean", &out) == 0);
  INFO(out);
  const json c = json::parse(slurp(d / "config.json"))["precision"]["state"];
  CHECK(c["preset"] == "lean");
  CHECK(c["master"] == "bf16-sr");
  CHECK(c["adam_m"] == "fp8-e4m3");
  CHECK(c["adam_v"] == "fp8-e4m3");
  CHECK(c["grad_comm"] == "bf16");
  // The same keys given one by one: the same run.
  REQUIRE(run_binary(tiny_args(keys.path) + args + master_arg("bf16-sr") +
                         " --precision.state.adam_m=fp8-e4m3 --precision.state.adam_v=fp8-e4m3 "
                         "--precision.state.grad_comm=bf16",
                     &out) == 0);
  check_same_losses(d.path, keys.path, 6);
  // fp32 weights cannot be a bf16-sr master: exit 2, naming the preset, the key it set and the
  // mode that keeps it.
  tgt::TempDir bad;
  CHECK(run_binary(tiny_args(bad.path) + " --precision.mode=fp32 --precision.state.preset=lean",
                   &out) == 2);
  CHECK(has(out, "state preset 'lean' (precision.state.preset) cannot be kept in "
                 "precision.mode=fp32"));
  CHECK(has(out, "precision.state.master"));
  CHECK(has(out, "it can with --precision.mode=bf16"));
}
