// run_lock.h: one owner per run directory (train.out_dir).
//
// A run takes an advisory lock (flock) on <out_dir>/run.lock before it writes anything there,
// and writes into that file who holds it: pid, host and start time. A second process on the
// same directory (or a second run of this process) finds the lock held and is refused
// (UsageError: exit code 2) with the holder named; nothing it would have written happens
// (config.json, logs, checkpoints, train.overwrite's moves). The kernel drops the lock with
// the process, kill -9 included, so a stale lock never blocks: the file stays, holding the
// last holder's lines, and the next run takes it over.
#pragma once
#include <string>

namespace tg {

constexpr const char* kRunLockFile = "run.lock";

// The lock on one run directory, held while this object lives (move-only).
class RunDirLock {
 public:
  RunDirLock() = default;
  explicit RunDirLock(int fd) : fd_(fd) {}
  ~RunDirLock();
  RunDirLock(RunDirLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  RunDirLock& operator=(RunDirLock&& o) noexcept;
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Makes out_dir and takes its lock, writing this process's pid, host and start time into
// out_dir/run.lock. UsageError naming the holder when another one holds it; Error when the
// file cannot be made.
RunDirLock lock_run_dir(const std::string& out_dir);

}  // namespace tg
