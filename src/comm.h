// comm.h: the communicator that data parallelism goes through.
//
// One process: every collective is the identity. Several processes started by mpirun:
// MPI (OpenMPI). The training loop asks for comm() once; MPI is initialised on first use
// when the environment says the process was started by an MPI launcher, and finalised at
// exit. Collectives are blocking and in fp32/fp64 on host memory (the CPU backend's).
#pragma once
#include <cstddef>
#include <memory>
#include <string>

namespace tg {

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
  // Ends every process of the job (after a rank failed), with exit code `code`.
  [[noreturn]] virtual void abort(int code) = 0;
};

// The process-wide communicator (MPI under mpirun, else single-process).
Comm& comm();
// True once comm() has been set up with more than one process.
bool comm_is_distributed();

}  // namespace tg
