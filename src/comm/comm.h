// comm.h: the communicator that data parallelism goes through, and how the processes of a
// job found each other.
//
// One process: every collective is the identity. Several CPU processes: MPI (OpenMPI), started
// by mpirun; started any other way they are refused with an error that says to use mpirun.
// Several GPUs: NCCL (src/backends/cuda/nccl_comm.cu), which needs from the launch only its unique
// id, handed from rank 0 to every rank (a Bootstrap): by MPI under mpirun, or for processes started
// without MPI (by hand, a job script, srun) by a rendezvous that carries just that id and then
// watches for a process that goes (src/comm/rendezvous.cpp). The training loop asks for comm() or
// comm_bootstrap() once; MPI is initialised on first use when the environment says the process
// was started by an MPI launcher, and finalised at exit. Collectives are blocking and in
// fp32/fp64 on host memory (the CPU backend's).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace tg {

class Backend;

class Comm {
 public:
  virtual ~Comm() = default;
  virtual std::string name() const = 0;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual void all_reduce_sum(float* x, size_t n) = 0;
  virtual void all_reduce_sum(double* x, size_t n) = 0;
  virtual void all_reduce_max(float* x, size_t n) = 0;
  // out (world * bytes) = every rank's in (bytes), in rank order. in == nullptr gathers in
  // place: this rank's part is already at out + rank * bytes.
  virtual void all_gather_bytes(const void* in, void* out, size_t bytes) = 0;
  void all_gather(const float* in, float* out, size_t n) {
    all_gather_bytes(in, out, n * sizeof(float));
  }
  // out (n) = sum over ranks of in[rank * n .. rank * n + n)
  virtual void reduce_scatter_sum(const float* in, float* out, size_t n) = 0;
  // out[r * bytes .. + bytes) = rank r's in[rank * bytes .. + bytes): part r of every rank's
  // `in` goes to rank r, in rank order (gradients in a compressed wire format, summed where
  // they arrive: src/numerics/wire_format.h). Host memory; communicators without it throw.
  virtual void all_to_all_bytes(const void* in, void* out, size_t bytes);
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // True when buffers may live in GPU memory (NCCL); host memory always works.
  virtual bool device_memory() const { return false; }
  // Ends every process of the job (after a rank failed), with exit code `code`.
  [[noreturn]] virtual void abort(int code) = 0;
};

// Bytes one rank sends for a collective with the ring algorithms (NCCL's "bus bytes", what
// MPI's large-message algorithms send too): an all-reduce of `payload` bytes sends
// 2 (W-1)/W of it, a reduce-scatter of `payload` input bytes or an all-gather of `payload`
// output bytes (W-1)/W. None with one rank. What a compressed format would shrink.
inline uint64_t ring_all_reduce_bytes(uint64_t payload, int world) {
  return world > 1 ? 2 * payload / uint64_t(world) * uint64_t(world - 1) : 0;
}
inline uint64_t ring_scatter_gather_bytes(uint64_t payload, int world) {
  return world > 1 ? payload / uint64_t(world) * uint64_t(world - 1) : 0;
}

// What a GPU communicator needs from the way its processes were launched: who this process is,
// rank 0's few bytes (NCCL's unique id) handed to every rank, a process that has gone noticed
// without blocking (NCCL kernels would wait for it forever), and the whole job ended.
class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual std::string name() const = 0;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // Every rank's `bytes` at data become rank 0's; blocks until they have arrived.
  virtual void share_from_rank0(void* data, size_t bytes) = 0;
  // -1 while no other process of the job is known to have gone; else the rank of one that has.
  virtual int gone_rank() = 0;
  // Ends every process of the job with exit code `code`.
  [[noreturn]] virtual void abort(int code) = 0;
};
// The bootstrap over host communicator `c` (MPI, or one process), which must outlive it: its
// broadcast carries the bytes, and gone_rank() is always -1 (mpirun itself ends the job when
// one of its processes dies, naming it).
std::unique_ptr<Bootstrap> make_comm_bootstrap(Comm& c);

// Launching GPU processes without MPI: rank r of `world` processes meeting at `rendezvous`
// (tcp://HOST:PORT or file:///PATH, see src/comm/rendezvous.h). Negative / zero / empty fields
// are taken from the environment: TG_RANK, TG_WORLD_SIZE, TG_RENDEZVOUS (or SLURM_PROCID
// and SLURM_NTASKS under srun).
struct DistOptions {
  int rank = -1;
  int world = 0;
  std::string rendezvous;
  int timeout_s = 300;
};
// Sets up how this process was launched from `o` (before the first comm() or
// comm_bootstrap()): MPI under mpirun (where `o` must not ask for another world size), else
// `o` with the environment's values; a rank outside the world is a UsageError. Connects to
// nothing without MPI: the rendezvous is joined by comm_bootstrap().
void comm_init(const DistOptions& o);
// The process-wide communicator of host collectives: MPI under mpirun, else single-process.
// Several processes launched without MPI have none: a UsageError that says to use mpirun (only
// GPUs train together without it, through comm_bootstrap()).
Comm& comm();
// The process-wide bootstrap of a GPU communicator: over comm() under mpirun or for one
// process, else the rendezvous of comm_init's options, joined on the first call (an Error when
// the others do not arrive within their timeout).
Bootstrap& comm_bootstrap();
// This process's rank and the number of processes of the job, as launched.
int comm_rank();
int comm_world();
// A communicator of one process (every collective an identity), apart from comm()'s.
std::unique_ptr<Comm> make_single_comm();
// GPUs: NCCL on the device of `backend` (a CUDA backend, whose stream its collectives on
// device memory are ordered with), its ncclUniqueId handed over by `bootstrap`, which it also
// watches for a process that has gone; both must outlive it. Defined in the CUDA library
// (src/backends/cuda/nccl_comm.cu) when NCCL's header was found at build time (the library itself
// is loaded then); host code reaches it through make_gpu_comm (src/backends/cuda_library.h).
std::unique_ptr<Comm> make_nccl_comm(Bootstrap& bootstrap, Backend& backend);
// Ends every process of a distributed job (MPI_Abort, or through the rendezvous) with `code`.
[[noreturn]] void comm_abort(int code);
// Says that every process of the job stops here together: each is about to throw the same
// refusal after a collective that agreed on it (train.out_dir in use). The error is then
// printed by every rank and each exits plainly, where comm_abort could end a rank before its
// message is out.
void comm_agree_to_stop();
bool comm_stop_agreed();
// An agreed stop's last step, after each rank printed its error: under MPI, waits until every
// process has got here, since mpirun ends the others as soon as one exits with an error (and
// could cut off a message not yet out). Elsewhere nothing ends the others: it returns at once.
void comm_wait_for_all();
// True once this process is connected to others: MPI with more than one process, or the
// rendezvous joined.
bool comm_is_distributed();
// This process's index among the processes on its machine (from the launcher: OpenMPI,
// MPICH, Slurm or TG_LOCAL_RANK); without one, the global rank (one machine).
int comm_local_rank();
// How many of the job's `world` processes run on this machine (from the launcher: OpenMPI or
// MPICH); without it, all of them (one machine).
int comm_local_world(int world);

}  // namespace tg
