// device_memory_emulation.cpp: the emulated device memory (tests/cuda/memory_check.h):
// cudaMalloc, cudaFree and cudaPointerGetAttributes over an arena of reserved address space,
// each block with red zones on both sides and a shadow byte per device byte, and the
// host-side notes (note_write / note_read / note_copy) by which copies and memsets keep the
// shadow and are bounds-checked.
//
// Layout: the arena is kArenaBytes of address space reserved without access (PROT_NONE), and
// a shadow of the same size beside it; an allocation of n bytes takes the next
// kRedZone + round_up(n, page) + kRedZone bytes of both, made readable and writable, and
// returns the address after the left red zone (page-aligned, so cudaMalloc's 256-byte
// alignment holds). Its shadow says kUninit for the n bytes, kUnaddressable for the rest (the
// red zones, including the tail of the last page). Addresses are never handed out twice: a
// freed block's pages are given back to the kernel (madvise) and its shadow drops to
// kUnaddressable, so a late access is caught and described as one to freed memory (the
// blocks' records stay for the reports). Under ASan (SAN=1 builds) the red zones and freed
// blocks are also poisoned, so that ASan traps any access to them from any code.
#include <sanitizer/asan_interface.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "memory_check.h"

namespace emu::check {

namespace {

constexpr size_t kArenaBytes = size_t(2) << 40;  // 2 TiB of addresses: never reused
constexpr size_t kRedZone = 4096;

struct Block {
  uintptr_t user = 0;     // the address handed out
  size_t n = 0, len = 0;  // user bytes; the whole block, red zones included
  uint64_t serial = 0;
  const void* alloc_pc = nullptr;
  const void* free_pc = nullptr;
  bool freed = false;
};

struct Arena {
  uintptr_t base = 0, shadow = 0, used = 0;  // used: bytes of the arena handed out
  uint64_t serial = 0;
  std::map<uintptr_t, Block> blocks;  // by block start (left red zone), freed ones included
  std::mutex mu;
};

size_t page_size() {
  static const size_t p = size_t(sysconf(_SC_PAGESIZE));
  return p;
}

Arena& arena() {
  static Arena* a = [] {
    auto* x = new Arena;
    void* d = mmap(nullptr, 2 * kArenaBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (d == MAP_FAILED) {
      std::perror("device memory emulation: reserving the arena");
      std::abort();
    }
    x->base = reinterpret_cast<uintptr_t>(d);
    x->shadow = x->base + kArenaBytes;
    return x;
  }();
  return *a;
}

// The block holding arena address a (caller holds the lock), or null.
const Block* block_at(Arena& ar, uintptr_t a) {
  auto it = ar.blocks.upper_bound(a);
  if (it == ar.blocks.begin()) return nullptr;
  --it;
  return a < it->first + it->second.len ? &it->second : nullptr;
}

std::string hex(uintptr_t a) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%zx", size_t(a));
  return b;
}

std::string describe_block(const Block& b) {
  std::string s = "allocation #" + std::to_string(b.serial) + " (" + std::to_string(b.n) +
                  " bytes at " + hex(b.user) + ", allocated at " + symbolize(b.alloc_pc, true);
  if (b.freed) s += "; freed at " + symbolize(b.free_pc, true);
  return s + ")";
}

// Checks the shadow of [a, a + n) for a host-side access: the first byte outside a live
// allocation is reported. Returns the number of bytes from a that lie in mapped shadow.
size_t check_range(uintptr_t a, size_t n, const char* what, const char* verb) {
  Arena& ar = arena();
  const uintptr_t end = ar.base + ar.used;
  const size_t mapped = a >= end ? 0 : a + n <= end ? n : end - a;
  size_t bad = mapped < n ? mapped : n;
  for (size_t i = 0; i < mapped; i++)
    if (*shadow_of(reinterpret_cast<const void*>(a + i)) == kUnaddressable) {
      bad = i;
      break;
    }
  if (bad < n)
    emu::error(std::string("memcheck: ") + what + " " + verb + " " + std::to_string(n) +
               " bytes at " + hex(a) + ": byte " + std::to_string(bad) + " is " +
               describe_device_address(reinterpret_cast<const void*>(a + bad)));
  return mapped;
}

#if defined(__SANITIZE_ADDRESS__)
// ASan's report of a poisoned device address (a red zone, freed memory) ends with what the
// address is, as the checks would say it.
void asan_report(const char*) {
  const void* a = __asan_get_report_address();
  if (a && in_arena(a))
    std::fprintf(stderr, "device memory: %s\n", describe_device_address(a).c_str());
}
const bool g_asan_hook = (__asan_set_error_report_callback(asan_report), true);
#endif

}  // namespace

uintptr_t arena_begin() { return arena().base; }
uintptr_t arena_end() { return arena().base + kArenaBytes; }
uintptr_t arena_used_end() { return arena().base + arena().used; }
bool in_arena(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  return a - arena().base < kArenaBytes;
}
uint8_t* shadow_of(const void* p) {
  const Arena& ar = arena();
  return reinterpret_cast<uint8_t*>(ar.shadow + (reinterpret_cast<uintptr_t>(p) - ar.base));
}

void* device_alloc(size_t n, const void* caller) {
  Arena& ar = arena();
  const size_t page = page_size();
  const size_t len = kRedZone + (n + page - 1) / page * page + kRedZone;
  std::lock_guard<std::mutex> lock(ar.mu);
  if (ar.used + len > kArenaBytes) return nullptr;
  const uintptr_t start = ar.base + ar.used;
  if (mprotect(reinterpret_cast<void*>(start), len, PROT_READ | PROT_WRITE) != 0 ||
      mprotect(reinterpret_cast<void*>(start - ar.base + ar.shadow), len, PROT_READ | PROT_WRITE) !=
          0)
    return nullptr;
  ar.used += len;
  Block b;
  b.user = start + kRedZone, b.n = n, b.len = len, b.serial = ++ar.serial, b.alloc_pc = caller;
  ar.blocks[start] = b;
  void* p = reinterpret_cast<void*>(b.user);
  std::memset(p, 0xff, n);  // the signalling pattern: NaN in every float type
  std::memset(shadow_of(p), kUninit, n);
  ASAN_POISON_MEMORY_REGION(reinterpret_cast<void*>(start), kRedZone);
  ASAN_POISON_MEMORY_REGION(reinterpret_cast<char*>(p) + n, len - kRedZone - n);
  return p;
}

bool device_free(void* p, const void* caller) {
  Arena& ar = arena();
  std::lock_guard<std::mutex> lock(ar.mu);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = ar.blocks.find(a - kRedZone);
  if (a - ar.base >= kArenaBytes || it == ar.blocks.end() || it->second.freed) return false;
  Block& b = it->second;
  b.freed = true;
  b.free_pc = caller;
  // Whole pages: the block starts and ends on page boundaries. Zero shadow = unaddressable.
  madvise(reinterpret_cast<void*>(it->first), b.len, MADV_DONTNEED);
  madvise(const_cast<uint8_t*>(shadow_of(reinterpret_cast<void*>(it->first))), b.len,
          MADV_DONTNEED);
  ASAN_POISON_MEMORY_REGION(reinterpret_cast<void*>(it->first), b.len);
  return true;
}

size_t device_bytes(const void* p) {
  Arena& ar = arena();
  std::lock_guard<std::mutex> lock(ar.mu);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (a - ar.base >= kArenaBytes) return 0;
  auto it = ar.blocks.find(a - kRedZone);
  return it == ar.blocks.end() || it->second.freed || it->second.user != a ? 0 : it->second.n;
}

bool is_device(const void* p) {
  Arena& ar = arena();
  std::lock_guard<std::mutex> lock(ar.mu);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const Block* b = a - ar.base < kArenaBytes ? block_at(ar, a) : nullptr;
  return b && !b->freed && a >= b->user && a < b->user + b->n;
}

std::string describe_device_address(const void* p) {
  Arena& ar = arena();
  std::lock_guard<std::mutex> lock(ar.mu);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const Block* b = block_at(ar, a);
  if (!b) return "outside every allocation (" + hex(a) + ")";
  const std::string what = describe_block(*b);
  if (a < b->user) return std::to_string(b->user - a) + " bytes before the start of " + what;
  if (a >= b->user + b->n)
    return std::to_string(a - b->user - b->n) + " bytes past the end of " + what;
  return "offset " + std::to_string(a - b->user) + " of " + (b->freed ? "freed " : "") + what;
}

void note_write(const void* dst, size_t n, const char* what) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(dst);
  if (!in_arena(dst) || n == 0) return;
  const size_t mapped = check_range(a, n, what, "writes");
  uint8_t* s = shadow_of(dst);
  for (size_t i = 0; i < mapped; i++)
    if (s[i] != kUnaddressable) s[i] = kInit;
}

void note_read(const void* src, size_t n, const char* what) {
  if (in_arena(src) && n) check_range(reinterpret_cast<uintptr_t>(src), n, what, "reads");
}

// The shadow travels with the bytes (memmove order: the ranges may overlap).
void note_copy(void* dst, const void* src, size_t n, const char* what) {
  if (!in_arena(src)) return note_write(dst, n, what);
  const size_t from = check_range(reinterpret_cast<uintptr_t>(src), n, what, "reads");
  if (!in_arena(dst)) return;
  const size_t to = check_range(reinterpret_cast<uintptr_t>(dst), n, what, "writes");
  const size_t m = from < to ? from : to;
  uint8_t* d = shadow_of(dst);
  const uint8_t* s = shadow_of(src);
  std::vector<uint8_t> states(s, s + m);
  for (size_t i = 0; i < m; i++)
    if (d[i] != kUnaddressable) d[i] = states[i] == kUnaddressable ? uint8_t(kInit) : states[i];
}

}  // namespace emu::check

extern "C" {

cudaError_t cudaMalloc(void** p, size_t n) {
  *p = emu::check::device_alloc(n, __builtin_return_address(0));
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  const size_t n = emu::check::device_bytes(p);
  if (n == 0) return cudaErrorInvalidValue;
  emu::before_free(p, n, "cudaFree");  // no queued work may still use it (stream_emulation.cpp)
  return emu::check::device_free(p, __builtin_return_address(0)) ? cudaSuccess
                                                                 : cudaErrorInvalidValue;
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  std::memset(a, 0, sizeof *a);
  a->type = emu::check::is_device(p) ? cudaMemoryTypeDevice
            : emu::pinned_host(p, 1) ? cudaMemoryTypeHost
                                     : cudaMemoryTypeUnregistered;
  return cudaSuccess;
}

}  // extern "C"
