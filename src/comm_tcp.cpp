// comm_tcp.cpp: the communicator for processes started without MPI.
//
// Every rank knows its rank, the world size and a rendezvous:
//   tcp://HOST:PORT   rank 0 listens on HOST:PORT, the others connect to it;
//   file:///PATH      rank 0 listens on a free port and writes "HOST PORT" to PATH (a
//                     filesystem every rank sees); the others read it and connect. Rank 0
//                     removes the file once everyone has arrived.
// The ranks form a star around rank 0: a collective sends each rank's data to rank 0, which
// combines it in rank order and sends the result back. Every rank therefore receives the
// same bits, the sums are deterministic, and the traffic through rank 0 grows with the
// world size: this is for CPU jobs of a few processes and for bootstrapping NCCL, not for
// large GPU jobs (use MPI or NCCL there). Large buffers travel in chunks, so rank 0 never
// holds more than one chunk per rank besides the data itself.
//
// A rank that fails closes its connections; its peers see the closed socket in their next
// collective and end with an error naming that rank, so no process waits forever.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "comm.h"
#include "common.h"
#include "fileio.h"

namespace tg {

namespace {

constexpr uint32_t kHelloMagic = 0x54474331;  // "TGC1"
constexpr size_t kChunkBytes = size_t(4) << 20;

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

// A listening socket on host:port (port 0: any free port; host "" : every interface).
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

class TcpComm final : public Comm {
 public:
  TcpComm(int rank, int world, const std::string& rendezvous, int timeout_s)
      : rank_(rank), world_(world), peers_(world, -1) {
    const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
    const std::string what = "rendezvous " + rendezvous;
    if (rendezvous.rfind("tcp://", 0) == 0) {
      Endpoint e = parse_host_port(rendezvous.substr(6), "config key 'dist.rendezvous'");
      if (rank_ == 0)
        accept_all(listen_on(e.host, e.port, world_, what), deadline, what);
      else
        connect_to_root([&] { return e; }, deadline, what);
    } else if (rendezvous.rfind("file://", 0) == 0) {
      const std::string path = rendezvous.substr(7);
      if (path.empty() || path[0] != '/')
        throw UsageError("config key 'dist.rendezvous': file:// needs an absolute path");
      if (rank_ == 0) {
        int fd = listen_on("", 0, world_, what);
        char host[256] = {};
        gethostname(host, sizeof(host) - 1);
        const char* adv = getenv("TG_RENDEZVOUS_HOST");  // where peers reach rank 0
        write_text_atomic(path, strf("%s %d\n", adv ? adv : host, bound_port(fd)));
        try {
          accept_all(fd, deadline, what);
        } catch (...) {
          unlink(path.c_str());
          throw;
        }
        unlink(path.c_str());  // everyone is here: the file has done its job
      } else {
        connect_to_root(
            [&] {
              // The file appears when rank 0 is listening (a stale one fails to connect and
              // is read again).
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
            },
            deadline, what);
      }
    } else {
      throw UsageError(
          strf("config key 'dist.rendezvous': '%s' is neither tcp://HOST:PORT nor file:///PATH",
               rendezvous.c_str()));
    }
  }
  ~TcpComm() override {
    for (int fd : peers_)
      if (fd >= 0) close(fd);
  }

  std::string name() const override { return strf("TCP, %d processes", world_); }
  int rank() const override { return rank_; }
  int world() const override { return world_; }

  void all_reduce_sum(float* x, size_t n) override {
    reduce(x, n, [](float a, float b) { return a + b; });
  }
  void all_reduce_sum(double* x, size_t n) override {
    reduce(x, n, [](double a, double b) { return a + b; });
  }
  void all_reduce_max(float* x, size_t n) override {
    // NaN wins, so a non-finite amax or found-inf flag reaches every rank.
    reduce(x, n, [](float a, float b) { return std::isnan(a) || a >= b ? a : b; });
  }

  void all_gather_bytes(const void* in, void* out, size_t bytes) override {
    char* o = static_cast<char*>(out);
    if (in && in != o + size_t(rank_) * bytes) memmove(o + size_t(rank_) * bytes, in, bytes);
    if (rank_ == 0) {
      for (int r = 1; r < world_; r++) recv_all(r, o + size_t(r) * bytes, bytes);
      for (int r = 1; r < world_; r++) send_all(r, o, bytes * size_t(world_));
    } else {
      send_all(0, o + size_t(rank_) * bytes, bytes);
      recv_all(0, o, bytes * size_t(world_));
    }
  }

  void reduce_scatter_sum(const float* in, float* out, size_t n) override {
    // Part p of the result is the rank-order sum of every rank's part p.
    const size_t chunk = std::max<size_t>(1, kChunkBytes / sizeof(float));
    std::vector<float> acc, tmp;
    for (int p = 0; p < world_; p++) {
      const float* part = in + size_t(p) * n;
      for (size_t off = 0; off < n; off += chunk) {
        const size_t len = std::min(chunk, n - off);
        if (rank_ == 0) {
          acc.assign(part + off, part + off + len);
          tmp.resize(len);
          for (int r = 1; r < world_; r++) {
            recv_all(r, tmp.data(), len * sizeof(float));
            for (size_t i = 0; i < len; i++) acc[i] += tmp[i];
          }
          if (p == 0)
            memcpy(out + off, acc.data(), len * sizeof(float));
          else
            send_all(p, acc.data(), len * sizeof(float));
        } else {
          send_all(0, part + off, len * sizeof(float));
          if (p == rank_) recv_all(0, out + off, len * sizeof(float));
        }
      }
    }
  }

  void broadcast(void* data, size_t bytes, int root) override {
    if (root != 0) {  // through rank 0, the hub
      if (rank_ == root) send_all(0, data, bytes);
      if (rank_ == 0) recv_all(root, data, bytes);
    }
    if (rank_ == 0) {
      for (int r = 1; r < world_; r++)
        if (r != root) send_all(r, data, bytes);
    } else if (rank_ != root) {
      recv_all(0, data, bytes);
    }
  }

  void barrier() override {
    float x = 0;
    all_reduce_sum(&x, 1);
  }

  bool peers_alive() override {
    // Between collectives nothing is in flight, so a readable socket means the peer closed
    // it (or sent what no collective expects, equally fatal).
    for (int r = 0; r < world_; r++) {
      if (peers_[r] < 0) continue;
      char c;
      ssize_t k = recv(peers_[r], &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        return false;
    }
    return true;
  }

  [[noreturn]] void abort(int code) override {
    // Closing every connection is the signal: each peer fails in its next collective.
    for (int& fd : peers_)
      if (fd >= 0) {
        shutdown(fd, SHUT_RDWR);
        close(fd);
        fd = -1;
      }
    std::_Exit(code);
  }

 private:
  template <typename T, typename Op>
  void reduce(T* x, size_t n, Op op) {
    const size_t chunk = std::max<size_t>(1, kChunkBytes / sizeof(T));
    std::vector<T> tmp;
    for (size_t off = 0; off < n; off += chunk) {
      const size_t len = std::min(chunk, n - off);
      T* part = x + off;
      if (rank_ == 0) {
        tmp.resize(len);
        for (int r = 1; r < world_; r++) {
          recv_all(r, tmp.data(), len * sizeof(T));
          for (size_t i = 0; i < len; i++) part[i] = op(part[i], tmp[i]);
        }
        for (int r = 1; r < world_; r++) send_all(r, part, len * sizeof(T));
      } else {
        send_all(0, part, len * sizeof(T));
        recv_all(0, part, len * sizeof(T));
      }
    }
  }

  [[noreturn]] void lost(int peer, const char* why) {
    throw Error(
        strf("lost the connection to rank %d (%s): that process failed or was stopped", peer, why));
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
  void accept_all(int lfd, Clock::time_point deadline, const std::string& what) {
    int arrived = 1;
    while (arrived < world_) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        close(lfd);
        throw Error(strf("%s: only %d of %d processes arrived within dist.timeout", what.c_str(),
                         arrived, world_));
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
      if (h.world != world_ || h.rank <= 0 || h.rank >= world_ || peers_[h.rank] >= 0) {
        close(fd);
        close(lfd);
        throw Error(strf("%s: a process announced rank %d of %d, but this job is %d processes%s",
                         what.c_str(), h.rank, h.world, world_,
                         h.rank > 0 && h.rank < world_ && peers_[h.rank] >= 0
                             ? " and that rank is already here"
                             : ""));
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
  void connect_to_root(Resolve resolve, Clock::time_point deadline, const std::string& what) {
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
        throw Error(strf("%s: rank 0 could not be reached within dist.timeout", what.c_str()));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  int rank_, world_;
  std::vector<int> peers_;  // rank 0: a socket per rank; others: peers_[0] only
};

}  // namespace

std::unique_ptr<Comm> make_tcp_comm(int rank, int world, const std::string& rendezvous,
                                    int timeout_s) {
  return std::make_unique<TcpComm>(rank, world, rendezvous, timeout_s);
}

}  // namespace tg
