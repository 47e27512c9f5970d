// ops.h: the CPU reference ops, one per file in src/cpu/, templated on the element type.
//
// T is float for fp32 training and double for the fp64 gradient checks; the math is done
// in T. Conventions are those of backend.h. Loops are OpenMP-parallel with static
// schedules and no atomics, so results are bit-identical run to run for a thread count.
#pragma once
#include <cstddef>
#include <cstdint>

namespace tg::cpu {

template <typename T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int T_,
                     int C);
template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int T_, int C);

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int N,
                       int C);
template <typename T>
void layernorm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w,
                        const T* mean, const T* rstd, int N, int C);

template <typename T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int C, int OC);
template <typename T>
void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w, int N,
                     int C, int OC);

template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int T_, int C, int NH);
template <typename T>
void attention_backward(T* dqkv, T* datt, const T* dout, const T* qkv, const T* att, int B, int T_,
                        int C, int NH);

template <typename T>
void gelu_forward(T* out, const T* inp, size_t n);
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n);

template <typename T>
void residual_forward(T* out, const T* a, const T* b, size_t n);

template <typename T>
void classifier(T* logits, T* losses, const int32_t* targets, float dloss, int N, int V, int Vp);

template <typename T>
double sum_squares(const T* x, size_t n);

void adamw(float* params, float* master, const float* grads, float* m, float* v, size_t n, float lr,
           float beta1, float beta2, float eps, float weight_decay, float grad_scale, int step);
// fp64 twin (gradient-check models): same formula in double.
void adamw(double* params, double* master, const double* grads, double* m, double* v, size_t n,
           float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
           int step);

}  // namespace tg::cpu
