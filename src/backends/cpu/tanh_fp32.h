// tanh_fp32: x[i] = tanhf(x[i]) with exactly the bits of glibc's tanhf, sixteen lanes at a time
// with AVX-512F when the CPU has it (chosen at run time from cpu_features()), else by calling
// std::tanh per element. The fp32 GELU (gelu.cpp) needs the library's bits, not merely a good
// tanh: the fp32 training results, and the regression fixtures recorded from them, were
// computed with glibc's. tanh_fp32.cpp says which glibc it reproduces and how that is checked.
#pragma once
#include <cstddef>

namespace tg::cpu {

// x[i] = std::tanh(x[i]) bit for bit (any NaN for a NaN), in place.
void tanh_fp32(float* x, size_t n);
// Whether tanh_fp32 runs the AVX-512F lanes on this CPU (else the per-element calls).
bool tanh_fp32_vectorized();

}  // namespace tg::cpu
