// parallel.h: how the CPU ops split their work over OpenMP threads.
//
// Work whose result depends on the split (per-part partial sums, GEMM row blocks) is cut
// into a fixed number of parts, train.threads. The threads that run the parts may be
// fewer: the trainer lowers the active count while another process shares the cores
// (train.adapt_threads), each thread then running several parts in turn. The bits never
// depend on how many threads ran, only on the number of parts.
#pragma once
#include <omp.h>

namespace tg::cpu {

// parts >= 1; active in [1, parts]. Also sets the OpenMP thread count of plain loops.
void set_parallelism(int parts, int active);
int num_parts();
int active_threads();

// Calls f(part, parts) for every part, spread over the active threads.
template <typename F>
void for_each_part(F&& f) {
  const int parts = num_parts();
#pragma omp parallel num_threads(active_threads())
  for (int p = omp_get_thread_num(); p < parts; p += omp_get_num_threads()) f(p, parts);
}

}  // namespace tg::cpu
