// rendezvous.cpp: the meeting of GPU processes launched without MPI (see rendezvous.h).
//
// The ranks form a star around rank 0. Each other rank connects, rank 0 sends it a challenge
// (a nonce), and it announces itself with a hello that proves the job's secret
// (rendezvous_secret.h); a connection that does not (a stranger, another job, a wrong world
// size, a rank already taken) is dropped and named in a log line, and the job goes on waiting.
// Once all have arrived rank 0 answers each with a "go" that proves the secret in turn, and the
// join is over (it is a barrier). Every wait is bounded by dist.timeout. Rank 0
// then sends the bytes to share (NCCL's unique id, 128 bytes) down every connection. After that
// nothing is sent while the job runs, so a connection that becomes readable means the process
// at its other end has gone: rank 0 sees which rank it was; the others see rank 0 close, which
// happens when rank 0 fails or ends the job after another rank went, and then rank 0 first
// sends that rank's number, so every process can name the one that went.
#include "rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "rendezvous_secret.h"
#include "src/base/common.h"
#include "src/base/fileio.h"

namespace tg {

namespace {

constexpr uint32_t kHelloMagic = 0x54474333;  // "TGC3": the handshake with proofs
// How long rank 0 gives a new connection to send its hello (an honest rank sends it at once).
constexpr int kHelloTimeoutMs = 2000;

using Clock = std::chrono::steady_clock;

struct Endpoint {
  std::string host;
  int port = 0;
};

Endpoint parse_host_port(const std::string& s, const std::string& what) {
  size_t colon = s.rfind(':');
  Endpoint e;
  if (colon == std::string::npos || colon == 0) throw UsageError(what + ": expected HOST:PORT");
  e.host = s.substr(0, colon);
  if (e.host.size() > 2 && e.host.front() == '[' && e.host.back() == ']')
    e.host = e.host.substr(1, e.host.size() - 2);
  char* end = nullptr;
  long port = strtol(s.c_str() + colon + 1, &end, 10);
  if (*end != 0 || port < 1 || port > 65535)
    throw UsageError(what + ": the port must be a number from 1 to 65535");
  e.port = int(port);
  return e;
}

void set_socket_options(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
}

// Tries once to connect to host:port; returns the socket or -1.
int try_connect(const Endpoint& e) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(e.host.c_str(), std::to_string(e.port).c_str(), &hints, &res) != 0) return -1;
  int fd = -1;
  for (addrinfo* a = res; a; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd >= 0) set_socket_options(fd);
  return fd;
}

// A listening socket on host:port (port 0: any free port; host "": every interface).
int listen_on(const std::string& host, int port, int backlog, const std::string& what) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints,
                       &res);
  if (rc != 0)
    throw Error(strf("%s: cannot resolve '%s': %s", what.c_str(), host.c_str(), gai_strerror(rc)));
  std::string last = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, backlog) == 0) {
      freeaddrinfo(res);
      return fd;
    }
    last = strerror(errno);
    close(fd);
  }
  freeaddrinfo(res);
  throw Error(
      strf("%s: cannot listen on %s:%d: %s", what.c_str(), host.c_str(), port, last.c_str()));
}

int bound_port(int fd) {
  sockaddr_storage ss = {};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

// The text form of a peer's address, for the log.
std::string address_of(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
  } else if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  }
  return strf("%s:%d", host, port);
}

// Receives exactly `bytes` within `ms` milliseconds; false on a timeout, a close or an error.
bool recv_within(int fd, void* data, size_t bytes, int ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(ms);
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd pfd = {fd, POLLIN, 0};
    if (left <= 0 || poll(&pfd, 1, int(left)) <= 0) return false;
    const ssize_t k = recv(fd, p, bytes, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    bytes -= size_t(k);
  }
  return true;
}

bool send_whole(int fd, const void* data, size_t bytes) {
  return send(fd, data, bytes, MSG_NOSIGNAL) == ssize_t(bytes);
}

int ms_until(Clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return int(std::max<long long>(0, std::min<long long>(ms, INT32_MAX)));
}

// The handshake's messages (one binary on every host: native layout).
struct Challenge {
  uint32_t magic;
  Nonce nonce;
};
struct Hello {
  uint32_t magic;
  int32_t rank, world;
  Nonce nonce;
  Proof proof;
};
struct Go {
  uint32_t magic;
  Proof proof;
};

class Rendezvous final : public Bootstrap {
 public:
  Rendezvous(int rank, int world, std::string where)
      : rank_(rank), world_(world), where_(std::move(where)), peers_(world, -1) {}
  ~Rendezvous() override { close_all(); }

  void join(int timeout_s) {
    const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
    timeout_s_ = timeout_s;
    secret_ = environment_secret();
    if (where_.rfind("tcp://", 0) == 0) {
      Endpoint e = parse_host_port(where_.substr(6), "config key 'dist.rendezvous'");
      if (secret_.empty())
        throw UsageError(
            strf("config key 'dist.rendezvous': %s needs the job's secret in the environment "
                 "variable %s, the same on every process (e.g. export %s=$(openssl rand -hex 16)), "
                 "so that nobody else can join the job or pose as its rank 0; file:// makes one "
                 "itself",
                 where_.c_str(), kRendezvousSecretEnv, kRendezvousSecretEnv));
      if (rank_ == 0)
        accept_all(listen_on(e.host, e.port, world_, what()), deadline);
      else
        connect_to_root([&](std::string*) { return e; }, deadline);
    } else if (where_.rfind("file://", 0) == 0) {
      const std::string path = where_.substr(7);
      if (path.empty() || path[0] != '/')
        throw UsageError("config key 'dist.rendezvous': file:// needs an absolute path");
      if (rank_ == 0)
        serve_file(path, deadline);
      else
        connect_to_root([&](std::string* why) { return file_endpoint(path, why); }, deadline);
    } else {
      throw UsageError(
          strf("config key 'dist.rendezvous': '%s' is neither tcp://HOST:PORT nor file:///PATH",
               where_.c_str()));
    }
  }

  std::string name() const override { return "rendezvous " + where_; }
  int rank() const override { return rank_; }
  int world() const override { return world_; }

  void share_from_rank0(void* data, size_t bytes) override {
    if (rank_ == 0) {
      for (int r = 1; r < world_; r++) send_all(r, data, bytes);
    } else {
      recv_all(0, data, bytes);
    }
  }

  int gone_rank() override {
    if (gone_ >= 0) return gone_;
    for (int r = 0; r < world_; r++) {
      if (peers_[r] < 0) continue;
      int32_t relayed = -1;
      ssize_t k = recv(peers_[r], &relayed, sizeof(relayed), MSG_PEEK | MSG_DONTWAIT);
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      // Rank 0 passes on which rank went before it closes; anything else readable is a close.
      if (r == 0 && k == ssize_t(sizeof(relayed)) && relayed > 0 && relayed < world_)
        gone_ = relayed;
      else
        gone_ = r;
      return gone_;
    }
    return -1;
  }

  [[noreturn]] void abort(int code) override {
    // Rank 0 tells the others which rank went (none known: rank 0 itself failed, which its
    // closed connections say); closing every connection is the signal.
    if (rank_ == 0 && gone_ > 0) {
      const int32_t relayed = gone_;
      for (int r = 1; r < world_; r++)
        if (peers_[r] >= 0 && r != gone_)
          (void)!send(peers_[r], &relayed, sizeof(relayed), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    close_all();
    std::_Exit(code);
  }

 private:
  std::string what() const { return "rendezvous " + where_; }

  void close_all() {
    for (int& fd : peers_)
      if (fd >= 0) {
        shutdown(fd, SHUT_RDWR);
        close(fd);
        fd = -1;
      }
  }

  [[noreturn]] void lost(int peer, const char* why) {
    throw Error(strf("%s: lost the connection to rank %d (%s): that process failed or was stopped",
                     what().c_str(), peer, why));
  }
  void send_all(int peer, const void* data, size_t bytes) {
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
      ssize_t k = send(peers_[peer], p, bytes, MSG_NOSIGNAL);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) lost(peer, k < 0 ? strerror(errno) : "closed");
      p += k;
      bytes -= size_t(k);
    }
  }
  void recv_all(int peer, void* data, size_t bytes) {
    char* p = static_cast<char*>(data);
    while (bytes > 0) {
      ssize_t k = recv(peers_[peer], p, bytes, 0);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) lost(peer, k < 0 ? strerror(errno) : "closed");
      p += k;
      bytes -= size_t(k);
    }
  }

  // Rank 0 of a file:// rendezvous: listen on a free port (on TG_RENDEZVOUS_HOST's address when
  // it is set, else every interface), write where it is and the secret, wait for everyone.
  void serve_file(const std::string& path, Clock::time_point deadline) {
    const char* adv = getenv("TG_RENDEZVOUS_HOST");  // where peers reach rank 0
    int fd = listen_on(adv ? adv : "", 0, world_, what());
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    const bool own = secret_.empty();
    if (own) secret_ = random_secret();
    write_rendezvous_file(path, {adv ? adv : host, bound_port(fd), own ? secret_ : "-"});
    try {
      accept_all(fd, deadline);
    } catch (...) {
      unlink(path.c_str());
      throw;
    }
    unlink(path.c_str());  // everyone is here: the file has done its job
  }

  // A peer of a file:// rendezvous: rank 0's address, and its secret unless the environment
  // gives one.
  Endpoint file_endpoint(const std::string& path, std::string* why) {
    const RendezvousFileData d = read_rendezvous_file(path, why);
    if (d.port == 0) return {};
    if (d.secret != "-") file_secret_ = d.secret;
    return {d.host, d.port};
  }
  const std::string& peer_secret() const { return secret_.empty() ? file_secret_ : secret_; }

  // Rank 0: why the connection `fd` is not one of this job's ranks ("" when it is: *rank then
  // holds its rank and *nonce the nonce the go must answer).
  std::string admit(int fd, int* rank, Nonce* nonce) {
    const Challenge c = {kHelloMagic, random_nonce()};
    Hello h = {};
    if (!send_whole(fd, &c, sizeof(c)) || !recv_within(fd, &h, sizeof(h), kHelloTimeoutMs))
      return strf("no hello within %d ms", kHelloTimeoutMs);
    if (h.magic != kHelloMagic) return "not a train_gpt rendezvous hello (another program?)";
    if (!same_proof(h.proof, hello_proof(secret_, c.nonce, h.rank, h.world, h.nonce)))
      return strf("it did not prove the job's secret (another job, or a different %s)",
                  kRendezvousSecretEnv);
    if (h.world != world_)
      return strf("it announced a job of %d processes, this one is %d", h.world, world_);
    if (h.rank <= 0 || h.rank >= world_)
      return strf("it announced rank %d, not one of 1 to %d", h.rank, world_ - 1);
    if (peers_[h.rank] >= 0) return strf("it announced rank %d, which is already here", h.rank);
    *rank = h.rank;
    *nonce = h.nonce;
    return "";
  }

  // Rank 0: accept world - 1 peers that prove the secret, then tell them all to go (proving it
  // back). Strangers are dropped and named; the job fails only at the deadline.
  void accept_all(int lfd, Clock::time_point deadline) {
    std::vector<Nonce> nonces(static_cast<size_t>(world_));
    int arrived = 1;
    while (arrived < world_) {
      pollfd pfd = {lfd, POLLIN, 0};
      const int left = ms_until(deadline);
      if (left == 0) {
        close(lfd);
        throw Error(
            strf("%s: only %d of %d processes arrived within dist.timeout (%d s); "
                 "missing: %s",
                 what().c_str(), arrived, world_, timeout_s_, missing_ranks().c_str()));
      }
      if (poll(&pfd, 1, std::min(left, 1000)) <= 0) continue;
      sockaddr_storage ss = {};
      socklen_t len = sizeof(ss);
      const int fd = accept(lfd, reinterpret_cast<sockaddr*>(&ss), &len);
      if (fd < 0) continue;
      set_socket_options(fd);
      int rank = -1;
      Nonce nonce{};
      const std::string why = admit(fd, &rank, &nonce);
      if (!why.empty()) {
        close(fd);
        fprintf(stderr, "%s: dropped a connection from %s: %s\n", what().c_str(),
                address_of(ss).c_str(), why.c_str());
        continue;
      }
      peers_[size_t(rank)] = fd;
      nonces[size_t(rank)] = nonce;
      arrived++;
    }
    close(lfd);
    for (int r = 1; r < world_; r++) {
      const Go go = {kHelloMagic, go_proof(secret_, nonces[size_t(r)], r)};
      send_all(r, &go, sizeof(go));
    }
  }

  std::string missing_ranks() const {
    std::string s;
    for (int r = 1; r < world_; r++)
      if (peers_[size_t(r)] < 0) s += (s.empty() ? "rank " : ", ") + std::to_string(r);
    return s;
  }

  // Other ranks: connect (retrying until the deadline), prove the secret, wait for rank 0's
  // go and check its proof. Whatever answers without proving the secret is not this job's
  // rank 0: dropped, tried again until the deadline, then named in the error.
  template <typename Resolve>
  void connect_to_root(Resolve resolve, Clock::time_point deadline) {
    std::string why;
    for (;;) {
      const Endpoint e = resolve(&why);
      const int fd = e.port > 0 ? try_connect(e) : -1;
      if (fd >= 0) {
        peers_[0] = fd;
        if (handshake(fd, e, deadline, &why)) return;
        close(fd);
        peers_[0] = -1;
      }
      if (Clock::now() > deadline)
        throw Error(strf("%s: rank 0 could not be reached within dist.timeout (%d s)%s%s",
                         what().c_str(), timeout_s_, why.empty() ? "" : ": ", why.c_str()));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  // One try: false (with *why) when the other end is not this job's rank 0; an Error when rank
  // 0 closes on us (it refused this process or gave up waiting).
  bool handshake(int fd, const Endpoint& e, Clock::time_point deadline, std::string* why) {
    const std::string at = strf("%s:%d", e.host.c_str(), e.port);
    Challenge c = {};
    if (!recv_within(fd, &c, sizeof(c), std::max(1, std::min(ms_until(deadline), 5000))) ||
        c.magic != kHelloMagic) {
      // (A try cut short by the deadline keeps the reason an earlier try found.)
      if (ms_until(deadline) > 0 || why->empty())
        *why = "the process at " + at + " sent no rendezvous challenge";
      return false;
    }
    Hello h = {kHelloMagic, rank_, world_, random_nonce(), {}};
    h.proof = hello_proof(peer_secret(), c.nonce, rank_, world_, h.nonce);
    if (!send_whole(fd, &h, sizeof(h))) {
      *why = "the process at " + at + " closed the connection";
      return false;
    }
    Go go = {};
    pollfd pfd = {fd, POLLIN, 0};
    if (poll(&pfd, 1, std::max(1, ms_until(deadline))) <= 0)
      throw Error(
          strf("%s: rank 0 did not say go within dist.timeout (%d s)", what().c_str(), timeout_s_));
    if (!recv_within(fd, &go, sizeof(go), 5000))
      throw Error(
          strf("%s: lost the connection to rank 0 at %s before its go: rank 0 gave up "
               "waiting, or refused this process (its log says why)",
               what().c_str(), at.c_str()));
    if (go.magic == kHelloMagic && same_proof(go.proof, go_proof(peer_secret(), h.nonce, rank_)))
      return true;
    *why = "the process at " + at + " did not prove the job's secret: not this job's rank 0";
    return false;
  }

  int rank_, world_;
  std::string where_;
  int timeout_s_ = 0;
  std::string secret_;       // the environment's, or rank 0's own for file://
  std::string file_secret_;  // a file:// peer: the one rank 0 wrote
  std::vector<int> peers_;   // rank 0: a socket per rank; others: peers_[0] only
  int gone_ = -1;            // the first rank known to have gone
};

}  // namespace

std::unique_ptr<Bootstrap> join_rendezvous(int rank, int world, const std::string& where,
                                           int timeout_s) {
  if (world < 2 || rank < 0 || rank >= world)
    throw UsageError(strf("config key 'dist.rank': %d is not a rank of %d processes", rank, world));
  auto r = std::make_unique<Rendezvous>(rank, world, where);
  r->join(timeout_s);  // on failure the destructor closes what was opened
  return r;
}

}  // namespace tg
