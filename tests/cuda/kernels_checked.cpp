// kernels_checked.cpp: the checks of the kernels_checked binary (tests/cuda/memory_check.h)
// shown to catch planted bugs, each a small kernel with one mistake, and to stay quiet on its
// corrected twin: a shared-memory race between warps, one between the lanes of a warp that
// only a shuffle separates, write-write and atomic-versus-plain conflicts (racecheck); a
// load and a store one element past a device buffer, one before it, a read of freed memory, a
// host copy past an allocation, an access past the launch's dynamic shared memory (memcheck);
// a read of a device element nobody wrote, of uninitialised bytes carried by a device copy,
// and of shared memory another block wrote (initcheck). On an emulator without the checks
// every one of these runs without a report, so each test fails there.
// launchers_checked.cpp runs every real kernel under the same checks.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN  // this file holds the binary's main
#include "checked_util.h"
// (first: it includes the emulation, which redefines the CUDA keywords the kernels use)
#include <vector>

using namespace emu_test;

namespace {

// ---- racecheck ----

// Each thread stores its slot and reads its neighbour's, with the barrier or without it.
__global__ void neighbour_kernel(float* out, bool sync) {
  __shared__ float s[128];
  s[threadIdx.x] = float(threadIdx.x);
  if (sync) __syncthreads();
  out[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}

// One warp: lanes exchange through shared memory with only a shuffle between the store and
// the load (no memory ordering), or with __syncthreads.
__global__ void warp_exchange_kernel(float* out, bool sync) {
  __shared__ float s[32];
  s[threadIdx.x] = float(threadIdx.x);
  const float v = __shfl_xor_sync(0xffffffffu, 1.f, 1);
  if (sync) __syncthreads();
  out[threadIdx.x] = s[threadIdx.x ^ 1] + v;
}

// Every thread stores into the same word (write-write), or only thread 0 does.
__global__ void same_word_kernel(float* out, bool all) {
  __shared__ float s[1];
  if (all || threadIdx.x == 0) s[0] = float(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = s[0];
}

// Atomic adds of every thread into one shared word, then a plain read by thread 0 before the
// barrier (a race with the other threads' atomics) or after it.
__global__ void atomic_kernel(float* out, bool read_early) {
  __shared__ float s[1];
  if (threadIdx.x == 0) s[0] = 0.f;
  __syncthreads();
  atomicAdd(&s[0], 1.f);
  if (read_early && threadIdx.x == 0) out[0] = s[0];
  __syncthreads();
  if (!read_early && threadIdx.x == 0) out[0] = s[0];
}

TEST_CASE("racecheck: a shared-memory race between warps, and its fix") {
  Dev<float> out(128);
  take_reports();
  gpu::launch(neighbour_kernel, 1, 128, 0, nullptr, out.p, false);
  expect_report({"racecheck: ", "neighbour_kernel", "write-read hazard", "neighbour_kernel::s",
                 "thread 127"});
  gpu::launch(neighbour_kernel, 1, 128, 0, nullptr, out.p, true);
  expect_clean();
}

TEST_CASE("racecheck: lanes of one warp are not ordered by a shuffle, only by a barrier") {
  Dev<float> out(32);
  take_reports();
  gpu::launch(warp_exchange_kernel, 1, 32, 0, nullptr, out.p, false);
  expect_report({"racecheck: ", "warp_exchange_kernel", "write-read hazard"});
  gpu::launch(warp_exchange_kernel, 1, 32, 0, nullptr, out.p, true);
  expect_clean();
}

TEST_CASE("racecheck: write-write conflicts; atomics conflict with plain accesses only") {
  Dev<float> out(64);
  take_reports();
  gpu::launch(same_word_kernel, 1, 64, 0, nullptr, out.p, true);
  expect_report({"racecheck: ", "same_word_kernel", "write-write hazard"});
  gpu::launch(same_word_kernel, 1, 64, 0, nullptr, out.p, false);
  expect_clean();
  gpu::launch(atomic_kernel, 1, 64, 0, nullptr, out.p, true);
  expect_report({"racecheck: ", "atomic_kernel", "read-write hazard", "a read by thread 0"});
  gpu::launch(atomic_kernel, 1, 64, 0, nullptr, out.p, false);
  expect_clean();
  CHECK(out.get()[0] == 64.f);
}

// ---- memcheck ----

// out[i] = in[i] for i < n + extra (extra 1: one element too many), or in[i - 1] (before: the
// first thread reads in[-1]).
__global__ void copy_kernel(float* out, const float* in, int n, int extra, bool before) {
  for (int i = int(threadIdx.x); i < n + extra; i += int(blockDim.x))
    out[i] = before ? in[i - 1] : in[i];
}

TEST_CASE("memcheck: a load and a store one element past a device buffer, one before it") {
  const int n = 100;
  Dev<float> small(std::vector<float>(n, 1.f)), large(std::vector<float>(n + 1, 2.f));
  take_reports();
  gpu::launch(copy_kernel, 1, 64, 0, nullptr, large.p, small.p, n, 1, false);
  expect_report({"memcheck: ", "copy_kernel", "invalid read of 4 bytes",
                 "0 bytes past the end of allocation", "(400 bytes at",
                 "thread 36 of block (0,0,0)"});
  gpu::launch(copy_kernel, 1, 64, 0, nullptr, small.p, large.p, n, 1, false);
  expect_report({"memcheck: ", "copy_kernel", "invalid write of 4 bytes",
                 "0 bytes past the end of allocation"});
  gpu::launch(copy_kernel, 1, 64, 0, nullptr, large.p, small.p, n, 0, true);
  expect_report({"memcheck: ", "copy_kernel", "invalid read of 4 bytes",
                 "4 bytes before the start of allocation"});
  gpu::launch(copy_kernel, 1, 64, 0, nullptr, large.p, small.p, n, 0, false);
  expect_clean();
}

TEST_CASE("memcheck: a kernel reading freed device memory") {
  Dev<float> out(64);
  float* in = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&in), 64 * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMemset(in, 0, 64 * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(cudaFree(in) == cudaSuccess);
  take_reports();
  gpu::launch(copy_kernel, 1, 64, 0, nullptr, out.p, static_cast<const float*>(in), 64, 0, false);
  expect_report({"memcheck: ", "copy_kernel", "invalid read", "of freed allocation"});
}

TEST_CASE("memcheck: a host copy past the end of an allocation") {
  Dev<float> d(16);
  const std::vector<float> h(17, 1.f);
  take_reports();
  REQUIRE(cudaMemcpy(d.p, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice) ==
          cudaSuccess);
  expect_report({"memcheck: cudaMemcpy", "writes 68 bytes", "byte 64 is 0 bytes past the end"});
}

// Each thread writes its float of the dynamic shared memory, then reads its neighbour's.
__global__ void dynamic_kernel(float* out) {
  float* s = gpu::dynamic_smem<float>();
  s[threadIdx.x] = float(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}

TEST_CASE("memcheck: past the launch's dynamic shared memory") {
  Dev<float> out(64);
  take_reports();
  gpu::launch(dynamic_kernel, 1, 64, 63 * sizeof(float), nullptr, out.p);
  expect_report({"memcheck: ", "dynamic_kernel", "write of 4 bytes at offset 252",
                 "past the 252 bytes of the launch"});
  gpu::launch(dynamic_kernel, 1, 64, 64 * sizeof(float), nullptr, out.p);
  expect_clean();
}

// ---- initcheck ----

TEST_CASE("initcheck: a read of a device element nobody wrote") {
  const int n = 100;
  Dev<float> in(n), out(n);
  in.put(std::vector<float>(n - 1, 1.f));  // the last element is never written
  take_reports();
  gpu::launch(copy_kernel, 1, 64, 0, nullptr, out.p, static_cast<const float*>(in.p), n, 0, false);
  expect_report({"initcheck: ", "copy_kernel", "read of uninitialised device memory",
                 "4 bytes at 0x", "offset 396 of allocation", "thread 35 of block (0,0,0)"});
  REQUIRE(cudaMemset(in.p, 0, n * sizeof(float)) == cudaSuccess);
  gpu::launch(copy_kernel, 1, 64, 0, nullptr, out.p, static_cast<const float*>(in.p), n, 0, false);
  expect_clean();
}

TEST_CASE("initcheck: a device-to-device copy carries unwritten bytes along") {
  const int n = 64;
  Dev<float> a(n), b(n), out(n);
  a.put(std::vector<float>(n / 2, 1.f));
  REQUIRE(cudaMemcpy(b.p, a.p, n * sizeof(float), cudaMemcpyDeviceToDevice) == cudaSuccess);
  take_reports();
  gpu::launch(copy_kernel, 1, 64, 0, nullptr, out.p, static_cast<const float*>(b.p), n, 0, false);
  expect_report({"initcheck: ", "copy_kernel", "offset 128 of allocation"});
}

// Block 0 fills the shared array (or every block does), then every block reads it.
__global__ void shared_fill_kernel(float* out, bool every_block) {
  __shared__ float s[64];
  if (every_block || blockIdx.x == 0) s[threadIdx.x] = float(threadIdx.x);
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = s[threadIdx.x];
}

TEST_CASE("initcheck: a block reading shared memory only another block wrote") {
  Dev<float> out(128);
  take_reports();
  gpu::launch(shared_fill_kernel, 2, 64, 0, nullptr, out.p, false);
  expect_report({"initcheck: ", "shared_fill_kernel", "shared memory the block has not written",
                 "shared_fill_kernel::s + ", "of block (1,0,0)"});
  gpu::launch(shared_fill_kernel, 2, 64, 0, nullptr, out.p, true);
  expect_clean();
}

}  // namespace
