// cpu_load.h: how much of this process's cores other processes took while it ran, so that a
// run's speed figures can say whether they were measured on a machine to itself.
//
// Over an interval: the busy time of the CPUs this process may run on (/proc/stat's per-CPU
// user, nice, system, irq, softirq and steal; steal is a hypervisor giving the core to another
// guest), minus this process's own CPU time (getrusage), over the interval's wall time times
// the number of those CPUs. A compare run beside a build reads about 0.5 on 2 cores.
#pragma once
#include <string>
#include <vector>

namespace tg {

// The CPU clocks at one moment. known is false where /proc/stat cannot be read.
struct CpuTimes {
  bool known = false;
  double busy_seconds = 0;  // of the allowed CPUs, all processes
  double self_seconds = 0;  // this process, user + system, all its threads
  double wall_seconds = 0;  // a monotonic clock
  int cpus = 0;             // the CPUs this process may run on
};
CpuTimes cpu_times_now();

// The busy seconds of the CPUs `ids` in /proc/stat's text ("cpuN user nice system idle iowait
// irq softirq steal ..." lines, in clock ticks); false when a CPU's line is missing or bad.
bool parse_proc_stat_busy(const std::string& text, const std::vector<int>& ids,
                          double ticks_per_second, double* busy_seconds);

// The share (0..1) of the allowed cores' time between two readings that other processes
// took; NAN where either reading is unknown or no time passed.
double others_cpu_share(const CpuTimes& from, const CpuTimes& to);

// Above this share a run's speed is "measured on a shared machine": other processes held
// more than a tenth of its cores.
constexpr double kSharedMachineShare = 0.10;

}  // namespace tg
