// cuda_emulation.h: enough of the CUDA execution model to run kernels/*.cuh device code on
// the CPU (g++ -std=c++20, no GPU, the CUDA headers for the vector and half types).
//
// Include this before any kernel header (the Makefile passes it with -include, so that
// src/backends/cuda/*.cu compile as C++ with it: their launchers go through gpu::launch, which maps
// to emu::launch when TG_CUDA_EMULATION is defined). What it does:
//   - the CUDA runtime headers are included first (host parts: vector types, cuda_fp16.h's
//     host conversions, which are bit-exact with the device _rn ones), then the keywords are
//     redefined: __device__/__global__/__host__ vanish, __forceinline__ is inline, __shared__
//     is `thread_local` (a kernel's shared arrays are function statics: blocks run one at a
//     time, all fibers on one OS thread; `extern __shared__`, the dynamic shared memory, is
//     common.cuh's dynamic_smem(), here one buffer of kMaxDynamicSmem bytes filled with 0xFF
//     bytes before each block; a launch past the default 48 KiB needs its kernel's
//     cudaFuncSetAttribute opt-in, as on the GPU);
//   - the CUDA runtime, cuBLAS, cuBLASLt and NCCL calls the backend makes are host stand-ins
//     (tests/cuda/cuda_emulation.cpp, runtime_emulation.cpp, stream_emulation.cpp,
//     cublaslt_emulation.cpp, nccl_emulation.cpp: one device with one multiprocessor, GEMMs as
//     fp32 loops, the cuBLASLt matmul computed from its descriptors, collectives of a world
//     whose peers hold this rank's data); device memory is an arena apart from the host heap
//     (device_memory_emulation.cpp: red zones around every cudaMalloc block, freed blocks never
//     handed out again, a shadow byte per device byte; copies and memsets are bounds-checked
//     there, in every emulated binary);
//   - streams are as strict as a GPU's (stream_emulation.cpp): a kernel launch, an async copy
//     or memset, a GEMM or a collective is queued on its stream and runs only when something
//     waits for it (a stream, event or device synchronisation, a stream waiting on an event,
//     a blocking copy, cudaStreamQuery), with the legacy default stream's implicit ordering
//     with blocking streams; async copies from or to pageable host memory and frees of memory
//     that queued work still uses are errors (emu::errors());
//   - emu::launch(grid, block, smem, stream, kernel, args...) queues the launch (the arguments
//     copied, as a launch copies them); when it runs, the grid runs block after block (x
//     fastest), each block as blockDim.x cooperative fibers (stacks kept between launches,
//     switched by tg_emu_switch on x86-64, else ucontext and _setjmp/_longjmp; switches
//     announced to ASan in SAN=1 builds) on the calling thread: a fiber runs until it waits at
//     a barrier, then the next one runs. (OS threads were tried first: with hundreds of threads
//     per block and a barrier per shuffle, futex wake-ups made a 512-block launch take minutes.)
//   - __syncthreads is a barrier over the block's fibers; warp shuffles write the lane's value
//     into an exchange array (double-buffered), wait at a barrier over the warp's 32 lanes
//     and read the source lane; a fiber that returns from the kernel drops out of both
//     barriers, as an exited GPU thread no longer takes part in them;
//   - a shuffle that reads a lane that has exited, or has a mask other than the full warp,
//     is recorded as an error (emu::errors()), as is a block whose threads did not all pass
//     the same number of __syncthreads (some exited while others synced: undefined);
//   - atomics are plain read-modify-writes (one fiber runs at a time), out of line and outside
//     the instrumentation of the checks, which they tell of their access themselves.
// The interleaving is one fixed, legal schedule (threads in index order, each up to its next
// barrier): it executes every thread's code as written but by itself finds no race between
// barriers, no access past a buffer and no read of unwritten memory. The kernels_checked
// binary does (tests/cuda/memory_check.h): its CUDA code is compiled with -fsanitize=thread
// instrumentation whose callbacks see every load and store, with the launch hooks below
// (launch, block, end): racecheck of shared memory per barrier interval (a shuffle does not
// order shared memory), memcheck (device red zones, freed device memory, past the dynamic
// shared memory) and initcheck (device bytes no kernel, copy or memset wrote; shared bytes the
// block did not write), reported to emu::errors() with kernel, block, threads and lines.
// Streams likewise run in one legal order (a stream's items in order, when waited for), so
// work that two streams may run concurrently is never interleaved.
// It does not emulate: the memory model (every store is visible at once to every fiber; races
// on global memory between threads or blocks go unseen), __syncwarp and warp-synchronous code
// without shuffles, 2-D/3-D blocks, nvcc's code generation (FMA contraction, fast-math
// intrinsics), device libm accuracy (expf, tanhf, ... are the host's), resource limits
// (registers, grid size, static shared memory; the dynamic only as far as kMaxDynamicSmem
// and the opt-in go), concurrency
// between streams, the per-thread default stream.
#pragma once
#define TG_CUDA_EMULATION 1
// _longjmp between fiber stacks: glibc's fortified longjmp (__longjmp_chk) would refuse it.
#undef _FORTIFY_SOURCE
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <vector_functions.h>
#include <vector_types.h>

#undef __host__
#undef __device__
#undef __global__
#undef __shared__
#undef __forceinline__
#undef __launch_bounds__
#define __host__
#define __device__
#define __global__
#define __shared__ thread_local
#define __forceinline__ inline
#define __launch_bounds__(...)

#include <math.h>  // isfinite etc. unqualified, as device code calls them (host libm)
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "memory_check.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

// The dynamic shared memory (kernels reach it through common.cuh's dynamic_smem()).
namespace tg::gpu {
inline constexpr size_t kMaxDynamicSmem = 228 * 1024;  // Hopper's per-block maximum
alignas(16) inline thread_local unsigned char tg_dynamic_smem[kMaxDynamicSmem];
}  // namespace tg::gpu

namespace emu {
// A block's dynamic shared memory without opting in, and the most it may opt into (the
// emulated device's sharedMemPerBlockOptin: Hopper's 227 KiB, static shared memory included
// on the GPU, which the emulation does not size).
inline constexpr size_t kDefaultDynamicSmem = 48 * 1024, kOptinDynamicSmem = 227 * 1024;
// What each kernel opted into: cudaFuncSetAttribute(kernel,
// cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) records it here (cuda_emulation.cpp). A
// launch with more dynamic shared memory than the default and its kernel's opt-in is an
// error, as the launch fails on the GPU.
inline std::map<const void*, size_t>& dynamic_smem_optin() {
  static std::map<const void*, size_t> m;
  return m;
}
}  // namespace emu

namespace emu {

inline constexpr size_t kStack = 128 * 1024;  // per fiber: a kernel's frames, libm's, the checks'

// x86-64: a fiber switch is tg_emu_switch (tests/cuda/fibers_emulation.cpp: the callee-saved
// registers pushed, the stack pointer saved and the other one's loaded, popped), some ten
// instructions where glibc's _longjmp also unwinds cleanup buffers and demangles pointers
// (perf: a fifth of a training-step test's time; with this switch and the kept stacks that
// test takes 21 s instead of 33). Elsewhere ucontext and _setjmp/_longjmp.
#if defined(__x86_64__)
#define TG_EMU_SWITCH 1
extern "C" void tg_emu_switch(void** save_sp, void* load_sp);
#endif

struct Fiber {
#if TG_EMU_SWITCH
  void* sp = nullptr;  // saved stack pointer while switched out
#else
  ucontext_t uc;
  jmp_buf jb;
#endif
  char* stack = nullptr;            // State::stacks[thread]
  void* asan_fake_stack = nullptr;  // ASan's bookkeeping of the fiber's stack (SAN=1 builds)
  uint3 idx{0, 0, 0};
  bool started = false, done = false;
  unsigned shfl_parity = 0;
  unsigned syncs = 0;  // __syncthreads passed in this block
};

// ASan's fiber annotations (SAN=1 builds; no-ops otherwise): a switch of stacks announced
// before the jump and completed after it, or ASan reports false stack errors.
inline void asan_start_switch(void** fake_stack_save, const void* bottom, size_t size) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(fake_stack_save, bottom, size);
#else
  (void)fake_stack_save, (void)bottom, (void)size;
#endif
}
inline void asan_finish_switch(void* fake_stack, const void** bottom_old, size_t* size_old) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake_stack, bottom_old, size_old);
#else
  (void)fake_stack, (void)bottom_old, (void)size_old;
#endif
}

inline uint3 thread_idx{0, 0, 0}, block_idx{0, 0, 0};
inline dim3 block_dim, grid_dim;

// A barrier between fibers whose party count shrinks when a fiber exits.
struct Barrier {
  int live = 0, arrived = 0;
  uint64_t gen = 0;
  void reset(int n) {
    live = n;
    arrived = 0;
  }
  void wait();
  void drop() {
    live--;
    if (arrived > 0 && arrived >= live) {
      arrived = 0;
      gen++;
    }
  }
};

struct State {
#if TG_EMU_SWITCH
  void* main_sp = nullptr;
#else
  jmp_buf main_jb;
#endif
  void* main_fake_stack = nullptr;  // ASan: the launching thread's stack while fibers run
  const void* main_stack_bottom = nullptr;
  size_t main_stack_size = 0;
  Fiber* cur = nullptr;
  std::vector<Fiber> fibers;
  std::vector<std::unique_ptr<char[]>> stacks;  // kStack bytes per thread, kept between launches
  std::function<void()> body;                   // the kernel call
  int threads = 0;
  Barrier block;
  std::vector<Barrier> warps;
  std::vector<uint64_t> lane_vals[2];  // [warp * 32 + lane]
  std::vector<unsigned> lane_stamps[2];
  std::vector<std::string> errors;
};
inline State& state() {
  static State s;
  return s;
}
inline void error(const std::string& e) {
  if (state().errors.size() < 20) state().errors.push_back(e);
}
// Errors recorded since the last call (then cleared).
inline std::vector<std::string> errors() {
  std::vector<std::string> e;
  e.swap(state().errors);
  return e;
}

// ---- streams (tests/cuda/stream_emulation.cpp) ----

// A range of memory queued work reads or writes (bytes = 1 for a kernel's pointer argument,
// whose extent the launch does not say).
struct Use {
  const void* p;
  size_t bytes;
};
// Queues `work` on `stream` (0 / cudaStreamLegacy: the legacy default stream); it runs when
// something waits for the stream. `what` names it in error messages; `uses` is the memory it
// touches (a cudaFree of it before the work has run is an error).
void enqueue(cudaStream_t stream, std::string what, std::vector<Use> uses,
             std::function<void()> work);
// Whether [p, p + bytes) lies in one allocation of cudaMallocHost / cudaHostAlloc.
bool pinned_host(const void* p, size_t bytes);
// Drops the work still queued on every stream (nothing waited for it) and says what it was:
// the tests' listener calls it after each test case, whose buffers are gone by then.
std::vector<std::string> drop_queued();
// Before memory [p, p + bytes) is released (cudaFree, cudaFreeHost, a test's buffer): an error
// when queued work still uses it, which then runs first (cudaFree synchronises the device).
void before_free(const void* p, size_t bytes, const char* how);

// Back to the scheduler; returns when the scheduler resumes this fiber.
inline void yield() {
  State& s = state();
  Fiber* f = s.cur;
#if TG_EMU_SWITCH
  asan_start_switch(&f->asan_fake_stack, s.main_stack_bottom, s.main_stack_size);
  tg_emu_switch(&f->sp, s.main_sp);
#else
  if (!_setjmp(f->jb)) {
    asan_start_switch(&f->asan_fake_stack, s.main_stack_bottom, s.main_stack_size);
    _longjmp(s.main_jb, 1);
  }
#endif
  asan_finish_switch(f->asan_fake_stack, &s.main_stack_bottom, &s.main_stack_size);
}

inline void Barrier::wait() {
  const uint64_t g = gen;
  if (++arrived >= live) {
    arrived = 0;
    gen++;
    return;
  }
  while (gen == g) yield();
}

inline void fiber_main() {
  State& s = state();
  asan_finish_switch(nullptr, &s.main_stack_bottom, &s.main_stack_size);
  for (;;) {
    Fiber* f = s.cur;
    s.body();
    f->done = true;
    s.block.drop();
    s.warps[f->idx.x / 32].drop();
    yield();  // resumed for the next block
  }
}

inline void syncthreads() {
  State& s = state();
  s.cur->syncs++;
  s.block.wait();
}

// The calling lane reads lane src_lane's value of its warp.
template <typename V>
V shfl(unsigned mask, V v, int src_lane, const char* what) {
  static_assert(sizeof(V) <= 8);
  State& s = state();
  const int t = int(thread_idx.x), w = t / 32, lane = t % 32;
  const int warp_size = std::min(32, s.threads - 32 * w);
  const unsigned full = warp_size == 32 ? 0xffffffffu : ((1u << warp_size) - 1u);
  if (mask != full) error(std::string(what) + ": mask other than the full warp");
  // The k-th shuffle of the block uses buffer k % 2 and stamps the value with k + 1: a source
  // lane whose stamp differs did not take part (it exited before).
  const unsigned k = s.cur->shfl_parity++;
  std::vector<uint64_t>& buf = s.lane_vals[k & 1];
  std::vector<unsigned>& stamp = s.lane_stamps[k & 1];
  uint64_t raw = 0;
  std::memcpy(&raw, &v, sizeof(V));
  buf[size_t(w) * 32 + lane] = raw;
  stamp[size_t(w) * 32 + lane] = k + 1;
  s.warps[w].wait();
  V out = v;
  if (src_lane >= 0 && src_lane < warp_size) {
    if (stamp[size_t(w) * 32 + src_lane] != k + 1)
      error(std::string(what) + ": reads a lane that has exited");
    std::memcpy(&out, &buf[size_t(w) * 32 + src_lane], sizeof(V));
  }
  return out;
}

// Runs fiber f until it yields or finishes the block (its own function: nothing of the
// caller's frame lives across the _setjmp).
[[gnu::noinline]] inline void resume(Fiber& f) {
  State& s = state();
  s.cur = &f;
  thread_idx = f.idx;
#if TG_EMU_SWITCH
  asan_start_switch(&s.main_fake_stack, f.stack, kStack);
  tg_emu_switch(&s.main_sp, f.sp);
#else
  if (!_setjmp(s.main_jb)) {
    asan_start_switch(&s.main_fake_stack, f.stack, kStack);
    if (!f.started) {
      f.started = true;
      setcontext(&f.uc);
    }
    _longjmp(f.jb, 1);
  }
#endif
  asan_finish_switch(s.main_fake_stack, nullptr, nullptr);
}

// Fiber f at the start of fiber_main on its stack. x86-64: the frame tg_emu_switch pops (six
// zeroed registers, then fiber_main as the return address), placed so that fiber_main starts
// with the stack aligned as after a call (rsp % 16 == 8).
inline void start_at_fiber_main(Fiber& f) {
#if TG_EMU_SWITCH
  const uintptr_t top = (reinterpret_cast<uintptr_t>(f.stack) + kStack) & ~uintptr_t(15);
  void** frame = reinterpret_cast<void**>(top - 64);
  for (int i = 0; i < 6; i++) frame[i] = nullptr;  // r15 r14 r13 r12 rbx rbp
  frame[6] = reinterpret_cast<void*>(&fiber_main);
  frame[7] = nullptr;  // fiber_main's own return address: it never returns
  f.sp = frame;
#else
  getcontext(&f.uc);
  f.uc.uc_stack.ss_sp = f.stack;
  f.uc.uc_stack.ss_size = kStack;
  f.uc.uc_link = nullptr;
  makecontext(&f.uc, &fiber_main, 0);
#endif
}

// The fibers of a block of `block` threads, each at the start of fiber_main on its own stack
// (the stacks are kept between launches rather than allocated and touched anew each time).
inline void make_fibers(State& s, unsigned block) {
  while (s.stacks.size() < block) s.stacks.emplace_back(new char[kStack]);
  s.fibers.clear();
  s.fibers.resize(block);
  for (unsigned t = 0; t < block; t++) {
    Fiber& f = s.fibers[t];
    f.idx = uint3{t, 0, 0};
    f.stack = s.stacks[t].get();
#if defined(__SANITIZE_ADDRESS__)
    ASAN_UNPOISON_MEMORY_REGION(f.stack, kStack);  // frames abandoned by the last launch
#endif
    start_at_fiber_main(f);
  }
}

// Runs block (bx, by, bz) of the launch to its end: each fiber in index order up to its next
// barrier, until every one has returned from the kernel.
inline void run_block(State& s, unsigned bx, unsigned by, unsigned bz, size_t smem) {
  const unsigned block = unsigned(s.fibers.size());
  const int nwarps = int((block + 31) / 32);
  block_idx = uint3{bx, by, bz};
  std::memset(tg::gpu::tg_dynamic_smem, 0xff, smem);  // NaN in every float type
  s.block.reset(int(block));
  for (int w = 0; w < nwarps; w++) s.warps[w].reset(std::min(32, int(block) - 32 * w));
  for (int b = 0; b < 2; b++) s.lane_stamps[b].assign(size_t(nwarps) * 32, 0);
  for (Fiber& f : s.fibers) {
    f.done = false;
    f.shfl_parity = 0;
    f.syncs = 0;
  }
  check::block_begin();
  for (unsigned left = block; left > 0;) {
    left = 0;
    for (Fiber& f : s.fibers) {
      if (f.done) continue;
      resume(f);
      left += !f.done;
    }
  }
  // Every thread must have passed the same number of __syncthreads: one that exited
  // earlier left the others at a barrier it never reached (undefined on the GPU).
  const auto [lo, hi] =
      std::minmax_element(s.fibers.begin(), s.fibers.end(),
                          [](const Fiber& a, const Fiber& b) { return a.syncs < b.syncs; });
  if (lo->syncs != hi->syncs)
    error("__syncthreads not reached by every thread of block (" + std::to_string(bx) + "," +
          std::to_string(by) + "): thread " + std::to_string(lo->idx.x) + " passed " +
          std::to_string(lo->syncs) + ", thread " + std::to_string(hi->idx.x) + " passed " +
          std::to_string(hi->syncs));
}

// Runs kernel<<<grid, block, smem>>>(args...) now, with 1-D blocks (every kernel of this
// project uses them) and smem bytes of dynamic shared memory (a queued launch, when it runs).
template <typename... P, typename... A>
void run_kernel(dim3 grid, dim3 block3, size_t smem, void (*kernel)(P...), A... args) {
  State& s = state();
  if (block3.y != 1 || block3.z != 1) error("2-D or 3-D blocks are not emulated");
  if (smem > tg::gpu::kMaxDynamicSmem) {
    error("dynamic shared memory of " + std::to_string(smem) + " bytes: more than emulated");
    return;
  }
  if (smem > kDefaultDynamicSmem) {
    const auto it = dynamic_smem_optin().find(reinterpret_cast<const void*>(kernel));
    if (it == dynamic_smem_optin().end() || it->second < smem) {
      error("dynamic shared memory of " + std::to_string(smem) +
            " bytes: over 48 KiB and over what the kernel opted into (cudaFuncSetAttribute)");
      return;
    }
  }
  const unsigned block = block3.x;
  block_dim = dim3(block);
  grid_dim = grid;
  s.threads = int(block);
  const int nwarps = int((block + 31) / 32);
  s.warps.assign(size_t(nwarps), Barrier{});
  s.lane_vals[0].assign(size_t(nwarps) * 32, 0);
  s.lane_vals[1].assign(size_t(nwarps) * 32, 0);
  s.body = [=] { kernel(args...); };
  make_fibers(s, block);
  check::launch_begin(reinterpret_cast<const void*>(kernel), smem);
  for (unsigned bz = 0; bz < grid.z; bz++)
    for (unsigned by = 0; by < grid.y; by++)
      for (unsigned bx = 0; bx < grid.x; bx++) run_block(s, bx, by, bz, smem);
  check::launch_end();
  s.cur = nullptr;
  s.fibers.clear();  // parked in yield(): nothing on their stacks needs destroying
}
// The memory a launch argument may point into: a pointer, or each aligned word of a parameter
// struct (a word that is no address of an allocation matches nothing).
template <typename A>
void note_uses(std::vector<Use>& uses, const A& a) {
  if constexpr (std::is_pointer_v<A>) {
    uses.push_back({reinterpret_cast<const void*>(a), 1});
  } else if constexpr (std::is_trivially_copyable_v<A> && sizeof(A) >= sizeof(void*)) {
    for (size_t o = 0; o + sizeof(void*) <= sizeof(A); o += alignof(void*)) {
      const void* w;
      std::memcpy(&w, reinterpret_cast<const char*>(&a) + o, sizeof w);
      uses.push_back({w, 1});
    }
  }
}

// kernel<<<grid, block, smem, stream>>>(args...): queued on the stream, the arguments copied
// now (a launch copies them), run when the stream is waited for.
template <typename... P, typename... A>
void launch(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, void (*kernel)(P...),
            A... args) {
  std::vector<Use> uses;
  (note_uses(uses, args), ...);
  enqueue(stream, "a kernel launch", std::move(uses),
          [=] { run_kernel(grid, block, smem, kernel, args...); });
}
// kernel<<<grid, block>>>(args...): on the legacy default stream.
template <typename... P, typename... A>
void launch(dim3 grid, unsigned block, void (*kernel)(P...), A... args) {
  launch(grid, dim3(block), 0, cudaStream_t(nullptr), kernel, args...);
}

}  // namespace emu

#define threadIdx emu::thread_idx
#define blockIdx emu::block_idx
#define blockDim emu::block_dim
#define gridDim emu::grid_dim

inline void __syncthreads() { emu::syncthreads(); }
template <typename V>
inline V __shfl_xor_sync(unsigned mask, V v, int lane_mask, int width = 32) {
  const int lane = int(threadIdx.x % 32);
  return emu::shfl(mask, v, (lane & ~(width - 1)) | ((lane ^ lane_mask) & (width - 1)),
                   "__shfl_xor_sync");
}
template <typename V>
inline V __shfl_down_sync(unsigned mask, V v, unsigned delta, int width = 32) {
  const int lane = int(threadIdx.x % 32), seg = lane & ~(width - 1);
  const int src = lane + int(delta);
  return emu::shfl(mask, v, src < seg + width ? src : lane, "__shfl_down_sync");
}
template <typename V>
inline V __shfl_sync(unsigned mask, V v, int src_lane, int width = 32) {
  const int lane = int(threadIdx.x % 32);
  return emu::shfl(mask, v, (lane & ~(width - 1)) + (src_lane & (width - 1)), "__shfl_sync");
}
// Max over the warp's values (all 32 lanes), as a butterfly of shuffles.
inline unsigned __reduce_max_sync(unsigned mask, unsigned v) {
  unsigned m = v;
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned x = __shfl_xor_sync(mask, m, o);
    m = x > m ? x : m;
  }
  return m;
}
// Whether pred holds on every lane of the warp (all 32 lanes), as a butterfly of shuffles.
inline int __all_sync(unsigned mask, int pred) {
  int all = pred != 0;
  for (int o = 16; o > 0; o >>= 1) all &= __shfl_xor_sync(mask, all, o);
  return all;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
template <typename V>
[[gnu::no_sanitize_thread, gnu::noinline]] V atomicAdd(V* p, V v) {
  emu::check::atomic_access(p, sizeof(V), __builtin_return_address(0));
  const V old = *p;
  *p = old + v;
  return old;
}
template <typename V>
[[gnu::no_sanitize_thread, gnu::noinline]] V atomicMax(V* p, V v) {
  emu::check::atomic_access(p, sizeof(V), __builtin_return_address(0));
  const V old = *p;
  if (v > old) *p = v;
  return old;
}
template <typename V>
[[gnu::no_sanitize_thread, gnu::noinline]] V atomicMin(V* p, V v) {
  emu::check::atomic_access(p, sizeof(V), __builtin_return_address(0));
  const V old = *p;
  if (v < old) *p = v;
  return old;
}
// CUDA's integer min/max overloads (device code calls them unqualified).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
