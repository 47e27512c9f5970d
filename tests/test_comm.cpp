// The communicator's collectives, checked in real MPI processes: the test binary re-runs
// itself under mpirun with TG_COMM_SELFTEST set, and each rank checks every collective.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "src/comm.h"

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
  c.barrier();
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
