// thread_tuner.h: how many threads run the CPU backend's parts, chosen from step times.
//
// The work is split into train.threads parts whatever runs them (src/backends/cpu/parallel.h), so
// the thread count can change between steps without changing a bit. A process that shares
// the cores (another training run, a compiler) makes every thread wait at each barrier for
// the one it descheduled; fewer threads then finish a step sooner. Every `probe_every`
// steps one step runs with the other count (all parts, or half of them); when it is at
// least 5% faster than the median of the recent steps, that count is kept. The first probe
// comes after about ten steps.
#pragma once
#include <deque>
#include <string>

namespace tg {

class ThreadTuner {
 public:
  explicit ThreadTuner(int parts, int probe_every = 50);
  // Threads to run the next step with.
  int next_threads();
  // The time of the step just run with next_threads(); returns a line to print when the
  // count changed ("" otherwise).
  std::string report(double seconds);
  int active() const { return active_; }

 private:
  int other() const;
  int parts_, active_, probe_every_;
  int since_probe_ = 0;
  bool probing_ = false;
  std::deque<double> recent_;  // step times with `active_` threads
};

}  // namespace tg
