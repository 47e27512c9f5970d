#include "run_dir.h"

#include <dirent.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/io/checkpoint.h"

namespace tg {

namespace {

const char* const kRunLogs[] = {"metrics.jsonl", "summary.json", "samples.txt", "config.json"};

// Names in out_dir that belong to a run: ckpt_* (complete or not) and the logs.
std::vector<std::string> run_entries(const std::string& out_dir, bool with_config) {
  std::vector<std::string> out;
  for (const std::string& d : list_checkpoints(out_dir)) out.push_back(d.substr(d.rfind('/') + 1));
  if (DIR* d = opendir(out_dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n.rfind(".ckpt_", 0) == 0) out.push_back(n);  // an interrupted save
    }
    closedir(d);
  }
  for (const char* name : kRunLogs) {
    if (!with_config && strcmp(name, "config.json") == 0) continue;
    if (file_exists(join_path(out_dir, name))) out.push_back(name);
  }
  return out;
}

std::string free_old_run_dir(const std::string& out_dir) {
  for (int k = 1;; k++) {
    const std::string d = join_path(out_dir, strf("old_run_%d", k));
    if (!dir_exists(d) && !file_exists(d)) return d;
  }
}

// The "step" of one metrics line, or -1 when it has none.
long long step_of_metrics_line(const std::string& line) {
  try {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer())
      return j["step"].get<long long>();
  } catch (const std::exception&) {
  }
  return -1;
}

void rewrite_if_changed(const std::string& path, const std::string& kept, size_t old_size) {
  if (kept.size() != old_size) write_text_atomic(path, kept);
}

void truncate_metrics(const std::string& path, int64_t step) {
  if (!file_exists(path)) return;
  const std::vector<char> bytes = read_file(path, "metrics file");
  std::istringstream in(std::string(bytes.begin(), bytes.end()));
  std::string line, kept;
  while (std::getline(in, line)) {
    // A line cut by a kill, or a record past the checkpoint, goes.
    const long long s = step_of_metrics_line(line);
    if (s >= 0 && s <= step) kept += line + "\n";
  }
  rewrite_if_changed(path, kept, bytes.size());
}

// samples.txt holds blocks that start with a line "--- step N".
void truncate_samples(const std::string& path, int64_t step) {
  if (!file_exists(path)) return;
  const std::vector<char> bytes = read_file(path, "samples file");
  std::istringstream in(std::string(bytes.begin(), bytes.end()));
  std::string line, kept;
  bool keep = false;
  while (std::getline(in, line)) {
    long long s;
    if (sscanf(line.c_str(), "--- step %lld", &s) == 1) keep = s <= step;
    if (keep) kept += line + "\n";
  }
  rewrite_if_changed(path, kept, bytes.size());
}

}  // namespace

std::vector<std::string> earlier_run_files(const std::string& out_dir) {
  return run_entries(out_dir, false);
}

std::string claim_fresh_run_dir(const std::string& out_dir, bool overwrite) {
  const std::vector<std::string> found = earlier_run_files(out_dir);
  if (found.empty()) return "";
  if (!overwrite) {
    std::string list;
    for (size_t i = 0; i < found.size() && i < 4; i++) list += (i ? ", " : "") + found[i];
    if (found.size() > 4) list += strf(" and %zu more", found.size() - 4);
    throw UsageError(strf(
        "train.out_dir %s already holds another run (%s); continue it with "
        "--checkpoint.resume=true, choose another --train.out_dir, or give "
        "--train.overwrite=true to move the old files into %s/old_run_<k>/ (nothing is deleted)",
        out_dir.c_str(), list.c_str(), out_dir.c_str()));
  }
  const std::string aside = free_old_run_dir(out_dir);
  make_dirs(aside);
  for (const std::string& name : run_entries(out_dir, true)) {
    const std::string from = join_path(out_dir, name), to = join_path(aside, name);
    if (rename(from.c_str(), to.c_str()) != 0)
      throw Error(strf("train.overwrite: cannot move %s to %s: %s", from.c_str(), to.c_str(),
                       strerror(errno)));
  }
  fsync_dir(out_dir);
  return aside;
}

void truncate_run_logs(const std::string& out_dir, int64_t step) {
  truncate_metrics(join_path(out_dir, "metrics.jsonl"), step);
  truncate_samples(join_path(out_dir, "samples.txt"), step);
}

}  // namespace tg
