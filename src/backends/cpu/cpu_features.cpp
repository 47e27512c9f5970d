// cpu_features: CPUID leaf 7 (sub-leaves 0 and 1) for the instruction sets, XGETBV for the
// OS's support of the ZMM and tile state, leaves 0x80000002-4 for the brand string.
#include "cpu_features.h"

#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define TG_X86 1
#endif

namespace tg::cpu {

namespace {

#ifdef TG_X86
// XCR0: which register states the OS saves on a context switch.
unsigned long long xcr0() {
  unsigned eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<unsigned long long>(edx) << 32) | eax;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1;
  if (!osxsave || __get_cpuid_max(0, nullptr) < 7) return f;
  const unsigned long long x = xcr0();
  const bool zmm_state = (x & 0xe6) == 0xe6;     // SSE, AVX, opmask, ZMM0-15 and 16-31
  const bool tile_state = ((x >> 17) & 3) == 3;  // XTILECFG, XTILEDATA
  __cpuid_count(7, 0, a, b, c, d);
  f.avx512f = zmm_state && ((b >> 16) & 1);
  f.avx512bw = f.avx512f && ((b >> 30) & 1);
  f.avx512dq = f.avx512f && ((b >> 17) & 1);
  f.avx512vl = f.avx512f && ((b >> 31) & 1);
  f.avx512_fp16 = f.avx512f && ((d >> 23) & 1);
  f.amx_tile = tile_state && ((d >> 24) & 1);
  f.amx_bf16 = f.amx_tile && ((d >> 22) & 1);
  const unsigned max_sub = a;
  if (max_sub >= 1) {
    __cpuid_count(7, 1, a, b, c, d);
    f.avx512_bf16 = f.avx512f && ((a >> 5) & 1);
    f.amx_fp16 = f.amx_tile && ((a >> 21) & 1);
  }
  return f;
}
#else
CpuFeatures detect() { return CpuFeatures{}; }
#endif

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

std::string cpu_isa_summary(const CpuFeatures& f) {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512_bf16, "avx512_bf16");
  add(f.avx512_fp16, "avx512_fp16");
  add(f.amx_bf16, "amx_bf16");
  add(f.amx_fp16, "amx_fp16");
  return s.empty() ? "none" : s;
}

std::string cpu_isa_summary() { return cpu_isa_summary(cpu_features()); }

std::string cpu_model_name() {
#ifdef TG_X86
  unsigned regs[12];
  if (__get_cpuid_max(0x80000000, nullptr) >= 0x80000004) {
    for (unsigned i = 0; i < 3; i++)
      __get_cpuid(0x80000002 + i, &regs[4 * i], &regs[4 * i + 1], &regs[4 * i + 2],
                  &regs[4 * i + 3]);
    char brand[49];
    std::memcpy(brand, regs, 48);
    brand[48] = 0;
    // The string is padded with spaces (leading on some Intel parts) and NULs.
    std::string s(brand);
    const size_t b = s.find_first_not_of(' '), e = s.find_last_not_of(' ');
    if (b != std::string::npos) return s.substr(b, e - b + 1);
  }
#endif
  return "unknown CPU";
}

}  // namespace tg::cpu
