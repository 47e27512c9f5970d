// signals.h: a run stopped by SIGTERM, SIGINT or SIGHUP keeps its last step.
//
// Schedulers preempt with SIGTERM (SLURM, Kubernetes), a terminal sends SIGINT (Ctrl-C) or
// SIGHUP. While a run trains (StopSignals alive), the first of these only sets a flag; the
// loop reads it after the step in flight, writes a checkpoint, and the process exits with
// 128 + the signal (StoppedBySignal, caught in src/cli/commands.cpp, which prints the command
// that continues the run). A second signal finds the default action and ends the process at
// once. Under MPI every rank reads its flag at the same point of the step and the flags are
// summed with the step's loss all-reduce (Trainer::sum_gradients), so every rank stops after
// the same step, whichever rank was signalled.
#pragma once
#include <stdexcept>
#include <string>

namespace tg {

// Installs the handlers (the flag cleared) and puts back the ones before it when it ends.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
};

// The first stop signal received since the StopSignals began (0 for none).
int stop_signal_received();
// "SIGTERM", "SIGINT", "SIGHUP", else "signal N".
std::string signal_name(int sig);

// The command line that continues a run stopped by a signal: argv itself (each argument
// quoted for a POSIX shell where it needs it), for train with --checkpoint.resume=true in
// place of any --checkpoint.resume given (compare resumes its interrupted runs by itself).
std::string continue_command(int argc, char** argv);

// A run stopped by a signal after writing its checkpoint: the process exits with 128 + sig.
// Not a tg::Error, so that nothing that handles a run's failure (compare's) takes it for one.
struct StoppedBySignal : std::runtime_error {
  StoppedBySignal(int sig, const std::string& what) : std::runtime_error(what), signal(sig) {}
  int signal;
};

}  // namespace tg
