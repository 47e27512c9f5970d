#include "fileio.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common.h"

namespace tg {

namespace {
std::string errstr() { return strerror(errno); }
}  // namespace

uint64_t file_size(const std::string& path, const char* what) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0)
    throw Error(strf("cannot open %s %s: %s", what, path.c_str(), errstr().c_str()));
  if (!S_ISREG(st.st_mode)) throw Error(strf("%s %s is not a regular file", what, path.c_str()));
  return uint64_t(st.st_size);
}

bool file_exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool dir_exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void read_at(const std::string& path, uint64_t offset, void* dst, size_t n, const char* what) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error(strf("cannot open %s %s: %s", what, path.c_str(), errstr().c_str()));
  size_t done = 0;
  while (done < n) {
    ssize_t r = pread(fd, static_cast<char*>(dst) + done, n - done, off_t(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      std::string e = r < 0 ? errstr() : "unexpected end of file";
      ::close(fd);
      throw Error(strf("cannot read %s %s: %s", what, path.c_str(), e.c_str()));
    }
    done += size_t(r);
  }
  ::close(fd);
}

std::vector<char> read_file(const std::string& path, const char* what) {
  uint64_t n = file_size(path, what);
  std::vector<char> buf(n);
  if (n) read_at(path, 0, buf.data(), n, what);
  return buf;
}

void fsync_dir(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // best effort: some filesystems refuse directory fds
  fsync(fd);
  ::close(fd);
}

std::string dirname_of(const std::string& path) {
  size_t p = path.find_last_of('/');
  if (p == std::string::npos) return ".";
  if (p == 0) return "/";
  return path.substr(0, p);
}

std::string join_path(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  return a.back() == '/' ? a + b : a + "/" + b;
}

void write_file_atomic(const std::string& path, const void* data, size_t n) {
  // The process's own temporary name: two processes writing one path never share a file.
  std::string tmp = path + "." + std::to_string(getpid()) + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw Error(strf("cannot write %s: %s", path.c_str(), errstr().c_str()));
  size_t done = 0;
  while (done < n) {
    ssize_t w = ::write(fd, static_cast<const char*>(data) + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      std::string e = errstr();
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error(strf("cannot write %s: %s", path.c_str(), e.c_str()));
    }
    done += size_t(w);
  }
  if (fsync(fd) != 0 || ::close(fd) != 0) {
    std::string e = errstr();
    ::unlink(tmp.c_str());
    throw Error(strf("cannot write %s: %s", path.c_str(), e.c_str()));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    std::string e = errstr();
    ::unlink(tmp.c_str());
    throw Error(strf("cannot write %s: %s", path.c_str(), e.c_str()));
  }
  fsync_dir(dirname_of(path));
}

void write_text_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, text.data(), text.size());
}

namespace {
// Returns an empty string on success, else why `path` could not be made.
std::string make_dirs_impl(const std::string& path) {
  if (path.empty() || dir_exists(path)) return "";
  std::string parent = dirname_of(path);
  if (parent != path && parent != "." && parent != "/") {
    std::string why = make_dirs_impl(parent);
    if (!why.empty()) return why;
  }
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return path + ": " + errstr();
  if (!dir_exists(path)) return path + " exists and is not a directory";
  return "";
}
}  // namespace

void make_dirs(const std::string& path) {
  std::string why = make_dirs_impl(path);
  if (!why.empty()) throw Error(strf("cannot create directory %s (%s)", path.c_str(), why.c_str()));
}

void remove_tree(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    if (DIR* d = opendir(path.c_str())) {
      while (dirent* e = readdir(d)) {
        std::string name = e->d_name;
        if (name != "." && name != "..") remove_tree(join_path(path, name));
      }
      closedir(d);
    }
    rmdir(path.c_str());
  } else {
    unlink(path.c_str());
  }
}

LineWriter::~LineWriter() {
  if (f_) fclose(f_);
}

void LineWriter::open(const std::string& path, bool append) {
  if (f_) fclose(f_);
  path_ = path;
  f_ = fopen(path.c_str(), append ? "a" : "w");
  if (!f_) throw Error(strf("cannot write %s: %s", path.c_str(), errstr().c_str()));
}

void LineWriter::write(const std::string& line) {
  if (!f_) return;
  if (fputs(line.c_str(), f_) < 0 || fputc('\n', f_) < 0 || fflush(f_) != 0)
    throw Error(strf("cannot write %s: %s", path_.c_str(), errstr().c_str()));
}

}  // namespace tg
