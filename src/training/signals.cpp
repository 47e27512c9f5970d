// signals.cpp: the stop signals' handler and flag (see signals.h).
#include "signals.h"

#include <signal.h>

#include "src/base/common.h"

namespace tg {

namespace {

constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGHUP};
volatile sig_atomic_t g_stop_signal = 0;
struct sigaction g_previous[3];

// Sets the flag and nothing else; a second signal takes its default action (signal() and
// raise() are async-signal-safe), which for these three ends the process.
extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal != 0) {
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  g_stop_signal = sig;
}

// 'arg' for the shell, unless it holds only characters a shell leaves alone.
std::string shell_quoted(const std::string& arg) {
  const char* plain = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%";
  if (!arg.empty() && arg.find_first_not_of(plain) == std::string::npos) return arg;
  std::string q = "'";
  for (char c : arg) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

StopSignals::StopSignals() {
  g_stop_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // reads and writes go on; the loop looks at the flag
  for (int i = 0; i < 3; i++) sigaction(kStopSignals[i], &sa, &g_previous[i]);
}

StopSignals::~StopSignals() {
  for (int i = 0; i < 3; i++) sigaction(kStopSignals[i], &g_previous[i], nullptr);
}

std::string continue_command(int argc, char** argv) {
  const std::string sub = argc > 1 ? argv[1] : "";
  const bool train = sub == "train" || sub.empty() || sub[0] == '-';
  const std::string resume = "--checkpoint.resume";
  std::string cmd;
  for (int i = 0; i < argc; i++) {
    std::string a = argv[i];
    if (train && a.compare(0, resume.size(), resume) == 0) continue;  // given below
    cmd += (i ? " " : "") + shell_quoted(a);
  }
  return train ? cmd + " " + resume + "=true" : cmd;
}

int stop_signal_received() { return g_stop_signal; }

std::string signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    default: return strf("signal %d", sig);
  }
}

}  // namespace tg
