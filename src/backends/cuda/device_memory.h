// device_memory.h: the CUDA backend's device memory (device_memory.cu). Plain cudaMalloc per
// allocation (never managed memory), rounded to 64 bytes like the CPU backend's and counted
// for bytes_in_use / peak_bytes, and the scratch slots (launch.h's ScratchSlot) grown on
// demand. A free waits for the backend's stream first: queued work may still use the memory.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <utility>

#include "launch.h"

namespace tg::gpu {

class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  // The stream whose work a free waits for (the backend's, once it exists).
  void set_stream(cudaStream_t s) { stream_ = s; }
  // `bytes` of device memory; an Error naming the bytes asked and in use when there are none.
  void* alloc(size_t bytes);
  // Frees memory from alloc (anything else is ignored), after the stream's queued work.
  void free(void* p);
  // Scratch slot s, of at least `bytes`: reallocated (its contents lost) when it is smaller.
  void* scratch(ScratchSlot s, size_t bytes);
  size_t scratch_bytes(int slot) const;
  size_t in_use() const { return in_use_; }
  size_t peak() const { return peak_; }
  // Every allocation freed, errors ignored (the backend's destructor, after its stream's work).
  void release_all();

 private:
  cudaStream_t stream_ = nullptr;
  std::map<void*, size_t> sizes_;
  size_t in_use_ = 0, peak_ = 0;
  std::pair<void*, size_t> scratch_[kNumScratch] = {};
};

}  // namespace tg::gpu
