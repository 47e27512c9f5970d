// End-to-end tests of precision.state.grad_comm (src/numerics/wire_format.h) over 2 and 3 MPI
// ranks: bf16 on the wire follows fp32's wire bit for bit when the gradients are bf16, at the
// bytes the format promises; lossy wires stay near fp32's; the encode buffers are planned
// exactly; resume is bit-exact; an unknown format is refused by name.
#include <doctest/doctest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "src/base/fileio.h"
#include "src/config/config.h"
#include "src/io/checkpoint.h"
#include "src/model/model.h"
#include "src/precision/cuda_scratch.h"
#include "src/report/runs_file.h"
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
const size_t kTinyParams = 7920;  // the tiny model's parameters
const std::string kSteps = " --train.steps=8 --data.batch_size=4 --sample.tokens=0";

std::string wire(const char* f) { return std::string(" --precision.state.grad_comm=") + f; }
std::string zero_arg(int zero) { return " --train.zero_stage=" + std::to_string(zero); }

// The final weights of a run directory's last checkpoint (step 8).
std::vector<float> final_params(const std::string& run) {
  return tg::load_checkpoint(run + "/ckpt_00000008", tg::gpt_config(1, 2, 16, 256, 32)).params;
}

// Bytes one rank sends per step: the gradients (wire) and, under ZeRO-1, the all-gather of
// the updated weights in the compute type (`width` bytes).
double expected_bytes(tg::WireFormat f, int zero, int world, double width) {
  if (zero) {
    const size_t S = tg::zero_shard_size(kTinyParams, world);
    return double(world - 1) * (double(tg::wire_bytes(S, f)) + width * double(S));
  }
  const size_t part = (kTinyParams + world - 1) / world;
  return 2.0 * double(world - 1) * double(tg::wire_bytes(part, f));
}

void check_bytes_and_memory(const std::string& run, double want) {
  const json s = json::parse(slurp(run + "/summary.json"));
  // The planner counts what the run sent.
  tg::Config c;
  tg::config_apply_json(c, json::parse(slurp(run + "/config.json")), "config.json");
  CHECK(double(tg::plan_comm_bytes(tg::model_config(c), tg::mode_dtype(c.precision.mode),
                                   s["ranks"].get<int>(), c.train.zero_stage == 1, {},
                                   c.precision.state.grad_comm)) == want);
  for (const json& r : read_metrics(run + "/metrics.jsonl", "train"))
    CHECK(r["comm_bytes"].get<double>() == want);
  CHECK(s["comm_bytes_per_step"].get<double>() == want);
  const double peak = s["peak_memory_bytes"].get<double>(),
               plan = s["planned_memory_bytes"].get<double>();
  CHECK(peak >= plan);
  CHECK(peak <= plan + 16 * 64);  // each buffer rounded up to 64 bytes
}
}  // namespace

TEST_CASE("mpi: bf16 gradients on the wire follow fp32's bit for bit in bf16, at half the bytes") {
  for (int zero : {0, 1}) {
    tgt::TempDir f32, b16;
    std::string out;
    const std::string args = kSteps + " --precision.mode=bf16" + zero_arg(zero);
    REQUIRE(run_mpi(2, tiny_args(f32.path) + args, &out) == 0);
    INFO("zero " << zero << "\n" << out);
    REQUIRE(run_mpi(2, tiny_args(b16.path) + args + wire("bf16"), &out) == 0);
    CHECK(has(out, "bf16 gradients on the wire (summed in fp32)"));
    check_same_losses(f32.path, b16.path, 8);
    CHECK(final_params(f32.path) == final_params(b16.path));
    const double fp32_bytes = expected_bytes(tg::WireFormat::FP32, zero, 2, 2);
    const double bf16_bytes = expected_bytes(tg::WireFormat::BF16, zero, 2, 2);
    check_bytes_and_memory(f32.path, fp32_bytes);
    check_bytes_and_memory(b16.path, bf16_bytes);
    MESSAGE("zero " << zero << ": bytes per step fp32 " << fp32_bytes << ", bf16 " << bf16_bytes);
    CHECK(bf16_bytes < (zero ? 0.7 : 0.51) * fp32_bytes);
    const json s = json::parse(slurp(b16 / "summary.json"));
    CHECK(s["state"]["grad_comm"].get<std::string>() == "bf16");
  }
}

TEST_CASE("mpi: lossy wires train near fp32's wire, over 2 and 3 ranks, in many chunks") {
  struct Case {
    const char* mode;
    const char* format;
    tg::WireFormat f;
    int world, zero;
    double tol;  // largest relative loss gap to the fp32 wire over 8 steps
  };
  const Case cases[] = {
      {"fp32", "bf16", tg::WireFormat::BF16, 2, 0, 5e-4},
      {"bf16", "fp8-e4m3", tg::WireFormat::FP8E4M3, 2, 0, 2e-3},
      {"bf16", "fp8-e4m3", tg::WireFormat::FP8E4M3, 3, 1, 2e-3},
      {"fp16", "fp8-e4m3", tg::WireFormat::FP8E4M3, 3, 0, 2e-3},
      {"bf16", "fp8-e5m2", tg::WireFormat::FP8E5M2, 2, 1, 4e-3},
  };
  // Chunks of 1000 gradients: parts padded with zeros, and FP8 blocks cut at part ends.
  setenv("TG_TEST_REDUCE_CHUNK", "1000", 1);
  for (const Case& c : cases) {
    tgt::TempDir ref, run;
    std::string out;
    const std::string args =
        kSteps + " --precision.mode=" + c.mode + zero_arg(c.zero) + " --eval.every=0";
    REQUIRE(run_mpi(c.world, tiny_args(ref.path) + args, &out) == 0);
    INFO(std::string(c.mode) << ", " << std::string(c.format) << ", " << c.world << " ranks, zero "
                             << c.zero << "\n"
                             << out);
    REQUIRE(run_mpi(c.world, tiny_args(run.path) + args + wire(c.format), &out) == 0);
    const auto a = read_metrics(ref / "metrics.jsonl", "train");
    const auto b = read_metrics(run / "metrics.jsonl", "train");
    REQUIRE(b.size() == 8);
    const double gap = tgt::max_relative_loss_gap(b, a);
    MESSAGE(std::string(c.mode) << " gradients, " << std::string(c.format) << " wire, " << c.world
                                << " ranks: largest loss gap " << gap);
    CHECK(gap < c.tol);
    CHECK(final_params(ref.path) != final_params(run.path));  // the wire really rounded
    for (const json& r : b) CHECK(r["skipped"].get<bool>() == false);
  }
  unsetenv("TG_TEST_REDUCE_CHUNK");
}

TEST_CASE("mpi: fp8 gradients on the wire: planned bytes sent and allocated, resume bit-exact") {
  for (int zero : {0, 1}) {
    tgt::TempDir full, part;
    std::string out;
    const std::string args = kSteps + " --precision.mode=bf16" + zero_arg(zero) + wire("fp8-e4m3");
    REQUIRE(run_mpi(2, tiny_args(full.path) + args, &out) == 0);
    INFO("zero " << zero << "\n" << out);
    check_bytes_and_memory(full.path, expected_bytes(tg::WireFormat::FP8E4M3, zero, 2, 2));
    REQUIRE(run_mpi(2, tiny_args(part.path) + args + " --train.stop_at_step=3", &out) == 0);
    REQUIRE(run_mpi(2, tiny_args(part.path) + args + " --checkpoint.resume=true", &out) == 0);
    check_same_losses(full.path, part.path, 8);
    CHECK(final_params(full.path) == final_params(part.path));
  }
}

TEST_CASE("cli: an unknown gradient wire format is refused by name") {
  tgt::TempDir run;
  std::string out;
  CHECK(run_binary(tiny_args(run.path) + " --train.steps=2" + wire("fp8"), &out) == 2);
  CHECK(has(out, "config key 'precision.state.grad_comm'"));
  CHECK(has(out, "fp8-e4m3"));  // the choices are listed
  CHECK(!tg::file_exists(run / "metrics.jsonl"));
  // One process sends nothing: the key changes nothing there.
  tgt::TempDir a, b;
  REQUIRE(run_binary(tiny_args(a.path) + kSteps, &out) == 0);
  REQUIRE(run_binary(tiny_args(b.path) + kSteps + wire("fp8-e4m3"), &out) == 0);
  check_same_losses(a.path, b.path, 8);
}

TEST_CASE("mpi: compare runs wire formats over ranks and reports the bytes each sends") {
  tgt::TempDir out;
  std::string text;
  const std::string args = tgt::tiny_compare_args() +
                           "--modes bf16 --states fp32,wire-bf16,wire-fp8,wire-e5m2 --seeds 2 "
                           "--train.steps=8 --out " +
                           out.path;
  REQUIRE(run_mpi(2, args, &text) == 0);
  INFO(text);
  const std::string md = slurp(out / "report.md");
  CHECK(has(md, "batch 4 x 32 per rank x 2 ranks (MPI)"));
  CHECK(has(md, "| sent per step per rank | at GPT-2 1.5B |"));
  CHECK(has(text, "wrote " + out.path + "/report.md"));  // once: rank 0 speaks for the job
  CHECK(text.find("wrote ") == text.rfind("wrote "));
  const json c = json::parse(slurp(out / "compare.json"));
  std::map<std::string, json> stats;
  for (const json& g : c["modes"]) stats[g["name"].get<std::string>()] = g["stats"];
  REQUIRE(stats.size() == 4);
  const double fp32 = stats["bf16"]["comm_bytes_gpt2_xl"].get<double>();
  CHECK(stats["bf16+wire-e5m2"]["comm_bytes_gpt2_xl"].get<double>() / fp32 ==
        doctest::Approx(1.03125 / 4).epsilon(1e-3));
  CHECK(stats["bf16+wire-bf16"]["comm_bytes_gpt2_xl"].get<double>() / fp32 ==
        doctest::Approx(0.5).epsilon(1e-3));
  CHECK(stats["bf16+wire-fp8"]["comm_bytes_gpt2_xl"].get<double>() / fp32 ==
        doctest::Approx(1.03125 / 4).epsilon(1e-3));
  CHECK(stats["bf16"]["comm_bytes_per_step"].get<double>() == 4.0 * kTinyParams);
  // bf16 gradients travel in bf16 without loss: the same final losses, seed for seed.
  CHECK(stats["bf16+wire-bf16"]["val_mean"].get<double>() ==
        stats["bf16"]["val_mean"].get<double>());
  CHECK(stats["bf16+wire-fp8"]["val_mean"].get<double>() !=
        stats["bf16"]["val_mean"].get<double>());
}

TEST_CASE("mpi: compare with ZeRO-1 runs fp32 accumulation and fp8 weight gathers") {
  tgt::TempDir out;
  std::string text;
  // 2 micro-steps a step (2 ranks x 4 rows x 32 per micro-step).
  const std::string args = tgt::tiny_compare_args() +
                           "--modes bf16 --states fp32,grads-fp32,weights-fp8,zero-fp8 --seeds 2 "
                           "--train.steps=8 --train.zero_stage=1 --data.total_batch_tokens=512 "
                           "--out " +
                           out.path;
  REQUIRE(run_mpi(2, args, &text) == 0);
  INFO(text);
  const json c = json::parse(slurp(out / "compare.json"));
  std::map<std::string, json> stats;
  for (const json& g : c["modes"]) stats[g["name"].get<std::string>()] = g["stats"];
  REQUIRE(stats.size() == 4);
  auto sent = [&](const char* name) { return stats[name]["comm_bytes_per_step"].get<double>(); };
  // fp32 sums of the micro-steps change the gradients, not the bytes.
  CHECK(sent("bf16+grads-fp32") == sent("bf16"));
  CHECK(stats["bf16+grads-fp32"]["val_mean"].get<double>() !=
        stats["bf16"]["val_mean"].get<double>());
  // ZeRO-1 sends 4 bytes per gradient of its shard, 2 per weight: fp8 weights cut the second.
  CHECK(sent("bf16+weights-fp8") < sent("bf16"));
  CHECK(sent("bf16+zero-fp8") < sent("bf16+weights-fp8") / 2);
  // Every run's bytes as planned at GPT-2 1.5B follow the same order.
  auto xl = [&](const char* name) { return stats[name]["comm_bytes_gpt2_xl"].get<double>(); };
  CHECK(xl("bf16+weights-fp8") / xl("bf16") == doctest::Approx((4 + 1.03125) / 6).epsilon(1e-3));
  CHECK(xl("bf16+zero-fp8") / xl("bf16") == doctest::Approx(2 * 1.03125 / 6).epsilon(1e-3));
  // The planned GPU memory is planned for the runs' ranks (sharded state, wire staging): the
  // CPU's plan of the same runs, which is what they allocated, and the CUDA backend's own
  // scratch (src/precision/cuda_scratch.h).
  std::map<std::string, json> first_summary, first_config;  // each group's first run's
  for (const json& r : tg::read_runs_file(out / "runs.jsonl").runs) {
    first_summary.emplace(r["group"].get<std::string>(), r["summary"]);
    first_config.emplace(r["group"].get<std::string>(), r["config"]);
  }
  for (const json& g : c["modes"]) {
    const json& s = first_summary[g["name"].get<std::string>()];
    const json& m = first_config[g["name"].get<std::string>()]["model"];
    const json& d = first_config[g["name"].get<std::string>()]["data"];
    const tg::GPTConfig mc =
        tg::gpt_config(m["n_layer"], m["n_head"], m["n_embd"], m["vocab_size"], m["max_seq_len"]);
    const double scratch =
        double(tg::plan_cuda_scratch(mc, tg::DType::BF16, d["batch_size"], d["seq_len"],
                                     tg::AttentionRequest::Cublas, false)
                   .total());
    INFO(g["name"].get<std::string>());
    CHECK(g["stats"]["planned_gpu_bytes"].get<double>() ==
          s["planned_memory_bytes"].get<double>() + scratch);
    CHECK(s["peak_memory_bytes"].get<double>() ==
          doctest::Approx(s["planned_memory_bytes"].get<double>()).epsilon(0.01));
  }
}

TEST_CASE("mpi: ZeRO-1 weights gathered in fp8: close to the compute type's, planned, resumed") {
  const std::string fp8 = " --precision.state.weight_comm=fp8-e4m3";
  const std::string args = kSteps + " --precision.mode=bf16 --eval.every=0" + zero_arg(1);
  tgt::TempDir ref, full, part;
  std::string out;
  REQUIRE(run_mpi(2, tiny_args(ref.path) + args, &out) == 0);
  REQUIRE(run_mpi(2, tiny_args(full.path) + args + fp8, &out) == 0);
  INFO(out);
  const auto a = read_metrics(ref / "metrics.jsonl", "train");
  const auto b = read_metrics(full / "metrics.jsonl", "train");
  REQUIRE(b.size() == 8);
  const double gap = tgt::max_relative_loss_gap(b, a);
  MESSAGE("bf16, weights gathered in fp8-e4m3: largest loss gap " << gap);
  CHECK(gap < 5e-3);
  CHECK(gap > 0);  // the weights really were rounded
  // A rank sends its shard of fp32 gradients, and its shard of weights in fp8 codes and scales.
  const size_t S = tg::zero_shard_size(kTinyParams, 2);
  const double want = double(tg::wire_bytes(S, tg::WireFormat::FP32)) +
                      double(tg::wire_bytes(S, tg::WireFormat::FP8E4M3));
  const json s = json::parse(slurp(full / "summary.json"));
  CHECK(s["state"]["weight_comm"].get<std::string>() == "fp8-e4m3");
  CHECK(s["comm_bytes_per_step"].get<double>() == want);
  CHECK(double(tg::plan_comm_bytes(tg::gpt_config(1, 2, 16, 256, 32), tg::DType::BF16, 2, true, {},
                                   tg::WireFormat::FP32, true)) == want);
  CHECK(s["peak_memory_bytes"].get<double>() >= s["planned_memory_bytes"].get<double>());
  CHECK(s["peak_memory_bytes"].get<double>() <= s["planned_memory_bytes"].get<double>() + 16 * 64);
  REQUIRE(run_mpi(2, tiny_args(part.path) + args + fp8 + " --train.stop_at_step=3", &out) == 0);
  REQUIRE(run_mpi(2, tiny_args(part.path) + args + fp8 + " --checkpoint.resume=true", &out) == 0);
  check_same_losses(full.path, part.path, 8);
  // Refused by name where it cannot work: no ZeRO-1, fp32 weights (the master itself), a master
  // kept in the weights.
  for (const std::string& bad :
       {std::string(" --precision.mode=bf16"),
        std::string(" --precision.mode=fp32 --train.zero_stage=1"),
        std::string(
            " --precision.mode=bf16 --train.zero_stage=1 --precision.state.master=bf16-sr")}) {
    tgt::TempDir run;
    CHECK(run_binary(tiny_args(run.path) + " --train.steps=2" + bad + fp8, &out) == 2);
    CHECK(has(out, "config key 'precision.state.weight_comm'"));
  }
}
