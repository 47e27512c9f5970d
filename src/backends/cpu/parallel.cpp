#include "parallel.h"

#include <algorithm>

namespace tg::cpu {

namespace {
int g_parts = 1, g_active = 1;
}  // namespace

void set_parallelism(int parts, int active) {
  g_parts = std::max(1, parts);
  g_active = std::clamp(active, 1, g_parts);
  omp_set_num_threads(g_active);
}

int num_parts() { return g_parts; }
int active_threads() { return g_active; }

}  // namespace tg::cpu
