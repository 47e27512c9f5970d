// adamw: decoupled weight decay Adam (Loshchilov & Hutter), as torch.optim.AdamW:
//   g = grad * grad_scale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   master -= lr * (m / (1-b1^t) / (sqrt(v / (1-b2^t)) + eps) + wd * master)
// then params (the copy the model computes with) receives master. weight_decay is 0 for
// the tensors that take none (biases, layernorm), chosen by the caller per tensor.
//
// global norm: sum of squares accumulated in fp64 per thread block and added in thread
// order, so clipping decisions are reproducible.
#include <omp.h>

#include <cmath>
#include <vector>

#include "ops.h"

namespace tg::cpu {

namespace {
template <typename T>
void adamw_impl(T* params, T* master, const T* grads, T* m, T* v, size_t n, float lr, float beta1,
                float beta2, float eps, float weight_decay, float grad_scale, int step) {
  const T b1 = beta1, b2 = beta2;
  const T c1 = T(1) - std::pow(b1, T(step)), c2 = T(1) - std::pow(b2, T(step));
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    T g = grads[i] * T(grad_scale);
    T mi = b1 * m[i] + (T(1) - b1) * g;
    T vi = b2 * v[i] + (T(1) - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    T w = master[i];
    w -= T(lr) * ((mi / c1) / (std::sqrt(vi / c2) + T(eps)) + T(weight_decay) * w);
    master[i] = w;
    params[i] = w;
  }
}
}  // namespace

void adamw(float* params, float* master, const float* grads, float* m, float* v, size_t n, float lr,
           float beta1, float beta2, float eps, float weight_decay, float grad_scale, int step) {
  adamw_impl(params, master, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, step);
}

void adamw(double* params, double* master, const double* grads, double* m, double* v, size_t n,
           float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
           int step) {
  adamw_impl(params, master, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, step);
}

template <typename T>
double sum_squares(const T* x, size_t n) {
  int nthreads = omp_get_max_threads();
  std::vector<double> partial(nthreads, 0.0);
#pragma omp parallel num_threads(nthreads)
  {
    int nt = omp_get_num_threads(), id = omp_get_thread_num();
    size_t i0 = n * id / nt, i1 = n * (id + 1) / nt;
    double s = 0;
    for (size_t i = i0; i < i1; i++) s += double(x[i]) * double(x[i]);
    partial[id] = s;
  }
  double s = 0;
  for (double p : partial) s += p;
  return s;
}

template double sum_squares<float>(const float*, size_t);
template double sum_squares<double>(const double*, size_t);

}  // namespace tg::cpu
