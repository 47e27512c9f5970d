// The share of a process's cores that other processes took (src/base/cpu_load.h): /proc/stat
// parsed, the arithmetic, a spinning child process seen as "others", and a training run's
// summary.json and summary line saying that its cores were shared.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "src/base/cpu_load.h"
#include "tests/test_util.h"

using namespace tg;

TEST_CASE("cpu load: /proc/stat's busy ticks of the allowed CPUs") {
  const std::string stat =
      "cpu  900 0 90 5000 10 0 5 3 0 0\n"
      "cpu0 100 10 20 3000 5 1 2 7 0 0\n"
      "cpu1 800 0 70 2000 5 0 3 0 0 0\n"
      "cpu12 5 0 0 0 0 0 0 0 0 0\n"
      "intr 1 2 3\n";
  double busy = 0;
  // user + nice + system + irq + softirq + steal, not idle or iowait: 140 and 873 ticks.
  REQUIRE(parse_proc_stat_busy(stat, {0}, 100, &busy));
  CHECK(busy == doctest::Approx(1.40));
  REQUIRE(parse_proc_stat_busy(stat, {0, 1}, 100, &busy));
  CHECK(busy == doctest::Approx(10.13));
  REQUIRE(parse_proc_stat_busy(stat, {12}, 100, &busy));
  CHECK(busy == doctest::Approx(0.05));
  // A CPU without a line, no CPUs, a bad clock: unknown.
  CHECK(!parse_proc_stat_busy(stat, {0, 3}, 100, &busy));
  CHECK(!parse_proc_stat_busy(stat, {}, 100, &busy));
  CHECK(!parse_proc_stat_busy(stat, {0}, 0, &busy));
  CHECK(!parse_proc_stat_busy("cpu0 1 2\n", {0}, 100, &busy));
}

TEST_CASE("cpu load: the others' share of the cores between two readings") {
  CpuTimes a, b;
  a.known = b.known = true;
  a.cpus = b.cpus = 2;
  a.wall_seconds = 10, b.wall_seconds = 20;  // 20 core-seconds
  a.busy_seconds = 100, b.busy_seconds = 118;
  a.self_seconds = 5, b.self_seconds = 18;  // this process took 13 of the 18 busy seconds
  CHECK(others_cpu_share(a, b) == doctest::Approx(0.25));
  b.self_seconds = 23.05;  // ticks: own time read a little above the busy time
  CHECK(others_cpu_share(a, b) == 0);
  CpuTimes unknown = b;
  unknown.known = false;
  CHECK(std::isnan(others_cpu_share(a, unknown)));
  CHECK(std::isnan(others_cpu_share(b, a)));  // no time passed forwards
}

namespace {
// A child process spinning on every allowed CPU for `seconds`; returns its pid.
pid_t spin_child(int cpus, double seconds) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  std::vector<std::thread> t;
  for (int i = 0; i < cpus; i++)
    t.emplace_back([seconds] {
      const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
      volatile unsigned x = 0;
      while (std::chrono::steady_clock::now() < end) x = x + 1;
    });
  for (auto& th : t) th.join();
  _exit(0);
}
}  // namespace

// (That this process's own work is not counted is the arithmetic above: a live check would
// depend on what else the machine runs.)
TEST_CASE("cpu load: another process spinning on the cores is seen") {
  const CpuTimes a = cpu_times_now();
  if (!a.known) {
    MESSAGE("SKIPPED: /proc/stat cannot be read here");
    return;
  }
  const pid_t child = spin_child(a.cpus, 1.0);
  waitpid(child, nullptr, 0);
  const CpuTimes b = cpu_times_now();
  CHECK(others_cpu_share(a, b) > 0.5);
}

TEST_CASE("cpu load: a run whose cores were shared says so in summary.json and its summary") {
  tgt::TempDir d;
  const CpuTimes now = cpu_times_now();
  if (!now.known) {
    MESSAGE("SKIPPED: /proc/stat cannot be read here");
    return;
  }
  const pid_t child = spin_child(now.cpus, 60.0);
  std::string out;
  const int rc = tgt::run_binary(tgt::tiny_args(d / "shared") + " --train.steps=60", &out);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  INFO(out);
  REQUIRE(rc == 0);
  const nlohmann::json s = nlohmann::json::parse(tgt::slurp(d / "shared/summary.json"));
  REQUIRE(s.contains("machine"));
  CHECK(s["machine"]["cpus"] == now.cpus);
  CHECK(s["machine"]["shared"] == true);
  CHECK(s["machine"]["others_cpu_share"].get<double>() > kSharedMachineShare);
  CHECK(out.find("summary: the cores were shared: other processes took") != std::string::npos);
  // Without the spinner the share is whatever else this machine runs: only its form is fixed.
  REQUIRE(tgt::run_binary(tgt::tiny_args(d / "alone") + " --train.steps=20", &out) == 0);
  const nlohmann::json a = nlohmann::json::parse(tgt::slurp(d / "alone/summary.json"));
  CHECK(a["machine"]["others_cpu_share"].get<double>() >= 0);
  CHECK(a["machine"]["shared"] == (a["machine"]["others_cpu_share"].get<double>() > 0.10));
}
