#include "cpu_load.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>

namespace tg {

namespace {
std::vector<int> allowed_cpus() {
  std::vector<int> ids;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return ids;
  for (int i = 0; i < CPU_SETSIZE; i++)
    if (CPU_ISSET(i, &set)) ids.push_back(i);
  return ids;
}

double self_cpu_seconds() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}
}  // namespace

bool parse_proc_stat_busy(const std::string& text, const std::vector<int>& ids,
                          double ticks_per_second, double* busy_seconds) {
  if (ids.empty() || !(ticks_per_second > 0)) return false;
  std::vector<double> busy(ids.size(), -1);
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.compare(0, 3, "cpu") != 0 || line.size() < 4 || !isdigit((unsigned char)line[3]))
      continue;
    std::istringstream f(line.substr(3));
    int id = -1;
    // user nice system idle iowait irq softirq steal
    unsigned long long v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    f >> id;
    for (auto& x : v) f >> x;
    if (!f) continue;
    for (size_t k = 0; k < ids.size(); k++)
      if (ids[k] == id) busy[k] = double(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]);
  }
  double sum = 0;
  for (double b : busy) {
    if (b < 0) return false;
    sum += b;
  }
  *busy_seconds = sum / ticks_per_second;
  return true;
}

CpuTimes cpu_times_now() {
  CpuTimes t;
  t.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  t.self_seconds = self_cpu_seconds();
  const std::vector<int> ids = allowed_cpus();
  t.cpus = int(ids.size());
  std::ifstream f("/proc/stat");
  if (!f) return t;
  std::stringstream ss;
  ss << f.rdbuf();
  t.known = parse_proc_stat_busy(ss.str(), ids, double(sysconf(_SC_CLK_TCK)), &t.busy_seconds);
  return t;
}

double others_cpu_share(const CpuTimes& from, const CpuTimes& to) {
  if (!from.known || !to.known || from.cpus != to.cpus || to.cpus <= 0) return NAN;
  const double wall = to.wall_seconds - from.wall_seconds;
  if (!(wall > 0)) return NAN;
  const double others =
      (to.busy_seconds - from.busy_seconds) - (to.self_seconds - from.self_seconds);
  // /proc/stat counts in ticks (10 ms): a short or idle interval can read slightly negative.
  return std::min(1.0, std::max(0.0, others / (wall * to.cpus)));
}

}  // namespace tg
