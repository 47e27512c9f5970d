// comm.h: the communicator that data parallelism goes through.
//
// One process: every collective is the identity. Several processes started by mpirun:
// MPI (OpenMPI). Several processes started any other way (by hand, a job script, srun
// without MPI): TCP through a rendezvous (comm_tcp.cpp). The training loop asks for comm()
// once; MPI is initialised on first use when the environment says the process was started
// by an MPI launcher, and finalised at exit. Collectives are blocking and in fp32/fp64 on
// host memory (the CPU backend's).
#pragma once
#include <cstddef>
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
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // True when buffers may live in GPU memory (NCCL); host memory always works.
  virtual bool device_memory() const { return false; }
  // False once another process of the job is known to have gone (checked without blocking,
  // between collectives). NCCL polls it while waiting on the GPU, so that a rank that died
  // ends the others instead of leaving them inside an NCCL collective forever.
  virtual bool peers_alive() { return true; }
  // Ends every process of the job (after a rank failed), with exit code `code`.
  [[noreturn]] virtual void abort(int code) = 0;
};

// Launching without MPI: rank r of `world` processes meeting at `rendezvous`
// (tcp://HOST:PORT or file:///PATH, see src/comm_tcp.cpp). Negative / zero / empty fields
// are taken from the environment: TG_RANK, TG_WORLD_SIZE, TG_RENDEZVOUS (or SLURM_PROCID
// and SLURM_NTASKS under srun).
struct DistOptions {
  int rank = -1;
  int world = 0;
  std::string rendezvous;
  int timeout_s = 300;
};
// Sets up the process-wide communicator from `o` (before the first comm()). Under mpirun
// MPI decides and `o` must not ask for another world size.
void comm_init(const DistOptions& o);
// The process-wide communicator: MPI under mpirun, TCP when TG_WORLD_SIZE > 1 (or as
// comm_init set it up), else single-process.
Comm& comm();
// A communicator of one process (every collective an identity), apart from comm()'s.
std::unique_ptr<Comm> make_single_comm();
std::unique_ptr<Comm> make_tcp_comm(int rank, int world, const std::string& rendezvous,
                                    int timeout_s);
// GPUs: NCCL on the device of `backend` (a CUDA backend, whose stream its collectives on
// device memory are ordered with), its ncclUniqueId broadcast over `bootstrap` (MPI or TCP);
// both must outlive it. Defined in the CUDA library (src/cuda/nccl_comm.cu) when NCCL's header
// was found at build time (the library itself is loaded then); host code reaches it through
// make_gpu_comm (src/cuda_library.h).
std::unique_ptr<Comm> make_nccl_comm(Comm& bootstrap, Backend& backend);
// True once comm() has been set up with more than one process.
bool comm_is_distributed();
// This process's index among the processes on its machine (from the launcher: OpenMPI,
// MPICH, Slurm or TG_LOCAL_RANK); without one, the global rank (one machine).
int comm_local_rank();

}  // namespace tg
