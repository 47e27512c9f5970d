// memory_check.cpp: racecheck, memcheck and initcheck of emulated kernels (memory_check.h),
// fed by GCC's -fsanitize=thread instrumentation: the Makefile compiles the kernels_checked
// binary's CUDA code with it and links this file instead of libtsan, so every load and store
// of that code calls one of the __tsan_* functions below with its address (and, as the return
// address, the place of the access). Only two address ranges matter; everything else returns
// at once:
//   device memory  the arena of device_memory_emulation.cpp: the access must lie inside a live
//                  allocation (memcheck: red zone, freed, never allocated) and a read must find
//                  its bytes written since the allocation, by a kernel, a copy or a memset
//                  (initcheck); a write marks them written. Checked in kernels and host code
//                  alike (the cuBLAS(Lt) stand-ins read and write device memory too).
//   shared memory  during a launch, the executable's TLS segment: the emulation's __shared__
//                  arrays are thread_local statics and the dynamic shared memory a
//                  thread_local buffer, so one range holds them all (with the few
//                  thread_local scratch vectors of the CPU backend, which no kernel touches;
//                  the name in a report says which object it is). Each byte's shadow cell
//                  keeps the barrier interval (epoch) and thread of its last write and of up to
//                  two reads in the current interval. Racecheck: two threads of the block
//                  accessing a byte in the same interval (between the same two __syncthreads),
//                  at least one of them writing, is a hazard; atomics (atomic_access)
//                  conflict only with plain accesses. Warp shuffles do not order shared memory:
//                  CUDA promises memory ordering among a warp's lanes for __syncwarp only
//                  (shuffles and votes "do not imply a memory barrier"), and the compiler may
//                  keep shared values in registers across a shuffle, which is not a memory
//                  operation. So lanes of one warp race as threads of different warps do.
//                  Initcheck: a read of a byte the block has not written (its write epoch
//                  predates the block). Memcheck: an access past the launch's dynamic bytes.
// An epoch is (block serial << 24) + the block barrier's generation since the block began, so
// stale cells never need clearing. Kernel reports wait in a list (one per kind and place, with
// a count) until the launch ends, then go to emu::errors() with the kernel's name, the block,
// the threads and the source lines; host-code reports go there at once. A running kernel's
// device accesses also go to the cost model's counter while it counts (traffic.h).
#include "memory_check.h"

#include <link.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "traffic.h"

namespace emu::check {

bool active = false;

namespace {

struct Cell {
  uint64_t w_epoch, r_epoch;
  const void* w_pc;
  const void* r_pc[2];
  uint16_t w_tid, r_tid[2];
  uint8_t w_atomic, readers;  // readers: distinct readers recorded in r_epoch (0..2)
};

enum Kind { kRace, kSharedInit, kSharedBounds, kDeviceBounds, kDeviceInit };

struct Found {
  Kind kind;
  bool write, other_write;
  size_t bytes;
  uintptr_t addr;  // the first offending byte
  const void* pc;
  const void* other_pc;
  unsigned tid, other_tid;
  uint3 block;
  size_t count;
};

struct Launch {
  const void* kernel = nullptr;
  size_t smem = 0;
  uintptr_t tls_lo = 0, tls_size = 0, dyn_lo = 0;  // tls_size 0: no launch running
  uint64_t block_serial = 0, gen0 = 0;
  std::vector<Found> found;
  std::vector<std::pair<int, const void*>> host_seen;  // host reports since the last launch
};

Launch g;
std::vector<const void*> g_kernels;  // launched_kernels()
uintptr_t g_arena_lo = 0, g_arena_hi = 0;
Cell* g_cells = nullptr;
size_t g_ncells = 0;

int tls_of_executable(dl_phdr_info* info, size_t, void* out) {
  auto* range = static_cast<uintptr_t*>(out);
  for (int i = 0; i < info->dlpi_phnum; i++)
    if (info->dlpi_phdr[i].p_type == PT_TLS) {
      range[0] = reinterpret_cast<uintptr_t>(info->dlpi_tls_data);
      range[1] = info->dlpi_phdr[i].p_memsz;
    }
  return 1;  // the first object is the executable
}

uint64_t epoch() { return (g.block_serial << 24) + (emu::state().block.gen - g.gen0); }

std::string hex(uintptr_t a) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%zx", size_t(a));
  return b;
}

// The report of one finding by `who` ("thread 3 of block (0,0,0)", "host code"), without
// the kernel (launch_end adds it).
std::string describe(const Found& f, const std::string& who) {
  const std::string verb = f.write ? "write" : "read";
  const std::string by = " by " + who + " at " + symbolize(f.pc, true);
  const std::string n = std::to_string(f.bytes) + " bytes";
  const void* addr = reinterpret_cast<const void*>(f.addr);
  switch (f.kind) {
    case kRace:
      return std::string("racecheck: ") + (f.other_write ? "write" : "read") + "-" + verb +
             " hazard on shared " + tls_object(f.addr - g.tls_lo) + " (" + n + "): a " +
             (f.other_write ? "write" : "read") + " by thread " + std::to_string(f.other_tid) +
             " at " + symbolize(f.other_pc, true) + ", then a " + verb + by +
             ", with no __syncthreads between them";
    case kSharedInit:
      return "initcheck: read of shared memory the block has not written, " +
             tls_object(f.addr - g.tls_lo) + " (" + n + ")," + by;
    case kSharedBounds:
      return "memcheck: " + verb + " of " + n + " at offset " + std::to_string(f.addr - g.dyn_lo) +
             " of the dynamic shared memory, past the " + std::to_string(g.smem) +
             " bytes of the launch," + by;
    case kDeviceBounds:
      return "memcheck: invalid " + verb + " of " + n + " at " + hex(f.addr) + ", " +
             describe_device_address(addr) + "," + by;
    case kDeviceInit:
      return "initcheck: read of uninitialised device memory, " + n + " at " + hex(f.addr) + ", " +
             describe_device_address(addr) + "," + by;
  }
  return "";
}

std::string thread_str(const Found& f) {
  return "thread " + std::to_string(f.tid) + " of block (" + std::to_string(f.block.x) + "," +
         std::to_string(f.block.y) + "," + std::to_string(f.block.z) + ")";
}

// Records a finding of the running launch (one per kind and place, counted), or reports one
// of host code at once (once per kind and place between two launches).
void report(Found f) {
  if (g.tls_size) {
    for (Found& x : g.found)
      if (x.kind == f.kind && x.pc == f.pc && x.other_pc == f.other_pc) {
        x.count++;
        return;
      }
    f.count = 1;
    if (g.found.size() < 64) g.found.push_back(f);
    return;
  }
  for (const auto& [k, pc] : g.host_seen)
    if (k == int(f.kind) && pc == f.pc) return;
  g.host_seen.push_back({int(f.kind), f.pc});
  emu::error(describe(f, "host code"));
}

Found finding(Kind k, bool write, size_t n, uintptr_t a, const void* pc) {
  Found f{};
  f.kind = k, f.write = write, f.bytes = n, f.addr = a, f.pc = pc;
  if (g.tls_size && emu::state().cur) {
    f.tid = emu::state().cur->idx.x;
    f.block = emu::block_idx;
  }
  return f;
}

void device_access(uintptr_t a, size_t n, bool write, const void* pc) {
  // A running kernel's access, for the cost model (traffic.h) while it counts.
  if (traffic::counting && g.tls_size && emu::state().cur)
    traffic::note_access(a, n, write, emu::state().cur->idx.x, pc);
  if (a + n > arena_used_end()) return report(finding(kDeviceBounds, write, n, a, pc));
  uint8_t* s = shadow_of(reinterpret_cast<const void*>(a));
  bool all_init = true;
  for (size_t i = 0; i < n; i++) all_init &= s[i] == kInit;
  if (all_init) return;
  size_t bad = n, uninit = n;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == kUnaddressable && bad == n) bad = i;
    if (s[i] == kUninit && uninit == n) uninit = i;
    if (write && s[i] == kUninit) s[i] = kInit;
  }
  if (bad < n) report(finding(kDeviceBounds, write, n, a + bad, pc));
  if (!write && uninit < n) report(finding(kDeviceInit, false, n, a + uninit, pc));
}

// Racecheck of one byte's cell; true when a hazard was reported.
bool race(Cell& c, uintptr_t a, size_t n, bool write, bool atomic, uint16_t tid, uint64_t ep,
          const void* pc) {
  Found f = finding(kRace, write, n, a, pc);
  if (c.w_epoch == ep && c.w_tid != tid && !(atomic && c.w_atomic)) {
    f.other_tid = c.w_tid, f.other_pc = c.w_pc, f.other_write = true;
    report(f);
    return true;
  }
  if (!write || c.r_epoch != ep) return false;
  const int k = c.r_tid[0] != tid ? 0 : c.readers == 2 ? 1 : -1;
  if (k < 0) return false;
  f.other_tid = c.r_tid[k], f.other_pc = c.r_pc[k], f.other_write = false;
  report(f);
  return true;
}

void shared_access(uintptr_t a, size_t n, bool write, bool atomic, const void* pc) {
  const uintptr_t dyn_end = g.dyn_lo + tg::gpu::kMaxDynamicSmem;
  if (a < dyn_end && a + n > g.dyn_lo + g.smem)
    return report(finding(kSharedBounds, write, n, a, pc));
  const uint16_t tid = uint16_t(emu::state().cur->idx.x);
  const uint64_t ep = epoch(), block_start = g.block_serial << 24;
  bool raced = false, uninit = false;
  for (size_t i = 0; i < n; i++) {
    Cell& c = g_cells[a - g.tls_lo + i];
    if (!write && c.w_epoch < block_start && !uninit) {
      uninit = true;
      report(finding(kSharedInit, false, n, a + i, pc));
    }
    if (!write && atomic) continue;  // an atomic's read half: its write half is checked
    if (!raced) raced = race(c, a, n, write, atomic, tid, ep, pc);
    if (write) {
      c.w_epoch = ep, c.w_tid = tid, c.w_pc = pc, c.w_atomic = atomic;
    } else if (c.r_epoch != ep) {
      c.r_epoch = ep, c.readers = 1, c.r_tid[0] = tid, c.r_pc[0] = pc;
    } else if (c.readers == 1 && c.r_tid[0] != tid) {
      c.readers = 2, c.r_tid[1] = tid, c.r_pc[1] = pc;
    }
  }
}

inline void access(const void* p, size_t n, bool write, const void* pc) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (a >= g_arena_lo && a < g_arena_hi) return device_access(a, n, write, pc);
  if (a - g.tls_lo < g.tls_size && emu::state().cur) shared_access(a, n, write, false, pc);
}

}  // namespace

void atomic_access(const void* p, size_t n, const void* pc) {
  if (!active) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (a >= g_arena_lo && a < g_arena_hi) {
    device_access(a, n, false, pc);
    device_access(a, n, true, pc);
  } else if (a - g.tls_lo < g.tls_size && emu::state().cur) {
    shared_access(a, n, false, true, pc);
    shared_access(a, n, true, true, pc);
  }
}

void launch_begin(const void* kernel, size_t smem) {
  if (!active) return;
  uintptr_t range[2] = {0, 0};
  dl_iterate_phdr(tls_of_executable, range);
  if (g_ncells < range[1]) {
    void* m = mmap(nullptr, range[1] * sizeof(Cell), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return;
    g_cells = static_cast<Cell*>(m), g_ncells = range[1];
  }
  g.kernel = kernel, g.smem = smem;
  if (std::find(g_kernels.begin(), g_kernels.end(), kernel) == g_kernels.end())
    g_kernels.push_back(kernel);
  g.tls_lo = range[0], g.tls_size = range[1];
  g.dyn_lo = reinterpret_cast<uintptr_t>(tg::gpu::tg_dynamic_smem);
  g.found.clear();
  g.host_seen.clear();
  traffic::launch_begin(kernel, unsigned(emu::state().threads));
}

const std::vector<const void*>& launched_kernels() { return g_kernels; }

void block_begin() {
  if (!g.tls_size) return;
  g.block_serial++;
  g.gen0 = emu::state().block.gen;
  traffic::block_begin();
}

void launch_end() {
  if (!g.tls_size) return;
  traffic::launch_end();
  std::vector<Found> found;
  found.swap(g.found);
  for (const Found& f : found) {
    std::string r = describe(f, thread_str(f));
    const size_t colon = r.find(": ");
    r.insert(colon + 2, symbolize(g.kernel, false) + ": ");
    if (f.count > 1) r += " [" + std::to_string(f.count) + " such accesses in this launch]";
    emu::error(r);
  }
  g.tls_size = 0;
}

}  // namespace emu::check

// The instrumentation's entry points (GCC's -fsanitize=thread ABI, as libtsan defines them).
using emu::check::access;
#define TG_PC __builtin_return_address(0)
#define TG_ACCESS(N)                                                     \
  void __tsan_read##N(void* p) { access(p, N, false, TG_PC); }           \
  void __tsan_write##N(void* p) { access(p, N, true, TG_PC); }           \
  void __tsan_unaligned_read##N(void* p) { access(p, N, false, TG_PC); } \
  void __tsan_unaligned_write##N(void* p) { access(p, N, true, TG_PC); } \
  void __tsan_volatile_read##N(void* p) { access(p, N, false, TG_PC); }  \
  void __tsan_volatile_write##N(void* p) { access(p, N, true, TG_PC); }

// Atomics of the instrumented host code (static guards, reference counts): done as asked, in
// sequential consistency (at least the order any caller asks for); they never touch device or
// shared memory (the emulated device atomics report themselves: atomic_access).
#define TG_ATOMIC(N, T)                                                                           \
  T __tsan_atomic##N##_load(const volatile T* a, int) { return __atomic_load_n(a, 5); }           \
  void __tsan_atomic##N##_store(volatile T* a, T v, int) { __atomic_store_n(a, v, 5); }           \
  T __tsan_atomic##N##_exchange(volatile T* a, T v, int) { return __atomic_exchange_n(a, v, 5); } \
  T __tsan_atomic##N##_fetch_add(volatile T* a, T v, int) { return __atomic_fetch_add(a, v, 5); } \
  T __tsan_atomic##N##_fetch_sub(volatile T* a, T v, int) { return __atomic_fetch_sub(a, v, 5); } \
  T __tsan_atomic##N##_fetch_and(volatile T* a, T v, int) { return __atomic_fetch_and(a, v, 5); } \
  T __tsan_atomic##N##_fetch_or(volatile T* a, T v, int) { return __atomic_fetch_or(a, v, 5); }   \
  T __tsan_atomic##N##_fetch_xor(volatile T* a, T v, int) { return __atomic_fetch_xor(a, v, 5); } \
  T __tsan_atomic##N##_fetch_nand(volatile T* a, T v, int) {                                      \
    return __atomic_fetch_nand(a, v, 5);                                                          \
  }                                                                                               \
  int __tsan_atomic##N##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {            \
    return __atomic_compare_exchange_n(a, c, v, false, 5, 5);                                     \
  }                                                                                               \
  int __tsan_atomic##N##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {              \
    return __atomic_compare_exchange_n(a, c, v, true, 5, 5);                                      \
  }                                                                                               \
  T __tsan_atomic##N##_compare_exchange_val(volatile T* a, T c, T v, int, int) {                  \
    __atomic_compare_exchange_n(a, &c, v, false, 5, 5);                                           \
    return c;                                                                                     \
  }

extern "C" {

TG_ATOMIC(8, char)
TG_ATOMIC(16, short)
TG_ATOMIC(32, int)
TG_ATOMIC(64, long)
void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(5); }
void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(5); }

void __tsan_init() {
  emu::check::active = true;
  emu::check::g_arena_lo = emu::check::arena_begin();
  emu::check::g_arena_hi = emu::check::arena_end();
}
TG_ACCESS(1)
TG_ACCESS(2)
TG_ACCESS(4)
TG_ACCESS(8)
TG_ACCESS(16)
void __tsan_read_range(void* p, unsigned long n) { access(p, n, false, TG_PC); }
void __tsan_write_range(void* p, unsigned long n) { access(p, n, true, TG_PC); }
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}

}  // extern "C"
