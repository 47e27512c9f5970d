// kill -9 in the middle of a run, for every kind of optimizer state (the presets of
// src/config/presets.h, and the loss scaler's fp16 state): the run resumed from whatever
// checkpoint the kill left ends with the same files and the same losses as a run never killed.
// The kills land at different points of the run (between steps, inside a checkpoint's write).
// And the signals a scheduler or a terminal sends (src/training/signals.h): SIGTERM stops the
// run after its step with a checkpoint that resumes bit-exactly; a second signal ends it at once.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "src/base/common.h"
#include "src/io/checkpoint.h"
#include "tests/cli/cli_helpers.h"
#include "tests/test_util.h"

using tgt::run_binary;
using tgt::slurp;
using tgt::tiny_args;

namespace {

const std::string kSteps = " --train.steps=600 --checkpoint.every=10 --checkpoint.keep=2 "
                           "--eval.every=0 --sample.tokens=0";

// Whether dir holds a finished checkpoint (ckpt_<step>; one being written is .ckpt_<step>.tmp).
bool has_checkpoint(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind("ckpt_", 0) == 0) return true;
  return false;
}

// Starts the run, waits for its first checkpoint, lets it go on for delay_ms and kills it with
// SIGKILL; whether the kill found it still running.
bool run_and_kill(const std::string& args, const std::string& dir, int delay_ms) {
  const pid_t pid = tgt::start_binary(args, dir + ".log");
  int status = 0;
  while (!has_checkpoint(dir)) {
    if (waitpid(pid, &status, WNOHANG) == pid) return false;  // ended on its own
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

}  // namespace

TEST_CASE("cli: kill -9 mid-run and resume: every state ends as the uninterrupted run") {
  struct Case {
    const char* what;
    std::string args;
  };
  const std::string bf16 = " --precision.mode=bf16 --precision.state.preset=";
  const Case cases[] = {
      {"bf16, fp32 state", bf16 + "fp32"},
      {"bf16-sr moments", bf16 + "moments-bf16sr"},
      {"fp8 moments with COAT", bf16 + "moments-fp8-coat"},
      {"fp8 m, fp16 v", bf16 + "moments-fp8m-fp16v"},
      {"bf16-kahan master", bf16 + "master-kahan"},
      {"lean", bf16 + "lean"},
      {"fp32 accumulation of 2 micro-steps", bf16 + "grads-fp32 --data.total_batch_tokens=256"},
      {"fp16 with its loss scaler, fp16 moments",
       " --precision.mode=fp16 --precision.state.preset=moments-fp16"},
  };
  int delay_ms = 0, killed = 0;
  for (const Case& c : cases) {
    INFO(c.what);
    tgt::TempDir ref, part;
    std::string out;
    const std::string args = kSteps + c.args;
    REQUIRE(run_binary(tiny_args(ref.path) + args, &out) == 0);
    const bool was_killed = run_and_kill(tiny_args(part.path) + args, part.path, delay_ms);
    killed += was_killed;
    delay_ms += 40;  // the next kill later in its run
    REQUIRE(run_binary(tiny_args(part.path) + args + " --checkpoint.resume=true", &out) == 0);
    INFO(out);
    tgt::check_same_losses(ref.path, part.path, 600);
    const std::string a = ref / "ckpt_00000600", b = part / "ckpt_00000600";
    CHECK(slurp(a + "/model.bin") == slurp(b + "/model.bin"));
    CHECK(slurp(a + "/optim.bin") == slurp(b + "/optim.bin"));
  }
  MESSAGE(killed << " of " << std::size(cases) << " runs were killed mid-run");
  CHECK(killed >= int(std::size(cases)) - 1);  // one may outrun its kill on a fast machine
}

TEST_CASE("cli: SIGTERM mid-run: a checkpoint of the step it stopped at, exit 143, resume exact") {
  tgt::TempDir ref, part;
  std::string out;
  const std::string args = " --train.steps=400 --checkpoint.every=100000 --eval.every=0 "
                           "--sample.tokens=0";
  REQUIRE(run_binary(tiny_args(ref.path) + args, &out) == 0);
  const pid_t pid = tgt::start_binary(tiny_args(part.path) + args, part.path + ".log");
  REQUIRE(tgt::wait_for_steps(part.path, pid, 20));
  kill(pid, SIGTERM);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  const std::string log = slurp(part.path + ".log");
  INFO(log);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 128 + SIGTERM);
  // It finished the step in flight, saved it, and said how to go on.
  long long stopped = 0;
  const size_t at = log.find("stopped by SIGTERM after step ");
  REQUIRE(at != std::string::npos);
  stopped = std::stoll(log.substr(at + 30));
  CHECK(stopped >= 20);
  CHECK(stopped < 400);
  CHECK(tgt::has(log, "to continue: " + tgt::binary() + " train "));
  CHECK(tgt::has(log, "--checkpoint.resume=true"));
  const std::vector<std::string> ckpts = tg::list_checkpoints(part.path);
  REQUIRE(ckpts.size() == 1);
  CHECK(ckpts[0] == part / tg::strf("ckpt_%08lld", stopped));
  CHECK(tgt::read_metrics(part / "metrics.jsonl", "train").size() == size_t(stopped));
  const nlohmann::json summary = nlohmann::json::parse(slurp(part / "summary.json"));
  CHECK(summary["stopped_by"] == "SIGTERM");
  CHECK(summary["stopped_at_step"] == stopped);
  // Resumed, it ends as the run never stopped: the same losses and the same final checkpoint.
  REQUIRE(run_binary(tiny_args(part.path) + args + " --checkpoint.resume=true", &out) == 0);
  tgt::check_same_losses(ref.path, part.path, 400);
  const std::string a = ref / "ckpt_00000400", b = part / "ckpt_00000400";
  CHECK(slurp(a + "/model.bin") == slurp(b + "/model.bin"));
  CHECK(slurp(a + "/optim.bin") == slurp(b + "/optim.bin"));
}

TEST_CASE("cli: a second stop signal ends the run at once, without a checkpoint") {
  tgt::TempDir part;
  const std::string args = " --train.steps=100000 --checkpoint.every=100000 --eval.every=0 "
                           "--sample.tokens=0";
  const pid_t pid = tgt::start_binary(tiny_args(part.path) + args, part.path + ".log");
  REQUIRE(tgt::wait_for_steps(part.path, pid, 5));
  // Two different signals (two of one kind may merge while pending): the first only asks for
  // a stop after the step; the second takes the default action.
  kill(pid, SIGTERM);
  kill(pid, SIGINT);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  const std::string log = slurp(part.path + ".log");
  INFO(log);
  REQUIRE(WIFSIGNALED(status));
  CHECK((WTERMSIG(status) == SIGTERM || WTERMSIG(status) == SIGINT));
  CHECK_FALSE(tgt::has(log, "stopped by"));
  CHECK(tg::list_checkpoints(part.path).empty());
}

TEST_CASE("mpi: SIGTERM to rank 1 alone stops both ranks after the same step; resume bit-exact") {
  tgt::TempDir ref, part;
  std::string out;
  const std::string args = " --train.steps=300 --checkpoint.every=100000 --eval.every=0 "
                           "--sample.tokens=0 --train.zero_stage=1";
  REQUIRE(tgt::run_mpi(2, tiny_args(ref.path) + args, &out) == 0);
  // mpirun in the background; once 20 steps are logged, SIGTERM to the rank-1 process only
  // (the child of mpirun whose environment says so). The script prints mpirun's exit code.
  const std::string metrics = part / "metrics.jsonl";
  const std::string script =
      "ASAN_OPTIONS=detect_leaks=0 timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 " +
      tgt::binary() + " " + tiny_args(part.path) + args + " --train.threads=1 > " + part.path +
      ".log 2>&1 & M=$!; while [ $(grep -c '\"train\"' " + metrics +
      " 2>/dev/null || echo 0) -lt 20 ]; do kill -0 $M || exit 99; sleep 0.01; done; "
      "for c in $(pgrep -P $(pgrep -P $M -x mpirun || echo $M)) $(pgrep -P $M); do "
      "tr '\\0' '\\n' < /proc/$c/environ 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && "
      "kill -TERM $c; done; wait $M; echo mpirun_rc=$?";
  REQUIRE(tgt::run_shell(script, &out) == 0);
  const std::string log = slurp(part.path + ".log");
  INFO(out << "\n" << log);
  CHECK(tgt::has(out, tg::strf("mpirun_rc=%d", 128 + SIGTERM)));
  // Rank 0, never signalled, stopped after the same step as rank 1 and wrote the checkpoint.
  const size_t at = log.find("stopped by SIGTERM after step ");
  REQUIRE(at != std::string::npos);
  const long long stopped = std::stoll(log.substr(at + 30));
  CHECK(stopped < 300);
  const std::vector<std::string> ckpts = tg::list_checkpoints(part.path);
  REQUIRE(ckpts.size() == 1);
  CHECK(ckpts[0] == part / tg::strf("ckpt_%08lld", stopped));
  REQUIRE(tgt::run_mpi(2, tiny_args(part.path) + args + " --checkpoint.resume=true", &out) == 0);
  tgt::check_same_losses(ref.path, part.path, 300);
  const std::string a = ref / "ckpt_00000300", b = part / "ckpt_00000300";
  CHECK(slurp(a + "/model.bin") == slurp(b + "/model.bin"));
  CHECK(slurp(a + "/optim_rank00001.bin") == slurp(b + "/optim_rank00001.bin"));
}
