#include "common.h"

#include <chrono>
#include <cstdarg>
#include <vector>

namespace tg {

std::string strf(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::vector<char> buf(n > 0 ? n + 1 : 1);
  vsnprintf(buf.data(), buf.size(), fmt, ap2);
  va_end(ap2);
  return std::string(buf.data(), n > 0 ? n : 0);
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
    case DType::I32: return 4;
    case DType::BF16:
    case DType::F16: return 2;
    case DType::E4M3:
    case DType::E5M2: return 1;
    case DType::F64: return 8;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "fp32";
    case DType::BF16: return "bf16";
    case DType::F16: return "fp16";
    case DType::E4M3: return "e4m3";
    case DType::E5M2: return "e5m2";
    case DType::F64: return "fp64";
    case DType::I32: return "int32";
  }
  return "?";
}

std::string fmt_duration(double s) {
  const long t = long(s + 0.5);
  if (t >= 3600) return strf("%ldh%02ldm", t / 3600, (t / 60) % 60);
  return strf("%ldm%02lds", t / 60, t % 60);
}

std::string fmt_rate(double x) {
  if (x >= 1e6) return strf("%.2fM", x / 1e6);
  if (x >= 1e3) return strf("%.1fk", x / 1e3);
  return strf("%.0f", x);
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace tg
