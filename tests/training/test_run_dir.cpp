// Run directories that cannot mix runs, checkpoints verified as a whole (state.json under a
// manifest, every field range-checked), resume falling back past damaged checkpoints, and
// logs that hold each step once after a resume.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/io/checkpoint.h"
#include "src/training/run_dir.h"
#include "src/training/run_lock.h"
#include "src/io/run_state.h"
#include "tests/test_util.h"

using json = nlohmann::json;
using tgt::run_binary;
using tgt::tiny_args;

namespace {

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

void write_text(const std::string& path, const std::string& text) {
  tg::write_text_atomic(path, text);
}

// Rewrites a checkpoint's state.json with `edit` applied and its manifest made to match,
// as a user who edits both would.
void edit_state(const std::string& ckpt, const std::function<void(json&)>& edit) {
  json st = json::parse(tgt::slurp(ckpt + "/state.json"));
  edit(st);
  const std::string text = st.dump(1) + "\n";
  write_text(ckpt + "/state.json", text);
  json man = json::parse(tgt::slurp(ckpt + "/manifest.json"));
  man["files"]["state.json"]["bytes"] = text.size();
  man["files"]["state.json"]["fnv1a64"] =
      tg::strf("%016llx", (unsigned long long)tg::fnv1a64(text.data(), text.size()));
  write_text(ckpt + "/manifest.json", man.dump(1) + "\n");
}

std::set<long long> steps_of(const std::vector<json>& lines) {
  std::set<long long> s;
  for (const auto& l : lines) s.insert(l["step"].get<long long>());
  return s;
}

}  // namespace

TEST_CASE("run dir: a fresh run refuses a directory with another run; overwrite moves it aside") {
  tgt::TempDir d;
  const std::string run = d / "run";
  std::string out;
  REQUIRE(run_binary(tiny_args(run) + " --train.steps=4 --checkpoint.every=2", &out) == 0);
  const std::string old_summary = tgt::slurp(run + "/summary.json");
  // The same command again: refused, naming the directory and the ways out; nothing changes.
  CHECK(run_binary(tiny_args(run) + " --train.steps=4", &out) == 2);
  CHECK(has(out, run));
  CHECK(has(out, "--checkpoint.resume=true"));
  CHECK(has(out, "--train.out_dir"));
  CHECK(has(out, "--train.overwrite=true"));
  CHECK(tgt::slurp(run + "/summary.json") == old_summary);
  CHECK(tg::list_checkpoints(run).size() == 2);
  // overwrite: the old run's files move to old_run_1/, the new run starts clean.
  REQUIRE(run_binary(tiny_args(run) + " --train.steps=3 --train.overwrite=true", &out) == 0);
  CHECK(has(out, "old_run_1"));
  CHECK(tgt::slurp(run + "/old_run_1/summary.json") == old_summary);
  CHECK(tg::list_checkpoints(run + "/old_run_1").size() == 2);
  CHECK(tgt::read_metrics(run + "/old_run_1/metrics.jsonl", "train").size() == 4);
  CHECK(tgt::read_metrics(run + "/metrics.jsonl", "train").size() == 3);
  const auto ckpts = tg::list_checkpoints(run);
  REQUIRE(ckpts.size() == 1);
  CHECK(ckpts[0] == run + "/ckpt_00000003");
}

TEST_CASE("run dir: one owner: a second process on a live run directory exits 2 naming it") {
  tgt::TempDir d;
  const std::string run = d / "run";
  // Run A: long enough for the three refusals below (each ends within a few ms of starting).
  const std::string a_args = tiny_args(run) +
                             " --train.steps=1000 --checkpoint.every=0 --eval.every=0 "
                             "--sample.tokens=0 --train.log_every=1000 --optim.lr=0.001";
  const pid_t a = tgt::start_binary(a_args, d / "a.log");
  REQUIRE(tgt::wait_for_steps(run, a, 1));
  // It took the lock before writing anything, and says who holds it.
  const json holder = json::parse(tgt::slurp(run + "/" + tg::kRunLockFile), nullptr, false);
  CHECK(holder.is_object());
  if (holder.is_object()) CHECK(holder.value("pid", -1) == a);
  // A fresh start with another learning rate, a resume, and an overwrite that would move A's
  // files aside: each refused with exit code 2, naming A's pid and host.
  const std::string pid = tg::strf("pid %d on host ", int(a));
  std::string out;
  for (const char* other : {" --optim.lr=0.002", " --checkpoint.resume=true",
                            " --train.overwrite=true --optim.lr=0.002"}) {
    INFO(other);
    CHECK(run_binary(tiny_args(run) + " --train.steps=4" + other, &out) == 2);
    INFO(out);
    CHECK(has(out, "train.out_dir " + run + " is in use by another run: " + pid));
  }
  CHECK(has(out, "train.overwrite never moves a run that is still going"));
  int status = 0;
  REQUIRE(waitpid(a, &status, WNOHANG) == 0);  // the refusals came while A was running
  // A ends as if alone: its config, every step once, its summary.
  REQUIRE(waitpid(a, &status, 0) == a);
  INFO(tgt::slurp(d / "a.log"));
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_FALSE(tg::dir_exists(run + "/old_run_1"));
  CHECK(json::parse(tgt::slurp(run + "/config.json"))["optim"]["lr"] == 0.001);
  const auto train = tgt::read_metrics(run + "/metrics.jsonl", "train");
  REQUIRE(train.size() == 1000);
  for (size_t i = 0; i < train.size(); i++) CHECK(train[i]["step"] == i + 1);
  CHECK(json::parse(tgt::slurp(run + "/summary.json"))["steps"] == 1000);
  // The lock went with A: the directory is free for the next run.
  CHECK(run_binary(tiny_args(run) + " --train.steps=2 --train.overwrite=true", &out) == 0);
}

TEST_CASE("run dir: sample and export verify a checkpoint as resume does; a NaN weight is named") {
  tgt::TempDir d;
  const std::string run = d / "run", c4 = run + "/ckpt_00000004";
  const std::string args =
      tiny_args(run) + " --train.steps=4 --checkpoint.every=2 --checkpoint.keep=3";
  std::string out;
  REQUIRE(run_binary(args, &out) == 0);
  // wte's element 5 made NaN; the checksums in state.json not updated.
  std::string model = tgt::slurp(c4 + "/model.bin");
  const float nan = NAN;
  memcpy(&model[1024 + 4 * 5], &nan, 4);
  write_text(c4 + "/model.bin", model);
  const std::string sample = "sample --tokens 4 --checkpoint ", to = " --out " + d / "hf";
  CHECK(run_binary(sample + run, &out) == 1);  // a run directory: its latest checkpoint
  CHECK(has(out, "checkpoint file " + c4 + "/model.bin is corrupt: checksum mismatch"));
  CHECK(run_binary("export --checkpoint " + c4 + to, &out) == 1);
  CHECK(has(out, "checkpoint file " + c4 + "/model.bin is corrupt: checksum mismatch"));
  CHECK_FALSE(tg::file_exists(d / "hf/model.safetensors"));
  // The checksums made to match, as an editor would: the weight itself is refused, by tensor.
  edit_state(c4, [&](json& st) {
    st["files"]["model.bin"]["bytes"] = model.size();
    st["files"]["model.bin"]["fnv1a64"] =
        tg::strf("%016llx", (unsigned long long)tg::fnv1a64(model.data(), model.size()));
  });
  const std::string named =
      "model file " + c4 +
      "/model.bin: tensor wte holds a non-finite weight (nan, element 5 of 4096)";
  CHECK(run_binary(sample + c4, &out) == 1);
  CHECK(has(out, named));
  CHECK(run_binary("export --checkpoint " + c4 + to, &out) == 1);
  CHECK(has(out, named));
  CHECK_FALSE(tg::file_exists(d / "hf/model.safetensors"));
  // Resume rejects it by the same words and goes on from the older checkpoint.
  REQUIRE(run_binary(args + " --checkpoint.resume=true", &out) == 0);
  CHECK(has(out, c4 + " rejected: " + named.substr(0, named.find(" (nan"))));
  CHECK(has(out, "resumed from " + run + "/ckpt_00000002"));
  // The good checkpoint the resumed run wrote samples and exports.
  CHECK(run_binary(sample + run, &out) == 0);
  CHECK(run_binary("export --checkpoint " + run + to, &out) == 0);
}

TEST_CASE("run dir: pruning keeps other runs' checkpoints; resume skips a foreign newer one") {
  tgt::TempDir d;
  const std::string a = d / "a", b = d / "b";
  std::string out;
  // Run A: a checkpoint at step 8.
  REQUIRE(run_binary(tiny_args(a) + " --train.steps=8 --checkpoint.every=0", &out) == 0);
  // Run B stops at step 2; A's step-8 checkpoint is copied in beside it.
  const std::string bargs =
      tiny_args(b) + " --train.steps=6 --checkpoint.every=2 --checkpoint.keep=1";
  REQUIRE(run_binary(bargs + " --train.stop_at_step=2", &out) == 0);
  REQUIRE(tgt::run_shell("cp -r '" + a + "/ckpt_00000008' '" + b + "/'") == 0);
  // Resuming B: A's checkpoint is newer but beyond train.steps=6: rejected, named, kept.
  REQUIRE(run_binary(bargs + " --checkpoint.resume=true", &out) == 0);
  CHECK(has(out, "ckpt_00000008 rejected"));
  CHECK(has(out, "field 'step' is 8, beyond train.steps=6"));
  CHECK(has(out, "resumed from " + b + "/ckpt_00000002"));
  // keep=1 pruned B's own older checkpoints only.
  const auto ckpts = tg::list_checkpoints(b);
  REQUIRE(ckpts.size() == 2);
  CHECK(ckpts[0] == b + "/ckpt_00000006");
  CHECK(ckpts[1] == b + "/ckpt_00000008");
}

TEST_CASE("run dir: an edited or damaged state.json is rejected by name; resume falls back") {
  tgt::TempDir d;
  const std::string run = d / "run";
  std::string out;
  const std::string args =
      tiny_args(run) + " --train.steps=6 --checkpoint.every=2 --checkpoint.keep=5";
  REQUIRE(run_binary(args + " --train.stop_at_step=4", &out) == 0);
  const std::string c2 = run + "/ckpt_00000002", c4 = run + "/ckpt_00000004";

  SUBCASE("step edited to 1e12 (manifest left alone): the checksum catches it") {
    json st = json::parse(tgt::slurp(c4 + "/state.json"));
    st["step"] = 1000000000000LL;
    write_text(c4 + "/state.json", st.dump(1));
    REQUIRE(run_binary(args + " --checkpoint.resume=true", &out) == 0);
    CHECK(has(out, "state.json is damaged or was edited"));
    CHECK(has(out, "resumed from " + c2 + " at step 2"));
  }
  SUBCASE("step edited to 1e12 with a matching manifest: the range check names the field") {
    edit_state(c4, [](json& st) { st["step"] = 1000000000000LL; });
    REQUIRE(run_binary(args + " --checkpoint.resume=true", &out) == 0);
    CHECK(has(out, "field 'step' is 1000000000000, beyond train.steps=6"));
    CHECK(has(out, "resumed from " + c2 + " at step 2"));
    CHECK_FALSE(has(out, "-2147483648"));
  }
  SUBCASE("step disagreeing with completed_steps") {
    edit_state(c4, [](json& st) { st["step"] = 3; });
    REQUIRE(run_binary(args + " --checkpoint.resume=true", &out) == 0);
    CHECK(has(out, "field 'completed_steps' is 4"));
  }
  SUBCASE("state.json deleted") {
    tg::remove_tree(c4 + "/state.json");
    REQUIRE(run_binary(args + " --checkpoint.resume=true", &out) == 0);
    CHECK(has(out, c4 + " rejected"));
    CHECK(has(out, "resumed from " + c2));
  }
  SUBCASE("state.json truncated") {
    const std::string t = tgt::slurp(c4 + "/state.json");
    write_text(c4 + "/state.json", t.substr(0, t.size() / 2));
    REQUIRE(run_binary(args + " --checkpoint.resume=true", &out) == 0);
    CHECK(has(out, c4 + " rejected"));
    CHECK(has(out, "resumed from " + c2));
  }
  SUBCASE("every checkpoint damaged: an error listing each, exit 1, nothing deleted") {
    tg::remove_tree(c4 + "/state.json");
    tg::remove_tree(c2 + "/manifest.json");
    CHECK(run_binary(args + " --checkpoint.resume=true", &out) == 1);
    CHECK(has(out, "no checkpoint in " + run + " verifies"));
    CHECK(has(out, c2));
    CHECK(has(out, c4));
  }
  // Whatever was rejected is still there.
  CHECK(tg::dir_exists(c4));
  CHECK(tg::dir_exists(c2));
}

TEST_CASE("run dir: a resumed run logs every step once (metrics.jsonl, samples.txt)") {
  tgt::TempDir d;
  const std::string run = d / "run";
  std::string out;
  const std::string args = tiny_args(run) +
                           " --train.steps=8 --checkpoint.every=4 --checkpoint.keep=5 "
                           "--eval.every=2 --sample.every=2";
  REQUIRE(run_binary(args, &out) == 0);
  // As if killed after step 8 with only step 4's checkpoint: steps 5-8 run again.
  tg::remove_tree(run + "/ckpt_00000008");
  REQUIRE(run_binary(args + " --checkpoint.resume=true", &out) == 0);
  REQUIRE(run_binary(args + " --checkpoint.resume=true", &out) == 0);  // from the final one
  const auto train = tgt::read_metrics(run + "/metrics.jsonl", "train");
  const auto val = tgt::read_metrics(run + "/metrics.jsonl", "val");
  CHECK(train.size() == 8);
  CHECK(steps_of(train).size() == 8);
  CHECK(val.size() == 5);  // steps 0, 2, 4, 6, 8
  CHECK(steps_of(val).size() == 5);
  const std::string samples = tgt::slurp(run + "/samples.txt");
  for (int s : {2, 4, 6, 8}) {
    const std::string tag = "--- step " + std::to_string(s) + "\n";
    const size_t first = samples.find(tag);
    CHECK(first != std::string::npos);
    CHECK(samples.find(tag, first + 1) == std::string::npos);
  }
}

TEST_CASE("run state: every field is range-checked against the others and the run") {
  tg::GPTConfig mc = tg::gpt_config(1, 2, 16, 256, 32);
  tg::RunState s;
  s.run_id = "0123456789abcdef";
  s.step = 10;
  s.opt_step = 9;
  s.counters.skipped_steps = 1;
  s.counters.tokens_seen = 10 * 128;
  s.batch_size = 4;
  s.seq_len = 32;
  s.data.row = 8;
  s.mode = tg::Mode::FP16;
  s.loss_scale.kind = tg::LossScaling::Dynamic;
  s.loss_scale.scale = 32768;
  s.sample_rng = tg::Rng(5);
  s.model = mc;
  s.num_params = tg::num_parameters(mc);
  s.config = json::object();
  tg::ResumeRequirements req;
  req.model = mc;
  req.num_params = s.num_params;
  req.batch_size = 4;
  req.seq_len = 32;
  req.steps = 20;
  req.step_tokens = 128;
  req.train_shards = 1;
  req.train_tokens = 65536;
  const json good = tg::run_state_to_json(s);
  const tg::RunState back = tg::run_state_from_json(good, "S", req);
  CHECK(back.step == 10);
  CHECK(back.opt_step == 9);
  CHECK(back.data.row == 8);
  CHECK(back.loss_scale.scale == 32768);
  CHECK(back.sample_rng.s[0] == s.sample_rng.s[0]);

  auto error_with = [&](const std::function<void(json&)>& edit) {
    json j = good;
    edit(j);
    return tgt::error_of([&] { tg::run_state_from_json(j, "S", req); });
  };
  CHECK(has(error_with([](json& j) { j["step"] = 1000000000000LL; }), "field 'step'"));
  CHECK(has(error_with([](json& j) { j["step"] = -1; }), "field 'step' is -1"));
  CHECK(has(error_with([](json& j) { j["step"] = 1e300; }), "field 'step' is not an integer"));
  CHECK(has(error_with([](json& j) { j["step"] = "ten"; }), "field 'step' is not an integer"));
  CHECK(has(error_with([](json& j) { j["step"] = 25; }), "beyond train.steps=20"));
  CHECK(has(error_with([](json& j) { j["completed_steps"] = 9; }), "field 'completed_steps'"));
  CHECK(has(error_with([](json& j) { j["precision"]["opt_step"] = 10; }),
            "field 'precision.opt_step'"));
  CHECK(has(error_with([](json& j) { j["counters"]["skipped_steps"] = 11; }),
            "field 'counters.skipped_steps'"));
  CHECK(has(error_with([](json& j) { j["counters"]["tokens_seen"] = -5; }),
            "field 'counters.tokens_seen'"));
  CHECK(has(error_with([](json& j) { j["data"]["shard"] = 1; }), "field 'data.shard'"));
  CHECK(has(error_with([](json& j) { j["data"]["row"] = 6; }), "field 'data.row'"));
  CHECK(has(error_with([](json& j) { j["data"]["epoch"] = 99; }), "field 'data.epoch'"));
  CHECK(has(error_with([](json& j) { j["data"]["batch_size"] = 8; }), "field 'data'"));
  CHECK(has(error_with([](json& j) {
              j["rng"]["sample"] = json::array({1, 2, 3});
            }),
            "field 'rng.sample'"));
  CHECK(has(error_with([](json& j) {
              j["rng"]["sample"] = json::array({0, 0, 0, 0});
            }),
            "all zeros"));
  CHECK(has(error_with([](json& j) { j["rng"]["sample"][2] = -4; }), "field 'rng.sample.2'"));
  CHECK(has(error_with([](json& j) { j["precision"]["loss_scale"]["scale"] = -1.0; }),
            "field 'precision.loss_scale.scale'"));
  CHECK(has(error_with([](json& j) { j["precision"]["mode"] = "fp7"; }), "field 'precision.mode'"));
  CHECK(has(error_with([](json& j) { j["model"]["n_layer"] = 2; }), "field 'model.n_layer'"));
  CHECK(has(error_with([](json& j) { j["num_params"] = 5; }), "field 'num_params'"));
  CHECK(has(error_with([](json& j) { j.erase("counters"); }), "is missing"));
  CHECK(has(error_with([](json& j) { j["initial_val_loss"] = -3.0; }), "field 'initial_val_loss'"));
  CHECK(has(error_with([](json& j) { j["fp8"] = json::array(); }), "field 'fp8'"));
  // Every message names the state file.
  CHECK(has(error_with([](json& j) { j["step"] = -1; }), "checkpoint state S:"));
}

TEST_CASE("run dir: truncate_run_logs keeps the records up to the checkpoint's step") {
  tgt::TempDir d;
  write_text(d / "metrics.jsonl",
             "{\"kind\":\"val\",\"step\":0}\n{\"kind\":\"train\",\"step\":1}\n"
             "{\"kind\":\"train\",\"step\":2}\n{\"kind\":\"val\",\"step\":2}\n"
             "{\"kind\":\"train\",\"step\":3}\n{\"kind\":\"tra");
  write_text(d / "samples.txt", "--- step 2\nab\ncd\n--- step 3\nef\n");
  tg::truncate_run_logs(d.path, 2);
  CHECK(tgt::slurp(d / "metrics.jsonl") ==
        "{\"kind\":\"val\",\"step\":0}\n{\"kind\":\"train\",\"step\":1}\n"
        "{\"kind\":\"train\",\"step\":2}\n{\"kind\":\"val\",\"step\":2}\n");
  CHECK(tgt::slurp(d / "samples.txt") == "--- step 2\nab\ncd\n");
  CHECK(tg::earlier_run_files(d.path).size() == 2);
}

TEST_CASE("messages: config files and subcommand options are checked like config keys") {
  tgt::TempDir d;
  std::string out;
  // --config naming a directory: exit 2, naming it.
  CHECK(run_binary("train --config " + d.path, &out) == 2);
  CHECK(has(out, d.path));
  CHECK(has(out, "not a regular file"));
  CHECK_FALSE(has(out, "basic_filebuf"));
  // A section that is not an object.
  write_text(d / "arr.json", "{\"model\": [2, 2]}");
  CHECK(run_binary("train --config " + d / "arr.json", &out) == 2);
  CHECK(has(out, "config section 'model'"));
  CHECK(has(out, "must be a JSON object, not array"));
  CHECK(has(out, d / "arr.json"));
  // A key given twice.
  write_text(d / "dup.json", "{\"model\": {\"n_layer\": 2, \"n_layer\": 3}}");
  CHECK(run_binary("train --config " + d / "dup.json", &out) == 2);
  CHECK(has(out, "key 'model.n_layer' appears twice"));
  write_text(d / "dup2.json", "{\"optim\": {\"lr\": 1e-3}, \"optim\": {\"lr\": 2e-3}}");
  CHECK(run_binary("train --config " + d / "dup2.json", &out) == 2);
  CHECK(has(out, "key 'optim' appears twice"));
  // The same key name in two sections is fine.
  write_text(d / "ok.json",
             "{\"train\": {\"steps\": 1}, \"eval\": {\"every\": 1}, \"sample\": {\"every\": 1}}");
  CHECK(run_binary("train --config " + d / "ok.json" + " --help", &out) == 0);
  // Command-line errors read as English.
  CHECK(run_binary("train --optim.lr=abc", &out) == 2);
  CHECK(has(out, "'optim.lr' on the command line"));
  CHECK_FALSE(has(out, "in on the command line"));
  // sample: numeric options validated, naming the option.
  REQUIRE(run_binary(tiny_args(d / "run") + " --train.steps=1 --sample.tokens=0", &out) == 0);
  const std::string ck = "sample --checkpoint " + d / "run";
  for (const char* bad : {"--tokens=-1", "--tokens=0", "--temperature=nan", "--temperature=-1",
                          "--top_k=-5", "--seed=-3", "--threads=x"}) {
    CAPTURE(bad);
    CHECK(run_binary(ck + " " + bad, &out) == 2);
    CHECK(has(out, std::string("option --") +
                       std::string(bad).substr(2, std::string(bad).find('=') - 2)));
  }
  CHECK(run_binary(ck + " --tokens=4 --temperature=0", &out) == 0);
  // Other subcommands' numeric options.
  CHECK(run_binary("prepare toy --out " + d / "t" + " --record_len=0", &out) == 2);
  CHECK(has(out, "option --record_len"));
  CHECK(run_binary("memory --zero_ranks=0", &out) == 2);
  CHECK(has(out, "option --zero_ranks"));
  CHECK(run_binary("bench --iters=1", &out) == 2);
  CHECK(has(out, "option --iters"));
}

TEST_CASE("switches: cuda.* keys reach the backend, config.json and the memory plan") {
  tgt::TempDir d;
  std::string out;
  // An old config's flash (the hand-written kernels have gone): read as cudnn, whose CPU twin
  // keeps lse, with a one-line notice; the config keeps the value as written.
  REQUIRE(run_binary(tiny_args(d / "run") + " --train.steps=2 --cuda.attention=flash", &out) == 0);
  CHECK(has(out,
            "notice: cuda.attention=flash: the hand-written flash kernels have gone; read "
            "as cudnn"));
  CHECK(has(out, "attention: lse (the CPU's lse twin of cuda.attention=flash (read as cudnn)"));
  const json cfg = json::parse(tgt::slurp(d / "run/config.json"));
  CHECK(cfg["cuda"]["attention"] == "flash");
  CHECK(cfg["cuda"]["gemm"] == "lt");
  CHECK(cfg["precision"]["loss_scale"]["on_device"] == false);
  const json st = json::parse(tgt::slurp(d / "run/ckpt_00000002/state.json"));
  CHECK(st["config"]["cuda"]["attention"] == "flash");
  // Resumed from that checkpoint: the same notice and path, not an error.
  REQUIRE(run_binary(tiny_args(d / "run") + " --train.steps=3 --cuda.attention=flash " +
                         "--checkpoint.resume=true",
                     &out) == 0);
  CHECK(has(out, "notice: cuda.attention=flash"));
  CHECK(has(out, "attention: lse"));
  REQUIRE(run_binary("memory --cuda.attention=flash", &out) == 0);
  CHECK(has(out, "notice: cuda.attention=flash"));
  CHECK(has(out, "attention keeping lse"));
  CHECK(has(out, "cuDNN's workspace is in the attention column"));
  // An old config's fused (the single-pass forward has gone): read as cublas, on the CPU its
  // reference, with a one-line notice; its checkpoint, which names fused, resumes.
  REQUIRE(run_binary(tiny_args(d / "run_fused") + " --train.steps=2 --cuda.attention=fused",
                     &out) == 0);
  CHECK(has(out, "notice: cuda.attention=fused: the single-pass forward has gone; read as cublas"));
  CHECK_FALSE(has(out, "attention: lse"));
  CHECK(json::parse(tgt::slurp(
            d / "run_fused/ckpt_00000002/state.json"))["config"]["cuda"]["attention"] == "fused");
  REQUIRE(run_binary(tiny_args(d / "run_fused") + " --train.steps=3 --cuda.attention=fused " +
                         "--checkpoint.resume=true",
                     &out) == 0);
  CHECK(has(out, "notice: cuda.attention=fused"));
  REQUIRE(run_binary("memory --cuda.attention=fused", &out) == 0);
  CHECK(has(out, "notice: cuda.attention=fused"));
  CHECK(run_binary("train --cuda.attention=magic", &out) == 2);
  CHECK(has(out, "auto|cublas|fused|cudnn|flash"));
  // cudnn's CPU twin keeps lse; the memory plan counts cuDNN's workspace for the GPU.
  REQUIRE(run_binary(tiny_args(d / "run_cudnn") + " --train.steps=1 --cuda.attention=cudnn",
                     &out) == 0);
  CHECK(has(out, "attention: lse (the CPU's lse twin of cuda.attention=cudnn:"));
  CHECK_FALSE(has(out, "notice:"));
  REQUIRE(run_binary("memory --cuda.attention=cudnn --modes=bf16,fp32", &out) == 0);
  CHECK(has(out, "cuDNN's workspace is in the attention column"));
  CHECK(has(out, "fp32: cuda.attention=cudnn cannot run"));
  REQUIRE(run_binary("memory", &out) == 0);
  CHECK(has(out, "cuda.attention=auto is planned as cublas"));
}

TEST_CASE("bench: every row has its spread over the repeats and its share of the sgemm ceiling") {
  std::string out;
  REQUIRE(run_binary("bench --iters=3 --repeats=2 --modes=fp32,bf16 --threads=2", &out) == 0);
  INFO(out);
  CHECK(has(out, "2 repeats interleaved"));
  CHECK(has(out, "CPU: "));
  CHECK(has(out, "instruction sets: "));
  CHECK(has(out, "narrow-mode GEMMs: "));
  CHECK(has(out, "| spread |"));
  CHECK(has(out, "| of sgemm |"));
  // A row: ms/step, then the repeats' min-max, then tokens/s, GFLOP/s and the share in %.
  std::istringstream lines(out);
  int rows = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| small (L4 C256", 0) != 0) continue;
    std::vector<std::string> cells;
    std::istringstream cs(line);
    for (std::string c; std::getline(cs, c, '|');) cells.push_back(c);
    REQUIRE(cells.size() >= 10);
    const double ms = std::stod(cells[5]);
    const double lo = std::stod(cells[6]), hi = std::stod(cells[6].substr(cells[6].find('-') + 1));
    CHECK(lo <= ms);
    CHECK(ms <= hi);
    CHECK(cells[9].find('%') != std::string::npos);
    rows++;
  }
  CHECK(rows == 2);
}
