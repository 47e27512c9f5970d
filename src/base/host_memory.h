// host_memory.h: how much memory this machine has, and what a failed host allocation was for.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "common.h"

namespace tg {

// This machine's memory in bytes: MemAvailable and MemTotal of /proc/meminfo (sysconf's
// physical and available pages where it cannot be read). 0 where unknown.
struct HostMemory {
  uint64_t available = 0, total = 0;
};
HostMemory host_memory();
// /proc/meminfo's text parsed (its "kB" values); fields absent stay 0.
HostMemory parse_meminfo(const std::string& text);

// "1.2 GiB", "512.0 MiB", "4.0 KiB", "12 B".
std::string fmt_bytes(double bytes);

// What the host allocations made while one is alive are for (innermost wins), named by an
// OutOfMemory error: AllocPurpose p("activations"); be.alloc(...).
class AllocPurpose {
 public:
  explicit AllocPurpose(const char* what);
  ~AllocPurpose();
  AllocPurpose(const AllocPurpose&) = delete;
  AllocPurpose& operator=(const AllocPurpose&) = delete;
  static const char* current();  // "" outside every AllocPurpose

 private:
  const char* outer_;
};

// A host allocation that failed: its size and what it was for (AllocPurpose, "" if unknown).
struct OutOfMemory : Error {
  OutOfMemory(size_t bytes, const std::string& what);
  size_t bytes;
  std::string purpose;
};

}  // namespace tg
