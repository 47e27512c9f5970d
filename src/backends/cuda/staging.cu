// staging.cu: host <-> device copies through pinned staging memory (staging.h).
#include <algorithm>
#include <cstring>

#include "launch.h"

namespace tg::gpu {

namespace {

constexpr size_t kStagingHalfMin = size_t(64) << 10;
constexpr size_t kStagingAlign = 256;

// Both halves of at least `want` bytes (at most kStagingHalfMax), once their copies are done.
void grow(HostStaging& s, size_t want) {
  if (s.bytes >= want) return;
  size_t n = std::max(kStagingHalfMin, 2 * s.bytes);
  while (n < want) n *= 2;
  n = std::min(n, kStagingHalfMax);
  staging_release(s);
  for (int k = 0; k < 2; k++) {
    void* p = nullptr;
    cudaError_t e = cudaMallocHost(&p, n);
    if (e == cudaSuccess) {
      s.half[k] = static_cast<char*>(p);
      e = cudaEventCreateWithFlags(&s.done[k], cudaEventDisableTiming);
    }
    if (e != cudaSuccess) {
      staging_release(s);  // nothing half made is left behind
      TG_CUDA_CHECK(e);
    }
  }
  s.bytes = n;
}

// n bytes (n <= kStagingHalfMax) of the half being filled; when it is full, of the other half
// once the device has finished the copies that used it.
char* take(HostStaging& s, size_t n) {
  grow(s, n);
  if (s.used[s.cur] + n > s.bytes) {
    s.cur ^= 1;
    TG_CUDA_CHECK(cudaEventSynchronize(s.done[s.cur]));
    s.used[s.cur] = 0;
  }
  char* p = s.half[s.cur] + s.used[s.cur];
  s.used[s.cur] += (n + kStagingAlign - 1) / kStagingAlign * kStagingAlign;
  return p;
}

}  // namespace

void stage_upload(HostStaging& s, cudaStream_t stream, void* dst, const void* host, size_t bytes) {
  for (size_t off = 0; off < bytes;) {
    const size_t n = std::min(bytes - off, kStagingHalfMax);
    char* p = take(s, n);
    std::memcpy(p, static_cast<const char*>(host) + off, n);
    TG_CUDA_CHECK(
        cudaMemcpyAsync(static_cast<char*>(dst) + off, p, n, cudaMemcpyHostToDevice, stream));
    TG_CUDA_CHECK(cudaEventRecord(s.done[s.cur], stream));
    off += n;
  }
}

void stage_download(HostStaging& s, cudaStream_t stream, void* host, const void* src,
                    size_t bytes) {
  struct Piece {
    const char* p;
    size_t off, n;
    int half;
  };
  // Piece k is copied out on the host while the device copies piece k + 1 into the other half.
  auto finish = [&](const Piece& q) {
    TG_CUDA_CHECK(cudaEventSynchronize(s.done[q.half]));
    std::memcpy(static_cast<char*>(host) + q.off, q.p, q.n);
  };
  Piece prev{nullptr, 0, 0, 0};
  for (size_t off = 0; off < bytes;) {
    const size_t n = std::min(bytes - off, kStagingHalfMax);
    char* p = take(s, n);
    TG_CUDA_CHECK(
        cudaMemcpyAsync(p, static_cast<const char*>(src) + off, n, cudaMemcpyDeviceToHost, stream));
    TG_CUDA_CHECK(cudaEventRecord(s.done[s.cur], stream));
    if (prev.p) finish(prev);
    prev = Piece{p, off, n, s.cur};
    off += n;
  }
  if (prev.p) finish(prev);
}

void staging_release(HostStaging& s) {
  for (int k = 0; k < 2; k++) {
    if (s.done[k]) {
      cudaEventSynchronize(s.done[k]);
      cudaEventDestroy(s.done[k]);
    }
    if (s.half[k]) cudaFreeHost(s.half[k]);
  }
  s = HostStaging{};
}

}  // namespace tg::gpu

namespace tg::gpu {

void deferred_queue(DeferredReads& r, cudaStream_t stream, const void* src, size_t bytes) {
  const size_t i = r.queued;
  if (i == r.buf.size()) {
    r.buf.push_back(nullptr);
    r.cap.push_back(0);
    r.bytes.push_back(0);
  }
  if (r.cap[i] < bytes) {
    // Buffer i is not a pending copy's target (only those below r.queued are); a buffer of
    // an earlier step's read was collected by its deferred_take.
    if (r.buf[i]) TG_CUDA_CHECK(cudaFreeHost(r.buf[i]));
    r.buf[i] = nullptr;
    r.cap[i] = 0;
    void* p = nullptr;
    TG_CUDA_CHECK(cudaMallocHost(&p, bytes));
    r.buf[i] = static_cast<char*>(p);
    r.cap[i] = bytes;
  }
  TG_CUDA_CHECK(cudaMemcpyAsync(r.buf[i], src, bytes, cudaMemcpyDeviceToHost, stream));
  r.bytes[i] = bytes;
  r.queued++;
}

std::vector<std::vector<char>> deferred_take(DeferredReads& r, cudaStream_t stream) {
  std::vector<std::vector<char>> out;
  if (r.queued == 0) return out;
  TG_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (size_t i = 0; i < r.queued; i++) out.emplace_back(r.buf[i], r.buf[i] + r.bytes[i]);
  r.queued = 0;
  return out;
}

void deferred_release(DeferredReads& r, cudaStream_t stream) {
  if (stream) cudaStreamSynchronize(stream);
  for (char* p : r.buf)
    if (p) cudaFreeHost(p);
  r = DeferredReads{};
}

}  // namespace tg::gpu
