// Tokenizers: byte-level round trips, llm.c's gpt2_tokenizer.bin format, printable output,
// and sampling.
#include <doctest/doctest.h>

#include <cstring>
#include <fstream>

#include "src/backends/cpu/cpu_backend.h"
#include "src/data/tokenizer.h"
#include "src/model/model.h"
#include "src/model/sample.h"
#include "tests/test_util.h"

using namespace tg;

TEST_CASE("tokenizer: byte level round trip") {
  Tokenizer t;
  std::string s = "Hello, world!\n\x01\xff";
  std::string back;
  for (int32_t id : t.encode(s)) back += t.decode(id);
  CHECK(back == s);
  CHECK(t.vocab_size() == 256);
}

TEST_CASE("tokenizer: llm.c gpt2_tokenizer.bin (version 2)") {
  tgt::TempDir d;
  std::vector<std::string> pieces = {"Hello", ",", " world", "<|endoftext|>"};
  {
    std::ofstream f(d / "tok.bin", std::ios::binary);
    uint32_t h[256] = {20240328, 2, uint32_t(pieces.size()), 3};
    f.write(reinterpret_cast<const char*>(h), sizeof(h));
    for (auto& p : pieces) {
      uint8_t n = uint8_t(p.size());
      f.write(reinterpret_cast<const char*>(&n), 1);
      f.write(p.data(), std::streamsize(p.size()));
    }
  }
  Tokenizer t(d / "tok.bin");
  CHECK(t.vocab_size() == 4);
  CHECK(t.decode(0) + t.decode(1) + t.decode(2) == "Hello, world");
  CHECK(t.decode(99).empty());
  CHECK_THROWS_AS(t.encode("x"), UsageError);
  // Truncated file.
  std::vector<char> b;
  {
    std::ifstream f(d / "tok.bin", std::ios::binary);
    b.assign(std::istreambuf_iterator<char>(f), {});
  }
  b.resize(b.size() - 5);
  std::ofstream(d / "short.bin", std::ios::binary).write(b.data(), std::streamsize(b.size()));
  std::string e = tgt::error_of([&] { Tokenizer bad(d / "short.bin"); });
  CHECK(e.find("short.bin") != std::string::npos);
}

TEST_CASE("tokenizer: printable escapes control bytes and broken UTF-8") {
  CHECK(printable("ab\ncd") == "ab\ncd");
  CHECK(printable("a\x01z") == "a\\x01z");
  CHECK(printable("\xc3\xa9") == "\xc3\xa9");  // é stays
  CHECK(printable("\xc3") == "\\xc3");
}

TEST_CASE("sample: greedy decoding is deterministic and top-k restricts the choice") {
  auto be = make_cpu_backend();
  GPT model(gpt_config(1, 2, 8, 20, 8), *be);
  model.init_random(4);
  Rng r1(1), r2(2);
  auto a = generate(model, {3}, 12, 0.0, 0, r1);  // longer than max_seq_len: the window slides
  auto b = generate(model, {3}, 12, 0.0, 0, r2);
  CHECK(a == b);
  CHECK(a.size() == 13);
  // top_k = 1 is greedy whatever the temperature.
  Rng r3(3);
  CHECK(generate(model, {3}, 12, 5.0, 1, r3) == a);
  for (int32_t id : generate(model, {3}, 50, 1.0, 0, r3)) CHECK((id >= 0 && id < 20));
}
