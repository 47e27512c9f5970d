// run_lock.cpp: the run directory's lock (see run_lock.h).
#include "run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <thread>

#include "src/base/common.h"
#include "src/base/fileio.h"

namespace tg {
using json = nlohmann::json;

namespace {

std::string this_host() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) return "unknown";
  return host;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

// The lock file's text as it is now (at most 4 KiB: it holds one short JSON line).
std::string read_lock_text(int fd) {
  char buf[4096];
  const ssize_t n = pread(fd, buf, sizeof(buf), 0);
  return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

std::string holder_of(const std::string& text) {
  const json j = json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("pid") || !j["pid"].is_number_integer() ||
      !j.contains("host") || !j["host"].is_string() || !j.contains("since") ||
      !j["since"].is_string())
    return "an unknown process";
  return strf("pid %lld on host %s since %s", j["pid"].get<long long>(),
              j["host"].get<std::string>().c_str(), j["since"].get<std::string>().c_str());
}

// The holder named by an open lock file; the holder writes its lines just after taking the
// lock, so an empty file is read again for a moment.
std::string holder_of_fd(int fd) {
  std::string text = read_lock_text(fd);
  for (int i = 0; i < 50 && text.empty(); i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    text = read_lock_text(fd);
  }
  return holder_of(text);
}

void write_holder(int fd, const std::string& path) {
  const std::string text =
      json({{"pid", int64_t(getpid())}, {"host", this_host()}, {"since", utc_now()}}).dump() + "\n";
  if (ftruncate(fd, 0) != 0 || pwrite(fd, text.data(), text.size(), 0) != ssize_t(text.size()))
    throw Error(strf("cannot write %s: %s", path.c_str(), strerror(errno)));
}

}  // namespace

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the only descriptor releases the flock
}

RunDirLock& RunDirLock::operator=(RunDirLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

RunDirLock lock_run_dir(const std::string& out_dir) {
  make_dirs(out_dir);
  const std::string path = join_path(out_dir, kRunLockFile);
  // Close-on-exec: a child process must not keep the lock after this run ends.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) throw Error(strf("cannot open %s: %s", path.c_str(), strerror(errno)));
  RunDirLock lock(fd);
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK)
      throw Error(strf("cannot lock %s: %s", path.c_str(), strerror(errno)));
    throw UsageError(strf(
        "train.out_dir %s is in use by another run: %s (the lock %s is held); wait for that run "
        "to end, stop it (SIGTERM saves a checkpoint), or choose another --train.out_dir",
        out_dir.c_str(), holder_of_fd(fd).c_str(), path.c_str()));
  }
  write_holder(fd, path);
  return lock;
}

}  // namespace tg
