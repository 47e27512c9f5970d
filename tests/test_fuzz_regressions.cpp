// test_fuzz_regressions.cpp: the fuzz targets' inputs as regression tests, run through the
// same entry code as the libFuzzer targets (tests/fuzz/fuzz_entries.h). Every input a fuzzer
// ever failed on is kept under tests/fuzz/regressions/<target>/ and must now be rejected
// cleanly (tg::Error or tg::UsageError; names starting "ok_": accepted); the seed corpora
// tests/fuzz/corpus/<target>/ must still be accepted (names starting "bad_": rejected), so
// that they keep reaching the readers' deep paths.
#include <dirent.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "src/base/fileio.h"
#include "tests/fuzz/fuzz_entries.h"

namespace {

using Entry = tgfuzz::Outcome (*)(const uint8_t*, size_t);
struct Target {
  const char* name;
  Entry entry;
};
const Target kTargets[] = {
    {"shard", tgfuzz::fuzz_shard},           {"model_file", tgfuzz::fuzz_model_file},
    {"checkpoint", tgfuzz::fuzz_checkpoint}, {"config", tgfuzz::fuzz_config},
    {"hf_model", tgfuzz::fuzz_hf_model},     {"bpe", tgfuzz::fuzz_bpe}};

// tests/fuzz, found next to this file (the tests run from the repository root).
std::string fuzz_dir() { return tg::join_path(tg::dirname_of(__FILE__), "fuzz"); }

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (tg::file_exists(tg::join_path(dir, e->d_name))) out.push_back(e->d_name);
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Runs every file of tests/fuzz/<kind>/<target>/: each must be rejected when
// reject_default, else accepted, and the other way round when its name starts with
// flip_prefix. Returns how many ran.
int run_all(const char* kind, const Target& t, const std::string& flip_prefix,
            bool reject_default) {
  const std::string dir = tg::join_path(tg::join_path(fuzz_dir(), kind), t.name);
  int n = 0;
  for (const std::string& name : files_in(dir)) {
    std::vector<char> b = tg::read_file(tg::join_path(dir, name), "fuzz input");
    const bool want_reject = reject_default != (name.rfind(flip_prefix, 0) == 0);
    tgfuzz::Outcome o;
    INFO(kind, "/", t.name, "/", name);
    CHECK_NOTHROW(o = t.entry(reinterpret_cast<const uint8_t*>(b.data()), b.size()));
    INFO("outcome: ", o.accepted ? "accepted" : "rejected: " + o.error);
    CHECK(o.accepted != want_reject);
    if (want_reject) CHECK(!o.error.empty());
    n++;
  }
  return n;
}

}  // namespace

TEST_CASE("fuzz regressions: every saved failing input is now rejected cleanly") {
  REQUIRE(tg::dir_exists(tg::join_path(fuzz_dir(), "regressions")));
  int n = 0;
  for (const Target& t : kTargets)
    if (std::string(t.name) != "bpe" || tgfuzz::bpe_vocab_present())
      n += run_all("regressions", t, "ok_", true);
  CHECK(n > 0);
}

TEST_CASE("fuzz seeds: every seed still reaches its reader's accepting path") {
  for (const Target& t : kTargets) {
    REQUIRE(tg::dir_exists(tg::join_path(tg::join_path(fuzz_dir(), "corpus"), t.name)));
    if (std::string(t.name) == "bpe" && !tgfuzz::bpe_vocab_present()) {
      MESSAGE("SKIPPED: the bpe seeds need data/gpt2/ (scripts/setup.sh --gpt2; .ci/run does)");
      continue;
    }
    CHECK(run_all("corpus", t, "bad_", false) > 0);
  }
}
