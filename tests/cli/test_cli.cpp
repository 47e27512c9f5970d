// End-to-end tests of the train_gpt binary: subcommands, exit codes, run directory
// contents, bit-exact resume, llm.c init, and bad input.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "src/base/fileio.h"
#include "src/data/data.h"
#include "src/model/model.h"
#include "src/report/runs_file.h"
#include "src/io/checkpoint.h"
#include "tests/cli/cli_helpers.h"
#include "tests/test_util.h"

using json = nlohmann::json;
using tgt::check_same_losses;
using tgt::has;
using tgt::read_metrics;
using tgt::run_mpi;
using tgt::run_binary;
using tgt::slurp;
using tgt::tiny_args;
using tgt::toy_dir;

using tgt::max_relative_loss_gap;

TEST_CASE("cli: help and usage errors") {
  std::string out;
  CHECK(run_binary("--help", &out) == 0);
  CHECK(out.find("prepare") != std::string::npos);
  CHECK(run_binary("train --help", &out) == 0);
  CHECK(out.find("optim.lr") != std::string::npos);
  CHECK(out.find("0.003") != std::string::npos);
  CHECK(run_binary("train --model.n_layerz=3", &out) == 2);
  CHECK(out.find("n_layerz") != std::string::npos);
  CHECK(run_binary("train --optim.lr=abc", &out) == 2);
  CHECK(out.find("'optim.lr'") != std::string::npos);
  CHECK(run_binary("train --config /nonexistent/c.json", &out) == 2);
  CHECK(out.find("/nonexistent/c.json") != std::string::npos);
  CHECK(run_binary("frobnicate", &out) == 2);
  CHECK(run_binary("prepare text", &out) == 2);
  CHECK(out.find("--input") != std::string::npos);
}

TEST_CASE("cli: a short run writes config, metrics, checkpoint, samples and summary") {
  tgt::TempDir run;
  std::string out;
  int rc = run_binary(tiny_args(run.path) + " --train.steps=12 --checkpoint.every=6", &out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("step 12/12") != std::string::npos);
  CHECK(out.find("val loss") != std::string::npos);
  json cfg = json::parse(slurp(run / "config.json"));
  CHECK(cfg["model"]["n_embd"] == 16);
  auto train = read_metrics(run / "metrics.jsonl", "train");
  REQUIRE(train.size() == 12);
  for (const char* k :
       {"step", "loss", "lr", "grad_norm", "loss_scale", "skipped", "ms", "tokens_per_second"})
    CHECK(train[0].contains(k));
  CHECK(read_metrics(run / "metrics.jsonl", "val").size() == 4);  // 0, 5, 10, 12
  json s = json::parse(slurp(run / "summary.json"));
  for (const char* k : {"mode", "device", "steps", "initial_val_loss", "final_train_loss",
                        "final_val_loss", "loss_floor", "tokens_per_second", "peak_memory_bytes",
                        "skipped_steps", "final_loss_scale", "wall_seconds"})
    CHECK(s.contains(k));
  CHECK(s["mode"] == "fp32");
  CHECK(s["device"] == "cpu");
  CHECK(s["loss_floor"].get<double>() == doctest::Approx(1.3213).epsilon(1e-3));
  CHECK(std::fabs(s["initial_val_loss"].get<double>() - std::log(256.0)) < 0.1);
  CHECK(s["final_val_loss"].get<double>() < s["initial_val_loss"].get<double>());
  auto ckpts = tg::list_checkpoints(run.path);
  REQUIRE(ckpts.size() == 2);
  CHECK(ckpts[1] == run / "ckpt_00000012");
  CHECK(slurp(run / "samples.txt").find("--- step 12") != std::string::npos);
  // sample from the run directory
  CHECK(run_binary("sample --checkpoint " + run.path + " --tokens 5 --prompt '|ab'", &out) == 0);
  CHECK(out.rfind("|ab", 0) == 0);
  // A small model samples on one thread, and says so (after the text, on stderr).
  CHECK(has(out, "sample: 1 thread (a model of "));
  CHECK(run_binary("sample --checkpoint " + run.path + " --tokens 5 --threads 2", &out) == 0);
  CHECK(has(out, "sample: 2 threads (asked"));
}

TEST_CASE("cli: train.device=cuda trains on the GPU, or says why it cannot") {
  tgt::TempDir run;
  std::string out;
  int rc = run_binary(tiny_args(run.path) + " --train.device=cuda --train.steps=1", &out);
  INFO(out);
  if (rc == 0) {  // a CUDA build on a machine with a GPU
    CHECK(out.find("device: cuda") != std::string::npos);
    return;
  }
  CHECK(rc == 2);
  CHECK(out.find("train.device") != std::string::npos);
  CHECK((out.find("built without CUDA") != std::string::npos ||
         out.find("no CUDA GPU is visible") != std::string::npos ||
         out.find("could not be opened") != std::string::npos));
}

// The CUDA backend is a library opened only for GPU runs (src/backends/cuda_library.h): a copy of
// the binary without it still trains on the CPU, and asking it for a GPU names the missing file.
TEST_CASE("cli: a binary whose CUDA library is missing trains on the CPU and says so for cuda") {
  const std::string bin = tgt::binary();
  if (!tg::file_exists(tg::join_path(tg::dirname_of(bin), "libtrain_gpt_cuda.so"))) {
    MESSAGE("skipped: " << bin << " was built without CUDA");
    return;
  }
  tgt::TempDir dir;
  const std::string lone = dir / "train_gpt";
  REQUIRE(tgt::run_shell("cp '" + bin + "' '" + lone + "'") == 0);
  std::string out;
  CHECK(tgt::run_shell(lone + " " + tiny_args(dir / "cpu") + " --train.steps=2", &out) == 0);
  int rc = tgt::run_shell(lone + " " + tiny_args(dir / "gpu") + " --train.device=cuda", &out);
  INFO(out);
  CHECK(rc == 2);
  CHECK(out.find("train.device") != std::string::npos);
  CHECK(out.find("libtrain_gpt_cuda.so") != std::string::npos);
}

// A CPU run loads none of the CUDA libraries: the llm.c-shaped model (L3 C96 V1000, 4 x 64)
// peaks at about 38 MiB of resident memory (229 MiB when train_gpt linked them).
TEST_CASE("cli: a CPU run of the llm.c-shaped model stays under 60 MiB resident") {
#if defined(__SANITIZE_ADDRESS__)
  MESSAGE("skipped: the sanitizers' shadow memory is resident too");
  return;
#endif
  tgt::TempDir run;
  std::string out;
  const std::string d = toy_dir();
  REQUIRE(run_binary("train --model.n_layer=3 --model.n_head=4 --model.n_embd=96 "
                     "--model.vocab_size=1000 --model.max_seq_len=64 --data.seq_len=64 "
                     "--data.batch_size=4 --data.train='" +
                         d + "/toy_train_*.bin' --data.val='" + d +
                         "/toy_val_*.bin' --train.steps=5 --train.threads=2 "
                         "--eval.every=0 --sample.every=0 --train.out_dir=" +
                         run.path,
                     &out) == 0);
  const json summary = json::parse(slurp(run / "summary.json"));
  const double mib = summary["peak_rss_bytes"].get<double>() / (1 << 20);
  INFO("peak resident " << mib << " MiB");
  CHECK(mib > 1);
  CHECK(mib < 60);
}

TEST_CASE("cli: resuming from a checkpoint gives bit-identical losses") {
  tgt::TempDir full, part;
  std::string out;
  REQUIRE(run_binary(tiny_args(full.path) + " --train.steps=16", &out) == 0);
  // Stop after 8 steps (with a checkpoint), then resume to 16.
  REQUIRE(run_binary(tiny_args(part.path) + " --train.steps=16 --train.stop_at_step=8", &out) == 0);
  CHECK(out.find("stopping after step 8") != std::string::npos);
  auto ck = tg::list_checkpoints(part.path);
  REQUIRE(ck.size() == 1);
  CHECK(ck.back() == part / "ckpt_00000008");
  int rc = run_binary(tiny_args(part.path) + " --train.steps=16 --checkpoint.resume=true", &out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("resumed from") != std::string::npos);
  auto a = read_metrics(full / "metrics.jsonl", "train");
  auto b = read_metrics(part / "metrics.jsonl", "train");
  REQUIRE(a.size() == 16);
  // b holds steps 1..8 of the first part, then 9..16 of the resumed run.
  REQUIRE(b.size() == 16);
  for (int s = 1; s <= 16; s++) {
    CHECK(b[s - 1]["step"] == s);
    CHECK(b[s - 1]["loss"].get<double>() == a[s - 1]["loss"].get<double>());
  }
  auto vb = read_metrics(part / "metrics.jsonl", "val");
  CHECK(vb.back()["val_loss"].get<double>() ==
        read_metrics(full / "metrics.jsonl", "val").back()["val_loss"].get<double>());
  // Final weights are identical too.
  CHECK(tg::read_model_file(full / "ckpt_00000016/model.bin").params ==
        tg::read_model_file(part / "ckpt_00000016/model.bin").params);
}

TEST_CASE("cli: model.init_from starts from an llm.c model file") {
  tgt::TempDir a, b;
  std::string out;
  REQUIRE(run_binary(tiny_args(a.path) + " --train.steps=4", &out) == 0);
  std::string model = a / "ckpt_00000004/model.bin";
  // The file defines the architecture; model.* keys given differently are overridden.
  int rc = run_binary(
      tiny_args(b.path) + " --train.steps=1 --model.n_embd=32 --model.init_from=" + model, &out);
  INFO(out);
  REQUIRE(rc == 0);
  json cfg = json::parse(slurp(b / "config.json"));
  CHECK(cfg["model"]["n_embd"] == 16);
  auto va = read_metrics(a / "metrics.jsonl", "val");
  auto vb = read_metrics(b / "metrics.jsonl", "val");
  // b's initial val loss is a's final val loss: same weights, same val batches.
  CHECK(vb[0]["val_loss"].get<double>() == va.back()["val_loss"].get<double>());
}

TEST_CASE("cli: bad input ends with a message naming the file, no checkpoint left behind") {
  tgt::TempDir run, data;
  std::string out;
  // A shard with a token outside the vocabulary.
  tg::write_shard(data / "bad_train_000.bin", std::vector<uint32_t>(4000, 300));
  std::string args =
      "train --model.n_layer=1 --model.n_head=2 --model.n_embd=16 "
      "--model.max_seq_len=32 --data.seq_len=32 --data.batch_size=4 "
      "--data.train='" +
      data.path +
      "/bad_train_*.bin' --data.val= "
      "--train.steps=2 --train.out_dir=" +
      run.path;
  CHECK(run_binary(args, &out) == 1);
  CHECK(out.find("bad_train_000.bin") != std::string::npos);
  CHECK(out.find("vocab_size") != std::string::npos);
  CHECK(tg::list_checkpoints(run.path).empty());
  // Missing data.
  CHECK(run_binary("train --data.train=/nonexistent/x_*.bin --train.out_dir=" + run.path, &out) ==
        1);
  CHECK(out.find("/nonexistent/x_*.bin") != std::string::npos);
  // An output directory that cannot be created.
  std::ofstream(data / "file") << "x";
  CHECK(run_binary(tiny_args(data / "file/sub") + " --train.steps=1", &out) == 1);
  CHECK(out.find("file/sub") != std::string::npos);
  // A corrupt checkpoint is named when resuming, and left in place.
  REQUIRE(run_binary(tiny_args(run.path) + " --train.steps=2", &out) == 0);
  std::string ck = run / "ckpt_00000002";
  truncate((ck + "/optim.bin").c_str(), 100);
  CHECK(run_binary(tiny_args(run.path) + " --train.steps=4 --checkpoint.resume=true", &out) == 1);
  CHECK(out.find("optim.bin") != std::string::npos);
  CHECK(tg::dir_exists(ck));
  // A checkpoint from another architecture.
  tgt::TempDir run2;
  REQUIRE(run_binary(tiny_args(run2.path) + " --train.steps=2", &out) == 0);
  CHECK(run_binary(tiny_args(run2.path) + " --model.n_embd=32 --train.steps=4 "
                                          "--checkpoint.resume=true",
                   &out) == 1);
  CHECK(out.find("does not match the config") != std::string::npos);
}

TEST_CASE("cli: bf16 and fp16 20-step loss curves stay within 2% of fp32") {
  tgt::TempDir a, b, c;
  std::string out;
  REQUIRE(run_binary(tiny_args(a.path) + " --train.steps=20", &out) == 0);
  REQUIRE(run_binary(tiny_args(b.path) + " --train.steps=20 --precision.mode=bf16", &out) == 0);
  CHECK(out.find("bf16 weights and activations") != std::string::npos);
  REQUIRE(run_binary(tiny_args(c.path) + " --train.steps=20 --precision.mode=fp16", &out) == 0);
  CHECK(out.find("loss scaling dynamic") != std::string::npos);
  auto ref = read_metrics(a / "metrics.jsonl", "train");
  for (const tgt::TempDir* d : {&b, &c}) {
    auto m = read_metrics(*d / "metrics.jsonl", "train");
    REQUIRE(m.size() == 20);
    INFO(d->path);
    CHECK(max_relative_loss_gap(m, ref) < 0.02);
  }
  json s = json::parse(slurp(c / "summary.json"));
  CHECK(s["mode"] == "fp16");
  CHECK(s["loss_scale_kind"] == "dynamic");
}

TEST_CASE("cli: a skipped step leaves weights, Adam state, step count and LR unchanged") {
  tgt::TempDir before, skip;
  std::string out;
  const std::string args = " --train.steps=10 --precision.mode=fp16 --optim.warmup_steps=5";
  REQUIRE(run_binary(tiny_args(before.path) + args + " --train.stop_at_step=2", &out) == 0);
  REQUIRE(run_binary(tiny_args(skip.path) + args +
                         " --train.stop_at_step=3 --precision.inject_nonfinite_step=3",
                     &out) == 0);
  CHECK(out.find("step 3 skipped") != std::string::npos);
  auto m = read_metrics(skip / "metrics.jsonl", "train");
  REQUIRE(m.size() == 3);
  CHECK(m[2]["skipped"] == true);
  CHECK(m[2]["grad_norm"].is_null());
  CHECK(m[1]["skipped"] == false);
  // The scale halved, everything the optimizer owns stayed.
  CHECK(m[2]["loss_scale"].get<double>() == m[1]["loss_scale"].get<double>());
  auto a = tg::load_checkpoint(before / "ckpt_00000002", tg::gpt_config(1, 2, 16, 256, 32));
  auto b = tg::load_checkpoint(skip / "ckpt_00000003", tg::gpt_config(1, 2, 16, 256, 32));
  CHECK(a.params == b.params);
  CHECK(a.m == b.m);
  CHECK(a.v == b.v);
  CHECK(a.state["precision"]["opt_step"] == 2);
  CHECK(b.state["precision"]["opt_step"] == 2);
  CHECK(b.state["precision"]["loss_scale"]["scale"].get<double>() ==
        a.state["precision"]["loss_scale"]["scale"].get<double>() / 2);
  CHECK(b.state["counters"]["skipped_steps"] == 1);
  // The step after a skip uses the learning rate the skipped step would have used.
  tgt::TempDir cont;
  REQUIRE(run_binary(tiny_args(cont.path) + args + " --precision.inject_nonfinite_step=3", &out) ==
          0);
  auto c = read_metrics(cont / "metrics.jsonl", "train");
  CHECK(c[3]["lr"].get<double>() == c[2]["lr"].get<double>());
  CHECK(c[2]["lr"].get<double>() > c[1]["lr"].get<double>());  // still warming up
  json s = json::parse(slurp(cont / "summary.json"));
  CHECK(s["skipped_steps"] == 1);
  CHECK(s["optimizer_steps"] == 9);
}

TEST_CASE("cli: resume is bit-exact in bf16 (with stochastic rounding) and fp16") {
  for (const char* mode : {"--precision.mode=bf16 --precision.stochastic_rounding=true",
                           "--precision.mode=fp16 --precision.loss_scale.growth_interval=3"}) {
    tgt::TempDir full, part;
    std::string out;
    const std::string args = std::string(" --train.steps=12 ") + mode;
    REQUIRE(run_binary(tiny_args(full.path) + args, &out) == 0);
    REQUIRE(run_binary(tiny_args(part.path) + args + " --train.stop_at_step=5", &out) == 0);
    int rc = run_binary(tiny_args(part.path) + args + " --checkpoint.resume=true", &out);
    INFO(mode << "\n" << out);
    REQUIRE(rc == 0);
    auto a = read_metrics(full / "metrics.jsonl", "train");
    auto b = read_metrics(part / "metrics.jsonl", "train");
    REQUIRE(b.size() == 12);
    for (int i = 0; i < 12; i++) {
      CHECK(b[i]["loss"].get<double>() == a[i]["loss"].get<double>());
      CHECK(b[i]["loss_scale"].get<double>() == a[i]["loss_scale"].get<double>());
    }
    CHECK(tg::read_model_file(full / "ckpt_00000012/model.bin").params ==
          tg::read_model_file(part / "ckpt_00000012/model.bin").params);
  }
}

TEST_CASE("cli: memory prints the plan per mode") {
  std::string out;
  REQUIRE(run_binary("memory --preset gpt2 --data.batch_size=4 --data.seq_len=1024 "
                     "--model.max_seq_len=1024",
                     &out) == 0);
  CHECK(out.find("124475904 parameters") != std::string::npos);
  CHECK(out.find("| fp32 |") != std::string::npos);
  CHECK(out.find("| bf16 |") != std::string::npos);
  CHECK(run_binary("memory --preset gpt5", &out) == 2);
}

TEST_CASE("cli: memory --states plans every state preset at GPT-2's sizes, alone and ZeRO-1") {
  std::string out;
  REQUIRE(run_binary("memory --modes bf16 --states fp32,lean,grads-fp32,zero-fp8", &out) == 0);
  INFO(out);
  // One process: 16 bytes per parameter in fp32 state (bf16 weights and gradients, an fp32
  // master, two fp32 moments); lean's bf16-sr master and fp8 moments (1 + 4/128 each) leave 6.06.
  CHECK(has(out, "| fp32 | bf16 | 16.00 | 1.9 GiB | 5.3 GiB | 11.5 GiB | 23.2 GiB |"));
  CHECK(has(out, "| lean | bf16 | 6.06 | 719.7 MiB | 2.0 GiB | 4.4 GiB | 8.8 GiB |"));
  CHECK(has(out, "| grads-fp32 | bf16 | 20.00 |"));
  // ZeRO-1 over 8 ranks (the default): the master and moments sharded, the fp32 gradient sums
  // not; the bytes a rank sends per step at 1.5B.
  CHECK(has(out, "Per rank, ZeRO-1 over 8 ranks:"));
  CHECK(has(out, "| fp32 | bf16 | 5.50 | 652.9 MiB | 1.8 GiB | 4.0 GiB | 8.0 GiB |"));
  CHECK(has(out, "| grads-fp32 | bf16 | 9.50 |"));
  // A preset the mode cannot keep is planned in the mode that keeps it, and says why.
  REQUIRE(run_binary("memory --modes fp32 --states lean,fp32 --zero_ranks 4", &out) == 0);
  CHECK(has(out, "Per rank, ZeRO-1 over 4 ranks:"));
  CHECK(has(out, "| lean | bf16 | 6.06 |"));
  CHECK(has(out, "| fp32 | fp32 | 16.00 |"));
  CHECK(has(out, "not in fp32: lean (planned in bf16): state preset 'lean'"));
  CHECK(has(out, "config key 'precision.state.master'"));
  CHECK(has(out, "it can with --precision.mode=bf16"));
  CHECK(run_binary("memory --states slim", &out) == 2);
  CHECK(has(out, "unknown state preset 'slim'"));
}

TEST_CASE("cli: fp8 20-step loss curve within 5% of fp32, and bit-exact resume") {
  tgt::TempDir a, b, part;
  std::string out;
  REQUIRE(run_binary(tiny_args(a.path) + " --train.steps=20", &out) == 0);
  REQUIRE(run_binary(tiny_args(b.path) + " --train.steps=20 --precision.mode=fp8", &out) == 0);
  CHECK(out.find("quantized linears: fwd E4M3 x E4M3, dgrad E5M2 x E4M3, wgrad E5M2 x E4M3") !=
        std::string::npos);
  CHECK(out.find("path: CPU emulation, bit-faithful") != std::string::npos);
  auto ref = read_metrics(a / "metrics.jsonl", "train");
  auto m = read_metrics(b / "metrics.jsonl", "train");
  REQUIRE(m.size() == 20);
  CHECK(max_relative_loss_gap(m, ref) < 0.05);
  // Resume: the amax histories travel in the checkpoint.
  const std::string args = " --train.steps=20 --precision.mode=fp8 --precision.fp8.history_len=4";
  tgt::TempDir full;
  REQUIRE(run_binary(tiny_args(full.path) + args, &out) == 0);
  REQUIRE(run_binary(tiny_args(part.path) + args + " --train.stop_at_step=7", &out) == 0);
  REQUIRE(run_binary(tiny_args(part.path) + args + " --checkpoint.resume=true", &out) == 0);
  auto x = read_metrics(full / "metrics.jsonl", "train");
  auto y = read_metrics(part / "metrics.jsonl", "train");
  REQUIRE(y.size() == 20);
  for (int i = 0; i < 20; i++) CHECK(y[i]["loss"].get<double>() == x[i]["loss"].get<double>());
}

TEST_CASE("cli: compare runs every mode x seed, reports spread and verdicts, and resumes") {
  tgt::TempDir out_dir;
  std::string out;
  const std::string cmd = tgt::tiny_compare_args() +
                          "--train.steps=8 --checkpoint.every=4 --precision.telemetry_every=4 "
                          "--modes fp32,bf16,fp16-noscale,fp8 --seeds 2 --out " +
                          out_dir.path;
  int rc = run_binary(cmd, &out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("compare: run 8/8 done") != std::string::npos);
  std::string report = slurp(out_dir / "report.md");
  for (const char* mode : {"| fp32 |", "| bf16 |", "| fp16-noscale |", "| fp8 |"})
    CHECK(report.find(mode) != std::string::npos);
  CHECK(report.find("Welch") != std::string::npos);
  CHECK(report.find(" ± ") != std::string::npos);
  json cmp = json::parse(slurp(out_dir / "compare.json"));
  REQUIRE(cmp["modes"].size() == 4);
  CHECK(cmp["seeds"] == 2);
  for (const auto& m : cmp["modes"]) {
    CHECK(m["stats"]["seeds_finished"] == 2);
    if (m["name"] != "fp32") CHECK(m["stats"].contains("verdict"));
  }
  // Every run's config and summary, in the compare's runs file.
  CHECK(tg::read_runs_file(out_dir / "runs.jsonl").runs.size() == 8);
  CHECK(tg::file_exists(out_dir / "fp8/seed1338/metrics.jsonl"));
  CHECK(tg::file_exists(out_dir / "loss.png"));
  for (const char* png : {"numerics_fp32.png", "numerics_fp16-noscale.png"}) {
    CHECK(slurp(out_dir / png).size() > 1000);
    CHECK(report.find(png) != std::string::npos);
  }
  // The optimizer state was measured, but every mode keeps it in fp32: nothing was narrowed,
  // so no state picture (it would be black panels).
  CHECK(!read_metrics(out_dir / "bf16/seed1337/metrics.jsonl", "state").empty());
  for (const char* mode : {"fp32", "bf16", "fp16-noscale", "fp8"})
    CHECK_FALSE(tg::file_exists(out_dir / ("state_" + std::string(mode) + ".png")));
  // Per-layer telemetry: one value per block for the tensors that hold blocks.
  auto nm = read_metrics(out_dir / "fp32/seed1337/metrics.jsonl", "numerics");
  REQUIRE(!nm.empty());
  CHECK(nm[0]["layers"]["act/qkv"]["zero_frac"].size() == 1);
  CHECK(!nm[0]["layers"].contains("act/lnf"));
  // Seeds differ: the two fp32 runs do not train the same losses.
  auto a = read_metrics(out_dir / "fp32/seed1337/metrics.jsonl", "train");
  auto b = read_metrics(out_dir / "fp32/seed1338/metrics.jsonl", "train");
  CHECK(a.back()["loss"] != b.back()["loss"]);
  // The same command again reuses every finished run; an interrupted one resumes.
  const std::string fp8_dir = out_dir / "fp8/seed1338";
  tg::remove_tree(fp8_dir + "/summary.json");
  tg::remove_tree(fp8_dir + "/ckpt_00000008");
  REQUIRE(run_binary(cmd, &out) == 0);
  CHECK(out.find("fp32 finished earlier with this config") != std::string::npos);
  CHECK(out.find("fp8 was interrupted; resuming it") != std::string::npos);
  CHECK(out.find("resumed from " + fp8_dir + "/ckpt_00000004") != std::string::npos);
  CHECK(read_metrics(fp8_dir + "/metrics.jsonl", "train").size() == 8);
  // `report` on the compare's directory rebuilds the same table.
  tgt::TempDir rep;
  REQUIRE(run_binary("report '" + out_dir.path + "' --out '" + rep.path + "'", &out) == 0);
  json cmp2 = json::parse(slurp(rep / "compare.json"));
  REQUIRE(cmp2["modes"].size() == 4);
  for (size_t i = 0; i < 4; i++) {
    CHECK(cmp2["modes"][i]["name"] == cmp["modes"][i]["name"]);
    CHECK(cmp2["modes"][i]["stats"]["val_mean"] == cmp["modes"][i]["stats"]["val_mean"]);
  }
  CHECK(run_binary("compare --modes fp9", &out) == 2);
  CHECK(run_binary("compare --seeds 0", &out) == 2);
}

TEST_CASE("cli: numerics telemetry shows fp16 underflow that fp32 does not have") {
  tgt::TempDir a, b;
  std::string out;
  const std::string args = " --train.steps=6 --precision.telemetry_every=3";
  REQUIRE(run_binary(tiny_args(a.path) + args, &out) == 0);
  REQUIRE(run_binary(
              tiny_args(b.path) + args + " --precision.mode=fp16 --precision.loss_scale.kind=none",
              &out) == 0);
  auto na = read_metrics(a / "metrics.jsonl", "numerics");
  auto nb = read_metrics(b / "metrics.jsonl", "numerics");
  REQUIRE(na.size() == 2);
  REQUIRE(nb.size() == 2);
  const json& t = na[0]["tensors"];
  for (const char* k : {"act/qkv", "dact/dresidual", "grad/wte", "grad/fcprojw"}) {
    REQUIRE(t.contains(k));
    for (const char* f : {"amax", "zero_frac", "subnormal_frac", "nonfinite_frac"})
      CHECK(t[k].contains(f));
  }
  CHECK(t["grad/qkvw"]["amax"].get<double>() > 0);
  json sa = json::parse(slurp(a / "summary.json"))["numerics"];
  json sb = json::parse(slurp(b / "summary.json"))["numerics"];
  // fp16 without scaling loses small activation gradients; fp32 does not.
  CHECK(sb["dact"]["subnormal_frac"].get<double>() > 0.1);
  CHECK(sa["dact"]["subnormal_frac"].get<double>() == 0.0);
  CHECK(sb["dact"]["zero_frac"].get<double>() > sa["dact"]["zero_frac"].get<double>());
}


TEST_CASE("mpi: 2 ranks x B train like 1 rank x 2B (fp32 and bf16)") {
  for (const char* mode : {"fp32", "bf16"}) {
    tgt::TempDir one, two;
    std::string out;
    const std::string args = std::string(" --train.steps=10 --precision.mode=") + mode;
    REQUIRE(run_binary(tiny_args(one.path) + args + " --data.batch_size=8 --train.threads=1",
                       &out) == 0);
    int rc = run_mpi(2, tiny_args(two.path) + args + " --data.batch_size=4", &out);
    INFO(mode << "\n" << out);
    REQUIRE(rc == 0);
    CHECK(out.find("data parallel: MPI, 2 processes") != std::string::npos);
    auto a = read_metrics(one / "metrics.jsonl", "train");
    auto b = read_metrics(two / "metrics.jsonl", "train");
    REQUIRE(b.size() == 10);
    CHECK(max_relative_loss_gap(b, a) < (std::string(mode) == "fp32" ? 1e-5 : 1e-2));
    auto va = read_metrics(one / "metrics.jsonl", "val"),
         vb = read_metrics(two / "metrics.jsonl", "val");
    CHECK(std::fabs(vb.back()["val_loss"].get<double>() / va.back()["val_loss"].get<double>() - 1) <
          (std::string(mode) == "fp32" ? 1e-5 : 1e-2));
  }
}

TEST_CASE("mpi: resume with 2 ranks is bit-exact; another world size is refused") {
  tgt::TempDir full, part;
  std::string out;
  const std::string args = " --train.steps=10 --data.batch_size=4";
  REQUIRE(run_mpi(2, tiny_args(full.path) + args, &out) == 0);
  REQUIRE(run_mpi(2, tiny_args(part.path) + args + " --train.stop_at_step=4", &out) == 0);
  int rc = run_mpi(2, tiny_args(part.path) + args + " --checkpoint.resume=true", &out);
  INFO(out);
  REQUIRE(rc == 0);
  check_same_losses(full.path, part.path, 10);
  // The checkpoint records 2 ranks; one rank cannot continue it.
  CHECK(run_binary(tiny_args(part.path) + " --train.steps=12 --data.batch_size=4 "
                                          "--checkpoint.resume=true",
                   &out) == 1);
  CHECK(out.find("world size") != std::string::npos);
}

TEST_CASE("mpi: a failing rank ends the whole job with its message") {
  tgt::TempDir run;
  std::string out;
  setenv("TG_TEST_FAIL_RANK", "1", 1);
  int rc = run_mpi(2, tiny_args(run.path) + " --train.steps=10 --data.batch_size=4", &out);
  unsetenv("TG_TEST_FAIL_RANK");
  INFO(out);
  CHECK(rc != 0);
  CHECK(rc != 124);  // ended by the failure, not by the timeout
  CHECK(out.find("error (rank 1): injected failure on rank 1") != std::string::npos);
}

TEST_CASE("mpi: fp8 with delayed scaling reduces amax over the ranks") {
  tgt::TempDir one, two;
  std::string out;
  const std::string args = " --train.steps=10 --precision.mode=fp8";
  REQUIRE(run_binary(tiny_args(one.path) + args + " --data.batch_size=8 --train.threads=1", &out) ==
          0);
  int rc = run_mpi(2, tiny_args(two.path) + args + " --data.batch_size=4", &out);
  INFO(out);
  REQUIRE(rc == 0);
  auto a = read_metrics(one / "metrics.jsonl", "train");
  auto b = read_metrics(two / "metrics.jsonl", "train");
  REQUIRE(b.size() == 10);
  // Same scales as one process with all rows: only the bf16 rounding of the all-reduced
  // gradients differs.
  CHECK(max_relative_loss_gap(b, a) < 2e-3);
}

TEST_CASE("mpi: ZeRO-1 trains exactly like unsharded data parallelism") {
  // bf16 with stochastic rounding: the random bits follow each parameter's global index;
  // fp16 with gradient accumulation and a skipped step (the found-inf decision is global);
  // the block-scaled recipes (each rank quantizes its own rows with the bits of (seed, step):
  // sharding the optimizer changes nothing of that), nvfp4 with every ingredient on.
  for (const char* mode : {"fp32", "bf16", "fp16", "nvfp4", "mxfp8"}) {
    tgt::TempDir plain, zero;
    std::string out;
    const std::string m = mode;
    const std::string args =
        " --train.steps=10 --data.batch_size=4 --precision.mode=" + m +
        (m == "bf16" ? " --precision.stochastic_rounding=true" : "") +
        (m == "fp16" ? " --precision.inject_nonfinite_step=3 --data.total_batch_tokens=512" : "") +
        (m == "nvfp4" ? " --precision.recipe.bf16_last=0" : "");
    REQUIRE(run_mpi(2, tiny_args(plain.path) + args, &out) == 0);
    // ZeRO-1 reduces through many small staging chunks (the last one partial).
    setenv("TG_TEST_REDUCE_CHUNK", "1000", 1);
    int rc = run_mpi(2, tiny_args(zero.path) + args + " --train.zero_stage=1", &out);
    unsetenv("TG_TEST_REDUCE_CHUNK");
    INFO(mode << "\n" << out);
    REQUIRE(rc == 0);
    CHECK(out.find("ZeRO-1") != std::string::npos);
    auto a = read_metrics(plain / "metrics.jsonl", "train");
    auto b = read_metrics(zero / "metrics.jsonl", "train");
    REQUIRE(b.size() == 10);
    for (int i = 0; i < 10; i++) {
      CHECK(b[i]["loss"].get<double>() == a[i]["loss"].get<double>());
      // The norm is summed shard by shard, in another order.
      if (a[i]["grad_norm"].is_null()) {  // the skipped step
        CHECK(b[i]["grad_norm"].is_null());
        continue;
      }
      CHECK(b[i]["grad_norm"].get<double>() ==
            doctest::Approx(a[i]["grad_norm"].get<double>()).epsilon(1e-12));
    }
    // Same weights; the Adam moments are spread over one file per rank.
    const std::string ca = plain / "ckpt_00000010", cb = zero / "ckpt_00000010";
    CHECK(slurp(ca + "/model.bin") == slurp(cb + "/model.bin"));
    CHECK(tg::file_exists(cb + "/optim_rank00000.bin"));
    CHECK(tg::file_exists(cb + "/optim_rank00001.bin"));
    CHECK(!tg::file_exists(cb + "/optim.bin"));
    tg::GPTConfig mc = tg::gpt_config(1, 2, 16, 256, 32);
    tg::CheckpointData da = tg::load_checkpoint(ca, mc), db = tg::load_checkpoint(cb, mc);
    CHECK(da.m == db.m);
    CHECK(da.v == db.v);
  }
}

TEST_CASE("mpi: ZeRO-1 resume is bit-exact, and checkpoints move between sharded and not") {
  tgt::TempDir full, zero_part, plain_part;
  std::string out;
  const std::string args = " --train.steps=10 --data.batch_size=4 --precision.mode=bf16";
  REQUIRE(run_mpi(2, tiny_args(full.path) + args + " --train.zero_stage=1", &out) == 0);
  struct Case {
    const tgt::TempDir* dir;
    const char* first;
    const char* second;
  };
  for (const Case& c :
       {Case{&zero_part, "1", "1"}, Case{&zero_part, "1", "0"}, Case{&plain_part, "0", "1"}}) {
    tg::remove_tree(c.dir->path);
    REQUIRE(run_mpi(2,
                    tiny_args(c.dir->path) + args +
                        " --train.stop_at_step=4 --train.zero_stage=" + c.first,
                    &out) == 0);
    int rc = run_mpi(
        2,
        tiny_args(c.dir->path) + args + " --checkpoint.resume=true --train.zero_stage=" + c.second,
        &out);
    INFO("zero_stage " << c.first << " then " << c.second << "\n" << out);
    REQUIRE(rc == 0);
    check_same_losses(full.path, c.dir->path, 10);
  }
}

TEST_CASE("mpi: a missing or corrupt ZeRO-1 optimizer file is named") {
  tgt::TempDir run;
  std::string out;
  REQUIRE(run_mpi(2,
                  tiny_args(run.path) + " --train.steps=4 --data.batch_size=4 --train.zero_stage=1",
                  &out) == 0);
  const std::string ck = run / "ckpt_00000004";
  tg::GPTConfig mc = tg::gpt_config(1, 2, 16, 256, 32);
  // Rank 0's range needs only rank 0's file.
  tg::CheckpointData whole = tg::load_checkpoint(ck, mc);
  const size_t half = tg::zero_shard_size(whole.params.size(), 2);
  std::string f1 = slurp(ck + "/optim_rank00001.bin");
  f1[2000] ^= 1;
  tg::write_file_atomic(ck + "/optim_rank00001.bin", f1.data(), f1.size());
  CHECK_NOTHROW(tg::load_checkpoint(ck, mc, 0, half));
  CHECK_THROWS_WITH(tg::load_checkpoint(ck, mc),
                    doctest::Contains("optim_rank00001.bin is corrupt"));
  remove(std::string(ck + "/optim_rank00001.bin").c_str());
  CHECK_THROWS_WITH(tg::load_checkpoint(ck, mc, half, SIZE_MAX),
                    doctest::Contains("optim_rank00001.bin"));
}

TEST_CASE("mpi: a 2-rank run on a run directory another process holds: every rank exits 2") {
  tgt::TempDir d;
  const std::string run = d / "run";
  const pid_t a = tgt::start_binary(tiny_args(run) + " --train.steps=100000 --checkpoint.every=0 "
                                                     "--eval.every=0 --sample.tokens=0",
                                    d / "a.log");
  REQUIRE(tgt::wait_for_steps(run, a, 1));
  // Rank 0 tries the lock; rank 1 waits for its word and stops with it.
  std::string out;
  const int rc = run_mpi(2, tiny_args(run) + " --train.steps=4", &out);
  kill(a, SIGTERM);  // A goes on undisturbed until then, and stops with its checkpoint
  int status = 0;
  REQUIRE(waitpid(a, &status, 0) == a);
  INFO(out);
  CHECK(rc == 2);
  CHECK(has(out, "error (rank 0): train.out_dir " + run + " is in use by another run: pid " +
                     std::to_string(a) + " on host "));
  CHECK(has(out, "error (rank 1): train.out_dir " + run +
                     " is in use by another run (rank 0 names it)"));
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM));
  const std::vector<std::string> ckpts = tg::list_checkpoints(run);
  REQUIRE(ckpts.size() == 1);  // A's own, of the step it stopped at
  CHECK(tgt::read_metrics(run + "/metrics.jsonl", "train").size() ==
        size_t(tg::checkpoint_dir_step(ckpts[0])));
}

TEST_CASE("mpi: a checkpoint rank 1 rejects late resumes both ranks from the older one") {
  // Resume is verify, vote, apply: rank 0 accepts the newest checkpoint, rank 1 rejects its
  // part of it after reading everything; both ranks go back to the older checkpoint together
  // (before, rank 0 had applied the newer one and entered a collective rank 1 never reached).
  tgt::TempDir full;
  std::string out;
  const std::string args =
      " --train.steps=8 --data.batch_size=4 --train.zero_stage=1 --checkpoint.every=2";
  REQUIRE(run_mpi(2, tiny_args(full.path) + args, &out) == 0);
  struct Case {
    const char* what;
    const char* hook;  // TG_TEST_REJECT_CKPT, or none
  };
  for (const Case& c : {Case{"rank 1's optimizer file corrupt", nullptr},
                        Case{"rank 1 rejects at the end of its checks", "1:6"}}) {
    tgt::TempDir part;
    REQUIRE(run_mpi(2, tiny_args(part.path) + args + " --train.stop_at_step=6", &out) == 0);
    const std::string c6 = part / "ckpt_00000006";
    if (!c.hook) {  // rank 0 reads only its own optimizer file and accepts
      std::string f1 = slurp(c6 + "/optim_rank00001.bin");
      f1[2000] ^= 1;
      tg::write_file_atomic(c6 + "/optim_rank00001.bin", f1.data(), f1.size());
    } else {
      setenv("TG_TEST_REJECT_CKPT", c.hook, 1);
    }
    int rc = run_mpi(2, tiny_args(part.path) + args + " --checkpoint.resume=true", &out);
    unsetenv("TG_TEST_REJECT_CKPT");
    INFO(c.what << "\n" << out);
    REQUIRE(rc == 0);
    CHECK(out.find(c6 + " rejected: another rank could not verify its part of it") !=
          std::string::npos);
    CHECK(out.find("resumed from " + part / "ckpt_00000004" + " at step 4") != std::string::npos);
    CHECK(out.find(c6 + " rejected on rank 1: ") != std::string::npos);  // rank 1 says why
    if (!c.hook) CHECK(out.find("optim_rank00001.bin is corrupt") != std::string::npos);
    check_same_losses(full.path, part.path, 8);
  }
}

TEST_CASE("dist: CPU processes launched without MPI are refused with a pointer to mpirun") {
  tgt::TempDir run;
  // By the config keys, and by the environment (as a job script or srun would start them).
  for (const std::string& launch :
       {std::string(tgt::binary() + " " + tiny_args(run.path) +
                    " --dist.world_size=2 --dist.rank=1 --dist.rendezvous=tcp://127.0.0.1:" +
                    std::to_string(tgt::free_port())),
        "env TG_WORLD_SIZE=3 TG_RANK=0 " + tgt::binary() + " " + tiny_args(run.path)}) {
    std::string out;
    int rc = tgt::run_shell("timeout 60 " + launch + " --train.device=cpu", &out);
    INFO(launch << "\n" << out);
    CHECK(rc == 2);
    CHECK(out.find("processes on the CPU train together only under MPI") != std::string::npos);
    CHECK(out.find("`mpirun -np ") != std::string::npos);
    // Refused before anything was trained or written.
    CHECK(!tg::file_exists(run / "metrics.jsonl"));
  }
}

TEST_CASE("mpi: the memory plan of 2 ranks, plain and ZeRO-1, equals the measured peak") {
  // Also what each rank sends per step (ring bytes, src/comm/comm.h): plain, the fp32
  // all-reduce of every gradient, 2 (W-1)/W x 4 bytes x n = 4 n; ZeRO-1, the fp32
  // reduce-scatter of W shards (4 S) and the all-gather of the updated weights (S x 4 or 2).
  for (const char* mode : {"fp32", "bf16"})
    for (int zero : {0, 1}) {
      tgt::TempDir run;
      std::string out;
      int rc =
          run_mpi(2,
                  tiny_args(run.path) + " --train.steps=3 --data.batch_size=4 --sample.tokens=0" +
                      " --precision.mode=" + mode + " --train.zero_stage=" + std::to_string(zero),
                  &out);
      INFO(mode << " zero " << zero << "\n" << out);
      REQUIRE(rc == 0);
      json s = json::parse(slurp(run / "summary.json"));
      const double peak = s["peak_memory_bytes"].get<double>(),
                   plan = s["planned_memory_bytes"].get<double>();
      CHECK(peak >= plan);
      CHECK(peak <= plan + 16 * 64);  // each buffer rounded up to 64 bytes
      const double n = s["num_params"].get<double>();
      const double S = double(tg::zero_shard_size(size_t(n), 2));
      const double width = std::string(mode) == "fp32" ? 4 : 2;
      const double want = zero ? 4 * S + width * S : 4 * n;
      for (const json& r : read_metrics(run / "metrics.jsonl", "train"))
        CHECK(r["comm_bytes"].get<double>() == want);
      CHECK(s["comm_bytes_per_step"].get<double>() == want);
      CHECK(double(tg::plan_comm_bytes(tg::gpt_config(1, 2, 16, 256, 32),
                                       tg::mode_dtype(tg::parse_mode(mode, "mode")), 2, zero)) ==
            want);
    }
}

TEST_CASE("cli: block-scaled recipes train 20 steps near bf16, and resume bit-exactly") {
  tgt::TempDir ref;
  std::string out;
  REQUIRE(run_binary(tiny_args(ref.path) + " --train.steps=20 --precision.mode=bf16", &out) == 0);
  const auto bf16 = read_metrics(ref / "metrics.jsonl", "train");
  // The tiny model has one layer: nvfp4 keeps it quantized (bf16_last=0) here.
  const struct {
    const char* args;
    double tol;
  } modes[] = {
      {"--precision.mode=fp8-rowwise --precision.recipe.pow2_scales=true", 0.01},
      {"--precision.mode=fp8-block", 0.01},
      {"--precision.mode=mxfp8 --precision.recipe.grad_format=e5m2", 0.01},
      {"--precision.mode=mxfp4", 0.02},
      {"--precision.mode=nvfp4 --precision.recipe.bf16_last=0", 0.02},
  };
  for (const auto& m : modes) {
    const std::string args = std::string(" --train.steps=20 --eval.every=0 ") + m.args;
    tgt::TempDir full, part;
    REQUIRE(run_binary(tiny_args(full.path) + args, &out) == 0);
    INFO(m.args << "\n" << out);
    CHECK(out.find("quantized linears: ") != std::string::npos);
    CHECK(out.find("\nfp8:") == std::string::npos);  // a 4-bit recipe is not called fp8
    const auto x = read_metrics(full / "metrics.jsonl", "train");
    REQUIRE(x.size() == 20);
    const double gap = max_relative_loss_gap(x, bf16);
    MESSAGE(std::string(m.args) << ": largest loss gap to bf16 over 20 steps " << gap);
    CHECK(gap < m.tol);
    CHECK(gap > 0);  // the recipe really quantized something
    // Resume: stochastic rounding and Hadamard signs come from (seed, step), so nothing but
    // the usual state travels in the checkpoint.
    REQUIRE(run_binary(tiny_args(part.path) + args + " --train.stop_at_step=7", &out) == 0);
    REQUIRE(run_binary(tiny_args(part.path) + args + " --checkpoint.resume=true", &out) == 0);
    const auto y = read_metrics(part / "metrics.jsonl", "train");
    REQUIRE(y.size() == 20);
    for (int i = 0; i < 20; i++) CHECK(y[i]["loss"].get<double>() == x[i]["loss"].get<double>());
  }
  // A switched-off ingredient changes the run (each is really wired to the config).
  for (const char* off :
       {"--precision.recipe.stochastic_grads=false", "--precision.recipe.hadamard=false",
        "--precision.recipe.weight_2d=false"}) {
    tgt::TempDir a, b;
    const std::string base =
        " --train.steps=3 --precision.mode=nvfp4 --precision.recipe.bf16_last=0";
    REQUIRE(run_binary(tiny_args(a.path) + base, &out) == 0);
    REQUIRE(run_binary(tiny_args(b.path) + base + " " + off, &out) == 0);
    INFO(off);
    const auto p = read_metrics(a / "metrics.jsonl", "train");
    const auto q = read_metrics(b / "metrics.jsonl", "train");
    REQUIRE(p.size() == 3);
    REQUIRE(q.size() == 3);
    CHECK(p[2]["loss"].get<double>() != q[2]["loss"].get<double>());
  }
  // nvfp4's default keeps the last layer in bf16: on a one-layer model that is plain bf16.
  tgt::TempDir k;
  REQUIRE(run_binary(tiny_args(k.path) + " --train.steps=20 --precision.mode=nvfp4", &out) == 0);
  const auto kept = read_metrics(k / "metrics.jsonl", "train");
  REQUIRE(kept.size() == 20);
  CHECK(max_relative_loss_gap(kept, bf16) == 0);
  CHECK(run_binary(tiny_args(k.path) + " --precision.recipe.hadamard_size=12", &out) == 2);
}

namespace {
// The train command `prepare text` printed ("train on it: ./train_gpt <this>"), "" if none.
std::string printed_train_command(const std::string& out) {
  const std::string mark = "train on it: ./train_gpt ";
  const size_t at = out.find(mark);
  if (at == std::string::npos) return "";
  const size_t from = at + mark.size();
  return out.substr(from, out.find('\n', from) - from);
}
}  // namespace

TEST_CASE("cli: prepare text --tokenizer gpt2, then its train command, then sample with a prompt") {
  const std::string vocab = tgt::gpt2_vocab_dir();
  if (vocab.empty()) {
    MESSAGE(tgt::kNoGpt2Vocab);
    return;
  }
  tgt::TempDir d;
  std::string text;
  for (int i = 0; i < 120; i++)
    text += "ROMEO:\nBut soft, what light through yonder window breaks?\n\nJULIET:\nAy me!\n\n";
  tg::write_file_atomic(d / "play.txt", text.data(), text.size());
  std::string out;
  REQUIRE(run_binary("prepare text --input " + (d / "play.txt") + " --tokenizer gpt2 --out " +
                         (d / "data") + " --vocab_dir " + vocab,
                     &out) == 0);
  // The file is one document; --split paragraphs makes one per paragraph (240 here).
  CHECK(has(out, "(1 shard(s), 1 documents,"));
  const std::string printed = printed_train_command(out), prepared = out;
  REQUIRE(run_binary("prepare text --input " + (d / "play.txt") + " --tokenizer gpt2 --out " +
                         (d / "para") + " --vocab_dir " + vocab + " --split paragraphs",
                     &out) == 0);
  const json docs = json::parse(slurp(d / "para/meta.json"))["documents"];
  CHECK(docs["train"].get<int>() + docs["val"].get<int>() == 240);
  CHECK(run_binary("prepare text --input " + (d / "play.txt") + " --out " + (d / "b") +
                       " --split paragraphs",
                   &out) == 2);
  CHECK(has(out, "prepare text: --split needs --tokenizer gpt2"));
  // The command it prints, run as printed (plus a short run's keys).
  REQUIRE(!printed.empty());
  // The GPT-2-shaped config with this data, in a run directory named after it.
  CHECK(has(printed, "--config configs/shakespeare_gpt2.json --data.train '" + (d / "data") +
                         "/play_train_*.bin'"));
  CHECK(has(printed, "--train.out_dir runs/data"));
  CHECK(has(prepared,
            "then sample: ./train_gpt sample --checkpoint runs/data --tokens 200 "
            "--prompt 'Your prompt'\n"));
  const std::string run = d / "run";
  REQUIRE(run_binary(printed + " --train.out_dir " + run +
                         " --train.steps 2 --data.batch_size 4 --data.seq_len 32 "
                         "--eval.every 0 --sample.tokens 4 --sample.prompt 'ROMEO: But'",
                     &out) == 0);
  CHECK(has(out, "vocab 50257"));
  CHECK(has(out, "sample at step 2:\nROMEO: But"));
  // sample with the dataset folder as its tokenizer: the prompt is GPT-2's tokens.
  REQUIRE(run_binary("sample --checkpoint " + run + " --tokenizer " + (d / "data") +
                         " --prompt 'JULIET: Ay' --tokens 3",
                     &out) == 0);
  CHECK(has(out, "JULIET: Ay"));
  // Its shards do not fit a byte-level model: named.
  CHECK(run_binary(printed + " --model.vocab_size 256 --train.out_dir " + (d / "small"), &out) ==
        2);
  CHECK(has(out, "'model.vocab_size': 256 is smaller than the dataset's vocabulary (50257"));
}

namespace {

// A finished run's val loss in bits per byte at `tokens_per_byte` (loss x ratio / ln 2): in
// every val line of the console `out`, every val record of metrics.jsonl, summary.json and
// the summary line, and in the report of the run (both tables, compare.json).
void check_bpb(const std::string& run, const std::string& out, double tokens_per_byte,
               const std::string& source) {
  auto bpb = [&](double v) { return v * tokens_per_byte / std::log(2.0); };
  const auto val = read_metrics(run + "/metrics.jsonl", "val");
  REQUIRE(val.size() >= 2);
  for (const json& r : val) {
    INFO(r.dump());
    REQUIRE(r.contains("val_bpb"));
    const double v = r["val_loss"].get<double>();
    CHECK(r["val_bpb"].get<double>() == doctest::Approx(bpb(v)).epsilon(1e-12));
    CHECK(has(out, tg::strf("val   step %lld | val loss %.4f | %.3f bpb",
                            r["step"].get<long long>(), v, bpb(v))));
  }
  const json s = json::parse(slurp(run + "/summary.json"));
  const double final_val = s["final_val_loss"].get<double>();
  CHECK(s["bpb_tokens_per_byte"].get<double>() == tokens_per_byte);
  CHECK(s["bpb_source"] == source);
  CHECK(s["final_val_bpb"].get<double>() == doctest::Approx(bpb(final_val)).epsilon(1e-12));
  CHECK(s["initial_val_bpb"].get<double>() ==
        doctest::Approx(bpb(s["initial_val_loss"].get<double>())).epsilon(1e-12));
  CHECK(has(out, tg::strf("final val loss %.4f (%.3f bpb)", final_val, bpb(final_val))));
  tgt::TempDir rep;
  std::string log;
  REQUIRE(run_binary("report '" + run + "' --out '" + rep.path + "'", &log) == 0);
  const json cmp = json::parse(slurp(rep / "compare.json"));
  CHECK(cmp["bpb_tokens_per_byte"].get<double>() == tokens_per_byte);
  CHECK(cmp["modes"][0]["stats"]["bpb_mean"].get<double>() ==
        doctest::Approx(bpb(final_val)).epsilon(1e-12));
  const std::string md = slurp(rep / "report.md");
  CHECK(has(md, tg::strf("| %.4f ± 0.0000 | %.4f ± 0.0000 |", final_val, bpb(final_val))));
  CHECK(has(md, tg::strf("| %.4f | %.4f |", final_val, bpb(final_val))));
  CHECK(has(md, "tokens per byte from " + source + "."));
}

}  // namespace

TEST_CASE("cli: prepare text prints the train and sample commands for its output; they run") {
  tgt::TempDir d;
  std::string text;
  for (int i = 0; i < 200; i++) text += tg::strf("Line %d of a text nobody wrote before.\n", i);
  tg::write_file_atomic(d / "mine.txt", text.data(), text.size());
  std::string out;
  REQUIRE(run_binary("prepare text --input " + (d / "mine.txt") + " --out " + (d / "data/mine"),
                     &out) == 0);
  const std::string printed = printed_train_command(out);
  REQUIRE(!printed.empty());
  CHECK(printed == "train --config configs/shakespeare.json --data.train '" + (d / "data/mine") +
                       "/mine_train_*.bin' --data.val '" + (d / "data/mine") +
                       "/mine_val_*.bin' --train.out_dir runs/mine");
  // As printed, with a short run's keys and a run directory in the temporary folder: it trains
  // and ends with a sample (the config names no prompt: it starts from the data's first byte).
  const std::string run = d / "run";
  REQUIRE(run_binary(printed + " --train.out_dir " + run +
                         " --train.steps 2 --data.batch_size 2 --data.seq_len 32 --eval.every 0 "
                         "--sample.tokens 8 --train.threads 2",
                     &out) == 0);
  CHECK(has(out, "sample at step 2:\nL"));
  REQUIRE(run_binary("sample --checkpoint " + run + " --tokens 8 --prompt 'Your prompt'", &out) ==
          0);
  CHECK(has(out, "Your prompt"));
  // From a directory without configs/: the program's defaults with the vocabulary size.
  const std::string bin = std::filesystem::absolute(tgt::binary()).string();
  REQUIRE(tgt::run_shell("cd '" + d.path + "' && '" + bin + "'" +
                             " prepare text --input mine.txt --out data/again",
                         &out) == 0);
  CHECK(has(out, "train on it: ./train_gpt train --model.vocab_size 256 --data.train "
                 "'data/again/mine_train_*.bin' --data.val 'data/again/mine_val_*.bin' "
                 "--train.out_dir runs/again"));
}

TEST_CASE("cli: val loss in bits per byte on byte-level data; none where the ratio is unknown") {
  tgt::TempDir run;
  std::string out;
  REQUIRE(run_binary(tiny_args(run.path) + " --train.steps=6", &out) == 0);
  INFO(out);
  // The toy task is byte-level: 1 token per byte, bpb = loss / ln 2.
  check_bpb(run.path, out, 1.0, "byte-level tokenizer (1 token per byte)");
  // The same shards without meta.json: the ratio is unknown, bpb is left out.
  tgt::TempDir bare, run2;
  for (const char* f : {"toy_train_000000.bin", "toy_val_000000.bin"}) {
    const std::string b = slurp(tg::join_path(toy_dir(), f));
    tg::write_file_atomic(bare / f, b.data(), b.size());
  }
  std::string args = tiny_args(run2.path);
  for (size_t at; (at = args.find(toy_dir())) != std::string::npos;)
    args.replace(at, toy_dir().size(), bare.path);
  REQUIRE(run_binary(args + " --train.steps=2", &out) == 0);
  CHECK(!has(out, "bpb"));
  for (const json& r : read_metrics(run2 / "metrics.jsonl", "val")) CHECK(!r.contains("val_bpb"));
  const json s = json::parse(slurp(run2 / "summary.json"));
  CHECK(s["final_val_bpb"].is_null());
  CHECK(s["bpb_tokens_per_byte"].is_null());
  CHECK(s["bpb_source"] == "unknown (no meta.json beside the val shards)");
}

TEST_CASE("cli: val loss in bits per byte on GPT-2 tokens, at the val split's tokens per byte") {
  const std::string vocab = tgt::gpt2_vocab_dir();
  if (vocab.empty()) {
    MESSAGE(tgt::kNoGpt2Vocab);
    return;
  }
  tgt::TempDir d;
  std::string text;
  for (int i = 0; i < 60; i++)
    text += tg::strf(
        "Document %d: the quick brown fox jumps over the lazy dog, %d times.\n\n"
        "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich.\n\n",
        i, i * 7);
  tg::write_file_atomic(d / "docs.txt", text.data(), text.size());
  std::string out;
  REQUIRE(run_binary("prepare text --input " + (d / "docs.txt") + " --tokenizer gpt2 --out " +
                         (d / "data") + " --vocab_dir " + vocab,
                     &out) == 0);
  const json meta = json::parse(slurp(d / "data/meta.json"));
  const double ratio = meta["val_tokens_per_byte"].get<double>();
  // GPT-2 tokens hold several bytes each; the val split has a ratio of its own.
  CHECK(ratio < 0.5);
  CHECK(ratio != meta["tokens_per_byte"].get<double>());
  const std::string printed = printed_train_command(out);
  REQUIRE(!printed.empty());
  const std::string run = d / "run";
  REQUIRE(run_binary(printed + " --train.out_dir " + run +
                         " --train.steps 3 --data.batch_size 2 --data.seq_len 32 "
                         "--model.n_layer 1 --model.n_head 2 --model.n_embd 16 "
                         "--model.max_seq_len 32 --eval.every 2 --eval.batches 2 "
                         "--sample.tokens 0 --train.threads 2",
                     &out) == 0);
  INFO(out);
  check_bpb(run, out, ratio, "meta.json val_tokens_per_byte");
}

TEST_CASE("cli: quiet by default: one config line, the whole config in config.json or on request") {
  tgt::TempDir run;
  std::string out;
  REQUIRE(run_binary(tiny_args(run.path) + " --train.steps=12 --train.log_every=1", &out) == 0);
  INFO(out);
  CHECK(out.find("config: fp32 | 12 steps") != std::string::npos);
  CHECK(out.find("full config: " + run.path + "/config.json") != std::string::npos);
  CHECK(out.find("\"optim\"") == std::string::npos);  // no JSON on the console
  CHECK(json::parse(slurp(run / "config.json"))["optim"]["lr"] == 0.003);
  // No ETA until five steps after the first are timed (steps 2..6), none on the last line.
  std::istringstream lines(out);
  int with_eta = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("step ", 0) != 0 || line.find(" | loss ") == std::string::npos) continue;
    const int step = std::stoi(line.substr(5));
    INFO(line);
    CHECK((line.find("| eta ") != std::string::npos) == (step >= 6 && step < 12));
    with_eta += line.find("| eta ") != std::string::npos;
  }
  CHECK(with_eta == 6);
  tgt::TempDir run2;
  REQUIRE(run_binary(tiny_args(run2.path) + " --train.steps=2 --train.print_config=true", &out) ==
          0);
  CHECK(out.find("full config: ") != std::string::npos);
  CHECK(out.find("\"optim\": {") != std::string::npos);
}

TEST_CASE("cli: a misspelt key, option or command gets 'did you mean', exit code 2") {
  std::string out;
  CHECK(run_binary("train --train.stpes=5", &out) == 2);
  CHECK(out.find("unknown config key 'train.stpes' on the command line (did you mean "
                 "'--train.steps'?)") != std::string::npos);
  CHECK(run_binary("train --precison.mode=bf16", &out) == 2);
  CHECK(out.find("did you mean '--precision.mode'?") != std::string::npos);
  CHECK(run_binary("sample --checkpont x", &out) == 2);
  CHECK(out.find("unknown option '--checkpont' of train_gpt sample (did you mean "
                 "'--checkpoint'?)") != std::string::npos);
  CHECK(run_binary("memory --prest gpt2", &out) == 2);
  CHECK(out.find("did you mean '--preset'?") != std::string::npos);
  CHECK(run_binary("memory --preset gpt-2", &out) == 2);
  CHECK(out.find("did you mean 'gpt2'") != std::string::npos);
  CHECK(run_binary("trian", &out) == 2);
  CHECK(out.find("unknown command 'trian' (did you mean 'train'?)") != std::string::npos);
  tgt::TempDir d;
  std::ofstream(d / "c.json") << R"({"train": {"stpes": 5}})";
  CHECK(run_binary("train --config " + d / "c.json", &out) == 2);
  CHECK(out.find("unknown config key 'train.stpes' in config file " + d / "c.json" +
                 " (did you mean 'train.steps'?)") != std::string::npos);
}

TEST_CASE("cli: memory says whether the plan fits this machine, and what shrinks it") {
  const std::string args =
      " memory --preset gpt2 --data.batch_size=4 --data.seq_len=1024 "
      "--model.max_seq_len=1024";
  std::string out;
  // bf16 needs 5230.2 MiB, fp32 7774.2 MiB (the plan of "memory prints the plan per mode").
  REQUIRE(tgt::run_shell("TG_TEST_HOST_MEMORY=6000000000:8000000000 " + tgt::binary() + args,
                         &out) == 0);
  INFO(out);
  CHECK(out.find("this machine, a CPU run: 5.6 GiB available of 7.5 GiB") != std::string::npos);
  CHECK(out.find("fp32: does NOT fit: 7.6 GiB of 5.6 GiB available") != std::string::npos);
  CHECK(out.find("bf16: fits: 5.1 GiB of 5.6 GiB available") != std::string::npos);
  // The activations are most of it: the micro-batch's keys come first.
  CHECK(out.find("To fit, shrink data.batch_size (now 4) or data.seq_len (now 1024)") !=
        std::string::npos);
  REQUIRE(run_binary(args, &out) == 0);  // this machine's own memory
  CHECK(out.find("this machine, a CPU run: ") != std::string::npos);
  CHECK((out.find("fp32: fits: ") != std::string::npos ||
         out.find("fp32: does NOT fit: ") != std::string::npos));
}

TEST_CASE("cli: running out of host memory names the allocation and points at train_gpt memory") {
  tgt::TempDir run;
  std::string out;
  // The tiny model's tensors take some 30 KiB, its activations more: the limit stops those.
  CHECK(tgt::run_shell("TG_TEST_HOST_ALLOC_LIMIT=200000 " + tgt::binary() + " " +
                           tiny_args(run.path) + " --train.steps=2",
                       &out) == 1);
  INFO(out);
  CHECK(out.find("out of host memory allocating") != std::string::npos);
  CHECK(out.find("for the activations") != std::string::npos);
  CHECK(out.find("`train_gpt memory`") != std::string::npos);
  CHECK(out.find("data.batch_size or data.seq_len") != std::string::npos);
  CHECK(tgt::run_shell("TG_TEST_HOST_ALLOC_LIMIT=20000 " + tgt::binary() + " " +
                           tiny_args(run.path + "/b") + " --train.steps=2",
                       &out) == 1);
  CHECK(out.find("for the weights, gradients, master weights and Adam moments") !=
        std::string::npos);
}

TEST_CASE("cli: train refuses a run its machine cannot hold, before allocating (exit 2)") {
  tgt::TempDir run;
  std::string out;
  // GPT-2 XL at batch 64 x 1024 plans 679.3 GiB in fp32 (train_gpt memory): once, it
  // allocated for 80 s and was OOM-killed.
  const std::string xl =
      " --model.n_layer=48 --model.n_head=25 --model.n_embd=1600 --model.vocab_size=50257 "
      "--model.max_seq_len=1024 --data.batch_size=64 --data.seq_len=1024 --train.steps=2";
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = tgt::run_shell("TG_TEST_HOST_MEMORY=64000000000:68000000000 " + tgt::binary() +
                                    " " + tiny_args(run / "xl") + xl,
                                &out);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(out);
  CHECK(rc == 2);
  CHECK(seconds < 2.0);  // the plan is arithmetic: nothing was allocated
  CHECK(has(out, "this run plans 679.3 GiB of memory and this machine has 59.6 GiB available"));
  CHECK(has(out, "shrink data.batch_size (now 64) or data.seq_len (now 1024)"));
  CHECK(has(out, "model.n_layer, model.n_embd"));
  CHECK(has(out, "a lower precision.mode"));
  CHECK(has(out, "--train.memory_check=false skips this check"));
  CHECK_FALSE(tg::dir_exists(run / "xl"));  // refused before the run directory was touched
  // The machine's own memory refuses it too (no machine here has 680 GiB free).
  CHECK(run_binary(tiny_args(run / "xl") + xl, &out) == 2);
  CHECK(has(out, "this run plans 679.3 GiB of memory"));
  // The tiny run on a machine said to have 100 kB free: refused; train.memory_check=false skips
  // the check, and the run trains.
  const std::string small = "TG_TEST_HOST_MEMORY=100000:100000 " + tgt::binary() + " ";
  CHECK(tgt::run_shell(small + tiny_args(run / "a") + " --train.steps=2", &out) == 2);
  CHECK(has(out, "this machine has 97.7 KiB available"));
  CHECK(tgt::run_shell(small + tiny_args(run / "b") + " --train.steps=2 --train.memory_check=false",
                       &out) == 0);
}

// ---- Adam moments stored in bf16, bf16-sr, fp16 (precision.state.adam_m / adam_v) ----

namespace {
const char* const kMomentFormats[] = {"bf16", "bf16-sr", "fp16"};
std::string moment_args(const std::string& f) {
  return " --precision.state.adam_m=" + f + " --precision.state.adam_v=" + f;
}
}  // namespace

TEST_CASE(
    "cli: 16-bit Adam moments: half the optimizer bytes, training converges, resume is "
    "bit-exact") {
  const size_t n = 7920;  // the tiny model's parameters
  for (const char* f : kMomentFormats) {
    for (const char* mode : {"fp32", "bf16"}) {
      tgt::TempDir full, part;
      std::string out;
      const std::string args =
          std::string(" --train.steps=12 --sample.tokens=0 --precision.mode=") + mode +
          moment_args(f) +
          (std::string(mode) == "bf16" ? " --precision.stochastic_rounding=true" : "");
      REQUIRE(run_binary(tiny_args(full.path) + args, &out) == 0);
      INFO(f << " " << mode << "\n" << out);
      CHECK(has(out, "optimizer state: Adam m in " + std::string(f)));
      REQUIRE(run_binary(tiny_args(part.path) + args + " --train.stop_at_step=5", &out) == 0);
      REQUIRE(run_binary(tiny_args(part.path) + args + " --checkpoint.resume=true", &out) == 0);
      CHECK_FALSE(has(out, "convert"));  // same formats: the codes come back as they were
      check_same_losses(full.path, part.path, 12);
      const std::string a = full / "ckpt_00000012", b = part / "ckpt_00000012";
      CHECK(slurp(a + "/model.bin") == slurp(b + "/model.bin"));
      // The moments too, bit for bit, 2 bytes each.
      CHECK(slurp(a + "/optim.bin") == slurp(b + "/optim.bin"));
      CHECK(slurp(a + "/optim.bin").size() == 1024 + 4 * n);
      // The CPU backend allocates what the plan says, the 2-byte moments included.
      json s = json::parse(slurp(full / "summary.json"));
      const double peak = s["peak_memory_bytes"].get<double>(),
                   plan = s["planned_memory_bytes"].get<double>();
      CHECK(peak >= plan);
      CHECK(peak <= plan + 32 * 64);
      CHECK(s["final_val_loss"].get<double>() < s["initial_val_loss"].get<double>());
    }
  }
}

TEST_CASE(
    "cli: resuming in other moment formats: widening converts and says so, narrowing is "
    "refused (exit 2) unless allowed") {
  std::string out;
  tgt::TempDir narrow, wide;
  const std::string steps = " --train.steps=8";
  REQUIRE(
      run_binary(tiny_args(narrow.path) + steps + moment_args("bf16") + " --train.stop_at_step=4",
                 &out) == 0);
  // bf16 -> fp32 holds every value: converted once, and said.
  REQUIRE(run_binary(tiny_args(narrow.path) + steps + " --checkpoint.resume=true", &out) == 0);
  CHECK(has(out, "convert once, losing nothing"));
  CHECK(has(out, "precision.state.adam_m=fp32 (the checkpoint's bf16)"));
  CHECK(has(out, "precision.state.adam_v=fp32 (the checkpoint's bf16)"));
  // fp32 -> bf16 would round them: refused naming the keys and the way out; nothing changes.
  REQUIRE(run_binary(tiny_args(wide.path) + steps + " --train.stop_at_step=4", &out) == 0);
  const std::string before = slurp(wide / "metrics.jsonl");
  CHECK(run_binary(
            tiny_args(wide.path) + steps + moment_args("bf16-sr") + " --checkpoint.resume=true",
            &out) == 2);
  INFO(out);
  CHECK(has(out, "precision.state.adam_m"));
  CHECK(has(out, "precision.state.allow_narrowing=true"));
  CHECK(has(out, "precision.state.adam_m=fp32 precision.state.adam_v=fp32"));
  CHECK(slurp(wide / "metrics.jsonl") == before);
  // ... unless asked for: rounded once, and said.
  REQUIRE(run_binary(tiny_args(wide.path) + steps + moment_args("bf16-sr") +
                         " --checkpoint.resume=true --precision.state.allow_narrowing=true",
                     &out) == 0);
  CHECK(has(out, "rounded once, to nearest"));
  // bf16-sr -> bf16: the same codes; only future stores round otherwise.
  REQUIRE(run_binary(tiny_args(wide.path) + " --train.steps=10" + moment_args("bf16") +
                         " --checkpoint.resume=true",
                     &out) == 0);
  CHECK(has(out, "losing nothing: precision.state.adam_m=bf16 (the checkpoint's bf16-sr)"));
  // A bad value is a usage error naming the key.
  CHECK(run_binary(tiny_args(wide.path) + " --precision.state.adam_v=fp8", &out) == 2);
  CHECK(has(out, "precision.state.adam_v"));
}

TEST_CASE("cli: memory plans the optimizer in the moments' formats") {
  std::string out;
  const std::string args =
      "memory --preset gpt2 --data.batch_size=4 --data.seq_len=1024 "
      "--model.max_seq_len=1024 --modes=fp32";
  // Weights, master, gradients, optimizer: 124475904 parameters x 8 bytes of moments, then x 4
  // (bf16 m, fp16 v), then x 4 over 2 ZeRO-1 ranks.
  REQUIRE(run_binary(args, &out) == 0);
  CHECK(has(out, "| fp32 | 474.8 MiB | 0.0 MiB | 474.8 MiB | 949.7 MiB |"));
  CHECK(has(out, "Adam's m (fp32) and v (fp32), 8 bytes per parameter"));
  REQUIRE(run_binary(args + " --precision.state.adam_m=bf16 --precision.state.adam_v=fp16", &out) ==
          0);
  INFO(out);
  CHECK(has(out, "| fp32 | 474.8 MiB | 0.0 MiB | 474.8 MiB | 474.8 MiB |"));
  CHECK(has(out, "Adam's m (bf16) and v (fp16), 4 bytes per parameter"));
  REQUIRE(run_binary(args + moment_args("bf16-sr") + " --zero_ranks=2", &out) == 0);
  CHECK(has(out, "| fp32 | 474.8 MiB | 0.0 MiB | 474.8 MiB | 237.4 MiB |"));
  CHECK(has(out, "4 bytes per parameter of this rank's shard"));
}

TEST_CASE("mpi: ZeRO-1 with 2-byte Adam moments trains like unsharded and resumes bit-exactly") {
  tgt::TempDir plain, zero, part;
  std::string out;
  const std::string args = " --train.steps=10 --data.batch_size=4 --precision.mode=bf16" +
                           std::string(" --precision.state.adam_m=bf16-sr") +
                           " --precision.state.adam_v=fp16";
  REQUIRE(run_mpi(2, tiny_args(plain.path) + args, &out) == 0);
  int rc = run_mpi(2, tiny_args(zero.path) + args + " --train.zero_stage=1", &out);
  INFO(out);
  REQUIRE(rc == 0);
  check_same_losses(plain.path, zero.path, 10);
  // Every moment's stochastic rounding drew the bits of its global index: the same codes.
  const std::string ca = plain / "ckpt_00000010", cb = zero / "ckpt_00000010";
  tg::GPTConfig mc = tg::gpt_config(1, 2, 16, 256, 32);
  tg::CheckpointData da = tg::load_checkpoint(ca, mc), db = tg::load_checkpoint(cb, mc);
  CHECK(db.m_format == tg::StateFormat::BF16SR);
  CHECK(db.v_format == tg::StateFormat::FP16);
  CHECK(da.m == db.m);
  CHECK(da.v == db.v);
  // Sharded, stopped and resumed (and resumed unsharded from the sharded files): bit-exact.
  for (const char* second : {"1", "0"}) {
    tg::remove_tree(part.path);
    REQUIRE(run_mpi(2, tiny_args(part.path) + args + " --train.zero_stage=1 --train.stop_at_step=4",
                    &out) == 0);
    rc = run_mpi(
        2, tiny_args(part.path) + args + " --checkpoint.resume=true --train.zero_stage=" + second,
        &out);
    INFO("resumed with zero_stage " << second << "\n" << out);
    REQUIRE(rc == 0);
    check_same_losses(plain.path, part.path, 10);
  }
}
