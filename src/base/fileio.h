// fileio.h: file helpers that turn every I/O failure into an Error naming the file.
//
// Writes go to "<path>.<pid>.tmp", are fsync'ed, then renamed, so a reader never sees a
// half-written file and a full disk leaves the previous version in place.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace tg {

std::vector<char> read_file(const std::string& path, const char* what);
// Reads exactly n bytes at offset; Error if the file is shorter.
void read_at(const std::string& path, uint64_t offset, void* dst, size_t n, const char* what);
uint64_t file_size(const std::string& path, const char* what);
bool file_exists(const std::string& path);
bool dir_exists(const std::string& path);
// Writes the whole buffer atomically (tmp + fsync + rename + fsync of the directory).
void write_file_atomic(const std::string& path, const void* data, size_t n);
void write_text_atomic(const std::string& path, const std::string& text);
// mkdir -p; Error naming the directory when it cannot be created.
void make_dirs(const std::string& path);
void fsync_dir(const std::string& path);
void remove_tree(const std::string& path);
std::string dirname_of(const std::string& path);
std::string join_path(const std::string& a, const std::string& b);

// Appends lines to a file, flushing each (metrics.jsonl).
class LineWriter {
 public:
  LineWriter() = default;
  ~LineWriter();
  void open(const std::string& path, bool append);
  void write(const std::string& line);

 private:
  std::string path_;
  FILE* f_ = nullptr;
};

}  // namespace tg
