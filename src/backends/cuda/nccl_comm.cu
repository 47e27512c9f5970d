// nccl_comm.cu: the communicator for GPUs, NCCL over the GPUs of every rank.
//
// A GPU job starts under mpirun or, without MPI, at a tcp:// or file:// rendezvous
// (src/comm/rendezvous.h); either is only the bootstrap: rank 0 creates an ncclUniqueId, the
// bootstrap hands it to every rank, and every rank joins the NCCL communicator with it. From
// then on every collective of the job goes through NCCL; the bootstrap only watches for a
// process that has gone and ends the job.
//
// NCCL is a run-time dependency, loaded when the first communicator is made (nccl_api): the
// functions the process already has (a libnccl loaded by someone else, or the emulated tests'
// stand-ins), else libnccl.so.2 (or libnccl.so) opened with dlopen. One GPU needs no NCCL, so
// the CUDA library does not link it; several GPUs without it is an error that says how to get it.
//
// Collectives are blocking, like every Comm. The communicator belongs to one CUDA backend,
// whose stream writes the device buffers it reduces (gradients, weights) and reads the
// results: a collective on device memory first makes the communicator's stream wait for an
// event recorded on the backend's stream (the work the backend has queued on those buffers is
// done before NCCL reads them), and afterwards makes the backend's stream wait for an event
// recorded on the communicator's (the backend's later work reads the results, which the device
// orders itself, not only through the host's wait below). The host then waits for the
// collective, watching the job: NCCL kernels wait forever for a process that has gone.
// Host buffers (a loss, a norm, fp8 amaxes, checkpoint shards) go through pinned staging and a
// device scratch buffer, so callers need not care where their data lives.
#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "launch.h"
#include "src/base/common.h"
#include "src/base/test_hooks.h"
#include "src/comm/comm.h"

namespace tg {

namespace {

// The NCCL functions this communicator calls, from the process or from libnccl.
struct NcclApi {
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclCommGetAsyncError) comm_get_async_error = nullptr;
  decltype(&ncclGetErrorString) get_error_string = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclReduceScatter) reduce_scatter = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
};

// Every function from `h` (RTLD_DEFAULT: the process's own symbols); the first missing name,
// or "" when all were found.
std::string resolve(void* h, NcclApi& a) {
  std::string missing;
  auto get = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
    if (!fn && missing.empty()) missing = name;
  };
  get(a.get_unique_id, "ncclGetUniqueId");
  get(a.comm_init_rank, "ncclCommInitRank");
  get(a.comm_destroy, "ncclCommDestroy");
  get(a.comm_abort, "ncclCommAbort");
  get(a.comm_get_async_error, "ncclCommGetAsyncError");
  get(a.get_error_string, "ncclGetErrorString");
  get(a.all_reduce, "ncclAllReduce");
  get(a.reduce_scatter, "ncclReduceScatter");
  get(a.all_gather, "ncclAllGather");
  get(a.broadcast, "ncclBroadcast");
  get(a.send, "ncclSend");
  get(a.recv, "ncclRecv");
  get(a.group_start, "ncclGroupStart");
  get(a.group_end, "ncclGroupEnd");
  return missing;
}

Error nccl_not_found(const std::string& why) {
  return Error(strf(
      "several GPUs need NCCL, and libnccl.so.2 could not be loaded (%s). Install it (e.g. "
      "`pip install nvidia-nccl-cu13` and add its lib folder, site-packages/nvidia/nccl/lib, "
      "to LD_LIBRARY_PATH), or rebuild with NCCL_HOME=<an NCCL installation>, whose lib folder "
      "the CUDA library then searches; one GPU per job needs no NCCL",
      why.c_str()));
}

// NCCL's functions, loaded on first use (kept for the process once found).
const NcclApi& nccl_api() {
  static std::mutex mu;
  static NcclApi api;
  static bool loaded = false;
  std::lock_guard<std::mutex> lock(mu);
  if (test_hooks::nccl_missing()) throw nccl_not_found("TG_TEST_NO_NCCL: treated as absent");
  if (loaded) return api;
  if (!resolve(RTLD_DEFAULT, api).empty()) {
    void* h = nullptr;
    std::string why;
    for (const char* name : {"libnccl.so.2", "libnccl.so"}) {
      if ((h = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
      why += std::string(why.empty() ? "" : "; ") + dlerror();
    }
    if (!h) throw nccl_not_found(why);
    const std::string missing = resolve(h, api);
    if (!missing.empty())
      throw Error(strf("the NCCL library that was loaded has no %s", missing.c_str()));
  }
  loaded = true;
  return api;
}

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(strf("NCCL communicator: %s: %s", what, cudaGetErrorString(e)));
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
  NcclComm(Bootstrap& bootstrap, Backend& backend)
      : nccl_(nccl_api()), boot_(bootstrap), backend_stream_(gpu::backend_stream(backend)) {
    cuda_check(cudaSetDevice(backend.device_index()), "cudaSetDevice");
    ncclUniqueId id;
    if (boot_.rank() == 0) nccl_check(nccl_.get_unique_id(&id), "ncclGetUniqueId");
    boot_.share_from_rank0(&id, sizeof(id));
    nccl_check(nccl_.comm_init_rank(&comm_, boot_.world(), id, boot_.rank()), "ncclCommInitRank");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda_check(cudaEventCreateWithFlags(&backend_done_, cudaEventDisableTiming), "cudaEventCreate");
    cuda_check(cudaEventCreateWithFlags(&collective_done_, cudaEventDisableTiming),
               "cudaEventCreate");
  }
  ~NcclComm() override {
    // Every collective was waited for; the stream is idle, so its memory may go.
    if (stream_) cudaStreamSynchronize(stream_);
    gpu::staging_release(staging_);
    if (scratch_) cudaFree(scratch_);
    for (cudaEvent_t e : {backend_done_, collective_done_})
      if (e) cudaEventDestroy(e);
    if (stream_) cudaStreamDestroy(stream_);
    if (comm_) nccl_.comm_destroy(comm_);
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
      after_backend();
      // NCCL gathers in place when the send buffer is this rank's slot of the output.
      if (in && in != mine_in_out && is_device_pointer(in))
        cuda_check(cudaMemcpyAsync(mine_in_out, in, bytes, cudaMemcpyDeviceToDevice, stream_),
                   "copy into the gather slot");
      else if (in && in != mine_in_out)
        gpu::stage_upload(staging_, stream_, mine_in_out, in, bytes);
      nccl_check(nccl_.all_gather(mine_in_out, out, bytes, ncclUint8, comm_, stream_),
                 "all_gather");
      return finish_for_backend();
    }
    char* d = static_cast<char*>(scratch(total));
    gpu::stage_upload(staging_, stream_, d + size_t(rank()) * bytes, in ? in : mine_in_out, bytes);
    nccl_check(nccl_.all_gather(d + size_t(rank()) * bytes, d, bytes, ncclUint8, comm_, stream_),
               "all_gather");
    finish_to_host(out, d, total);
  }

  void reduce_scatter_sum(const float* in, float* out, size_t n) override {
    const size_t total = n * size_t(world());
    if (is_device_pointer(in) && is_device_pointer(out)) {
      after_backend();
      nccl_check(nccl_.reduce_scatter(in, out, n, ncclFloat, ncclSum, comm_, stream_),
                 "reduce_scatter");
      return finish_for_backend();
    }
    float* d = static_cast<float*>(scratch((total + n) * sizeof(float)));
    gpu::stage_upload(staging_, stream_, d, in, total * sizeof(float));
    nccl_check(nccl_.reduce_scatter(d, d + total, n, ncclFloat, ncclSum, comm_, stream_),
               "reduce_scatter");
    finish_to_host(out, d + total, n * sizeof(float));
  }

  // Part r of `in` to rank r, rank r's part for this rank into out + r * bytes: one group of
  // point-to-point sends and receives (NCCL has no all-to-all collective), this rank's own
  // part included.
  void all_to_all_bytes(const void* in, void* out, size_t bytes) override {
    const size_t total = bytes * size_t(world());
    if (is_device_pointer(in) && is_device_pointer(out)) {
      after_backend();
      exchange(static_cast<const char*>(in), static_cast<char*>(out), bytes);
      return finish_for_backend();
    }
    char* d = static_cast<char*>(scratch(2 * total));
    gpu::stage_upload(staging_, stream_, d, in, total);
    exchange(d, d + total, bytes);
    finish_to_host(out, d + total, total);
  }

  void broadcast(void* data, size_t bytes, int root) override {
    if (is_device_pointer(data)) {
      after_backend();
      nccl_check(nccl_.broadcast(data, data, bytes, ncclUint8, root, comm_, stream_), "broadcast");
      return finish_for_backend();
    }
    void* d = scratch(bytes);
    gpu::stage_upload(staging_, stream_, d, data, bytes);
    nccl_check(nccl_.broadcast(d, d, bytes, ncclUint8, root, comm_, stream_), "broadcast");
    finish_to_host(data, d, bytes);
  }

  void barrier() override {
    float x = 0;
    all_reduce_sum(&x, 1);
  }

  [[noreturn]] void abort(int code) override {
    // Free the other GPUs from any collective they wait in, then end the job the bootstrap's
    // way (MPI_Abort, or closing the rendezvous's connections).
    if (comm_) nccl_.comm_abort(comm_);
    comm_ = nullptr;
    boot_.abort(code);
    std::_Exit(code);  // not reached: the bootstrap's abort does not return
  }

 private:
  void nccl_check(ncclResult_t r, const char* what) {
    if (r != ncclSuccess) throw Error(strf("NCCL %s failed: %s", what, nccl_.get_error_string(r)));
  }
  void exchange(const char* in, char* out, size_t bytes) {
    nccl_check(nccl_.group_start(), "group_start");
    for (int r = 0; r < world(); r++) {
      nccl_check(nccl_.send(in + size_t(r) * bytes, bytes, ncclUint8, r, comm_, stream_), "send");
      nccl_check(nccl_.recv(out + size_t(r) * bytes, bytes, ncclUint8, r, comm_, stream_), "recv");
    }
    nccl_check(nccl_.group_end(), "group_end");
  }
  void all_reduce(void* x, size_t n, size_t elem, ncclDataType_t t, ncclRedOp_t op) {
    if (is_device_pointer(x)) {
      after_backend();
      nccl_check(nccl_.all_reduce(x, x, n, t, op, comm_, stream_), "all_reduce");
      return finish_for_backend();
    }
    void* d = scratch(n * elem);
    gpu::stage_upload(staging_, stream_, d, x, n * elem);
    nccl_check(nccl_.all_reduce(d, d, n, t, op, comm_, stream_), "all_reduce");
    finish_to_host(x, d, n * elem);
  }
  // The next collective on device memory starts after the work queued so far on the backend's
  // stream (which wrote its input).
  void after_backend() {
    cuda_check(cudaEventRecord(backend_done_, backend_stream_), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(stream_, backend_done_, 0), "cudaStreamWaitEvent");
  }
  // The backend's later work starts after the collective (it reads the results); the host
  // waits for it too (collectives are blocking).
  void finish_for_backend() {
    cuda_check(cudaEventRecord(collective_done_, stream_), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(backend_stream_, collective_done_, 0), "cudaStreamWaitEvent");
    sync();
  }
  // A collective on the scratch buffer: waited for, then `bytes` of its result at d copied to
  // the host buffer.
  void finish_to_host(void* host, const void* d, size_t bytes) {
    sync();
    gpu::stage_download(staging_, stream_, host, d, bytes);
  }
  // Waits for the queued collective, watching the job: when another process has gone (it
  // failed, or was killed), the NCCL kernels here would wait for it forever, so the
  // communicator is aborted and this rank fails too, naming it.
  void sync() {
    for (int spins = 0;; spins++) {
      cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) cuda_check(q, "waiting for a collective");
      if (spins % 1000 == 999) {
        ncclResult_t async = ncclSuccess;
        nccl_.comm_get_async_error(comm_, &async);
        const int gone = async == ncclSuccess ? boot_.gone_rank() : -1;
        // A peer that finished the last collective may exit before this rank sees it done.
        if (gone >= 0 && cudaStreamQuery(stream_) == cudaSuccess) return;
        if (async != ncclSuccess || gone >= 0) {
          nccl_.comm_abort(comm_);
          comm_ = nullptr;
          if (async != ncclSuccess)
            throw Error(strf("NCCL failed during a collective: %s", nccl_.get_error_string(async)));
          throw Error(
              strf("rank %d of the job has gone (it failed or was stopped); stopping", gone));
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  // Device scratch of at least `bytes`, kept for the next collective. Every collective has
  // been waited for, so no queued work uses the old buffer when it is freed.
  void* scratch(size_t bytes) {
    if (bytes > scratch_bytes_) {
      cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      if (scratch_) cuda_check(cudaFree(scratch_), "cudaFree");
      scratch_ = nullptr;
      scratch_bytes_ = std::max(bytes, size_t(1) << 20);
      cuda_check(cudaMalloc(&scratch_, scratch_bytes_), "cudaMalloc of the staging buffer");
    }
    return scratch_;
  }

  const NcclApi& nccl_;
  Bootstrap& boot_;
  cudaStream_t backend_stream_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t backend_done_ = nullptr, collective_done_ = nullptr;
  gpu::HostStaging staging_;  // pinned memory of the host buffers' copies (on stream_)
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
};

}  // namespace

std::unique_ptr<Comm> make_nccl_comm(Bootstrap& bootstrap, Backend& backend) {
  return std::make_unique<NcclComm>(bootstrap, backend);
}

}  // namespace tg
