// How the processes of a job meet and talk: the MPI communicator's collectives, checked in
// real MPI processes (the test binary re-runs itself under mpirun with TG_COMM_SELFTEST set,
// and each rank checks every collective), a rank that dies under mpirun, and the rendezvous
// that hands NCCL's id to GPU processes launched without MPI (forked processes here).
#include <doctest/doctest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/comm/comm.h"
#include "src/comm/rendezvous.h"
#include "src/comm/rendezvous_secret.h"
#include "tests/test_util.h"

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
  if (getenv("TG_COMM_KILL_TEST")) {
    // Rank 1 dies; the others wait in a collective it never joins, until mpirun ends them.
    if (r == 1) raise(SIGKILL);
    c.barrier();
  }
  return bad;
}

namespace {

// Runs the test binary under mpirun with np processes and `env`; returns its exit status.
int run_self_mpi(int np, const std::string& env, std::string* out) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  exe[n > 0 ? n : 0] = 0;
  return tgt::run_shell(env +
                            " TG_COMM_SELFTEST=1 ASAN_OPTIONS=detect_leaks=0 timeout 60 mpirun "
                            "--allow-run-as-root --oversubscribe -np " +
                            std::to_string(np) + " " + exe,
                        out);
}

}  // namespace

TEST_CASE("comm: collectives in 2 and 3 MPI processes") {
  if (getenv("TG_COMM_SELFTEST")) return;
  for (int np : {2, 3}) {
    std::string out;
    int rc = run_self_mpi(np, "", &out);
    INFO("np=" << np << "\n" << out);
    CHECK(rc == 0);
  }
}

TEST_CASE("comm: a rank killed under mpirun ends the job, and mpirun names it") {
  if (getenv("TG_COMM_SELFTEST")) return;
  std::string out;
  int rc = run_self_mpi(3, "TG_COMM_KILL_TEST=1", &out);
  INFO(out);
  CHECK(rc != 0);
  CHECK(rc != 124);  // ended by mpirun, not by the timeout
  CHECK(out.find("process rank 1") != std::string::npos);
}

namespace {

// Runs body(rank) in `world` forked processes, or in those of `ranks` only; each one's exit
// status (body's return value; 100 + the signal when killed), in rank order.
std::vector<int> run_forked(int world, const std::function<int(int)>& body,
                            std::vector<int> ranks = {}) {
  if (ranks.empty())
    for (int r = 0; r < world; r++) ranks.push_back(r);
  std::vector<pid_t> pids;
  for (int r : ranks) {
    pid_t pid = fork();
    if (pid == 0) {
      int code = 99;
      try {
        code = body(r);
      } catch (const std::exception& e) {
        fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      fflush(stderr);
      _exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status));
  }
  return codes;
}

// The bytes rank 0 shares (NCCL's unique id is 128 bytes), different on every call.
std::vector<unsigned char> id_bytes(unsigned salt) {
  std::vector<unsigned char> id(128);
  for (size_t i = 0; i < id.size(); i++) id[i] = static_cast<unsigned char>(i * 7 + salt);
  return id;
}

bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

// tcp:// takes the job's secret from the environment; file:// (without it) makes its own.
void secret_for(const std::string& where) {
  if (where.rfind("tcp://", 0) == 0)
    setenv("TG_RENDEZVOUS_SECRET", "the job's secret", 1);
  else
    unsetenv("TG_RENDEZVOUS_SECRET");
}

// The error a rendezvous at `where` gives this rank (empty when it joins).
std::string join_error(int rank, int world, const std::string& where, int timeout_s) {
  try {
    tg::join_rendezvous(rank, world, where, timeout_s);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("comm: the rendezvous hands rank 0's id to every process, tcp:// and file://") {
  if (getenv("TG_COMM_SELFTEST")) return;
  tgt::TempDir dir;
  const std::string file = dir.path + "/meet";
  for (const std::string& where :
       {"tcp://127.0.0.1:" + std::to_string(tgt::free_port()), "file://" + file}) {
    CAPTURE(where);
    secret_for(where);
    const std::vector<unsigned char> want = id_bytes(where.size());
    std::vector<int> codes = run_forked(3, [&](int rank) {
      std::unique_ptr<tg::Bootstrap> b = tg::join_rendezvous(rank, 3, where, 30);
      std::vector<unsigned char> id = rank == 0 ? want : std::vector<unsigned char>(128, 0);
      b->share_from_rank0(id.data(), id.size());
      int bad = 0;
      bad += id != want;
      bad += b->rank() != rank || b->world() != 3;
      // Nobody has gone: the others leave only after rank 0, whose leaving they then see.
      if (rank == 0) bad += b->gone_rank() != -1;
      if (rank != 0) {
        int gone = -1;
        for (int i = 0; i < 1000 && gone < 0; i++) {
          gone = b->gone_rank();
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        bad += gone != 0;
      }
      return bad;
    });
    CHECK(codes == std::vector<int>{0, 0, 0});
  }
  // The rendezvous file is gone once everyone has arrived.
  CHECK(!tg::file_exists(file));
}

TEST_CASE("comm: a process that never arrives at the rendezvous is an error naming it") {
  if (getenv("TG_COMM_SELFTEST")) return;
  tgt::TempDir dir;
  for (const std::string& where :
       {"tcp://127.0.0.1:" + std::to_string(tgt::free_port()), "file://" + dir.path + "/meet"}) {
    CAPTURE(where);
    secret_for(where);
    // Rank 0 waits for 3 processes while only 2 come: both fail, neither waits forever.
    const auto t0 = std::chrono::steady_clock::now();
    const std::string rank0_says =
        "rendezvous " + where +
        ": only 2 of 3 processes arrived within dist.timeout (1 s); missing: rank 2";
    std::vector<int> codes = run_forked(
        3,
        [&](int rank) {
          const std::string e = join_error(rank, 3, where, 1);
          // Rank 1 sees rank 0 give up, or its own wait for the go end first.
          if (rank == 1)
            return contains(e, "lost the connection to rank 0") ||
                           contains(e, "rank 0 did not say go within dist.timeout (1 s)")
                       ? 0
                       : 1;
          return contains(e, rank0_says) ? 0 : 1;
        },
        {0, 1});
    CHECK(codes == std::vector<int>{0, 0});
    // A rank whose rank 0 never comes.
    const std::string e = join_error(2, 3, where, 1);
    INFO(e);
    CHECK(e.find("rendezvous " + where +
                 ": rank 0 could not be reached within dist.timeout (1 s)") != std::string::npos);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
  }
  CHECK_THROWS_WITH_AS(tg::join_rendezvous(0, 2, "udp://host:1", 1),
                       doctest::Contains("neither tcp://HOST:PORT nor file:///PATH"),
                       tg::UsageError);
  CHECK_THROWS_WITH_AS(tg::join_rendezvous(0, 2, "tcp://host", 1),
                       doctest::Contains("expected HOST:PORT"), tg::UsageError);
  unsetenv("TG_RENDEZVOUS_SECRET");
  CHECK_THROWS_WITH_AS(tg::join_rendezvous(1, 2, "tcp://127.0.0.1:1", 1),
                       doctest::Contains("needs the job's secret in the environment variable "
                                         "TG_RENDEZVOUS_SECRET"),
                       tg::UsageError);
}

TEST_CASE("comm: after the rendezvous, every process learns which one has gone") {
  if (getenv("TG_COMM_SELFTEST")) return;
  const std::string where = "tcp://127.0.0.1:" + std::to_string(tgt::free_port());
  secret_for(where);
  // Rank 2 dies; rank 0 sees its connection close and ends the job (as a failing rank does,
  // through comm_abort), passing on which rank went; rank 1 learns it from rank 0.
  std::vector<int> codes = run_forked(4, [&](int rank) {
    std::unique_ptr<tg::Bootstrap> b = tg::join_rendezvous(rank, 4, where, 30);
    std::vector<unsigned char> id = id_bytes(1);
    b->share_from_rank0(id.data(), id.size());
    if (rank == 2) raise(SIGKILL);
    int gone = -1;
    for (int i = 0; i < 1000 && gone < 0; i++) {
      gone = b->gone_rank();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (rank == 0 && gone == 2) b->abort(7);
    return gone == 2 ? 0 : 1;
  });
  CHECK(codes == std::vector<int>{7, 0, 100 + SIGKILL, 0});
}

namespace {

// A TCP connection to 127.0.0.1:port, retried for up to 5 s (the listener may not be up yet).
int connect_local(int port) {
  for (int i = 0; i < 100; i++) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) return fd;
    close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return -1;
}

}  // namespace

TEST_CASE("comm: strangers at the rendezvous are dropped and named; the job goes on") {
  if (getenv("TG_COMM_SELFTEST")) return;
  const int port = tgt::free_port();
  const std::string where = "tcp://127.0.0.1:" + std::to_string(port);
  secret_for(where);
  tgt::TempDir dir;
  const std::string log = dir / "rank0.log";
  const std::vector<unsigned char> want = id_bytes(9);
  // 0, 1, 2: the job (1 and 2 arrive late); 3: a stranger sending bytes that are no hello;
  // 4: a process with another secret claiming rank 1; 5: one of a job of another size.
  std::vector<int> codes = run_forked(6, [&](int who) {
    if (who == 0 && !freopen(log.c_str(), "w", stderr)) return 9;
    if (who == 1 || who == 2) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    if (who <= 2) {
      std::unique_ptr<tg::Bootstrap> b = tg::join_rendezvous(who, 3, where, 30);
      std::vector<unsigned char> id = who == 0 ? want : std::vector<unsigned char>(128, 0);
      b->share_from_rank0(id.data(), id.size());
      return id == want ? 0 : 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200 * (who - 2)));
    if (who == 3) {
      const int fd = connect_local(port);
      const std::string junk(64, 'G');
      char c;
      const bool sent = fd >= 0 && send(fd, junk.data(), junk.size(), MSG_NOSIGNAL) == 64;
      while (fd >= 0 && recv(fd, &c, 1, 0) > 0) {
      }
      if (fd >= 0) close(fd);
      return sent ? 0 : 1;
    }
    if (who == 4) setenv("TG_RENDEZVOUS_SECRET", "another job's secret", 1);
    const std::string e = who == 4 ? join_error(1, 3, where, 5) : join_error(2, 4, where, 5);
    return contains(e, "lost the connection to rank 0 at 127.0.0.1:" + std::to_string(port) +
                           " before its go")
               ? 0
               : 1;
  });
  const std::string said = tgt::slurp(log);
  INFO(said);
  CHECK(codes == std::vector<int>(6, 0));
  const std::string from = "rendezvous " + where + ": dropped a connection from 127.0.0.1:";
  CHECK(contains(said, from));
  CHECK(contains(said, "not a train_gpt rendezvous hello"));
  CHECK(contains(said, "it did not prove the job's secret (another job, or a different "
                       "TG_RENDEZVOUS_SECRET)"));
  CHECK(contains(said, "it announced a job of 4 processes, this one is 3"));
}

TEST_CASE("comm: a rank trusts only a rank 0 that proves the secret, and waits no longer than "
          "dist.timeout") {
  if (getenv("TG_COMM_SELFTEST")) return;
  setenv("TG_RENDEZVOUS_SECRET", "the job's secret", 1);
  for (const bool answers : {true, false}) {
    CAPTURE(answers);
    // A fake rank 0: it sends a challenge, reads the hello, then answers with a go that proves
    // nothing, or never answers.
    const int lfd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    REQUIRE(bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    REQUIRE(listen(lfd, 8) == 0);
    getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
    std::atomic<bool> stop{false};
    std::thread fake([&] {
      std::vector<int> held;
      while (!stop) {
        pollfd p = {lfd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) continue;
        const int fd = accept(lfd, nullptr, nullptr);
        unsigned char challenge[20] = {0x33, 0x43, 0x47, 0x54}, hello[60];
        if (send(fd, challenge, 20, MSG_NOSIGNAL) != 20 || recv(fd, hello, 60, MSG_WAITALL) != 60) {
          close(fd);
          continue;
        }
        unsigned char go[36] = {0x33, 0x43, 0x47, 0x54};
        if (answers) (void)!send(fd, go, sizeof(go), MSG_NOSIGNAL);
        held.push_back(fd);
      }
      for (int fd : held) close(fd);
    });
    const auto t0 = std::chrono::steady_clock::now();
    const std::string where = "tcp://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    const std::string e = join_error(1, 2, where, 2);
    stop = true;
    fake.join();
    close(lfd);
    INFO(e);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
    if (answers)
      CHECK(contains(e, "rank 0 could not be reached within dist.timeout (2 s): the process at "
                        "127.0.0.1:" +
                            std::to_string(ntohs(a.sin_port)) +
                            " did not prove the job's secret: not this job's rank 0"));
    else
      CHECK(contains(e, "rank 0 did not say go within dist.timeout (2 s)"));
  }
}

TEST_CASE("comm: the file:// rendezvous file is 0600, follows no symlink, trusted only if ours") {
  tgt::TempDir dir;
  const std::string path = dir / "meet", victim = dir / "victim";
  tg::write_text_atomic(victim, "keep\n");
  REQUIRE(symlink(victim.c_str(), path.c_str()) == 0);
  tg::write_rendezvous_file(path, {"host", 1234, "abcd"});
  CHECK(tgt::slurp(victim) == "keep\n");  // the symlink was replaced, not followed
  struct stat st {};
  REQUIRE(lstat(path.c_str(), &st) == 0);
  CHECK(S_ISREG(st.st_mode));
  CHECK((st.st_mode & 0777) == 0600);
  std::string why;
  tg::RendezvousFileData d = tg::read_rendezvous_file(path, &why);
  CHECK(d.host == "host");
  CHECK(d.port == 1234);
  CHECK(d.secret == "abcd");
  CHECK(why.empty());
  // One that others may read or write (or a symlink) is not rank 0's: not trusted, and why.
  REQUIRE(chmod(path.c_str(), 0644) == 0);
  d = tg::read_rendezvous_file(path, &why);
  CHECK(d.port == 0);
  CHECK(contains(why, "is not a file only this user"));
  REQUIRE(unlink(path.c_str()) == 0);
  REQUIRE(symlink(victim.c_str(), path.c_str()) == 0);
  d = tg::read_rendezvous_file(path, &why);
  CHECK(d.port == 0);
  CHECK(contains(why, "is a symlink"));
  // The proofs depend on the secret and on every nonce.
  const tg::Nonce n1 = tg::random_nonce(), n2 = tg::random_nonce();
  CHECK(n1 != n2);
  CHECK(tg::same_proof(tg::hello_proof("s", n1, 1, 2, n2), tg::hello_proof("s", n1, 1, 2, n2)));
  CHECK_FALSE(tg::same_proof(tg::hello_proof("s", n1, 1, 2, n2), tg::hello_proof("t", n1, 1, 2, n2)));
  CHECK_FALSE(tg::same_proof(tg::hello_proof("s", n1, 1, 2, n2), tg::hello_proof("s", n2, 1, 2, n1)));
  CHECK_FALSE(tg::same_proof(tg::go_proof("s", n1, 1), tg::go_proof("s", n1, 2)));
}

TEST_CASE("comm: a single process is its own world") {
  if (getenv("TG_COMM_SELFTEST")) return;
  tg::Comm& c = tg::comm();
  CHECK(c.world() == 1);
  CHECK(c.rank() == 0);
  CHECK(tg::comm_world() == 1);
  CHECK(tg::comm_rank() == 0);
  CHECK(!tg::comm_is_distributed());
  float x = 3;
  c.all_reduce_sum(&x, 1);
  CHECK(x == 3);
  std::vector<float> in = {1, 2}, out(2);
  c.all_gather(in.data(), out.data(), 2);
  CHECK(out == in);
  // Its bootstrap (a GPU's, were there one) hands the bytes over as they are.
  tg::Bootstrap& b = tg::comm_bootstrap();
  std::vector<unsigned char> id = id_bytes(3);
  b.share_from_rank0(id.data(), id.size());
  CHECK(id == id_bytes(3));
  CHECK(b.gone_rank() == -1);
}
