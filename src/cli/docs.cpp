#include "docs.h"

#include "command_table.h"
#include "commands.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/config/config.h"
#include "src/model/model.h"
#include "src/numerics/precision_mode.h"
#include "src/precision/precision.h"

namespace tg {
using json = nlohmann::json;

namespace {
// A markdown table cell: '|' escaped, line breaks as spaces.
std::string cell(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '|')
      out += "\\|";
    else
      out += c == '\n' ? ' ' : c;
  }
  return out;
}

std::string read_text(const std::string& path, const char* what) {
  const std::vector<char> b = read_file(path, what);
  return std::string(b.begin(), b.end());
}

std::vector<std::string> config_files(const std::string& root) {
  std::vector<std::string> files;
  const std::string dir = join_path(root, "configs");
  if (!dir_exists(dir)) throw Error("docs: " + dir + " is not a directory");
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".json") files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  return files;
}

// The first line of a config file's leading // comment: its one-line summary.
std::string config_summary(const std::string& path) {
  const std::string text = read_text(path, "config file");
  const size_t end = text.find('\n');
  const std::string first = text.substr(0, end);
  if (first.compare(0, 3, "// ") != 0)
    throw Error("docs: " + path + " does not start with a '// ' line saying what it is for");
  return first.substr(3);
}

// The keys (section.key) where two configs as JSON differ, with the first one's values.
std::vector<std::string> differences(const json& a, const json& b, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& [k, v] : a.items()) {
    const std::string name = prefix.empty() ? k : prefix + "." + k;
    if (v.is_object() && b.contains(k) && b[k].is_object()) {
      for (const auto& d : differences(v, b[k], name)) out.push_back(d);
    } else if (!b.contains(k) || b[k] != v) {
      out.push_back("`" + name + "` " + (v.is_string() ? v.get<std::string>() : v.dump()));
    }
  }
  return out;
}
}  // namespace

std::string config_keys_md() {
  std::string md = "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const auto& k : config_keys())
    md += "| `" + k.name + "` | " + cell(k.type) + " | " +
          cell(k.default_value.empty() ? "\"\"" : k.default_value) + " | " + cell(k.help) + " |\n";
  return md;
}

std::string config_files_md(const std::string& root) {
  std::string md =
      "| config | what it is | model | batch x steps | mode |\n|---|---|---|---|---|\n";
  for (const std::string& f : config_files(root)) {
    const std::string path = join_path(join_path(root, "configs"), f);
    Config c;
    config_load_file(c, path);
    const GPTConfig m = model_config(c);
    md += strf("| [`configs/%s`](configs/%s) | %s | %d layers x %d channels, vocab %d, %.2fM "
               "parameters | %d x %d tokens x %d steps | %s |\n",
               f.c_str(), f.c_str(), cell(config_summary(path)).c_str(), m.n_layer, m.n_embd,
               m.vocab_size, num_parameters(m) / 1e6, c.data.batch_size, c.data.seq_len,
               c.train.steps, mode_name(precision_spec(c).mode));
  }
  return md;
}

std::string default_config_md(const std::string& root) {
  Config c;
  config_load_file(c, join_path(join_path(root, "configs"), "default.json"));
  std::string md = "`configs/default.json` (the run of `make run`) sets";
  const std::vector<std::string> d = differences(config_to_json(c), config_to_json(Config()), "");
  for (size_t i = 0; i < d.size(); i++)
    md += std::string(i == 0 ? " " : i + 1 == d.size() ? " and " : ", ") + d[i];
  return md + "; every other key has the default above.\n";
}

std::string replace_generated(const std::string& text, const std::string& name,
                              const std::string& body, const std::string& file) {
  const std::string begin = "<!-- BEGIN generated: " + name + " (train_gpt docs) -->\n";
  const std::string end = "<!-- END generated: " + name + " -->";
  const size_t b = text.find(begin);
  const size_t e = b == std::string::npos ? b : text.find(end, b);
  if (e == std::string::npos)
    throw UsageError("docs: " + file + " has no '" + begin.substr(0, begin.size() - 1) +
                     "' ... '" + end + "' block");
  return text.substr(0, b + begin.size()) + body + text.substr(e);
}

int cmd_docs(int argc, char** argv) {
  std::string root = ".";
  bool check = false;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (a == "--check") {
      check = true;
    } else if (a == "--root" && i + 1 < argc) {
      root = argv[++i];
    } else if (a == "-h" || a == "--help") {
      printf(
          "Usage:\n  train_gpt docs [--check] [--root DIR]\n\n"
          "Rewrites the manual's generated tables (config keys, config files, default.json, the\n"
          "commands) from the code and configs/.\n\n"
          "  -h, --help    print this help\n"
          "      --check   change nothing; exit 1 naming each file whose tables differ\n"
          "      --root    the repository (default: .)\n");
      return 0;
    } else {
      throw UsageError("docs: unknown argument '" + a + "' (--check, --root DIR)");
    }
  }
  const struct {
    const char* file;
    const char* name;
    std::string body;
  } blocks[] = {{"docs/training.md", "config keys", config_keys_md()},
                {"docs/training.md", "default config", default_config_md(root)},
                {"README.md", "config files", config_files_md(root)},
                {"README.md", "commands", commands_md()}};
  std::vector<std::string> stale;
  for (const char* file : {"README.md", "docs/training.md"}) {
    const std::string path = join_path(root, file);
    const std::string old = read_text(path, "manual page");
    std::string now = old;
    for (const auto& b : blocks)
      if (std::string(b.file) == file) now = replace_generated(now, b.name, b.body, path);
    if (now == old) continue;
    stale.push_back(file);
    if (!check) write_text_atomic(path, now);
  }
  for (const auto& f : stale)
    printf(check ? "%s: its generated tables differ from the code (run: train_gpt docs)\n"
                 : "%s: generated tables rewritten\n",
           f.c_str());
  if (stale.empty()) printf("docs: the generated tables match the code\n");
  return check && !stale.empty() ? 1 : 0;
}

}  // namespace tg
