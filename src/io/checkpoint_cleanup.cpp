// checkpoint_cleanup.cpp: leftovers of interrupted checkpoint writes and prunes (see
// checkpoint_cleanup.h).
#include "checkpoint_cleanup.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "checkpoint.h"
#include "src/base/common.h"
#include "src/base/fileio.h"

namespace tg {

namespace {

bool is_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The step digits of ".ckpt_<digits><suffix>", or "" when `name` is not one.
std::string hidden_step(const std::string& name, const std::string& suffix) {
  const std::string pre = ".ckpt_";
  if (name.size() <= pre.size() + suffix.size() || name.compare(0, pre.size(), pre) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return "";
  const std::string d = name.substr(pre.size(), name.size() - pre.size() - suffix.size());
  return is_digits(d) ? d : "";
}

// fileio.h's temporary file names: "<name>.<pid>.tmp".
bool is_temp_file_name(const std::string& name) {
  const std::string suffix = ".tmp";
  if (name.size() <= suffix.size() ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  const std::string stem = name.substr(0, name.size() - suffix.size());
  const size_t dot = stem.rfind('.');
  return dot != std::string::npos && dot > 0 && is_digits(stem.substr(dot + 1));
}

// Why checkpoint folder `dir` lacks a file it must have ("" when none is missing, or when
// its state.json cannot be read: a damaged checkpoint stays, as evidence).
std::string missing_file(const std::string& dir) {
  const std::string state_path = join_path(dir, "state.json");
  if (!file_exists(state_path)) return "no state.json";
  nlohmann::json st;
  try {
    const std::vector<char> text = read_file(state_path, "checkpoint state");
    st = nlohmann::json::parse(text.begin(), text.end());
  } catch (const std::exception&) {
    return "";
  }
  if (!st.is_object()) return "";
  if (st.contains("version") && st["version"].is_number_integer() &&
      st["version"].get<int64_t>() >= 2 && !file_exists(join_path(dir, "manifest.json")))
    return "no manifest.json";
  if (st.contains("files") && st["files"].is_object())
    for (auto it = st["files"].begin(); it != st["files"].end(); ++it)
      if (!file_exists(join_path(dir, it.key()))) return "no " + it.key();
  return "";
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) out.push_back(e->d_name);
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string comma_list(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// An .old whose step has no checkpoint any more: the replacement was never published.
void restore_old(const std::string& out_dir, const std::string& name, const std::string& step,
                 RunDirCleanup& c) {
  const std::string final_dir = join_path(out_dir, "ckpt_" + step);
  if (dir_exists(final_dir) || file_exists(final_dir)) return;
  if (rename(join_path(out_dir, name).c_str(), final_dir.c_str()) != 0)
    throw Error(strf("cannot restore %s as %s: %s", join_path(out_dir, name).c_str(),
                     final_dir.c_str(), strerror(errno)));
  c.restored.push_back("ckpt_" + step);
}

// The step of the newest checkpoint folder that lacks none of its files (-1: none).
long long newest_complete(const std::string& out_dir, const std::vector<std::string>& names) {
  long long newest = -1;
  for (const std::string& name : names)
    if (checkpoint_dir_step(name) >= 0 && dir_exists(join_path(out_dir, name)) &&
        missing_file(join_path(out_dir, name)).empty())
      newest = std::max(newest, (long long)checkpoint_dir_step(name));
  return newest;
}

// Why `name` in out_dir is a leftover to remove ("" when it stays). A checkpoint folder that
// lacks files counts only below a complete one: pruning removes older checkpoints after a
// newer one is published, so that is what a killed prune leaves; the newest one damaged is a
// user's problem to see (resume names it), not ours to delete.
std::string leftover(const std::string& out_dir, const std::string& name, long long complete) {
  const std::string path = join_path(out_dir, name);
  if (!dir_exists(path)) return file_exists(path) && is_temp_file_name(name) ? name : "";
  if (!hidden_step(name, ".tmp").empty() || !hidden_step(name, ".pruning").empty() ||
      !hidden_step(name, ".old").empty())
    return name;
  const int64_t step = checkpoint_dir_step(name);  // -1: not a ckpt_<step> name
  if (step < 0 || step >= complete) return "";
  const std::string why = missing_file(path);
  return why.empty() ? "" : name + " (" + why + ")";
}

}  // namespace

RunDirCleanup cleanup_run_dir(const std::string& out_dir) {
  RunDirCleanup c;
  std::vector<std::string> names = entries(out_dir);
  for (const std::string& name : names) {
    const std::string step = hidden_step(name, ".old");
    if (!step.empty() && dir_exists(join_path(out_dir, name))) restore_old(out_dir, name, step, c);
  }
  if (!c.restored.empty()) names = entries(out_dir);
  const long long complete = newest_complete(out_dir, names);
  for (const std::string& name : names) {
    const std::string why = leftover(out_dir, name, complete);
    if (why.empty()) continue;
    remove_tree(join_path(out_dir, name));
    c.removed.push_back(why);
  }
  if (!c.removed.empty() || !c.restored.empty()) fsync_dir(out_dir);
  return c;
}

std::string cleanup_line(const std::string& out_dir, const RunDirCleanup& c) {
  if (c.removed.empty() && c.restored.empty()) return "";
  std::string line = strf("cleanup of %s:", out_dir.c_str());
  if (!c.removed.empty())
    line += strf(" removed %zu leftover%s of interrupted checkpoint writes and prunes: %s",
                 c.removed.size(), c.removed.size() == 1 ? "" : "s", comma_list(c.removed).c_str());
  if (!c.restored.empty())
    line += strf("%s restored %s, whose replacement was never completed",
                 c.removed.empty() ? "" : ";", comma_list(c.restored).c_str());
  return line;
}

void remove_checkpoint_dir(const std::string& dir) {
  const size_t slash = dir.find_last_of('/');
  const std::string parent = slash == std::string::npos ? "." : dir.substr(0, slash);
  const std::string name = dir.substr(slash + 1);
  const std::string doomed = join_path(parent, "." + name + ".pruning");
  remove_tree(doomed);
  // If the rename fails the folder goes in place, as before.
  remove_tree(rename(dir.c_str(), doomed.c_str()) == 0 ? doomed : dir);
}

}  // namespace tg
