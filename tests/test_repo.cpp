// test_repo.cpp: properties of the repository and its build that no code test sees.
//
// - The tracked tree stays small: a GPU session sends the working tree to the device machine
//   (at most 64 MiB) and every clone downloads it, so run logs and data stay out of git
//   (studies keep their reports; their READMEs name the command that remakes the runs).
// - Warnings are errors only where asked (WERROR=1, as CI builds): a user's compiler, newer
//   than ours, may warn about more and must still build.
#include <doctest/doctest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_util.h"

using namespace tgt;

namespace {

constexpr uintmax_t kMaxTreeBytes = uintmax_t(16) << 20;
constexpr uintmax_t kMaxFileBytes = uintmax_t(1) << 20;

// The tracked files of the checkout the tests run in ("" entries dropped); empty when this
// is no git checkout (a source tarball) or git is missing.
std::vector<std::string> tracked_files(std::string* root) {
  std::string out;
  if (run_shell("git rev-parse --show-toplevel 2>/dev/null", &out) != 0) return {};
  *root = out.substr(0, out.find('\n'));
  if (run_shell("cd '" + *root + "' && git ls-files", &out) != 0) return {};
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
  run_shell("env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u WERROR make -n -B SKIP_SETUP=1 SAN= NO_MPI= NO_BLAS= " +
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

}  // namespace

TEST_CASE("repository: the tracked tree is at most 16 MiB and no tracked file is over 1 MiB") {
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

TEST_CASE("build: warnings are errors with WERROR=1 only") {
  std::string probe;
  if (run_shell("make --version >/dev/null 2>&1 && test -f Makefile", &probe) != 0) {
    MESSAGE("skipped: no make, or not run from the source tree");
    return;
  }
  // One object of each compiler the Makefile drives: g++ always; nvcc and the emulated
  // kernels (g++ with the CUDA headers) when nvcc is installed.
  std::vector<std::pair<std::string, std::string>> targets = {
      {"build/rel/src/common.o", "g++"}};
  if (run_shell("command -v nvcc >/dev/null || test -x /usr/local/cuda/bin/nvcc") == 0) {
    targets.push_back({"build/rel/src/cuda/adamw.o", "nvcc"});
    targets.push_back({"build/rel/emu/src/cuda/adamw.o", "g++"});
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
