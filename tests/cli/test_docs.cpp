// The manual's generated tables (src/cli/docs.h): the ones in this checkout match the code
// and configs/, and a table that drifts (a config edited, a key added) is caught by
// `train_gpt docs --check`, then rewritten by `train_gpt docs`.
#include <doctest/doctest.h>

#include <filesystem>
#include <set>
#include <sstream>
#include <vector>
#include <string>

#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/cli/docs.h"
#include "src/config/config.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;

TEST_CASE("docs: README.md's and docs/training.md's generated tables match the code") {
  std::string out;
  const int rc = tgt::run_binary("docs --check", &out);
  INFO(out);
  CHECK(rc == 0);
  // Every config key is a row of the key table, with its default.
  const std::string training = tgt::slurp("docs/training.md");
  for (const auto& k : tg::config_keys()) {
    INFO(k.name);
    CHECK(training.find("| `" + k.name + "` |") != std::string::npos);
  }
  // Every config file is a row of the README's table.
  const std::string readme = tgt::slurp("README.md");
  for (const auto& e : fs::directory_iterator("configs"))
    CHECK(readme.find("[`configs/" + e.path().filename().string() + "`]") != std::string::npos);
}

TEST_CASE("docs: a config or table that drifts is caught by --check and rewritten by docs") {
  tgt::TempDir root;
  fs::create_directories(root / "docs");
  fs::copy("configs", root / "configs");
  fs::copy_file("README.md", root / "README.md");
  fs::copy_file("docs/training.md", root / "docs/training.md");
  std::string out;
  REQUIRE(tgt::run_binary("docs --check --root '" + root.path + "'", &out) == 0);
  // default.json trains longer: the README's config table and training.md's list of what
  // default.json sets both differ.
  std::string cfg = tgt::slurp(root / "configs/default.json");
  const size_t at = cfg.find("\"steps\": 2500");
  REQUIRE(at != std::string::npos);
  cfg.replace(at, 13, "\"steps\": 2600");
  tg::write_text_atomic(root / "configs/default.json", cfg);
  CHECK(tgt::run_binary("docs --check --root '" + root.path + "'", &out) == 1);
  CHECK(out.find("README.md: its generated tables differ from the code") != std::string::npos);
  CHECK(out.find("docs/training.md: its generated tables differ") != std::string::npos);
  REQUIRE(tgt::run_binary("docs --root '" + root.path + "'", &out) == 0);
  CHECK(tgt::slurp(root / "README.md").find("64 x 16 tokens x 2600 steps") != std::string::npos);
  CHECK(tgt::slurp(root / "docs/training.md").find("`train.steps` 2600") != std::string::npos);
  CHECK(tgt::run_binary("docs --check --root '" + root.path + "'", &out) == 0);
  // A hand edit inside a generated block is drift too.
  std::string md = tgt::slurp(root / "docs/training.md");
  md.replace(md.find("| `optim.lr` | number | 0.003 |"), 30, "| `optim.lr` | number | 0.001 |");
  tg::write_text_atomic(root / "docs/training.md", md);
  CHECK(tgt::run_binary("docs --check --root '" + root.path + "'", &out) == 1);
  // A config without its one-line summary, a page without its markers: errors naming them.
  tg::write_text_atomic(root / "configs/extra.json", "{}\n");
  CHECK(tgt::run_binary("docs --check --root '" + root.path + "'", &out) == 1);
  CHECK(out.find("configs/extra.json does not start with a '// ' line") != std::string::npos);
  fs::remove(root / "configs/extra.json");
  tg::write_text_atomic(root / "README.md", "# nothing generated here\n");
  CHECK(tgt::run_binary("docs --check --root '" + root.path + "'", &out) == 2);
  CHECK(out.find("README.md has no '<!-- BEGIN generated: config files (train_gpt docs) -->'") !=
        std::string::npos);
}

namespace {
// The multi-process examples of a page: each command (continuation lines joined) that
// starts several ranks of `train_gpt train --config configs/X.json`.
struct RankExample {
  int ranks = 0, batch = 0;
  std::string config, out_dir, text;
};

std::string option_value(const std::string& cmd, const std::string& name) {
  const size_t at = cmd.find(name);
  if (at == std::string::npos) return "";
  const size_t from = at + name.size();
  return cmd.substr(from, cmd.find_first_of(" \n", from) - from);
}

std::vector<RankExample> rank_examples(const std::string& page) {
  std::vector<RankExample> out;
  std::string text = tgt::slurp(page), joined;
  for (size_t i = 0; i < text.size(); i++) {
    if (text[i] == '\\' && i + 1 < text.size() && text[i + 1] == '\n') {
      i++;
      continue;
    }
    joined += text[i];
  }
  std::istringstream in(joined);
  std::string prev;
  for (std::string line; std::getline(in, line); prev = line) {
    RankExample e;
    const std::string np = option_value(line, "mpirun -np ");
    const std::string world = option_value(line, "--dist.world_size=");
    const std::string cfg = option_value(line, "--config ");
    if ((np.empty() && world.empty()) || cfg.rfind("configs/", 0) != 0) continue;
    e.ranks = std::stoi(np.empty() ? world : np);
    e.config = cfg;
    const std::string b = option_value(line, "--data.batch_size=");
    e.batch = b.empty() ? 0 : std::stoi(b);
    e.out_dir = option_value(line, "--train.out_dir=");
    e.text = line;
    out.push_back(e);
  }
  return out;
}
}  // namespace

TEST_CASE("docs: every multi-process example keeps its config's batch and has its own out_dir") {
  int seen = 0;
  for (const char* page : {"README.md", "docs/distributed.md"}) {
    std::set<std::string> out_dirs;  // no two examples of a page write into one run directory
    const std::vector<RankExample> examples = rank_examples(page);
    for (const RankExample& e : examples) {
      INFO(page << ": " << e.text);
      seen++;
      tg::Config c;
      tg::config_load_file(c, e.config);
      REQUIRE(e.batch > 0);
      CHECK(e.ranks * e.batch == c.data.batch_size);
      CHECK(!e.out_dir.empty());
      CHECK(e.out_dir != c.train.out_dir);
      out_dirs.insert(e.out_dir);
    }
    CHECK(out_dirs.size() == examples.size());
  }
  CHECK(seen >= 4);
}
