// Shards, the loader, the dataset makers and their errors.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/data/data.h"
#include "src/data/prepare.h"
#include "tests/test_util.h"

using namespace tg;
using tgt::error_of;

namespace {
std::vector<uint32_t> iota_tokens(size_t n, uint32_t mod) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; i++) t[i] = uint32_t(i % mod);
  return t;
}
void write_bytes(const std::string& path, const std::vector<char>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(b.data(), std::streamsize(b.size()));
}
}  // namespace

TEST_CASE("data: shard header is llm.c's, byte by byte") {
  tgt::TempDir d;
  std::vector<uint32_t> tok = {0, 1, 65535, 7, 300};
  write_shard(d / "a.bin", tok);
  std::vector<char> b = read_file(d / "a.bin", "shard");
  REQUIRE(b.size() == 1024 + 2 * tok.size());
  int32_t h[256];
  memcpy(h, b.data(), 1024);
  CHECK(h[0] == 20240520);
  CHECK(h[1] == 1);
  CHECK(h[2] == 5);
  for (int i = 3; i < 256; i++) CHECK(h[i] == 0);
  // uint16 little-endian payload
  CHECK(uint8_t(b[1024 + 4]) == 0xFF);
  CHECK(uint8_t(b[1024 + 5]) == 0xFF);
  CHECK(uint8_t(b[1024 + 8]) == (300 & 0xFF));
  CHECK(uint8_t(b[1024 + 9]) == (300 >> 8));
  CHECK(read_shard(d / "a.bin", 0) == tok);
}

TEST_CASE("data: large vocabularies use version 7 with uint32 tokens") {
  tgt::TempDir d;
  std::vector<uint32_t> tok = {1, 70000, 3};
  write_shard(d / "b.bin", tok);
  std::vector<char> b = read_file(d / "b.bin", "shard");
  int32_t h[3];
  memcpy(h, b.data(), 12);
  CHECK(h[0] == 20240801);
  CHECK(h[1] == 7);
  CHECK(b.size() == 1024 + 4 * 3);
  CHECK(read_shard(d / "b.bin", 100000) == tok);
}

TEST_CASE("data: bad shards are clear errors naming the file") {
  tgt::TempDir d;
  write_shard(d / "ok.bin", iota_tokens(100, 50));
  std::vector<char> good = read_file(d / "ok.bin", "shard");

  std::string missing = error_of([&] { read_shard(d / "nope.bin", 0); });
  CHECK(missing.find("nope.bin") != std::string::npos);

  std::vector<char> b = good;
  b[0] ^= 1;
  write_bytes(d / "magic.bin", b);
  std::string e = error_of([&] { read_shard(d / "magic.bin", 0); });
  CHECK(e.find("magic.bin") != std::string::npos);
  CHECK(e.find("bad magic") != std::string::npos);
  CHECK(e.find("train_gpt prepare text") != std::string::npos);  // what makes shards of text

  b = good;
  b.resize(b.size() - 3);
  write_bytes(d / "trunc.bin", b);
  e = error_of([&] { read_shard(d / "trunc.bin", 0); });
  CHECK(e.find("trunc.bin") != std::string::npos);
  CHECK(e.find("truncated") != std::string::npos);

  b = good;
  b.push_back(0);
  b.push_back(0);
  write_bytes(d / "long.bin", b);
  e = error_of([&] { read_shard(d / "long.bin", 0); });
  CHECK(e.find("long.bin") != std::string::npos);

  write_bytes(d / "tiny.bin", std::vector<char>(10, 0));
  e = error_of([&] { read_shard(d / "tiny.bin", 0); });
  CHECK(e.find("shorter than the 1024-byte header") != std::string::npos);

  b = good;
  b[4] = 9;  // version
  write_bytes(d / "ver.bin", b);
  e = error_of([&] { read_shard(d / "ver.bin", 0); });
  CHECK(e.find("version") != std::string::npos);

  e = error_of([&] { read_shard(d / "ok.bin", 40); });
  CHECK(e.find("ok.bin") != std::string::npos);
  CHECK(e.find(">= vocab_size 40") != std::string::npos);

  e = error_of([&] { expand_glob(d / "*.nothing", "training"); });
  CHECK(e.find("no training files match") != std::string::npos);
  CHECK(e.find("train_gpt prepare toy") != std::string::npos);  // how to make a dataset
}

TEST_CASE("data: loader rows, targets, shards and epochs") {
  tgt::TempDir d;
  // Two shards with distinct content; rows start at multiples of T.
  std::vector<uint32_t> s0(41), s1(33);
  for (size_t i = 0; i < s0.size(); i++) s0[i] = uint32_t(i);
  for (size_t i = 0; i < s1.size(); i++) s1[i] = uint32_t(1000 + i);
  write_shard(d / "x_000.bin", s0);
  write_shard(d / "x_001.bin", s1);
  const int B = 2, T = 4;
  DataLoader dl(d / "x_*.bin", "training", B, T, 0, 1, false, 0, 0);
  std::vector<int32_t> in(B * T), tg(B * T);
  // shard 0: 10 rows -> 5 batches; shard 1: 8 rows -> 4 batches
  std::vector<int32_t> firsts;
  for (int i = 0; i < 9; i++) {
    dl.next_batch(in.data(), tg.data());
    for (int k = 0; k < B * T; k++) CHECK(tg[k] == in[k] + 1);
    firsts.push_back(in[0]);
  }
  CHECK(firsts == std::vector<int32_t>{0, 8, 16, 24, 32, 1000, 1008, 1016, 1024});
  CHECK(dl.position().epoch == 1);
  dl.next_batch(in.data(), tg.data());
  CHECK(in[0] == 0);
}

TEST_CASE("data: 2 ranks x B rows are the rows of 1 rank x 2B") {
  tgt::TempDir d;
  write_shard(d / "s.bin", iota_tokens(2000, 60000));
  const int B = 3, T = 8;
  for (bool shuffle : {false, true}) {
    DataLoader one(d / "s.bin", "training", 2 * B, T, 0, 1, shuffle, 42, 0);
    DataLoader r0(d / "s.bin", "training", B, T, 0, 2, shuffle, 42, 0);
    DataLoader r1(d / "s.bin", "training", B, T, 1, 2, shuffle, 42, 0);
    std::vector<int32_t> a(2 * B * T), ta(2 * B * T), b(B * T), tb(B * T), c(B * T), tc(B * T);
    for (int step = 0; step < 30; step++) {
      one.next_batch(a.data(), ta.data());
      r0.next_batch(b.data(), tb.data());
      r1.next_batch(c.data(), tc.data());
      std::vector<int32_t> joined = b;
      joined.insert(joined.end(), c.begin(), c.end());
      CHECK(joined == a);
    }
  }
}

TEST_CASE("data: shuffling is seeded, covers every row once per epoch, and resumes exactly") {
  tgt::TempDir d;
  write_shard(d / "s_0.bin", iota_tokens(801, 60000));
  write_shard(d / "s_1.bin", iota_tokens(401, 60000));
  const int B = 2, T = 10;
  DataLoader a(d / "s_*.bin", "training", B, T, 0, 1, true, 7, 0);
  DataLoader b(d / "s_*.bin", "training", B, T, 0, 1, true, 7, 0);
  DataLoader c(d / "s_*.bin", "training", B, T, 0, 1, true, 8, 0);
  std::vector<int32_t> x(B * T), y(B * T), z(B * T), t(B * T);
  bool differs = false;
  int batches_per_epoch = 80 / 2 + 40 / 2;
  for (int i = 0; i < batches_per_epoch; i++) {
    a.next_batch(x.data(), t.data());
    b.next_batch(y.data(), t.data());
    c.next_batch(z.data(), t.data());
    CHECK(x == y);
    differs |= x != z;
  }
  CHECK(differs);
  CHECK(a.position().epoch == 1);
  // Save, continue, restore, and see the same batches again.
  LoaderPosition p = a.position();
  std::vector<std::vector<int32_t>> seen;
  for (int i = 0; i < 7; i++) {
    a.next_batch(x.data(), t.data());
    seen.push_back(x);
  }
  DataLoader fresh(d / "s_*.bin", "training", B, T, 0, 1, true, 7, 0);
  fresh.set_position(p);
  for (int i = 0; i < 7; i++) {
    fresh.next_batch(x.data(), t.data());
    CHECK(x == seen[i]);
  }
}

TEST_CASE("data: every row of a shuffled epoch is served exactly once") {
  tgt::TempDir d;
  std::vector<uint32_t> tok(8 * 25 + 1);
  for (size_t i = 0; i < tok.size(); i++) tok[i] = uint32_t(i);
  write_shard(d / "s.bin", tok);
  const int B = 5, T = 8;
  DataLoader dl(d / "s.bin", "training", B, T, 0, 1, true, 3, 0);
  std::vector<int32_t> x(B * T), t(B * T);
  std::multiset<int32_t> starts;
  for (int i = 0; i < 5; i++) {
    dl.next_batch(x.data(), t.data());
    for (int b = 0; b < B; b++) starts.insert(x[b * T]);
  }
  CHECK(starts.size() == 25);
  for (int r = 0; r < 25; r++) CHECK(starts.count(r * T) == 1);
}

TEST_CASE("data: a shard too small for one batch is an error naming it") {
  tgt::TempDir d;
  write_shard(d / "small.bin", iota_tokens(20, 10));
  std::string e =
      error_of([&] { DataLoader dl(d / "small.bin", "training", 4, 8, 0, 1, false, 0, 0); });
  CHECK(e.find("small.bin") != std::string::npos);
  CHECK(e.find("too few") != std::string::npos);
}

TEST_CASE("data: toy task is deterministic, structured, and its floor is right") {
  tgt::TempDir d;
  prepare_toy(d / "a", 5, 4096, 1024);
  prepare_toy(d / "b", 5, 4096, 1024);
  prepare_toy(d / "c", 6, 4096, 1024);
  std::vector<uint32_t> a = read_shard(d / "a/toy_train_000000.bin", 256);
  CHECK(a == read_shard(d / "b/toy_train_000000.bin", 256));
  CHECK(a != read_shard(d / "c/toy_train_000000.bin", 256));
  CHECK(a.size() == 4097);
  CHECK(a != read_shard(d / "a/toy_val_000000.bin", 256));
  // Records of 16 tokens by default: '|', 7 letters, '=' or '~', the 7 copied or reversed.
  const int R = 16, K = 7;
  int copies = 0, reverses = 0;
  for (size_t r = 0; r + R <= a.size(); r += R) {
    const uint32_t* x = a.data() + r;
    REQUIRE(x[0] == '|');
    for (int i = 1; i <= K; i++) CHECK((x[i] >= 'a' && x[i] <= 'p'));
    REQUIRE((x[K + 1] == '=' || x[K + 1] == '~'));
    bool rev = x[K + 1] == '~';
    (rev ? reverses : copies)++;
    for (int i = 0; i < K; i++) CHECK(x[K + 2 + i] == x[rev ? K - i : 1 + i]);
  }
  CHECK(copies > 20);
  CHECK(reverses > 20);
  nlohmann::json meta = read_dataset_meta(d / "a/toy_train_*.bin");
  CHECK(meta["vocab_size"] == 256);
  CHECK(meta["record_len"] == R);
  double floor = meta["loss_floor"].get<double>();
  CHECK(floor == doctest::Approx((K * std::log(16.0) + std::log(2.0)) / R).epsilon(1e-12));
  CHECK(dataset_loss_floor(meta, 64) == floor);
  CHECK(std::isnan(dataset_loss_floor(meta, 24)));  // rows would cut records
  CHECK(dataset_plateau_loss(meta, 16) ==
        doctest::Approx((2 * K * std::log(16.0) + std::log(2.0)) / R).epsilon(1e-12));
  CHECK(std::isnan(dataset_plateau_loss(meta, 24)));
}

TEST_CASE("data: prepare text makes byte shards and a validation split") {
  tgt::TempDir d;
  std::string text;
  for (int i = 0; i < 1000; i++) text += char('A' + i % 26);
  {
    std::ofstream f(d / "in.txt");
    f << text;
  }
  prepare_text(d / "in.txt", d / "out", "in", 0.1, 400);
  auto train = expand_glob(d / "out/in_train_*.bin", "training");
  auto val = expand_glob(d / "out/in_val_*.bin", "validation");
  CHECK(train.size() == 3);  // 900 bytes in shards of 400
  CHECK(val.size() == 1);
  std::string back;
  for (auto& f : train)
    for (uint32_t t : read_shard(f, 256)) back += char(t);
  for (uint32_t t : read_shard(val[0], 256)) back += char(t);
  CHECK(back == text);
  std::string e = error_of([&] { prepare_text(d / "missing.txt", d / "o2", "m", 0.1, 100); });
  CHECK(e.find("missing.txt") != std::string::npos);
  // A binary file (a NUL byte) is refused, naming where, and nothing is written.
  {
    std::ofstream f(d / "bin.dat", std::ios::binary);
    f << text.substr(0, 300) << '\0' << text.substr(0, 300);
  }
  e = error_of([&] { prepare_text(d / "bin.dat", d / "o3", "b", 0.1, 100); });
  CHECK(e.find("bin.dat: a NUL byte at byte offset 300: not text") != std::string::npos);
  CHECK_FALSE(tg::dir_exists(d / "o3"));
}

TEST_CASE("data: tokens per byte for bits per byte: val split's, whole text's, 1 for bytes") {
  using nlohmann::json;
  // Byte-level datasets (prepare text, prepare toy): exactly 1.
  tgt::TempDir d;
  std::ofstream(d / "in.txt") << std::string(1000, 'x');
  prepare_text(d / "in.txt", d / "out", "in", 0.1, 400);
  TokensPerByte b = dataset_tokens_per_byte(read_dataset_meta(d / "out/in_val_*.bin"));
  CHECK(b.ratio == 1.0);
  CHECK(b.source == "byte-level tokenizer (1 token per byte)");
  prepare_toy(d / "toy", 1, 256, 64);
  CHECK(dataset_tokens_per_byte(read_dataset_meta(d / "toy/toy_val_*.bin")).ratio == 1.0);
  // GPT-2: the val split's ratio, else the whole text's.
  json g = {{"tokenizer", "gpt2"}, {"val_tokens_per_byte", 0.25}, {"tokens_per_byte", 0.3}};
  TokensPerByte t = dataset_tokens_per_byte(g);
  CHECK(t.ratio == 0.25);
  CHECK(t.source == "meta.json val_tokens_per_byte");
  g.erase("val_tokens_per_byte");
  t = dataset_tokens_per_byte(g);
  CHECK(t.ratio == 0.3);
  CHECK(t.source == "meta.json tokens_per_byte");
  // Unknown: no meta.json, no tokenizer named, no usable ratio.
  CHECK(std::isnan(dataset_tokens_per_byte(json::object()).ratio));
  CHECK(dataset_tokens_per_byte(json::object()).source.find("no meta.json") != std::string::npos);
  t = dataset_tokens_per_byte({{"vocab_size", 256}, {"tokens_per_byte", 1.0}});
  CHECK(std::isnan(t.ratio));
  CHECK(t.source == "unknown (meta.json names no tokenizer)");
  for (const json& bad : {json(0.0), json(-1.0), json("0.3"), json(nullptr)}) {
    INFO(bad.dump());
    CHECK(std::isnan(
        dataset_tokens_per_byte({{"tokenizer", "gpt2"}, {"val_tokens_per_byte", bad}}).ratio));
  }
  // bits per byte = nats per token x tokens per byte / ln 2.
  CHECK(bits_per_byte(std::log(2.0), 1.0) == doctest::Approx(1.0));
  CHECK(bits_per_byte(2.0, 0.25) == doctest::Approx(0.5 / std::log(2.0)));
  CHECK(std::isnan(bits_per_byte(2.0, NAN)));
}
