// perf.h: model FLOPs utilisation (MFU): achieved FLOP/s over the device's peak.
#pragma once
#include <string>

namespace tg {

// Peak dense FLOP/s of a GPU (its name as CUDA reports it) for a precision mode; 0 when the
// GPU is not in the table (MFU is then not shown). Which number is used for which mode:
//   bf16, fp16, fp8 -> the dense 16-bit tensor-core peak: A100 312, H100/H200 989 TFLOP/s
//                      (fp8 too: its GEMMs run in bf16 today, quantize-dequantize emulation)
//   fp32            -> the plain (non-tensor-core) FP32 peak: A100 19.5, H100/H200 67 TFLOP/s,
//                      because fp32 mode runs true fp32 GEMMs (CUBLAS_COMPUTE_32F, no TF32)
// The H100 figures are the SXM part's; H200 has the same arithmetic rates.
double gpu_peak_flops(const std::string& gpu_name, const std::string& mode);

}  // namespace tg
