// device_memory.cu: the CUDA backend's device memory (device_memory.h).
#include "device_memory.h"

namespace tg::gpu {

void* DeviceMemory::alloc(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, rounded ? rounded : 64);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error(strf("out of GPU memory allocating %zu bytes (%zu in use): %s", bytes, in_use_,
                     cudaGetErrorString(e)));
  }
  sizes_[p] = rounded;
  in_use_ += rounded;
  if (in_use_ > peak_) peak_ = in_use_;
  return p;
}

void DeviceMemory::free(void* p) {
  auto it = sizes_.find(p);
  if (it == sizes_.end()) return;
  // Queued work may still use p: wait for it before the memory goes. cudaFree would wait
  // for the whole device anyway, but only as the driver's habit, not a documented guarantee
  // of this code's order (a stream-ordered or caching allocator would not); the wait costs
  // nothing more, and the emulated runtime checks that frees come after the work is done.
  TG_CUDA_CHECK(cudaStreamSynchronize(stream_));
  TG_CUDA_CHECK(cudaFree(p));
  in_use_ -= it->second;
  sizes_.erase(it);
}

void* DeviceMemory::scratch(ScratchSlot s, size_t bytes) {
  auto& buf = scratch_[s];
  if (buf.second < bytes) {
    if (buf.first) free(buf.first);
    buf.first = nullptr;
    buf.second = 0;
    buf.first = alloc(bytes);
    buf.second = bytes;
  }
  return buf.first;
}

size_t DeviceMemory::scratch_bytes(int slot) const {
  return slot >= 0 && slot < kNumScratch ? scratch_[slot].second : 0;
}

void DeviceMemory::release_all() {
  for (auto& kv : sizes_) cudaFree(kv.first);
  sizes_.clear();
  in_use_ = 0;
  for (auto& s : scratch_) s = {nullptr, 0};
}

}  // namespace tg::gpu
