// kill -9 in the middle of a run, for every kind of optimizer state (the presets of
// src/config/state_presets.h, and the loss scaler's fp16 state): the run resumed from whatever
// checkpoint the kill left ends with the same files and the same losses as a run never killed.
// The kills land at different points of the run (between steps, inside a checkpoint's write).
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "tests/cli/cli_helpers.h"
#include "tests/test_util.h"

using tgt::run_binary;
using tgt::slurp;
using tgt::tiny_args;

namespace {

const std::string kSteps = " --train.steps=600 --checkpoint.every=10 --checkpoint.keep=2 "
                           "--eval.every=0 --sample.tokens=0";

// `train_gpt args` started in a child process (the shell execs into it: the pid is the run's),
// its output in log.
pid_t start_binary(const std::string& args, const std::string& log) {
  const std::string cmd = "exec " + tgt::binary() + " " + args + " > " + log + " 2>&1";
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

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
  const pid_t pid = start_binary(args, dir + ".log");
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
