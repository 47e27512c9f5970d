// host_device.h: TG_HD marks a function that both backends run, __host__ __device__ under nvcc
// and plain C++ elsewhere, so that the CPU backend and the CUDA kernels share one definition
// (src/numerics/formats.h's conversions, elem_format.h's table, loss_scaler.h's state machine).
#pragma once

#ifdef __CUDACC__
#define TG_HD __host__ __device__
#else
#define TG_HD
#endif
