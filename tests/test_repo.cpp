// test_repo.cpp: properties of the repository and its build that no code test sees.
//
// - The tracked tree stays small: a GPU session sends the working tree to the device machine
//   (at most 64 MiB) and every clone downloads it, so run logs and data stay out of git
//   (studies keep their reports; their READMEs name the command that remakes the runs).
// - A study keeps its runs in one runs file (runs.jsonl: each run's config and summary, what
//   they share written once), never a folder per run, and a compare.json of statistics.
// - Warnings are errors only where asked (WERROR=1, as CI builds): a user's compiler, newer
//   than ours, may warn about more and must still build.
// - The manual's links hold: every relative link in README.md and the markdown under docs/
//   names a file of the checkout, and a link to a heading of a markdown file names one that
//   exists (pages and pictures move between README.md and docs/, whose links are relative to
//   different folders). The README's examples name only files a user has.
#include <doctest/doctest.h>

#include <cctype>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "src/base/common.h"
#include "src/report/runs_file.h"
#include "test_util.h"

using namespace tgt;

namespace {

constexpr uintmax_t kMaxTreeBytes = uintmax_t(10) << 20;
constexpr uintmax_t kMaxFileBytes = uintmax_t(1) << 20;

// The tracked files of the checkout the tests run in ("" entries dropped); empty when this
// is no git checkout (a source tarball) or git is missing. With `untracked`, also the files
// not yet added that git does not ignore (a new page is linked before it is committed).
std::vector<std::string> tracked_files(std::string* root, bool untracked = false) {
  std::string out;
  if (run_shell("git rev-parse --show-toplevel 2>/dev/null", &out) != 0) return {};
  *root = out.substr(0, out.find('\n'));
  const std::string others = untracked ? " --cached --others --exclude-standard" : "";
  if (run_shell("cd '" + *root + "' && git ls-files" + others, &out) != 0) return {};
  std::vector<std::string> files;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) files.push_back(line);
  return files;
}

// The commands `make -n` prints for `target` with the given WERROR setting, run without
// the calling make's flags (a `make test WERROR=1` would otherwise pass its own down), and
// in the default variant: make exports its command line's variables to the tests it runs,
// so under `make test SAN=1` the objects named would be build/san's.
std::string make_dry_run(const std::string& target, const std::string& werror) {
  std::string out;
  run_shell(
      "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u WERROR make -n -B SKIP_SETUP=1 SAN= NO_MPI= "
      "NO_BLAS= " +
          werror + " " + target + " 2>&1",
      &out);
  return out;
}

// The lines of `text` that contain `tool` (the compile commands).
std::string lines_with(const std::string& text, const std::string& tool) {
  std::string keep;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.find(tool) != std::string::npos) keep += line + "\n";
  return keep;
}

// GitHub's anchor for a heading's text: lower case; letters, digits, '-', '_' and non-ASCII
// bytes kept, spaces turned into '-', everything else (punctuation, backticks) dropped.
std::string heading_anchor(const std::string& heading) {
  std::string anchor;
  for (const char c : heading) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == ' ')
      anchor += '-';
    else if (std::isalnum(u))
      anchor += static_cast<char>(std::tolower(u));
    else if (c == '-' || c == '_' || u >= 0x80)
      anchor += c;
  }
  return anchor;
}

// `line` with its inline code spans blanked, so that `a[i](x)` in code is no link.
std::string without_code_spans(const std::string& line) {
  std::string out = line;
  for (size_t open = out.find('`'); open != std::string::npos; open = out.find('`', open)) {
    const size_t close = out.find('`', open + 1);
    if (close == std::string::npos) break;
    for (size_t i = open; i <= close; ++i) out[i] = ' ';
    open = close + 1;
  }
  return out;
}

struct MarkdownLink {
  int line;
  std::string target;  // as written: path, path#anchor or #anchor
};

// The inline links and images of a markdown text outside fenced code, and the anchors of its
// headings (a repeated heading's anchor gets -1, -2, ... as on GitHub).
void scan_markdown(const std::string& text, std::vector<MarkdownLink>* links,
                   std::set<std::string>* anchors) {
  std::istringstream in(text);
  std::map<std::string, int> seen;
  bool fenced = false;
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    const size_t first = line.find_first_not_of(' ');
    if (first != std::string::npos && line.compare(first, 3, "```") == 0) {
      fenced = !fenced;
      continue;
    }
    if (fenced) continue;
    const size_t hashes = line.find_first_not_of('#');
    if (hashes >= 1 && hashes <= 6 && hashes < line.size() && line[hashes] == ' ') {
      const std::string anchor = heading_anchor(line.substr(hashes + 1));
      const int k = seen[anchor]++;
      anchors->insert(k == 0 ? anchor : anchor + "-" + std::to_string(k));
    }
    const std::string plain = without_code_spans(line);
    for (size_t at = plain.find("]("); at != std::string::npos; at = plain.find("](", at + 2)) {
      const size_t end = plain.find_first_of(") \t", at + 2);
      links->push_back({number, plain.substr(at + 2, end - (at + 2))});
    }
  }
}

// Why `link`, written in the markdown file `from` (a path relative to the checkout), does
// not resolve among `paths` (the checkout's files and folders); "" when it does. Web links
// (a scheme such as https:) are not followed.
std::string broken_link_reason(const std::string& root, const std::string& from,
                               const std::string& link, const std::set<std::string>& paths) {
  const size_t colon = link.find(':');
  if (colon != std::string::npos && link.find_first_of("/#") > colon) return "";
  const size_t hash = link.find('#');
  const std::string path = link.substr(0, hash);
  std::string target =
      path.empty()
          ? from
          : (std::filesystem::path(from).parent_path() / path).lexically_normal().generic_string();
  if (target.size() > 1 && target.back() == '/') target.pop_back();  // a folder, "dir/"
  if (!paths.count(target)) return "no such file in the checkout: " + target;
  if (hash == std::string::npos || target.size() < 3 ||
      target.compare(target.size() - 3, 3, ".md") != 0)
    return "";
  std::vector<MarkdownLink> unused;
  std::set<std::string> anchors;
  scan_markdown(slurp(root + "/" + target), &unused, &anchors);
  const std::string anchor = link.substr(hash + 1);
  return anchors.count(anchor) ? "" : target + " has no heading #" + anchor;
}

}  // namespace

TEST_CASE("repository: the tracked tree is at most 10 MiB and no tracked file is over 1 MiB") {
  std::string root;
  const std::vector<std::string> files = tracked_files(&root);
  if (files.empty()) {
    MESSAGE("skipped: not a git checkout (git ls-files gave nothing)");
    return;
  }
  uintmax_t total = 0;
  std::string large;
  for (const std::string& f : files) {
    std::error_code ec;
    const uintmax_t n = std::filesystem::file_size(root + "/" + f, ec);
    if (ec) continue;  // deleted in the working tree, or a submodule
    total += n;
    if (n > kMaxFileBytes) large += f + " (" + std::to_string(n) + " bytes)\n";
  }
  INFO("tracked files: " << files.size() << ", " << total << " bytes; over 1 MiB:\n" << large);
  CHECK(large.empty());
  CHECK(total <= kMaxTreeBytes);
}

TEST_CASE("repository: studies keep their runs in one runs file, not a folder per run") {
  // A study's runs were ~4 KiB of config.json and summary.json each, mostly alike: 988 files,
  // a sixth of the tree. runs.jsonl keeps them once (src/report/runs_file.h).
  std::string root;
  const std::vector<std::string> files = tracked_files(&root, true);
  if (files.empty()) {
    MESSAGE("skipped: not a git checkout (git ls-files gave nothing)");
    return;
  }
  std::string per_run, not_compact;
  int studies = 0;
  for (const std::string& f : files) {
    if (f.rfind("docs/", 0) != 0) continue;
    const std::string name = f.substr(f.rfind('/') + 1);
    if (name == "config.json" || name == "summary.json" || name == "metrics.jsonl" ||
        f.find("/runs/") != std::string::npos)
      per_run += f + "\n";
    if (name != "compare.json") continue;
    studies++;
    const std::string dir = f.substr(0, f.size() - name.size());
    const nlohmann::json cmp = nlohmann::json::parse(slurp(root + "/" + f));
    // The statistics only: the runs are the runs file's, which reads back whole.
    for (const auto& m : cmp["modes"])
      if (m.contains("runs")) not_compact += f + ": modes hold their runs\n";
    const std::string runs = root + "/" + dir + tg::kRunsFileName;
    const std::string error = error_of([&] {
      if (tg::read_runs_file(runs).runs.empty()) throw tg::Error(runs + ": no runs");
    });
    if (!error.empty()) not_compact += error + "\n";
  }
  INFO("per-run files under docs/:\n" << per_run << "studies not compact:\n" << not_compact);
  CHECK(studies > 0);
  CHECK(per_run.empty());
  CHECK(not_compact.empty());
}

TEST_CASE("build: the CUDA backend is built only with a GPU present or CUDA=1") {
  std::string probe;
  if (run_shell("make --version >/dev/null 2>&1 && test -f Makefile", &probe) != 0 ||
      run_shell("command -v nvcc >/dev/null || test -x /usr/local/cuda/bin/nvcc") != 0) {
    MESSAGE("skipped: no make, no nvcc, or not run from the source tree");
    return;
  }
  // What the Makefile would run nvcc as, with CUDA unset (a user's plain `make`), =1 and =0.
  auto use_nvcc = [](const std::string& cuda) {
    std::string out;
    // MAKEFLAGS: a `make test CUDA=1` passes CUDA=1 down to every make it starts (and puts it
    // in the environment, as `make test SAN=1` does SAN=1, which leaves nvcc out).
    run_shell("env -u CUDA -u SAN -u MAKEFLAGS -u MFLAGS -u MAKELEVEL " + cuda +
                  " make -s SKIP_SETUP=1 --eval='tg-use-nvcc: ; @echo $(USE_NVCC)' tg-use-nvcc",
              &out);
    return out.find("nvcc") != std::string::npos;
  };
  const bool gpu = run_shell("nvidia-smi -L 2>/dev/null | grep -q '^GPU'") == 0;
  CHECK(use_nvcc("") == gpu);  // minutes of nvcc only where a GPU can use them
  CHECK(use_nvcc("CUDA=1"));
  CHECK_FALSE(use_nvcc("CUDA=0"));
}

TEST_CASE("build: warnings are errors with WERROR=1 only") {
  std::string probe;
  if (run_shell("make --version >/dev/null 2>&1 && test -f Makefile", &probe) != 0) {
    MESSAGE("skipped: no make, or not run from the source tree");
    return;
  }
  // One object of each compiler the Makefile drives: g++ always; the emulated kernels (g++
  // with the CUDA headers) when nvcc is installed; nvcc itself when the Makefile builds the
  // CUDA backend (CUDA=1, which CI sets, or a GPU present: it has a rule for the object).
  std::vector<std::pair<std::string, std::string>> targets = {
      {"build/rel/src/base/common.o", "g++"}};
  // `make test NVCC=` exports an empty NVCC to this process: the Makefile then drives no nvcc.
  const char* nvcc_env = getenv("NVCC");
  const bool nvcc_off = nvcc_env && !*nvcc_env;
  if (!nvcc_off &&
      run_shell("command -v nvcc >/dev/null || test -x /usr/local/cuda/bin/nvcc") == 0) {
    std::string use_nvcc;
    run_shell("make -s SKIP_SETUP=1 --eval='tg-use-nvcc: ; @echo $(USE_NVCC)' tg-use-nvcc",
              &use_nvcc);
    if (use_nvcc.find("nvcc") != std::string::npos)
      targets.push_back({"build/rel/src/backends/cuda/adamw.o", "nvcc"});
    targets.push_back({"build/rel/emu/src/backends/cuda/adamw.o", "g++"});
  }
  for (const auto& [target, tool] : targets) {
    const std::string plain = lines_with(make_dry_run(target, ""), tool);
    const std::string strict = lines_with(make_dry_run(target, "WERROR=1"), tool);
    INFO(target << "\nwithout WERROR:\n" << plain << "with WERROR=1:\n" << strict);
    REQUIRE(!plain.empty());
    CHECK(plain.find("-Werror") == std::string::npos);
    CHECK(strict.find("-Werror") != std::string::npos);
  }
}

TEST_CASE("docs: every relative link in README.md and docs/ names a file and heading that exist") {
  std::string root;
  const std::vector<std::string> files = tracked_files(&root, /*untracked=*/true);
  if (files.empty()) {
    MESSAGE("skipped: not a git checkout (git ls-files gave nothing)");
    return;
  }
  std::set<std::string> paths(files.begin(), files.end());
  for (const std::string& f : files)  // a link may name a folder (a study's directory)
    for (auto p = std::filesystem::path(f).parent_path(); !p.empty(); p = p.parent_path())
      paths.insert(p.generic_string());
  std::string broken;
  int pages = 0, links_checked = 0;
  for (const std::string& md : files) {
    const bool in_docs =
        md.rfind("docs/", 0) == 0 && md.size() > 3 && md.compare(md.size() - 3, 3, ".md") == 0;
    if (md != "README.md" && !in_docs) continue;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(root + "/" + md, ec)) continue;  // deleted, not staged
    ++pages;
    std::vector<MarkdownLink> links;
    std::set<std::string> anchors;
    scan_markdown(slurp(root + "/" + md), &links, &anchors);
    for (const MarkdownLink& link : links) {
      ++links_checked;
      const std::string reason = broken_link_reason(root, md, link.target, paths);
      if (!reason.empty())
        broken += md + ":" + std::to_string(link.line) + ": (" + link.target + ") " + reason + "\n";
    }
  }
  INFO(pages << " pages, " << links_checked << " links; broken:\n" << broken);
  CHECK(paths.count("README.md") == 1);
  CHECK(links_checked > 0);
  CHECK(broken.empty());
  // The README's examples are for a user's clone: nothing from outside it (../shared is this
  // project's own machines).
  CHECK(slurp(root + "/README.md").find("../shared") == std::string::npos);
}
