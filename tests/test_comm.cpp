// The communicator's collectives, checked in real MPI processes: the test binary re-runs
// itself under mpirun with TG_COMM_SELFTEST set, and each rank checks every collective.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "src/comm.h"
#include "test_util.h"

// Runs on every rank; returns the number of failed checks (0 on success).
int comm_selftest() {
  tg::Comm& c = tg::comm();
  const int r = c.rank(), w = c.world();
  int bad = 0;
  auto expect = [&](bool ok, const char* what) {
    if (!ok) {
      fprintf(stderr, "rank %d: %s failed\n", r, what);
      bad++;
    }
  };
  expect(w >= 2, "world size");
  std::vector<float> x = {float(r + 1), float(10 * (r + 1))};
  c.all_reduce_sum(x.data(), x.size());
  expect(x[0] == float(w * (w + 1) / 2) && x[1] == float(10 * w * (w + 1) / 2), "all_reduce_sum");
  double d = r + 0.5;
  c.all_reduce_sum(&d, 1);
  expect(d == w * w / 2.0, "all_reduce_sum double");
  float m = float(r);
  c.all_reduce_max(&m, 1);
  expect(m == float(w - 1), "all_reduce_max");
  std::vector<float> mine = {float(r), float(r) + 0.25f}, all(2 * w);
  c.all_gather(mine.data(), all.data(), 2);
  for (int k = 0; k < w; k++)
    expect(all[2 * k] == float(k) && all[2 * k + 1] == float(k) + 0.25f, "all_gather");
  std::vector<float> full(2 * w), part(2);
  for (int k = 0; k < 2 * w; k++) full[k] = float(k + r);
  c.reduce_scatter_sum(full.data(), part.data(), 2);
  for (int i = 0; i < 2; i++) {
    float want = 0;
    for (int rr = 0; rr < w; rr++) want += float(2 * r + i + rr);
    expect(part[i] == want, "reduce_scatter_sum");
  }
  char msg[8] = {0};
  if (r == 0) snprintf(msg, sizeof(msg), "hello");
  c.broadcast(msg, sizeof(msg), 0);
  expect(std::string(msg) == "hello", "broadcast");
  // Before the last collective: a rank that finished everything may already have exited.
  expect(c.peers_alive(), "peers_alive while everyone is here");
  c.barrier();
  if (getenv("TG_COMM_LEAVE_TEST")) {
    // Rank 1 leaves; rank 0 must notice without a collective (what NCCL waits rely on).
    if (r == 1) std::_Exit(0);
    if (r == 0) {
      bool gone = false;
      for (int i = 0; i < 500 && !gone; i++) {
        gone = !c.peers_alive();
        usleep(10000);
      }
      expect(gone, "peers_alive after rank 1 left");
    }
  }
  return bad;
}

TEST_CASE("comm: collectives in 2 and 3 MPI processes") {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  REQUIRE(n > 0);
  exe[n] = 0;
  for (int np : {2, 3}) {
    std::string cmd =
        "TG_COMM_SELFTEST=1 ASAN_OPTIONS=detect_leaks=0 timeout 60 mpirun "
        "--allow-run-as-root --oversubscribe -np " +
        std::to_string(np) + " " + exe + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p);
    std::string out;
    char buf[4096];
    size_t k;
    while ((k = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, k);
    int status = pclose(p);
    INFO("np=" << np << "\n" << out);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
}

namespace {

// Starts np copies of `cmd` (a shell command) with TG_RANK = 0..np-1 and the rest of `env`;
// returns 0 when every one of them exited 0. Output goes to *out.
int run_ranks(int np, const std::string& env, const std::string& cmd, std::string* out) {
  return tgt::run_shell("pids=''; for r in $(seq 0 " + std::to_string(np - 1) +
                            "); do TG_RANK=$r " + env + " timeout 120 " + cmd +
                            " & pids=\"$pids $!\"; done; rc=0; for p in $pids; do wait $p || "
                            "rc=1; done; exit $rc",
                        out);
}

std::string self_exe() {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  exe[n > 0 ? n : 0] = 0;
  return exe;
}

}  // namespace

TEST_CASE("comm: collectives over TCP without MPI, tcp:// and file:// rendezvous") {
  if (getenv("TG_COMM_SELFTEST")) return;
  const std::string exe = self_exe();
  for (int np : {2, 3}) {
    std::string out;
    const std::string env = "TG_COMM_SELFTEST=1 TG_WORLD_SIZE=" + std::to_string(np) +
                            " TG_RENDEZVOUS=tcp://127.0.0.1:" + std::to_string(tgt::free_port());
    int rc = run_ranks(np, env, exe, &out);
    INFO("tcp np=" << np << "\n" << out);
    CHECK(rc == 0);
  }
  char dir[] = "/tmp/tg_rdv_XXXXXX";
  REQUIRE(mkdtemp(dir));
  const std::string file = std::string(dir) + "/meet";
  std::string out;
  int rc = run_ranks(
      3, "TG_COMM_SELFTEST=1 TG_COMM_LEAVE_TEST=1 TG_WORLD_SIZE=3 TG_RENDEZVOUS=file://" + file,
      exe, &out);
  INFO("file\n" << out);
  CHECK(rc == 0);
  // The rendezvous file is gone once everyone has arrived.
  CHECK(access(file.c_str(), F_OK) != 0);
  rmdir(dir);
}

TEST_CASE("comm: a process missing at the rendezvous is an error after dist.timeout") {
  if (getenv("TG_COMM_SELFTEST")) return;
  std::string out;
  const std::string env = "TG_COMM_SELFTEST=1 TG_WORLD_SIZE=3 TG_RENDEZVOUS=tcp://127.0.0.1:" +
                          std::to_string(tgt::free_port());
  // Only 2 of 3 start: rank 0 gives up (the selftest reads no timeout key: use the binary).
  const char* bin = getenv("TG_BIN");
  if (!bin) return;
  int rc = run_ranks(2, env, std::string(bin) + " train --dist.timeout=2 --data.train=/nonexistent",
                     &out);
  INFO(out);
  CHECK(rc != 0);
  CHECK(out.find("only 2 of 3 processes arrived") != std::string::npos);
}

TEST_CASE("comm: a single process is its own world") {
  if (getenv("TG_COMM_SELFTEST")) return;
  tg::Comm& c = tg::comm();
  CHECK(c.world() == 1);
  CHECK(c.rank() == 0);
  float x = 3;
  c.all_reduce_sum(&x, 1);
  CHECK(x == 3);
  std::vector<float> in = {1, 2}, out(2);
  c.all_gather(in.data(), out.data(), 2);
  CHECK(out == in);
}
