// memory_check.h: the emulated device memory and the checks on it, shared by the emulation
// (tests/cuda/cuda_emulation.h), the runtime stand-ins and the tests.
//
// Device memory (device_memory_emulation.cpp) is one arena of address space apart from the
// host heap: every cudaMalloc block has poisoned red zones on both sides, freed blocks are
// never handed out again, and one shadow byte per device byte says what the byte is (red zone
// or unallocated, allocated but never written, written). Copies and memsets that the runtime
// stand-ins make with libc say so through note_write / note_read / note_copy, which check their
// ranges (memcheck) and keep the shadow (initcheck). Under ASan the red zones and freed blocks
// are poisoned too, so that any access to them traps.
//
// The kernel checks (memory_check.cpp) see every load and store of the code compiled with
// GCC's -fsanitize=thread instrumentation (the Makefile's kernels_checked binary), through the
// __tsan_* callbacks it defines itself (libtsan is not linked): memcheck and initcheck on
// device memory, and on shared memory racecheck (conflicting accesses of two threads of a
// block between the same two __syncthreads), initcheck (a read of shared memory the block has
// not written) and the dynamic shared memory's bounds. Reports go to emu::errors().
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace emu::check {

// ---- device memory (device_memory_emulation.cpp) ----

// n bytes of device memory, 256-byte aligned, filled with 0xFF bytes (NaN in every float
// type), shadow "never written"; null when the arena is exhausted. `caller` names the
// allocation site in reports.
void* device_alloc(size_t n, const void* caller);
// false when p is not a live allocation's start.
bool device_free(void* p, const void* caller);
// Whether p lies inside a live allocation.
bool is_device(const void* p);
// Whether p lies in the device arena (live, freed, red zone or never allocated).
bool in_arena(const void* p);
// The shadow byte of arena address p (in_arena(p) must hold and p lie below the arena's
// used end: arena_used_end()).
enum Shadow : uint8_t { kUnaddressable = 0, kUninit = 2, kInit = 3 };
uint8_t* shadow_of(const void* p);
// The size of the live allocation that starts at p (0 when p starts none).
size_t device_bytes(const void* p);
uintptr_t arena_begin();
uintptr_t arena_end();
uintptr_t arena_used_end();
// What arena address p is, for reports: "8 bytes past the end of allocation #3 (1024 bytes at
// 0x..., allocated at ...)", "offset 12 of freed allocation #3 (...)", ...
std::string describe_device_address(const void* p);

// Host-side accesses to device memory made by the runtime stand-ins with libc (what = the
// call, e.g. "cudaMemcpyAsync"): a range that leaves its allocation is reported (memcheck);
// written bytes become initialised; a device-to-device copy carries the source's shadow.
// Addresses outside the arena (host memory) are ignored.
void note_write(const void* dst, size_t n, const char* what);
void note_read(const void* src, size_t n, const char* what);
void note_copy(void* dst, const void* src, size_t n, const char* what);

// ---- kernel checks (memory_check.cpp) ----

// True once instrumented code is linked and initialised (its __tsan_init ran): then every
// launch is checked.
extern bool active;
// Launch hooks of emu::launch: a launch of `kernel` with smem bytes of dynamic shared memory,
// each block's start, the launch's end (the reports found are formatted into emu::errors()).
void launch_begin(const void* kernel, size_t smem);
void block_begin();
void launch_end();
// An atomic read-modify-write of n bytes at p by the code at pc (the emulated atomics are not
// instrumented: they say so here, and conflict only with plain accesses).
void atomic_access(const void* p, size_t n, const void* pc);
// Every kernel launched under the checks so far (their addresses, in launch order).
const std::vector<const void*>& launched_kernels();
// Names a code address (a kernel, an access): "tg::gpu::foo_kernel<float>(...)"; with
// `line`, "kernels/foo.cuh:12 (tg::gpu::foo_kernel<float>)" where the debug information says.
std::string symbolize(const void* pc, bool line);
// The thread-local object at `offset` of the executable's TLS segment (the emulation's
// __shared__ arrays are thread_local statics) and the offset in it: "ns::kernel::tile + 12".
std::string tls_object(size_t offset);

}  // namespace emu::check
