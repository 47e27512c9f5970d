// End-to-end tests of precision.state.grads (GPT::set_fp32_grad_accumulation): a 16-bit model's
// micro-steps summed in an fp32 buffer and rounded once. With one micro-step it is the compute
// type's run bit for bit; with several it differs and stays close; its bytes are planned and
// allocated; resume is bit-exact (alone and over 2 MPI ranks with ZeRO-1).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "src/base/fileio.h"
#include "src/io/checkpoint.h"
#include "tests/cli/cli_helpers.h"
#include "tests/test_util.h"

using json = nlohmann::json;
using tgt::check_same_losses;
using tgt::has;
using tgt::read_metrics;
using tgt::run_binary;
using tgt::run_mpi;
using tgt::slurp;
using tgt::tiny_args;

namespace {
const size_t kTinyParams = 7920;
const std::string kFp32Grads = " --precision.state.grads=fp32";
// 4 micro-steps of 4 x 32 tokens per optimizer step.
const std::string kFourMicro = " --data.total_batch_tokens=512";
const std::string kBase =
    " --precision.mode=bf16 --train.steps=10 --sample.tokens=0 --eval.every=0";

std::vector<float> final_params(const std::string& run) {
  return tg::load_checkpoint(run + "/ckpt_00000010", tg::gpt_config(1, 2, 16, 256, 32)).params;
}
}  // namespace

TEST_CASE(
    "cli: fp32 gradient accumulation: one micro-step is the compute type's run, four are close") {
  std::string out;
  tgt::TempDir a, b;
  REQUIRE(run_binary(tiny_args(a.path) + kBase, &out) == 0);
  REQUIRE(run_binary(tiny_args(b.path) + kBase + kFp32Grads, &out) == 0);
  check_same_losses(a.path, b.path, 10);  // the sum of one micro-step, rounded once, is itself
  CHECK(final_params(a.path) == final_params(b.path));
  const json sb = json::parse(slurp(b / "summary.json"));
  CHECK(sb["state"]["grads"].get<std::string>() == "fp32");
  // The fp32 buffer and its fold's staging (n < one staging chunk): 2 x 4 bytes a parameter.
  const json sa = json::parse(slurp(a / "summary.json"));
  CHECK(sb["planned_memory_bytes"].get<double>() - sa["planned_memory_bytes"].get<double>() ==
        8.0 * kTinyParams);
  for (const json* s : {&sa, &sb}) {
    CHECK((*s)["peak_memory_bytes"].get<double>() >= (*s)["planned_memory_bytes"].get<double>());
    CHECK((*s)["peak_memory_bytes"].get<double>() <=
          (*s)["planned_memory_bytes"].get<double>() + 16 * 64);
  }
  tgt::TempDir c, d;
  REQUIRE(run_binary(tiny_args(c.path) + kBase + kFourMicro, &out) == 0);
  INFO(out);
  REQUIRE(has(out, "4 micro-step(s) per step"));
  REQUIRE(run_binary(tiny_args(d.path) + kBase + kFourMicro + kFp32Grads, &out) == 0);
  const auto x = read_metrics(c / "metrics.jsonl", "train"),
             y = read_metrics(d / "metrics.jsonl", "train");
  REQUIRE(y.size() == 10);
  const double gap = tgt::max_relative_loss_gap(y, x);
  MESSAGE("4 micro-steps, fp32 vs bf16 accumulation: largest loss gap " << gap);
  CHECK(gap < 2e-3);
  CHECK(final_params(c.path) != final_params(d.path));  // the accumulation really changed
  // An fp32 model accumulates in fp32 anyway: the key changes nothing there.
  tgt::TempDir e, f;
  const std::string fp32 = " --precision.mode=fp32 --train.steps=4 --sample.tokens=0" + kFourMicro;
  REQUIRE(run_binary(tiny_args(e.path) + fp32, &out) == 0);
  REQUIRE(run_binary(tiny_args(f.path) + fp32 + kFp32Grads, &out) == 0);
  check_same_losses(e.path, f.path, 4);
}

TEST_CASE(
    "cli: fp32 gradient accumulation resumes bit-exactly, alone and over 2 ranks with ZeRO-1") {
  std::string out;
  const std::string args = kBase + kFourMicro + kFp32Grads;
  tgt::TempDir full, part;
  REQUIRE(run_binary(tiny_args(full.path) + args, &out) == 0);
  REQUIRE(run_binary(tiny_args(part.path) + args + " --train.stop_at_step=4", &out) == 0);
  REQUIRE(run_binary(tiny_args(part.path) + args + " --checkpoint.resume=true", &out) == 0);
  check_same_losses(full.path, part.path, 10);
  CHECK(final_params(full.path) == final_params(part.path));
  // 2 ranks: 2 micro-steps each, gradients summed in bf16 on the wire, ZeRO-1.
  const std::string mpi = kBase + " --data.total_batch_tokens=512 --train.zero_stage=1" +
                          kFp32Grads + " --precision.state.grad_comm=bf16";
  tgt::TempDir mf, mp;
  REQUIRE(run_mpi(2, tiny_args(mf.path) + mpi, &out) == 0);
  INFO(out);
  REQUIRE(run_mpi(2, tiny_args(mp.path) + mpi + " --train.stop_at_step=4", &out) == 0);
  REQUIRE(run_mpi(2, tiny_args(mp.path) + mpi + " --checkpoint.resume=true", &out) == 0);
  check_same_losses(mf.path, mp.path, 10);
  const json s = json::parse(slurp(mf / "summary.json"));
  CHECK(s["peak_memory_bytes"].get<double>() >= s["planned_memory_bytes"].get<double>());
  CHECK(s["peak_memory_bytes"].get<double>() <= s["planned_memory_bytes"].get<double>() + 16 * 64);
}
