#include "host_memory.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "test_hooks.h"

namespace tg {

HostMemory parse_meminfo(const std::string& text) {
  HostMemory m;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    unsigned long long kb = 0;
    if (sscanf(line.c_str(), "MemAvailable: %llu kB", &kb) == 1) m.available = kb * 1024;
    if (sscanf(line.c_str(), "MemTotal: %llu kB", &kb) == 1) m.total = kb * 1024;
  }
  return m;
}

HostMemory host_memory() {
  unsigned long long available = 0, total = 0;
  if (test_hooks::host_memory(&available, &total)) return {available, total};
  std::ifstream f("/proc/meminfo");
  std::stringstream text;
  text << f.rdbuf();
  HostMemory m = parse_meminfo(text.str());
  const long page = sysconf(_SC_PAGESIZE);
  if (m.total == 0 && page > 0 && sysconf(_SC_PHYS_PAGES) > 0)
    m.total = uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(page);
  if (m.available == 0 && page > 0 && sysconf(_SC_AVPHYS_PAGES) > 0)
    m.available = uint64_t(sysconf(_SC_AVPHYS_PAGES)) * uint64_t(page);
  return m;
}

std::string fmt_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (bytes >= 1024 && u < 5) bytes /= 1024, u++;
  return u == 0 ? strf("%.0f B", bytes) : strf("%.1f %s", bytes, units[u]);
}

namespace {
thread_local const char* g_purpose = "";
}  // namespace

AllocPurpose::AllocPurpose(const char* what) : outer_(g_purpose) { g_purpose = what; }
AllocPurpose::~AllocPurpose() { g_purpose = outer_; }
const char* AllocPurpose::current() { return g_purpose; }

OutOfMemory::OutOfMemory(size_t n, const std::string& what)
    : Error(strf("out of host memory allocating %s (%zu bytes)%s", fmt_bytes(double(n)).c_str(), n,
                 what.empty() ? "" : (" for " + what).c_str())),
      bytes(n),
      purpose(what) {}

}  // namespace tg
