// gpu_peak.h: peak dense FLOP/s of the GPUs we know, the denominator of the model FLOPs
// utilisation (MFU) the training log and `train_gpt bench` show.
#pragma once
#include <string>

#include "src/numerics/precision_mode.h"

namespace tg {

// Peak dense FLOP/s of a GPU (its name as CUDA reports it) for a precision mode; 0 when the
// GPU is not in the table (MFU is then not shown). Which number is used for which mode (the
// registry's PeakClass column):
//   bf16, fp16, fp8 -> the dense 16-bit tensor-core peak: A100 312, H100/H200 989 TFLOP/s
//                      (fp8 too, although its block-linear GEMMs run on FP8 tensor cores with
//                      twice that peak on H100/H200: one yardstick makes modes comparable;
//                      fp8's MFU can thus exceed what bf16 can reach)
//   fp32            -> the plain (non-tensor-core) FP32 peak: A100 19.5, H100/H200 67 TFLOP/s,
//                      because fp32 mode runs true fp32 GEMMs (CUBLAS_COMPUTE_32F, no TF32)
// The H100 figures are the SXM part's; H200 has the same arithmetic rates.
double gpu_peak_flops(const std::string& gpu_name, Mode mode);

}  // namespace tg
