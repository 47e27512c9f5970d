// test_prepare_gpt2.cpp: `prepare text --tokenizer gpt2` (src/data/prepare_gpt2.h): shards that
// decode back to the input, whole documents in the val split, llm.c's files, bad input.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/data/bpe.h"
#include "src/data/data.h"
#include "src/data/prepare_gpt2.h"
#include "src/data/tokenizer.h"
#include "tests/test_util.h"

using nlohmann::json;
using namespace std::string_literals;

namespace {

std::string vocab_dir() { return tgt::gpt2_vocab_dir(); }
bool have_vocab() { return !vocab_dir().empty(); }
bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

void write(const std::string& path, const std::string& s) {
  tg::write_file_atomic(path, s.data(), s.size());
}

// Every token of the split's shards, in order.
std::vector<uint32_t> split_tokens(const std::string& dir, const char* name, const char* split) {
  std::vector<uint32_t> all;
  for (const std::string& f :
       tg::expand_glob(dir + "/" + name + "_" + split + "_*.bin", "test shard")) {
    const std::vector<uint32_t> t = tg::read_shard(f, tg::kGpt2VocabSize);
    all.insert(all.end(), t.begin(), t.end());
  }
  return all;
}

// The documents of a token stream: the runs after each <|endoftext|>, decoded.
std::vector<std::string> documents(const tg::Tokenizer& tok, const std::vector<uint32_t>& ids) {
  std::vector<std::string> docs;
  REQUIRE(!ids.empty());
  CHECK(ids[0] == tg::kGpt2EndOfText);
  for (uint32_t id : ids) {
    if (id == tg::kGpt2EndOfText)
      docs.emplace_back();
    else
      docs.back() += tok.decode(int32_t(id));
  }
  return docs;
}

tg::Gpt2PrepareOptions options(const std::string& input, const std::string& out) {
  tg::Gpt2PrepareOptions o;
  o.input = input;
  o.out_dir = out;
  o.name = "t";
  o.vocab_dir = vocab_dir();
  return o;
}

std::string text_of_paragraphs(int n) {
  std::string s;
  for (int i = 0; i < n; i++)
    s += tg::strf("ROMEO %d:\nIt's the east, and Juliet is the sun%s!\n\n", i,
                  i % 7 == 0 ? " \xe2\x80\x94 caf\xc3\xa9 \xf0\x9f\x98\x80" : "");
  return s;
}

}  // namespace

TEST_CASE("prepare gpt2: invalid UTF-8 is replaced as Python's errors='replace' does") {
  // The expected strings are Python 3.11's bytes.decode("utf-8", errors="replace").
  const std::string r = "\xef\xbf\xbd";
  CHECK(tg::utf8_replace_invalid("a\xe2\x82"
                                 "b") == "a" + r + "b");
  CHECK(tg::utf8_replace_invalid("\xf0\x80\x80") == r + r + r);
  CHECK(tg::utf8_replace_invalid("\xed\xa0\x80") == r + r + r);
  CHECK(tg::utf8_replace_invalid("x\xc3") == "x" + r);
  CHECK(tg::utf8_replace_invalid("\xf4\x90\x80\x80") == r + r + r + r);
  CHECK(tg::utf8_replace_invalid("\xe0\x80\xaf") == r + r + r);
  CHECK(tg::utf8_replace_invalid("\xf0\x9f\x98") == r);
  CHECK(tg::utf8_replace_invalid("\xc0\xaf") == r + r);
  CHECK(tg::utf8_replace_invalid("ok\xff\xfe") == "ok" + r + r);
  CHECK(tg::utf8_replace_invalid("caf\xc3\xa9 \xf0\x9f\x98\x80") == "caf\xc3\xa9 \xf0\x9f\x98\x80");
}

TEST_CASE("prepare gpt2: shards decode to the text, whole documents, llm.c's files, meta.json") {
  if (!have_vocab()) {
    MESSAGE(tgt::kNoGpt2Vocab);
    return;
  }
  tgt::TempDir d;
  const std::string text = text_of_paragraphs(200);
  write(d / "in.txt", text);
  tg::Gpt2PrepareOptions o = options(d / "in.txt", d / "out");
  o.split = "paragraphs";
  o.shard_tokens = 1000;  // several shards, documents cut across them
  const tg::Gpt2PrepareResult r = tg::prepare_text_gpt2(o);
  CHECK(r.train_docs + r.val_docs == 200);
  // About 10% of the bytes, in whole documents (they differ in size).
  CHECK(r.val_docs >= 18);
  CHECK(r.val_docs <= 20);
  CHECK(r.train_shards > 3);
  // llm.c's decoding file decodes every token; the documents join back into the text.
  const tg::Tokenizer tok(d / "out/gpt2_tokenizer.bin");
  CHECK(tok.vocab_size() == tg::kGpt2VocabSize);
  const std::vector<uint32_t> train = split_tokens(d / "out", "t", "train"),
                              val = split_tokens(d / "out", "t", "val");
  CHECK(int64_t(train.size()) == r.train_tokens);
  std::string joined;
  for (const auto& doc : documents(tok, train)) joined += doc;
  for (const auto& doc : documents(tok, val)) joined += doc;
  CHECK(joined == text);
  // Each document's ids are the encoder's.
  const tg::BpeTokenizer bpe(vocab_dir());
  const std::vector<uint32_t> first = bpe.encode(
      "ROMEO 0:\nIt's the east, and Juliet is the sun "
      "\xe2\x80\x94 caf\xc3\xa9 \xf0\x9f\x98\x80!\n\n");
  CHECK(std::equal(first.begin(), first.end(), train.begin() + 1));
  const json meta = json::parse(tgt::slurp(d / "out/meta.json"));
  CHECK(meta["tokenizer"] == "gpt2");
  CHECK(meta["vocab_size"] == 50257);
  CHECK(meta["gpt2"]["vocab_sha256"] ==
        "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783");
  CHECK(meta["val_tokens"].get<int64_t>() == int64_t(val.size()));
  CHECK(meta["tokens_per_byte"].get<double>() ==
        doctest::Approx(double(train.size() + val.size()) / double(text.size())));
  // One thread or two: the same shards.
  o.out_dir = d / "one";
  o.threads = 1;
  tg::prepare_text_gpt2(o);
  CHECK(split_tokens(d / "one", "t", "train") == train);
}

TEST_CASE("prepare gpt2: a text file is one document, its last tenth the val split") {
  if (!have_vocab()) return;
  tgt::TempDir d;
  const std::string text = text_of_paragraphs(200);
  write(d / "in.txt", text);
  const tg::Gpt2PrepareResult r = tg::prepare_text_gpt2(options(d / "in.txt", d / "out"));
  CHECK(r.train_docs == 1);
  CHECK(r.val_docs == 1);
  const tg::Tokenizer tok(d / "out/gpt2_tokenizer.bin");
  const std::vector<uint32_t> train = split_tokens(d / "out", "t", "train"),
                              val = split_tokens(d / "out", "t", "val");
  // One <|endoftext|>, before the text; the val split continues it from a line's start.
  CHECK(std::count(train.begin(), train.end(), tg::kGpt2EndOfText) == 1);
  CHECK(std::count(val.begin(), val.end(), tg::kGpt2EndOfText) == 0);
  std::string train_text, val_text;
  for (uint32_t id : train) train_text += id == tg::kGpt2EndOfText ? "" : tok.decode(int32_t(id));
  for (uint32_t id : val) val_text += tok.decode(int32_t(id));
  CHECK(train_text + val_text == text);
  CHECK(train_text.back() == '\n');
  CHECK(double(val_text.size()) == doctest::Approx(0.1 * double(text.size())).epsilon(0.05));
  // --split paragraphs: one document per paragraph, as before.
  tg::Gpt2PrepareOptions o = options(d / "in.txt", d / "p");
  o.split = "paragraphs";
  const tg::Gpt2PrepareResult p = tg::prepare_text_gpt2(o);
  CHECK(p.train_docs + p.val_docs == 200);
  o.split = "lines";
  CHECK(has(tgt::error_of([&] { tg::prepare_text_gpt2(o); }), "--split is none or paragraphs"));
}

TEST_CASE("prepare gpt2: a folder and a JSONL file, one document per file or line") {
  if (!have_vocab()) return;
  tgt::TempDir d;
  std::filesystem::create_directories(d / "docs/sub");
  write(d / "docs/a.txt", "First document.\n");
  write(d / "docs/sub/b.txt", "Second, in a sub-folder.");
  write(d / "docs/c.txt", "Third.");
  tg::prepare_text_gpt2(options(d / "docs", d / "f"));
  const tg::Tokenizer tok(d / "f/gpt2_tokenizer.bin");
  std::vector<std::string> docs = documents(tok, split_tokens(d / "f", "t", "train"));
  const std::vector<std::string> val = documents(tok, split_tokens(d / "f", "t", "val"));
  docs.insert(docs.end(), val.begin(), val.end());
  CHECK(docs ==
        std::vector<std::string>{"First document.\n", "Third.", "Second, in a sub-folder."});
  write(
      d / "in.jsonl",
      "{\"text\": \"one \\u00e9\", \"id\": 1}\n\n{\"text\": \"two\\nlines\"}\n{\"text\": \"3\"}\n");
  tg::prepare_text_gpt2(options(d / "in.jsonl", d / "j"));
  docs = documents(tok, split_tokens(d / "j", "t", "train"));
  CHECK(docs == std::vector<std::string>{"one \xc3\xa9", "two\nlines"});
}

TEST_CASE("prepare gpt2: bad input is an error naming the file and place; nothing is replaced") {
  if (!have_vocab()) return;
  tgt::TempDir d;
  write(d / "good.txt", text_of_paragraphs(20));
  tg::prepare_text_gpt2(options(d / "good.txt", d / "out"));
  const std::string meta = tgt::slurp(d / "out/meta.json");
  auto error_of = [&](const std::string& name, const std::string& content) {
    write(d / name, content);
    return tgt::error_of([&] { tg::prepare_text_gpt2(options(d / name, d / "out")); });
  };
  CHECK(has(error_of("bad.txt", "fine\n\nthen \xe2\x82 bad\n"),
            "bad.txt: invalid UTF-8 at byte offset 11 (byte 0xE2); --errors replace"));
  CHECK(
      has(error_of("nul.txt", "text\n\nwith a \0 NUL"s), "nul.txt: a NUL byte at byte offset 13"));
  CHECK(has(error_of("l.jsonl", "{\"text\": \"a\"}\n[1, 2]\n"), "l.jsonl:2: expected an object"));
  CHECK(has(error_of("m.jsonl", "{\"text\": \"a\"}\n{\"txt\": \"b\"}\n"), "m.jsonl:2: expected"));
  CHECK(has(error_of("n.jsonl", "{\"text\": \"a\"}\n{\"text\": 5}\n"), "n.jsonl:2: expected"));
  CHECK(has(error_of("e.jsonl", "{\"text\": \"a\"}\n{\"text\": \"\"}\n"), "e.jsonl:2: an empty"));
  CHECK(has(error_of("j.jsonl", "{\"text\": \"a\"}\n{\"text\": \"b\"\n"), "j.jsonl:2: not JSON"));
  CHECK(has(error_of("one.txt", "a"), "one.txt: 1 byte(s), too few to split into train and val"));
  // The earlier dataset is untouched by every failure.
  CHECK(tgt::slurp(d / "out/meta.json") == meta);
  // errors=replace: U+FFFD in the text.
  write(d / "bad2.txt", "fine\n\nthen \xe2\x82 bad\n");
  tg::Gpt2PrepareOptions o = options(d / "bad2.txt", d / "r");
  o.errors = "replace";
  o.split = "paragraphs";
  o.val_fraction = 0.5;
  tg::prepare_text_gpt2(o);
  const tg::Tokenizer tok(d / "r/gpt2_tokenizer.bin");
  CHECK(documents(tok, split_tokens(d / "r", "t", "val"))[0] == "then \xef\xbf\xbd bad\n");
}

TEST_CASE("prepare gpt2: a 2 MB line of one letter is one piece, merged in n log n") {
  if (!have_vocab()) return;
  const tg::BpeTokenizer tok(vocab_dir());
  const std::string line(2 << 20, 'a');  // quadratic merging would take hours
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<uint32_t> ids = tok.encode(line);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(tok.decode(ids) == line);
  CHECK(ids.size() == line.size() / 4);  // "aaaa" is GPT-2's longest run of a
  MESSAGE("2 MB of 'a': " << ids.size() << " tokens in " << s << " s");
  CHECK(s < 60);  // about 1 s here; the sanitizers' build is slower
}
