#include "gpu_peak.h"

namespace tg {

double gpu_peak_flops(const std::string& name, Mode mode) {
  const bool fp32 = mode_info(mode).peak == PeakClass::Fp32;
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("H200") || has("H100")) return fp32 ? 67e12 : 989e12;
  if (has("A100")) return fp32 ? 19.5e12 : 312e12;
  return 0;
}

}  // namespace tg
