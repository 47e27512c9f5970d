// Model files (llm.c format) and checkpoints: round trips, headers, atomicity, errors.
#include <doctest/doctest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <fstream>

#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/io/checkpoint.h"
#include "src/numerics/moment_block.h"
#include "tests/test_util.h"

using namespace tg;
using tgt::error_of;

namespace {
GPTConfig small_cfg() { return gpt_config(2, 2, 8, 100, 16); }
std::vector<float> random_params(size_t n, uint64_t seed) {
  Rng r(seed);
  std::vector<float> p(n);
  for (auto& x : p) x = float(r.normal());
  return p;
}
}  // namespace

TEST_CASE("checkpoint: model file header is llm.c's version 3, byte by byte") {
  tgt::TempDir d;
  GPTConfig c = small_cfg();
  auto p = random_params(num_parameters(c), 1);
  write_model_file(d / "m.bin", c, p);
  std::vector<char> b = read_file(d / "m.bin", "model");
  REQUIRE(b.size() == 1024 + 4 * p.size());
  int32_t h[256];
  memcpy(h, b.data(), 1024);
  CHECK(h[0] == 20240326);
  CHECK(h[1] == 3);
  CHECK(h[2] == 16);
  CHECK(h[3] == 100);
  CHECK(h[4] == 2);
  CHECK(h[5] == 2);
  CHECK(h[6] == 8);
  CHECK(h[7] == 128);
  for (int i = 8; i < 256; i++) CHECK(h[i] == 0);
  CHECK(memcmp(b.data() + 1024, p.data(), 4 * p.size()) == 0);
  ModelFile mf = read_model_file(d / "m.bin");
  CHECK(mf.params == p);
  CHECK(mf.cfg.padded_vocab_size == 128);
}

TEST_CASE("checkpoint: bf16 model files (version 5) load exactly") {
  tgt::TempDir d;
  GPTConfig c = small_cfg();
  size_t n = num_parameters(c);
  std::vector<char> b(1024 + 2 * n, 0);
  int32_t h[256] = {20240326, 5, 16, 100, 2, 2, 8, 128};
  memcpy(b.data(), h, sizeof(h));
  for (size_t i = 0; i < n; i++) {
    uint16_t v = uint16_t(0x3F80 + (i % 7));  // 1.0, 1.0078125, ...
    memcpy(b.data() + 1024 + 2 * i, &v, 2);
  }
  std::ofstream(d / "m5.bin", std::ios::binary).write(b.data(), std::streamsize(b.size()));
  ModelFile mf = read_model_file(d / "m5.bin");
  CHECK(mf.params[0] == 1.0f);
  CHECK(mf.params[1] == 1.0078125f);
}

TEST_CASE("checkpoint: bad model files name the file and the problem") {
  tgt::TempDir d;
  GPTConfig c = small_cfg();
  write_model_file(d / "m.bin", c, random_params(num_parameters(c), 2));
  std::vector<char> good = read_file(d / "m.bin", "model");
  auto write = [&](const std::string& name, std::vector<char> b) {
    std::ofstream(d / name, std::ios::binary).write(b.data(), std::streamsize(b.size()));
    return d / name;
  };
  std::vector<char> b = good;
  b[0] = 1;
  CHECK(error_of([&] { read_model_file(write("magic.bin", b)); }).find("bad magic") !=
        std::string::npos);
  b = good;
  b.resize(b.size() - 4);
  std::string e = error_of([&] { read_model_file(write("short.bin", b)); });
  CHECK(e.find("short.bin") != std::string::npos);
  CHECK(e.find("truncated") != std::string::npos);
  b = good;
  b[4] = 4;
  CHECK(error_of([&] { read_model_file(write("ver.bin", b)); }).find("unsupported version") !=
        std::string::npos);
  b = good;
  b[6 * 4] = 7;  // C = 7 is not a multiple of NH = 2
  CHECK(error_of([&] { read_model_file(write("hdr.bin", b)); }).find("invalid header") !=
        std::string::npos);
}

TEST_CASE("checkpoint: save, list, keep the last K, load and verify") {
  tgt::TempDir d;
  GPTConfig c = small_cfg();
  size_t n = num_parameters(c);
  auto p = random_params(n, 3), m = random_params(n, 4), v = random_params(n, 5);
  nlohmann::json st = {{"hello", 1}, {"run_id", "run-a"}};
  // A checkpoint of another run is never pruned.
  save_checkpoint(d.path, 5, c, {{"run_id", "run-b"}}, p, m, v, 1);
  for (int step : {10, 20, 30}) save_checkpoint(d.path, step, c, st, p, m, v, 2);
  auto all = list_checkpoints(d.path);
  REQUIRE(all.size() == 3);
  CHECK(all[0] == d / "ckpt_00000005");
  all.erase(all.begin());
  CHECK(all[0] == d / "ckpt_00000020");
  CHECK(all[1] == d / "ckpt_00000030");
  CheckpointData cd = load_checkpoint(all[1], c);
  CHECK(cd.params == p);
  CHECK(cd.m == m);
  CHECK(cd.v == v);
  CHECK(cd.state["hello"] == 1);
  CHECK(cd.state["step"] == 30);
  // The model file inside is a plain llm.c file.
  CHECK(read_model_file(all[1] + "/model.bin").params == p);
  // Architecture mismatch names the key.
  GPTConfig other = c;
  other.n_layer = 3;
  std::string e = error_of([&] { load_checkpoint(all[1], other); });
  CHECK(e.find("model.n_layer") != std::string::npos);
  CHECK(e.find("does not match") != std::string::npos);
  // No temporary directories remain.
  for (const char* tmp : {".ckpt_00000030.tmp", ".ckpt_00000030.old"})
    CHECK_FALSE(dir_exists(d / tmp));
}

TEST_CASE("checkpoint: corruption is detected and named") {
  tgt::TempDir d;
  GPTConfig c = small_cfg();
  size_t n = num_parameters(c);
  auto p = random_params(n, 6);
  std::string dir = save_checkpoint(d.path, 5, c, {}, p, p, p, 3);
  {
    std::fstream f(dir + "/optim.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2000);
    f.put('x');
  }
  std::string e = error_of([&] { load_checkpoint(dir, c); });
  CHECK(e.find("optim.bin") != std::string::npos);
  CHECK(e.find("checksum") != std::string::npos);
  truncate((dir + "/model.bin").c_str(), 500);
  e = error_of([&] { load_checkpoint(dir, c); });
  CHECK(e.find("model.bin") != std::string::npos);
  unlink((dir + "/state.json").c_str());
  e = error_of([&] { load_checkpoint(dir, c); });
  CHECK(e.find("state.json") != std::string::npos);
}

TEST_CASE("checkpoint: a full disk fails cleanly and leaves earlier checkpoints intact") {
  tgt::TempDir d;
  GPTConfig c = small_cfg();
  size_t n = num_parameters(c);
  auto p = random_params(n, 7);
  save_checkpoint(d.path, 1, c, {}, p, p, p, 5);
  // In a child process, limit the file size so that the next save runs out of room.
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {4096, 4096};
    setrlimit(RLIMIT_FSIZE, &rl);
    try {
      save_checkpoint(d.path, 2, c, {}, p, p, p, 5);
    } catch (const Error& e) {
      // The first file that does not fit is named (the optimizer file is written first).
      const std::string what = e.what();
      _exit(what.find("optim.bin") != std::string::npos ||
                    what.find("model.bin") != std::string::npos
                ? 42
                : 43);
    }
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 42);
  auto all = list_checkpoints(d.path);
  REQUIRE(all.size() == 1);
  CHECK(all[0] == d / "ckpt_00000001");
  CHECK(load_checkpoint(all[0], c).params == p);
  CHECK_FALSE(dir_exists(d / ".ckpt_00000002.tmp"));
}

TEST_CASE(
    "checkpoint: optimizer files must tile the parameters exactly once, under their own names") {
  tgt::TempDir d;
  GPTConfig c = small_cfg();
  const size_t n = num_parameters(c);
  auto p = random_params(n, 3), m = random_params(n, 4), v = random_params(n, 5);
  const size_t half = n / 2;
  // Two shards over the first half (overlapping) and none over the second: the element
  // count adds up, the coverage does not.
  prepare_checkpoint_dir(d.path, 1);
  const std::string tmp = checkpoint_tmp_dir(d.path, 1);
  std::vector<OptimFileRecord> recs = {
      write_optim_shard(tmp, int64_t(n), 0, m.data(), v.data(), int64_t(half), 0, 2),
      write_optim_shard(tmp, int64_t(n), 0, m.data(), v.data(), int64_t(n - half), 1, 2)};
  recs[1].count = int64_t(n - half);
  std::string e;
  try {
    publish_checkpoint(d.path, 1, c, {{"run_id", "r"}}, p, recs, 2);
    e = error_of([&] { load_checkpoint(d / "ckpt_00000001", c); });
  } catch (const std::exception& x) {
    e = x.what();
  }
  CHECK(e.find("exactly once") != std::string::npos);
  // A state that names a file outside the checkpoint is refused, not read.
  save_checkpoint(d.path, 2, c, {{"run_id", "r"}}, p, m, v, 5);
  const std::string ck = d / "ckpt_00000002";
  nlohmann::json st = nlohmann::json::parse(tgt::slurp(ck + "/state.json"));
  st["files"]["optim/../../etc/passwd"] = st["files"]["optim.bin"];
  tg::remove_tree(ck + "/manifest.json");  // a version-1 state has no manifest
  st["version"] = 1;
  write_text_atomic(ck + "/state.json", st.dump(1));
  e = error_of([&] { load_checkpoint(ck, c); });
  CHECK(e.find("unknown optimizer file") != std::string::npos);
}

TEST_CASE("checkpoint: Adam moments in their own formats, whole and sharded, read back exactly") {
  tgt::TempDir d;
  GPTConfig c = small_cfg();
  const size_t n = num_parameters(c);
  auto p = random_params(n, 3), m = random_params(n, 4), v = random_params(n, 5);
  for (float& x : m) x *= 1e-3f;
  for (float& x : v) x = x * x * 1e-6f;
  struct Case {
    StateFormat fm, fv;
  };
  int step = 1;
  for (const Case& k :
       {Case{StateFormat::BF16, StateFormat::FP16}, Case{StateFormat::FP16, StateFormat::BF16SR},
        Case{StateFormat::FP32, StateFormat::BF16}}) {
    CAPTURE(state_format_name(k.fm));
    CAPTURE(state_format_name(k.fv));
    // What the optimizer holds: the moments' codes, and the values they stand for.
    const MomentFormats f = moment_formats(k.fm, k.fv);
    std::vector<char> mb(n * size_t(state_format_bytes(k.fm))), vb(n * size_t(state_format_bytes(k.fv)));
    std::vector<float> mx(n), vx(n);
    for (size_t i = 0; i < n; i++) {
      auto put = [&](const MomentFormat& mf, float x, std::vector<char>& bytes, float* held) {
        if (moment_is_plain(mf)) {
          std::memcpy(bytes.data() + 4 * i, &x, 4);
          *held = x;
          return;
        }
        const uint16_t code = moment_encode16(x, mf, 0);
        std::memcpy(bytes.data() + 2 * i, &code, 2);
        *held = moment_decode16(code, mf);
      };
      put(f.m, m[i], mb, &mx[i]);
      put(f.v, v[i], vb, &vx[i]);
    }
    const MomentBytes moments{k.fm, k.fv, mb.data(), vb.data()};
    // Unsharded: optim.bin holds 2-byte moments as 2 bytes; they load widened, exactly.
    const std::string dir = save_checkpoint(d.path, step++, c, {{"run_id", "r"}}, p, moments, 9);
    const size_t bytes = 1024 + n * size_t(state_format_bytes(k.fm) + state_format_bytes(k.fv));
    CHECK(file_size(dir + "/optim.bin", "optimizer file") == bytes);
    CheckpointData cd = load_checkpoint(dir, c);
    CHECK(cd.m_format == k.fm);
    CHECK(cd.v_format == k.fv);
    CHECK(cd.m == mx);
    CHECK(cd.v == vx);
    // Sharded (ZeRO-1, one file per rank): each file its range's codes; a range across both.
    prepare_checkpoint_dir(d.path, step);
    const std::string tmp = checkpoint_tmp_dir(d.path, step);
    const size_t half = zero_shard_size(n, 2);
    const MomentBytes second{k.fm, k.fv, mb.data() + half * size_t(state_format_bytes(k.fm)),
                             vb.data() + half * size_t(state_format_bytes(k.fv))};
    std::vector<OptimFileRecord> recs = {
        write_optim_shard(tmp, int64_t(n), 0, moments, int64_t(half), 0, 2),
        write_optim_shard(tmp, int64_t(n), int64_t(half), second, int64_t(n - half), 1, 2)};
    const std::string sdir = publish_checkpoint(d.path, step++, c, {{"run_id", "r"}}, p, recs, 9);
    CheckpointData sd = load_checkpoint(sdir, c, half - 7, 100);
    CHECK(sd.m_format == k.fm);
    CHECK(std::vector<float>(mx.begin() + long(half) - 7, mx.begin() + long(half) + 93) == sd.m);
    CHECK(std::vector<float>(vx.begin() + long(half) - 7, vx.begin() + long(half) + 93) == sd.v);
    // A header whose format disagrees with state.json is a damaged file.
    std::string f0 = tgt::slurp(dir + "/optim.bin");
    int32_t code = state_format_info(StateFormat::FP16).file_code + 1;
    std::memcpy(&f0[40], &code, 4);  // header word 10: m's format
    nlohmann::json st = nlohmann::json::parse(tgt::slurp(dir + "/state.json"));
    st["files"]["optim.bin"]["fnv1a64"] =
        strf("%016llx", (unsigned long long)fnv1a64(f0.data(), f0.size()));
    write_file_atomic(dir + "/optim.bin", f0.data(), f0.size());
    remove_tree(dir + "/manifest.json");
    st["version"] = 1;
    write_text_atomic(dir + "/state.json", st.dump(1));
    CHECK(error_of([&] { load_checkpoint(dir, c); }).find("bad header") != std::string::npos);
    // A format name no registry row has is named.
    st["files"]["optim.bin"]["adam_v"] = "fp12";
    write_text_atomic(dir + "/state.json", st.dump(1));
    CHECK(error_of([&] { load_checkpoint(dir, c); }).find("unknown adam_v format \"fp12\"") !=
          std::string::npos);
  }
}

TEST_CASE("checkpoint: fp8 moments keep their codes and blocks' meta, whole and across shards") {
  tgt::TempDir d;
  GPTConfig c = small_cfg();
  const size_t n = num_parameters(c);
  auto p = random_params(n, 3), m = random_params(n, 4), v = random_params(n, 5);
  for (float& x : v) x = x * x * 1e-6f;
  const MomentBlocking b{64, MomentScale::E8M0, MomentExpand::Coat};
  const MomentFormats f = moment_formats(StateFormat::FP8E4M3, StateFormat::FP8E5M2, b);
  // What the optimizer holds: codes, each block's meta, and the values they stand for.
  auto encode = [&](const std::vector<float>& x, const MomentFormat& mf, std::vector<uint8_t>* q,
                    std::vector<float>* meta, std::vector<float>* held) {
    q->assign(n, 0);
    meta->assign(moment_blocks(n, 64) * 2, 0.f);
    held->assign(n, 0.f);
    moment_encode_blocks(x.data(), n, mf, q->data(), meta->data());
    moment_decode_blocks(q->data(), meta->data(), n, mf, held->data());
  };
  std::vector<uint8_t> mq, vq;
  std::vector<float> mm, vm, mx, vx;
  encode(m, f.m, &mq, &mm, &mx);
  encode(v, f.v, &vq, &vm, &vx);
  MomentBytes mb{StateFormat::FP8E4M3, StateFormat::FP8E5M2, mq.data(), vq.data()};
  mb.blocking = b;
  mb.m_meta = mm.data();
  mb.v_meta = vm.data();
  const std::string dir = save_checkpoint(d.path, 1, c, {{"run_id", "r"}}, p, mb, 9);
  const size_t each = (n + 15) / 16 * 16 + moment_blocks(n, 64) * 8;
  CHECK(file_size(dir + "/optim.bin", "optimizer file") == 1024 + 2 * each);
  CheckpointData cd = load_checkpoint(dir, c);
  CHECK(cd.m == mx);
  CHECK(cd.v == vx);
  CHECK(cd.m_codes == mq);
  CHECK(cd.v_meta == vm);
  CHECK(cd.blocking.block == 64);
  CHECK((cd.blocking.scale == MomentScale::E8M0 && cd.blocking.expand == MomentExpand::Coat));
  const nlohmann::json st = nlohmann::json::parse(tgt::slurp(dir + "/state.json"));
  CHECK(st["files"]["optim.bin"]["moment_scale"] == "e8m0");
  // Sharded at a block boundary: a range across both files keeps its blocks when it starts on
  // one, and is only decoded when it does not.
  prepare_checkpoint_dir(d.path, 2);
  const std::string tmp = checkpoint_tmp_dir(d.path, 2);
  const size_t half = 64 * 5;
  MomentBytes second = mb;
  second.m = mq.data() + half, second.v = vq.data() + half;
  second.m_meta = mm.data() + half / 64 * 2, second.v_meta = vm.data() + half / 64 * 2;
  std::vector<OptimFileRecord> recs = {
      write_optim_shard(tmp, int64_t(n), 0, mb, int64_t(half), 0, 2),
      write_optim_shard(tmp, int64_t(n), int64_t(half), second, int64_t(n - half), 1, 2)};
  const std::string sdir = publish_checkpoint(d.path, 2, c, {{"run_id", "r"}}, p, recs, 9);
  CheckpointData sd = load_checkpoint(sdir, c, 128, 400);
  CHECK(std::vector<float>(mx.begin() + 128, mx.begin() + 528) == sd.m);
  CHECK(std::vector<uint8_t>(mq.begin() + 128, mq.begin() + 528) == sd.m_codes);
  CHECK(std::vector<float>(vm.begin() + 4, vm.begin() + 4 + 7 * 2) == sd.v_meta);
  CheckpointData od = load_checkpoint(sdir, c, 100, 400);
  CHECK(std::vector<float>(vx.begin() + 100, vx.begin() + 500) == od.v);
  CHECK(od.m_codes.empty());
  // A blocking the files disagree on is a damaged checkpoint.
  nlohmann::json bad = nlohmann::json::parse(tgt::slurp(sdir + "/state.json"));
  bad["files"]["optim_rank00001.bin"]["moment_block"] = 32;
  remove_tree(sdir + "/manifest.json");
  bad["version"] = 1;
  write_text_atomic(sdir + "/state.json", bad.dump(1));
  CHECK(error_of([&] { load_checkpoint(sdir, c); }).find("block their fp8 moments differently") !=
        std::string::npos);
  bad["files"]["optim_rank00001.bin"]["moment_block"] = 48;
  write_text_atomic(sdir + "/state.json", bad.dump(1));
  CHECK(error_of([&] { load_checkpoint(sdir, c); }).find("bad fp8 moment blocking") !=
        std::string::npos);
}
