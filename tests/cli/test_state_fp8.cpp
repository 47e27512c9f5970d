// End-to-end tests of fp8 Adam moments (precision.state.adam_m / adam_v = fp8-e4m3 / fp8-e5m2,
// a scale per block: src/numerics/moment_block.h): they train, allocate what the plan says,
// checkpoint their codes and blocks' meta and resume bit-exactly (alone and under ZeRO-1,
// resharded or not), convert only where asked, and refuse bad blocking keys by name.
#include <doctest/doctest.h>

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
const std::string kBf16 = " --precision.mode=bf16 --sample.tokens=0";
const size_t kParams = 7920;  // the tiny model's
// Bytes of one moment of the tiny model in an optimizer file: codes, then fp32 meta words.
size_t fp8_bytes(int block, int words) {
  return (kParams + 15) / 16 * 16 + (kParams + block - 1) / block * words * 4;
}
}  // namespace

TEST_CASE("cli: fp8 moments: planned bytes allocated, training converges, resume bit-exact") {
  std::string out;
  tgt::TempDir base;
  REQUIRE(run_binary(tiny_args(base.path) + kBf16 + " --train.steps=12", &out) == 0);
  const json sb = json::parse(slurp(base / "summary.json"));
  struct Case {
    const char *args, *name;
    size_t file_bytes;  // optim.bin
  } cases[] = {
      {" --precision.state.adam_m=fp8-e4m3 --precision.state.adam_v=fp8-e4m3", "fp8-e4m3/128/fp32",
       1024 + 2 * fp8_bytes(128, 1)},
      {" --precision.state.adam_m=fp8-e4m3 --precision.state.adam_v=fp8-e5m2 "
       "--precision.state.moment_block=32 --precision.state.moment_scale=e8m0 "
       "--precision.state.moment_expand=coat",
       "fp8-e5m2/32/e8m0+coat", 1024 + 2 * fp8_bytes(32, 2)},
      {" --precision.state.adam_m=fp8-e4m3 --precision.state.adam_v=fp16", "fp16",
       1024 + fp8_bytes(128, 1) + 2 * kParams},
  };
  for (const Case& c : cases) {
    tgt::TempDir full, part;
    const std::string args = kBf16 + " --train.steps=12" + c.args;
    REQUIRE(run_binary(tiny_args(full.path) + args, &out) == 0);
    INFO(c.args << "\n" << out);
    CHECK(has(out, std::string("optimizer state: Adam m in fp8-e4m3/")));
    REQUIRE(run_binary(tiny_args(part.path) + args + " --train.stop_at_step=5", &out) == 0);
    REQUIRE(run_binary(tiny_args(part.path) + args + " --checkpoint.resume=true", &out) == 0);
    CHECK_FALSE(has(out, "convert"));
    check_same_losses(full.path, part.path, 12);
    const std::string a = full / "ckpt_00000012", b = part / "ckpt_00000012";
    CHECK(slurp(a + "/optim.bin") == slurp(b + "/optim.bin"));
    CHECK(slurp(a + "/optim.bin").size() == c.file_bytes);
    const json s = json::parse(slurp(full / "summary.json"));
    CHECK(s["state"]["adam_v"] == c.name);
    // The plan counts the codes and the meta, and the CPU backend allocates exactly that.
    const double plan = s["planned_memory_bytes"].get<double>();
    CHECK(s["peak_memory_bytes"].get<double>() >= plan);
    CHECK(s["peak_memory_bytes"].get<double>() <= plan + 32 * 64);
    CHECK(sb["planned_memory_bytes"].get<double>() - plan >= 8.0 * kParams - double(c.file_bytes));
    CHECK(s["final_val_loss"].get<double>() < s["initial_val_loss"].get<double>());
    CHECK(s["final_val_loss"].get<double>() ==
          doctest::Approx(sb["final_val_loss"].get<double>()).epsilon(0.03));
  }
}

TEST_CASE("cli: resuming fp8 moments in another format or blocking converts only where asked") {
  std::string out;
  tgt::TempDir d;
  const std::string steps = kBf16 + " --train.steps=8";
  const std::string fp8 = " --precision.state.adam_m=fp8-e4m3 --precision.state.adam_v=fp8-e4m3";
  REQUIRE(run_binary(tiny_args(d.path) + steps + fp8 + " --train.stop_at_step=3", &out) == 0);
  // Another block size would re-scale the blocks: refused, naming both blockings.
  const std::string before = slurp(d / "metrics.jsonl");
  CHECK(run_binary(tiny_args(d.path) + steps + fp8 +
                       " --precision.state.moment_block=64 --checkpoint.resume=true",
                   &out) == 2);
  INFO(out);
  CHECK(has(out, "precision.state.adam_m=fp8-e4m3/64/fp32 (the checkpoint's fp8-e4m3/128/fp32)"));
  CHECK(slurp(d / "metrics.jsonl") == before);
  // Into fp32 every decoded value is kept: said, and done.
  REQUIRE(run_binary(tiny_args(d.path) + steps + " --train.stop_at_step=5 --checkpoint.resume=true",
                     &out) == 0);
  CHECK(has(out, "Adam moments convert once, losing nothing: precision.state.adam_m=fp32 "
                 "(the checkpoint's fp8-e4m3/128/fp32)"));
  // fp32 into fp8 rounds: only with allow_narrowing.
  CHECK(run_binary(tiny_args(d.path) + steps + fp8 + " --checkpoint.resume=true", &out) == 2);
  REQUIRE(run_binary(tiny_args(d.path) + steps + fp8 +
                         " --checkpoint.resume=true --precision.state.allow_narrowing=true",
                     &out) == 0);
  CHECK(has(out, "Adam moments are rounded once, to nearest"));
}

TEST_CASE("cli: fp8 moment blocking keys are checked by name") {
  std::string out;
  tgt::TempDir d;
  CHECK(run_binary(tiny_args(d.path) + kBf16 + " --precision.state.moment_block=100", &out) == 2);
  CHECK(has(out, "config key 'precision.state.moment_block': 100 is not a power of two"));
  CHECK(run_binary(tiny_args(d.path) + kBf16 + " --precision.state.moment_block=8", &out) == 2);
  CHECK(has(out, "precision.state.moment_block"));
  CHECK(run_binary(tiny_args(d.path) + kBf16 + " --precision.state.moment_scale=ue8m0", &out) == 2);
  CHECK(has(out, "precision.state.moment_scale"));
  CHECK(run_binary(tiny_args(d.path) + kBf16 + " --precision.state.moment_expand=yes", &out) == 2);
  CHECK(has(out, "precision.state.moment_expand"));
}

TEST_CASE("mpi: ZeRO-1 with fp8 moments trains like unsharded and resumes bit-exactly") {
  tgt::TempDir plain, zero, part;
  std::string out;
  const std::string args =
      " --train.steps=10 --data.batch_size=4" + kBf16 +
      " --precision.state.adam_m=fp8-e4m3 --precision.state.adam_v=fp8-e4m3 "
      "--precision.state.moment_expand=coat";
  REQUIRE(run_mpi(2, tiny_args(plain.path) + args, &out) == 0);
  int rc = run_mpi(2, tiny_args(zero.path) + args + " --train.zero_stage=1", &out);
  INFO(out);
  REQUIRE(rc == 0);
  // Shards of whole blocks: the blocks, hence every scale and loss, are the unsharded ones.
  CHECK(has(out, "3968 parameters per rank"));
  check_same_losses(plain.path, zero.path, 10);
  const std::string ca = plain / "ckpt_00000010", cb = zero / "ckpt_00000010";
  CHECK(slurp(ca + "/model.bin") == slurp(cb + "/model.bin"));
  tg::GPTConfig mc = tg::gpt_config(1, 2, 16, 256, 32);
  const tg::CheckpointData da = tg::load_checkpoint(ca, mc), db = tg::load_checkpoint(cb, mc);
  CHECK(da.m_codes == db.m_codes);
  CHECK(da.v_meta == db.v_meta);
  CHECK(da.m_codes.size() == kParams);
  for (const char* second : {"1", "0"}) {
    tg::remove_tree(part.path);
    REQUIRE(run_mpi(2, tiny_args(part.path) + args + " --train.zero_stage=1 --train.stop_at_step=4",
                    &out) == 0);
    rc = run_mpi(2,
                 tiny_args(part.path) + args + " --checkpoint.resume=true --train.zero_stage=" +
                     second,
                 &out);
    INFO("resumed with zero_stage " << second << "\n" << out);
    REQUIRE(rc == 0);
    check_same_losses(plain.path, part.path, 10);
  }
}

TEST_CASE("cli: memory plans fp8 moments with their blocks' scales") {
  std::string out;
  const std::string args =
      "memory --preset gpt2 --data.batch_size=4 --data.seq_len=1024 --model.max_seq_len=1024 "
      "--modes=bf16";
  // GPT-2 124M: 124475904 parameters; m and v at 1 + 4/128 bytes each: 244.8 MiB.
  REQUIRE(run_binary(args + " --precision.state.adam_m=fp8-e4m3 --precision.state.adam_v=fp8-e4m3",
                     &out) == 0);
  INFO(out);
  CHECK(has(out, "| bf16 | 237.4 MiB | 474.8 MiB | 237.4 MiB | 244.8 MiB |"));
  CHECK(has(out, "2.062 bytes per parameter"));
}
