// comm.cpp: the single-process and MPI communicators, and the process-wide state of how this
// process was launched (comm.h).
#include "comm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "rendezvous.h"
#include "src/base/common.h"

#ifndef TG_NO_MPI
#define OMPI_SKIP_MPICXX 1  // the C API is all we use
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace tg {

namespace {

class SingleComm final : public Comm {
 public:
  std::string name() const override { return "single process"; }
  int rank() const override { return 0; }
  int world() const override { return 1; }
  void all_reduce_sum(float*, size_t) override {}
  void all_reduce_sum(double*, size_t) override {}
  void all_reduce_max(float*, size_t) override {}
  void all_gather_bytes(const void* in, void* out, size_t bytes) override {
    if (in && in != out) memmove(out, in, bytes);
  }
  void reduce_scatter_sum(const float* in, float* out, size_t n) override {
    if (in != out) memmove(out, in, n * sizeof(float));
  }
  void all_to_all_bytes(const void* in, void* out, size_t bytes) override {
    if (in != out) memmove(out, in, bytes);
  }
  void broadcast(void*, size_t, int) override {}
  void barrier() override {}
  [[noreturn]] void abort(int code) override { std::exit(code); }
};

#ifndef TG_NO_MPI
void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw Error(strf("MPI %s failed (error %d)", what, rc));
}

// MPI counts are int: large buffers go in chunks.
constexpr size_t kChunk = size_t(1) << 30;

class MpiComm final : public Comm {
 public:
  MpiComm() {
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "init");
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
  }
  ~MpiComm() override { MPI_Finalize(); }
  std::string name() const override { return strf("MPI, %d processes", world_); }
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  void all_reduce_sum(float* x, size_t n) override { reduce(x, n, MPI_FLOAT, MPI_SUM); }
  void all_reduce_sum(double* x, size_t n) override { reduce(x, n, MPI_DOUBLE, MPI_SUM); }
  void all_reduce_max(float* x, size_t n) override { reduce(x, n, MPI_FLOAT, MPI_MAX); }
  void all_gather_bytes(const void* in, void* out, size_t bytes) override {
    // MPI counts are int: large shards go as a contiguous type of 1 MiB blocks plus the rest.
    char* o = static_cast<char*>(out);
    if (bytes <= kChunk) {
      check(MPI_Allgather(in ? in : MPI_IN_PLACE, in ? int(bytes) : 0, MPI_BYTE, o, int(bytes),
                          MPI_BYTE, MPI_COMM_WORLD),
            "all_gather");
      return;
    }
    // Gather in chunks through a staging buffer so every rank's chunk lands in its place.
    const char* mine = in ? static_cast<const char*>(in) : o + size_t(rank_) * bytes;
    std::vector<char> stage(kChunk * size_t(world_));
    std::vector<char> own(mine, mine + bytes);
    for (size_t off = 0; off < bytes; off += kChunk) {
      const size_t len = std::min(kChunk, bytes - off);
      check(MPI_Allgather(own.data() + off, int(len), MPI_BYTE, stage.data(), int(len), MPI_BYTE,
                          MPI_COMM_WORLD),
            "all_gather");
      for (int r = 0; r < world_; r++)
        memcpy(o + size_t(r) * bytes + off, stage.data() + size_t(r) * len, len);
    }
  }
  void reduce_scatter_sum(const float* in, float* out, size_t n) override {
    if (n > kChunk) throw Error("reduce_scatter: shard too large for one MPI call");
    check(MPI_Reduce_scatter_block(in, out, int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
          "reduce_scatter");
  }
  void all_to_all_bytes(const void* in, void* out, size_t bytes) override {
    if (bytes > kChunk) throw Error("all_to_all: part too large for one MPI call");
    check(MPI_Alltoall(in, int(bytes), MPI_BYTE, out, int(bytes), MPI_BYTE, MPI_COMM_WORLD),
          "all_to_all");
  }
  void broadcast(void* data, size_t bytes, int root) override {
    for (size_t off = 0; off < bytes; off += kChunk)
      check(MPI_Bcast(static_cast<char*>(data) + off, int(std::min(kChunk, bytes - off)), MPI_BYTE,
                      root, MPI_COMM_WORLD),
            "broadcast");
  }
  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "barrier"); }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::exit(code);
  }

 private:
  void reduce(void* x, size_t n, MPI_Datatype t, MPI_Op op) {
    int size = 0;
    MPI_Type_size(t, &size);
    for (size_t off = 0; off < n; off += kChunk)
      check(MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(x) + off * size,
                          int(std::min(kChunk, n - off)), t, op, MPI_COMM_WORLD),
            "all_reduce");
  }
  int rank_ = 0, world_ = 1;
};
#endif

// The bootstrap over a host communicator: its broadcast hands the bytes over.
class CommBootstrap final : public Bootstrap {
 public:
  explicit CommBootstrap(Comm& c) : c_(c) {}
  std::string name() const override { return c_.name(); }
  int rank() const override { return c_.rank(); }
  int world() const override { return c_.world(); }
  void share_from_rank0(void* data, size_t bytes) override { c_.broadcast(data, bytes, 0); }
  int gone_rank() override { return -1; }
  [[noreturn]] void abort(int code) override {
    c_.abort(code);
    std::exit(code);  // not reached: the communicator's abort does not return
  }

 private:
  Comm& c_;
};

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (getenv(v)) return true;
  return false;
}

// How this process was launched: the options resolved by comm_init, the host communicator
// (none for several processes without MPI) and the bootstrap once asked for.
struct Launch {
  bool set = false;
  DistOptions options;
  std::unique_ptr<Comm> comm;
  std::unique_ptr<Bootstrap> bootstrap;
};

Launch& launch() {
  static Launch l;
  return l;
}

int env_int(const char* name, int fallback) {
  const char* v = getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long x = strtol(v, &end, 10);
  if (*end != 0 || x < 0 || x > 65536)
    throw UsageError(strf("environment variable %s='%s' is not a valid number", name, v));
  return int(x);
}

// Fills the unset fields of o from the environment.
DistOptions resolve(DistOptions o) {
  const bool slurm = getenv("SLURM_NTASKS") && getenv("SLURM_PROCID");
  if (o.world <= 0) o.world = env_int("TG_WORLD_SIZE", slurm ? env_int("SLURM_NTASKS", 1) : 1);
  if (o.rank < 0) o.rank = env_int("TG_RANK", slurm ? env_int("SLURM_PROCID", 0) : 0);
  if (o.rendezvous.empty() && getenv("TG_RENDEZVOUS")) o.rendezvous = getenv("TG_RENDEZVOUS");
  return o;
}

void init_from(const DistOptions& given) {
  Launch& l = launch();
#ifndef TG_NO_MPI
  if (launched_by_mpi()) {
    l.comm = std::make_unique<MpiComm>();
    l.set = true;
    l.options = given;
    l.options.rank = l.comm->rank();
    l.options.world = l.comm->world();
    // Finalise MPI at a normal exit (after the bootstrap over it).
    std::atexit([] {
      launch().bootstrap.reset();
      launch().comm.reset();
    });
    if (given.world > 0 && given.world != l.comm->world())
      throw UsageError(
          strf("config key 'dist.world_size': %d, but mpirun started %d processes "
               "(under MPI leave dist.* unset)",
               given.world, l.comm->world()));
    return;
  }
#endif
  DistOptions o = resolve(given);
  if (o.world <= 1) o = DistOptions{0, 1, "", o.timeout_s};
  if (o.rank >= o.world)
    throw UsageError(
        strf("config key 'dist.rank': %d is not below the world size %d", o.rank, o.world));
  if (o.world == 1) l.comm = std::make_unique<SingleComm>();
  l.options = o;
  l.set = true;
}

Launch& launched() {
  if (!launch().set) init_from(DistOptions{});
  return launch();
}

}  // namespace

void Comm::all_to_all_bytes(const void*, void*, size_t) {
  throw Error(strf("the %s communicator has no all-to-all (gradients in a compressed wire format "
                   "need one)",
                   name().c_str()));
}

void comm_init(const DistOptions& o) {
  Launch& l = launch();
  if (l.set) {
    // Already set up (e.g. by an earlier run in this process): it must be the same world.
    DistOptions r = o;
    if (!launched_by_mpi()) r = resolve(o);
    if (r.world > 1 && r.world != l.options.world)
      throw Error("the communicator is already set up with another world size");
    return;
  }
  init_from(o);
}

Comm& comm() {
  Launch& l = launched();
  if (l.comm) return *l.comm;
  const int n = l.options.world;
#ifdef TG_NO_MPI
  throw UsageError(
      strf("%d processes on the CPU train together only under MPI, and this binary was built "
           "without it (NO_MPI=1): rebuild with OpenMPI and start them with `mpirun -np %d "
           "./train_gpt ...` (dist.world_size / TG_WORLD_SIZE without MPI serve GPU jobs only)",
           n, n));
#else
  throw UsageError(
      strf("%d processes on the CPU train together only under MPI: start them with `mpirun "
           "-np %d ./train_gpt ...` (dist.world_size / TG_WORLD_SIZE without MPI serve GPU jobs "
           "only, whose NCCL meets at dist.rendezvous)",
           n, n));
#endif
}

Bootstrap& comm_bootstrap() {
  Launch& l = launched();
  if (l.bootstrap) return *l.bootstrap;
  if (l.comm) {
    l.bootstrap = make_comm_bootstrap(*l.comm);
    return *l.bootstrap;
  }
  const DistOptions& o = l.options;
  if (o.rendezvous.empty())
    throw UsageError(
        strf("config key 'dist.rendezvous': %d GPU processes without MPI need a meeting point, "
             "tcp://HOST:PORT or file:///PATH (or $TG_RENDEZVOUS)",
             o.world));
  l.bootstrap = join_rendezvous(o.rank, o.world, o.rendezvous, o.timeout_s);
  return *l.bootstrap;
}

int comm_rank() { return launched().options.rank; }
int comm_world() { return launched().options.world; }

std::unique_ptr<Comm> make_single_comm() { return std::make_unique<SingleComm>(); }

std::unique_ptr<Bootstrap> make_comm_bootstrap(Comm& c) {
  return std::make_unique<CommBootstrap>(c);
}

void comm_abort(int code) {
  Launch& l = launch();
  if (l.bootstrap) l.bootstrap->abort(code);
  if (l.comm) l.comm->abort(code);
  std::exit(code);
}

namespace {
bool g_stop_agreed = false;
}
void comm_agree_to_stop() { g_stop_agreed = true; }
bool comm_stop_agreed() { return g_stop_agreed; }
void comm_wait_for_all() {
#ifndef TG_NO_MPI
  Launch& l = launch();
  if (!l.comm || !launched_by_mpi()) return;
  try {
    l.comm->barrier();
  } catch (const std::exception&) {  // a rank gone already: nothing left to wait for
  }
#endif
}

int comm_local_rank() {
  for (const char* v :
       {"TG_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (getenv(v)) return env_int(v, 0);
  return comm_rank();
}

int comm_local_world(int world) {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    const char* e = getenv(v);
    const long n = e ? strtol(e, nullptr, 10) : 0;  // a hint only: a bad value is no value
    if (n > 0) return int(std::min<long>(n, world));
  }
  return world;
}

bool comm_is_distributed() {
  const Launch& l = launch();
  return l.comm ? l.comm->world() > 1 : l.bootstrap != nullptr;
}

}  // namespace tg
