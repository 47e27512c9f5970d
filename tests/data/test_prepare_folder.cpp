// prepare text --tokenizer gpt2 on a folder with symlinks: links to files are read (with a
// note when they lead out of the folder), loops, dangling links and linked folders are skipped
// with a warning, and the run goes on.
#include <doctest/doctest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "src/base/fileio.h"
#include "tests/test_util.h"

TEST_CASE("prepare gpt2: a folder's symlinks: out of it noted, loops and folders skipped") {
  const std::string vocab = tgt::gpt2_vocab_dir();
  if (vocab.empty()) {
    MESSAGE(tgt::kNoGpt2Vocab);
    return;
  }
  tgt::TempDir d;
  std::filesystem::create_directories(d / "docs/sub");
  tg::write_text_atomic(d / "docs/a.txt", "A first document.\n");
  tg::write_text_atomic(d / "docs/sub/b.txt", "A second one.\n");
  tg::write_text_atomic(d / "outside.txt", "From outside the folder.\n");
  REQUIRE(tgt::run_shell("cd '" + (d / "docs") +
                         "' && ln -s a.txt link_in && ln -s ../outside.txt link_out && "
                         "ln -s loop2 loop1 && ln -s loop1 loop2 && ln -s nowhere dangling && "
                         "ln -s .. sub/up") == 0);
  std::string out;
  const int rc = tgt::run_binary("prepare text --tokenizer gpt2 --vocab_dir '" + vocab +
                                     "' --input '" + (d / "docs") + "' --out '" + (d / "out") + "'",
                                 &out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("note: input folder " + (d / "docs") +
                 ": read these symlinks, which lead out of it: " + (d / "docs/link_out") + " -> " +
                 std::filesystem::canonical(d / "outside.txt").string()) != std::string::npos);
  CHECK(out.find("warning: input folder " + (d / "docs") + ": skipped these symlinks: ") !=
        std::string::npos);
  for (const char* skipped :
       {"dangling (No such file or directory)", "loop1 (Too many levels of symbolic links)",
        "loop2 (Too many levels of symbolic links)", "sub/up -> "})
    CHECK_MESSAGE(out.find(skipped) != std::string::npos, skipped);
  CHECK(out.find("link_in") == std::string::npos);  // inside: read without a word
  // a.txt, b.txt, link_in and link_out: four documents in the two splits.
  const auto meta = nlohmann::json::parse(tgt::slurp(d / "out/meta.json"));
  INFO(meta.dump());
  CHECK(meta["documents"]["train"].get<int>() + meta["documents"]["val"].get<int>() == 4);
}
