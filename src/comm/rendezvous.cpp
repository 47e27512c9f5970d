// rendezvous.cpp: the meeting of GPU processes launched without MPI (see rendezvous.h).
//
// The ranks form a star around rank 0. Each other rank connects and announces itself; once all
// have arrived rank 0 answers each with a "go", and the join is over (it is a barrier). Rank 0
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
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "src/base/common.h"
#include "src/base/fileio.h"

namespace tg {

namespace {

constexpr uint32_t kHelloMagic = 0x54474332;  // "TGC2"

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

// Rank 0's address as written to a file:// rendezvous, or port 0 while the file is not (yet)
// readable. A stale file from an earlier job fails to connect and is read again.
Endpoint read_endpoint_file(const std::string& path) {
  Endpoint e;
  if (!file_exists(path)) return e;
  std::vector<char> text;
  try {
    text = read_file(path, "rendezvous file");
  } catch (const Error&) {
    return e;
  }
  std::string s(text.begin(), text.end());
  size_t sp = s.find(' ');
  if (sp == std::string::npos) return e;
  e.host = s.substr(0, sp);
  e.port = atoi(s.c_str() + sp + 1);
  return e;
}

class Rendezvous final : public Bootstrap {
 public:
  Rendezvous(int rank, int world, std::string where)
      : rank_(rank), world_(world), where_(std::move(where)), peers_(world, -1) {}
  ~Rendezvous() override { close_all(); }

  void join(int timeout_s) {
    const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
    if (where_.rfind("tcp://", 0) == 0) {
      Endpoint e = parse_host_port(where_.substr(6), "config key 'dist.rendezvous'");
      if (rank_ == 0)
        accept_all(listen_on(e.host, e.port, world_, what()), deadline, timeout_s);
      else
        connect_to_root([&] { return e; }, deadline, timeout_s);
    } else if (where_.rfind("file://", 0) == 0) {
      const std::string path = where_.substr(7);
      if (path.empty() || path[0] != '/')
        throw UsageError("config key 'dist.rendezvous': file:// needs an absolute path");
      if (rank_ == 0) {
        int fd = listen_on("", 0, world_, what());
        char host[256] = {};
        gethostname(host, sizeof(host) - 1);
        const char* adv = getenv("TG_RENDEZVOUS_HOST");  // where peers reach rank 0
        write_text_atomic(path, strf("%s %d\n", adv ? adv : host, bound_port(fd)));
        try {
          accept_all(fd, deadline, timeout_s);
        } catch (...) {
          unlink(path.c_str());
          throw;
        }
        unlink(path.c_str());  // everyone is here: the file has done its job
      } else {
        connect_to_root([&] { return read_endpoint_file(path); }, deadline, timeout_s);
      }
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

  struct Hello {
    uint32_t magic;
    int32_t rank, world;
  };

  // Rank 0: accept world - 1 peers, each announcing its rank, then tell them all to go.
  void accept_all(int lfd, Clock::time_point deadline, int timeout_s) {
    int arrived = 1;
    while (arrived < world_) {
      if (Clock::now() >= deadline) {
        close(lfd);
        throw Error(strf("%s: only %d of %d processes arrived within dist.timeout (%d s)",
                         what().c_str(), arrived, world_, timeout_s));
      }
      timeval tv = {1, 0};
      setsockopt(lfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      int fd = accept(lfd, nullptr, nullptr);
      if (fd < 0) continue;  // timed out (checked above) or interrupted
      set_socket_options(fd);
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      Hello h = {};
      if (recv(fd, &h, sizeof(h), MSG_WAITALL) != ssize_t(sizeof(h)) || h.magic != kHelloMagic) {
        close(fd);  // not one of ours
        continue;
      }
      const bool twice = h.rank > 0 && h.rank < world_ && peers_[h.rank] >= 0;
      if (h.world != world_ || h.rank <= 0 || h.rank >= world_ || twice) {
        close(fd);
        close(lfd);
        throw Error(strf("%s: a process announced rank %d of %d, but this job is %d processes%s",
                         what().c_str(), h.rank, h.world, world_,
                         twice ? " and that rank is already here" : ""));
      }
      timeval none = {0, 0};
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none));
      peers_[h.rank] = fd;
      arrived++;
    }
    close(lfd);
    const uint32_t go = kHelloMagic;
    for (int r = 1; r < world_; r++) send_all(r, &go, sizeof(go));
  }

  // Other ranks: connect (retrying until the deadline), announce, wait for the go.
  template <typename Resolve>
  void connect_to_root(Resolve resolve, Clock::time_point deadline, int timeout_s) {
    for (;;) {
      Endpoint e = resolve();
      int fd = e.port > 0 ? try_connect(e) : -1;
      if (fd >= 0) {
        Hello h = {kHelloMagic, rank_, world_};
        uint32_t go = 0;
        if (send(fd, &h, sizeof(h), MSG_NOSIGNAL) == ssize_t(sizeof(h))) {
          peers_[0] = fd;
          recv_all(0, &go, sizeof(go));  // rank 0 refusing us closes the socket: an error
          if (go == kHelloMagic) return;
          lost(0, "bad reply at the rendezvous");
        }
        close(fd);
      }
      if (Clock::now() > deadline)
        throw Error(strf("%s: rank 0 could not be reached within dist.timeout (%d s)",
                         what().c_str(), timeout_s));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  int rank_, world_;
  std::string where_;
  std::vector<int> peers_;  // rank 0: a socket per rank; others: peers_[0] only
  int gone_ = -1;           // the first rank known to have gone
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
