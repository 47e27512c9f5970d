// What interrupted checkpoint writes and prunes leave in a run directory: removed when the
// run resumes (only what cannot be a valid checkpoint), said on one line; pruning that a
// kill interrupts leaves a name the cleanup knows.
#include <doctest/doctest.h>

#include <fstream>

#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/io/checkpoint.h"
#include "src/io/checkpoint_cleanup.h"
#include "tests/test_util.h"

using namespace tg;

namespace {

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

void sh(const std::string& script) { REQUIRE(tgt::run_shell(script) == 0); }

// A run directory with two checkpoints of run-a (steps 10 and 20) and one of run-b (5).
void two_checkpoints(const std::string& dir) {
  const GPTConfig c = gpt_config(2, 2, 8, 100, 16);
  std::vector<float> p(num_parameters(c), 0.5f), m(p.size(), 0.0f), v(p.size(), 0.0f);
  save_checkpoint(dir, 5, c, {{"run_id", "run-b"}}, p, m, v, 3);
  for (int step : {10, 20}) save_checkpoint(dir, step, c, {{"run_id", "run-a"}}, p, m, v, 3);
}

}  // namespace

TEST_CASE("cleanup: leftovers of killed writes and prunes go, evidence stays, .old comes back") {
  tgt::TempDir d;
  const std::string o = d.path;
  two_checkpoints(o);
  sh("cd '" + o + "' && cp -r ckpt_00000020 .ckpt_00000030.tmp && cp -r ckpt_00000020 " +
     ".ckpt_00000012.pruning && cp -r ckpt_00000020 ckpt_00000015 && rm ckpt_00000015/state.json" +
     " && cp -r ckpt_00000020 ckpt_00000016 && rm ckpt_00000016/model.bin && cp -r " +
     "ckpt_00000020 ckpt_00000017 && echo garbage > ckpt_00000017/state.json && cp -r " +
     "ckpt_00000020 ckpt_00000018 && rm ckpt_00000018/manifest.json && cp -r ckpt_00000020 " +
     ".ckpt_00000020.old && cp -r ckpt_00000020 .ckpt_00000022.old && mkdir ckpt_00000019 && " +
     "mkdir ckpt_00000025 && echo x > config.json.4242.tmp && echo x > notes.tmp && cp -r "
     "ckpt_00000005 " +
     "ckpt_00000005.replaced-1");
  const RunDirCleanup c = cleanup_run_dir(o);
  const std::string line = cleanup_line(o, c);
  CHECK(has(line, "removed 8 leftovers of interrupted checkpoint writes and prunes"));
  for (const char* gone :
       {".ckpt_00000030.tmp", ".ckpt_00000012.pruning", "ckpt_00000015 (no state.json)",
        "ckpt_00000016 (no model.bin)", "ckpt_00000018 (no manifest.json)",
        "ckpt_00000019 (no state.json)", ".ckpt_00000020.old", "config.json.4242.tmp"})
    CHECK_MESSAGE(has(line, gone), gone);
  CHECK(has(line, "restored ckpt_00000022, whose replacement was never completed"));
  for (const char* gone :
       {".ckpt_00000030.tmp", ".ckpt_00000012.pruning", "ckpt_00000015", "ckpt_00000016",
        "ckpt_00000018", "ckpt_00000019", ".ckpt_00000020.old", ".ckpt_00000022.old"})
    CHECK_FALSE_MESSAGE(dir_exists(o + "/" + gone), gone);
  CHECK_FALSE(file_exists(o + "/config.json.4242.tmp"));
  // What stays: complete checkpoints, damaged ones (evidence), what was moved aside, a file
  // that is not one of our temporary names; the restored .old verifies.
  // ckpt_00000025 lacks its files but no complete checkpoint is newer: not a pruning's.
  for (const char* kept : {"ckpt_00000005", "ckpt_00000010", "ckpt_00000017", "ckpt_00000020",
                           "ckpt_00000025", "ckpt_00000022", "ckpt_00000005.replaced-1"})
    CHECK_MESSAGE(dir_exists(o + "/" + kept), kept);
  CHECK(file_exists(o + "/notes.tmp"));
  CHECK(read_checkpoint_state(o + "/ckpt_00000022")["step"] == 20);
  // Nothing left: no line, nothing changes.
  CHECK(cleanup_line(o, cleanup_run_dir(o)).empty());
}

TEST_CASE("cleanup: pruning renames before it deletes, so a kill part way is recognisable") {
  tgt::TempDir d;
  two_checkpoints(d.path);
  remove_checkpoint_dir(d.path + "/ckpt_00000010");
  CHECK_FALSE(dir_exists(d.path + "/ckpt_00000010"));
  CHECK_FALSE(dir_exists(d.path + "/.ckpt_00000010.pruning"));
  CHECK(list_checkpoints(d.path).size() == 2);
}

TEST_CASE("cleanup: a resumed run removes a half-deleted checkpoint and an orphan .tmp") {
  tgt::TempDir d;
  const std::string o = d / "run";
  const std::string args =
      tgt::tiny_args(o) + " --train.steps=8 --checkpoint.every=2" + " --checkpoint.keep=1";
  std::string out;
  REQUIRE(tgt::run_binary(args + " --train.stop_at_step=4", &out) == 0);
  // What a kill inside the old pruning (ckpt_00000002 deleted in place) and a rank that died
  // mid-checkpoint leave.
  sh("cd '" + o + "' && cp -r ckpt_00000004 ckpt_00000002 && rm ckpt_00000002/state.json && " +
     "cp -r ckpt_00000004 .ckpt_00000006.tmp && rm .ckpt_00000006.tmp/manifest.json");
  REQUIRE(tgt::run_binary(args + " --checkpoint.resume=true", &out) == 0);
  CHECK(has(out,
            "removed 2 leftovers of interrupted checkpoint writes and prunes: "
            ".ckpt_00000006.tmp, ckpt_00000002 (no state.json)"));
  CHECK(has(out, "resumed from " + o + "/ckpt_00000004 at step 4"));
  const auto ckpts = list_checkpoints(o);
  REQUIRE(ckpts.size() == 1);
  CHECK(ckpts[0] == o + "/ckpt_00000008");
  CHECK_FALSE(dir_exists(o + "/.ckpt_00000006.tmp"));
}
