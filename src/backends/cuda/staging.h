// staging.h: host <-> device copies through pinned staging memory (staging.cu).
//
// The project's rule: cudaMemcpyAsync only from and to pinned host memory. From pageable
// memory CUDA copies through a staging buffer of its own and may synchronise with the stream
// behind the caller's back; the emulated tests (tests/cuda/stream_emulation.cpp) report such a
// copy as an error. Callers' buffers are pageable (vectors, stack variables), so every copy
// between them and the device goes through a HostStaging: two halves of pinned memory used in
// turn, each with an event recorded after the last copy that used it, so that a half is
// refilled only once the device has finished copying from it. The halves grow on demand to
// kStagingHalfMax bytes each; larger copies go in pieces, the host filling one half while the
// device copies the other. A HostStaging serves one stream (its events say nothing of others).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

namespace tg::gpu {

struct HostStaging {
  char* half[2] = {nullptr, nullptr};  // cudaMallocHost
  size_t bytes = 0;                    // of each half
  size_t used[2] = {0, 0};             // handed out since the half was last free
  cudaEvent_t done[2] = {nullptr, nullptr};
  int cur = 0;  // the half being filled
};
inline constexpr size_t kStagingHalfMax = size_t(8) << 20;

// dst (device) <- host[0, bytes), queued on `stream` after its earlier work; the host buffer
// may be reused as soon as this returns (the bytes are in pinned memory by then).
void stage_upload(HostStaging& s, cudaStream_t stream, void* dst, const void* host, size_t bytes);
// host[0, bytes) <- src (device) after the work queued on `stream`; returns once host holds it.
void stage_download(HostStaging& s, cudaStream_t stream, void* host, const void* src, size_t bytes);
// Waits for the staging's copies, then frees its memory and events (for destructors: errors
// are ignored).
void staging_release(HostStaging& s);

// Reads the host collects later (Backend::queue_read / take_reads): each into a pinned buffer
// of its own, kept and reused from step to step (a step queues the same reads), so that the
// copy needs no wait when it is queued and the host waits once for all of them.
struct DeferredReads {
  std::vector<char*> buf;     // cudaMallocHost
  std::vector<size_t> cap;    // bytes of each buffer
  std::vector<size_t> bytes;  // of each queued read
  size_t queued = 0;          // reads queued since the last take
};
// host <- src (device), queued on `stream` after its earlier work; no wait.
void deferred_queue(DeferredReads& r, cudaStream_t stream, const void* src, size_t bytes);
// Waits for `stream` once, then returns the queued reads' bytes in order and forgets them.
std::vector<std::vector<char>> deferred_take(DeferredReads& r, cudaStream_t stream);
// Waits for `stream`, then frees the buffers (for destructors: errors are ignored).
void deferred_release(DeferredReads& r, cudaStream_t stream);

}  // namespace tg::gpu
