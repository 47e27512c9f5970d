// nccl_comm.cu: the communicator for GPUs, NCCL over the GPUs of every rank.
//
// A GPU job starts like a CPU one (mpirun, or without MPI through a TCP/file rendezvous);
// that first communicator is only the bootstrap: rank 0 creates an ncclUniqueId, the
// bootstrap broadcasts it, and every rank joins the NCCL communicator with it. From then on
// every collective of the job goes through NCCL.
//
// Collectives are blocking, like every Comm: each one is queued on the communicator's stream
// and waited for. Buffers may be device memory (gradients, weights: NCCL reads them in
// place) or host memory (a loss, a norm, fp8 amaxes, checkpoint shards): host buffers are
// staged through a device scratch buffer, so callers need not care where their data lives.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "src/comm.h"
#include "src/common.h"

namespace tg {

namespace {

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(strf("NCCL communicator: %s: %s", what, cudaGetErrorString(e)));
}

void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw Error(strf("NCCL %s failed: %s", what, ncclGetErrorString(r)));
}

bool is_device_pointer(const void* p) {
  cudaPointerAttributes a = {};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();  // plain host memory on older runtimes: clear the error
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

class NcclComm final : public Comm {
 public:
  NcclComm(Comm& bootstrap, int device) : boot_(bootstrap), device_(device) {
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    ncclUniqueId id;
    if (boot_.rank() == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    boot_.broadcast(&id, sizeof(id), 0);
    nccl_check(ncclCommInitRank(&comm_, boot_.world(), id, boot_.rank()), "ncclCommInitRank");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~NcclComm() override {
    if (scratch_) cudaFree(scratch_);
    if (stream_) cudaStreamDestroy(stream_);
    if (comm_) ncclCommDestroy(comm_);
  }

  std::string name() const override {
    return strf("NCCL, %d GPUs (bootstrap: %s)", boot_.world(), boot_.name().c_str());
  }
  int rank() const override { return boot_.rank(); }
  int world() const override { return boot_.world(); }
  bool device_memory() const override { return true; }

  void all_reduce_sum(float* x, size_t n) override {
    all_reduce(x, n, sizeof(float), ncclFloat, ncclSum);
  }
  void all_reduce_sum(double* x, size_t n) override {
    all_reduce(x, n, sizeof(double), ncclDouble, ncclSum);
  }
  void all_reduce_max(float* x, size_t n) override {
    all_reduce(x, n, sizeof(float), ncclFloat, ncclMax);
  }

  void all_gather_bytes(const void* in, void* out, size_t bytes) override {
    const size_t total = bytes * size_t(world());
    char* mine_in_out = static_cast<char*>(out) + size_t(rank()) * bytes;
    if (is_device_pointer(out)) {
      // NCCL gathers in place when the send buffer is this rank's slot of the output.
      if (in && in != mine_in_out)
        cuda_check(cudaMemcpyAsync(mine_in_out, in, bytes, cudaMemcpyDefault, stream_),
                   "copy into the gather slot");
      nccl_check(ncclAllGather(mine_in_out, out, bytes, ncclUint8, comm_, stream_), "all_gather");
      sync();
      return;
    }
    char* d = static_cast<char*>(scratch(total));
    cuda_check(cudaMemcpyAsync(d + size_t(rank()) * bytes, in ? in : mine_in_out, bytes,
                               cudaMemcpyDefault, stream_),
               "stage the gather input");
    nccl_check(ncclAllGather(d + size_t(rank()) * bytes, d, bytes, ncclUint8, comm_, stream_),
               "all_gather");
    cuda_check(cudaMemcpyAsync(out, d, total, cudaMemcpyDefault, stream_), "stage the output");
    sync();
  }

  void reduce_scatter_sum(const float* in, float* out, size_t n) override {
    const size_t total = n * size_t(world());
    if (is_device_pointer(in) && is_device_pointer(out)) {
      nccl_check(ncclReduceScatter(in, out, n, ncclFloat, ncclSum, comm_, stream_),
                 "reduce_scatter");
      sync();
      return;
    }
    float* d = static_cast<float*>(scratch((total + n) * sizeof(float)));
    cuda_check(cudaMemcpyAsync(d, in, total * sizeof(float), cudaMemcpyDefault, stream_),
               "stage the reduce-scatter input");
    nccl_check(ncclReduceScatter(d, d + total, n, ncclFloat, ncclSum, comm_, stream_),
               "reduce_scatter");
    cuda_check(cudaMemcpyAsync(out, d + total, n * sizeof(float), cudaMemcpyDefault, stream_),
               "stage the output");
    sync();
  }

  void broadcast(void* data, size_t bytes, int root) override {
    if (is_device_pointer(data)) {
      nccl_check(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_), "broadcast");
      sync();
      return;
    }
    void* d = scratch(bytes);
    cuda_check(cudaMemcpyAsync(d, data, bytes, cudaMemcpyDefault, stream_), "stage broadcast");
    nccl_check(ncclBroadcast(d, d, bytes, ncclUint8, root, comm_, stream_), "broadcast");
    cuda_check(cudaMemcpyAsync(data, d, bytes, cudaMemcpyDefault, stream_), "stage broadcast");
    sync();
  }

  void barrier() override {
    float x = 0;
    all_reduce_sum(&x, 1);
  }

  [[noreturn]] void abort(int code) override {
    // Free the other GPUs from any collective they wait in, then end the job the bootstrap's
    // way (MPI_Abort, or closing the TCP connections).
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    boot_.abort(code);
    std::_Exit(code);  // not reached: the bootstrap's abort does not return
  }

 private:
  void all_reduce(void* x, size_t n, size_t elem, ncclDataType_t t, ncclRedOp_t op) {
    if (is_device_pointer(x)) {
      nccl_check(ncclAllReduce(x, x, n, t, op, comm_, stream_), "all_reduce");
      sync();
      return;
    }
    void* d = scratch(n * elem);
    cuda_check(cudaMemcpyAsync(d, x, n * elem, cudaMemcpyDefault, stream_), "stage all_reduce");
    nccl_check(ncclAllReduce(d, d, n, t, op, comm_, stream_), "all_reduce");
    cuda_check(cudaMemcpyAsync(x, d, n * elem, cudaMemcpyDefault, stream_), "stage all_reduce");
    sync();
  }
  // Waits for the queued collective, watching the job: when another process has gone (it
  // failed, or was killed), the NCCL kernels here would wait for it forever, so the
  // communicator is aborted and this rank fails too.
  void sync() {
    for (int spins = 0;; spins++) {
      cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) cuda_check(q, "waiting for a collective");
      if (spins % 1000 == 999) {
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(comm_, &async);
        if (async != ncclSuccess || !boot_.peers_alive()) {
          ncclCommAbort(comm_);
          comm_ = nullptr;
          throw Error(async != ncclSuccess
                          ? strf("NCCL failed during a collective: %s", ncclGetErrorString(async))
                          : std::string("another process of the job has gone; stopping"));
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  // Device scratch of at least `bytes`, kept for the next collective.
  void* scratch(size_t bytes) {
    if (bytes > scratch_bytes_) {
      if (scratch_) cuda_check(cudaFree(scratch_), "cudaFree");
      scratch_ = nullptr;
      scratch_bytes_ = std::max(bytes, size_t(1) << 20);
      cuda_check(cudaMalloc(&scratch_, scratch_bytes_), "cudaMalloc of the staging buffer");
    }
    return scratch_;
  }

  Comm& boot_;
  int device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
};

}  // namespace

std::unique_ptr<Comm> make_nccl_comm(Comm& bootstrap, int device) {
  return std::make_unique<NcclComm>(bootstrap, device);
}

}  // namespace tg
