// test_bpe.cpp: GPT-2's byte-level BPE (src/data/bpe.h) against tiktoken.
//
// The oracle is tiktoken 0.14 built offline over data/gpt2/'s ranks (tests/bpe_oracle.py, in
// the venv `scripts/setup.sh --hf` makes; .ci/run does). The ids must be equal on
// tests/data/bpe_corpus.txt (every hard case we could think of: contractions in several
// cases, whitespace runs and exotic spaces, digits, emoji, CJK, Arabic, combining marks,
// control characters, long runs), line by line and whole, and on random text drawn from those
// scripts.
#include <doctest/doctest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/base/rng.h"
#include "src/base/sha256.h"
#include "src/data/bpe.h"
#include "src/data/tokenizer.h"
#include "tests/test_util.h"

using nlohmann::json;

namespace {

std::string repo_file(const std::string& rel) {
  return tg::join_path(tg::dirname_of(tg::dirname_of(tg::dirname_of(__FILE__))), rel);
}

bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

std::string vocab_dir() { return tgt::gpt2_vocab_dir(); }
bool have_vocab() { return !vocab_dir().empty(); }

// A python3 with tiktoken: $TG_PYTHON, the hf venv, Debian's, PATH's. "" when none.
std::string tiktoken_python() {
  std::vector<std::string> c;
  if (const char* p = getenv("TG_PYTHON")) c.push_back(p);
  c.push_back(repo_file("build/hf-venv/bin/python"));
  c.push_back("/usr/bin/python3");
  c.push_back("python3");
  for (const std::string& py : c)
    if (tgt::run_shell("'" + py + "' -c 'import tiktoken' 2>/dev/null") == 0) return py;
  return "";
}

// tiktoken's ids of each document.
std::vector<std::vector<uint32_t>> tiktoken_ids(const std::vector<std::string>& docs) {
  const std::string py = tiktoken_python();
  REQUIRE_MESSAGE(!py.empty(), "no python3 with tiktoken (scripts/setup.sh --hf installs it)");
  tgt::TempDir d;
  const std::string in = d / "docs.json", out = d / "ids.json";
  const std::string text = json(docs).dump();
  tg::write_file_atomic(in, text.data(), text.size());
  std::string log;
  const int rc = tgt::run_shell("'" + py + "' '" + repo_file("tests/bpe_oracle.py") + "' '" +
                                    vocab_dir() + "' '" + in + "' '" + out + "'",
                                &log);
  REQUIRE_MESSAGE(rc == 0, log);
  return json::parse(tgt::slurp(out)).get<std::vector<std::vector<uint32_t>>>();
}

// Random text from a pool of pieces of every kind the corpus has.
std::string random_text(tg::Rng& r, size_t pieces) {
  static const char* const pool[] = {"a",
                                     "Z",
                                     "the",
                                     " ",
                                     "  ",
                                     "\t",
                                     "\n",
                                     "\r\n",
                                     "'s",
                                     "'LL",
                                     "'",
                                     "0",
                                     "42",
                                     "3.5",
                                     ",",
                                     "!!",
                                     "--",
                                     "\xc2\xa0",
                                     "\xe2\x80\x83",
                                     "\xe3\x80\x80",
                                     "\xe1\xa0\x8e",
                                     "\xe2\x80\x8b",
                                     "\xc3\xa9",
                                     "e\xcc\x81",
                                     "\xe6\xbc\xa2",
                                     "\xe5\xad\x97",
                                     "\xed\x95\x9c",
                                     "\xd9\x85",
                                     "\xd8\xb1",
                                     "\xe0\xa4\xa8",
                                     "\xe0\xa5\x8d",
                                     "\xf0\x9f\x98\x80",
                                     "\xe2\x80\x8d",
                                     "\xf0\x9d\x90\x80",
                                     "\xc2\xb2",
                                     "\xc2\xbd",
                                     "\x01",
                                     "\x1b",
                                     "\x7f",
                                     "<|endoftext|>",
                                     "\xc2\x85",
                                     "\xe2\x80\xa8",
                                     "hello",
                                     " world",
                                     "ing",
                                     "\xce\xb1",
                                     "\xd0\x9f"};
  const size_t n = sizeof(pool) / sizeof(pool[0]);
  std::string s;
  for (size_t i = 0; i < pieces; i++) s += pool[r.below(n)];
  return s;
}

// Bytes written in GPT-2's printable characters, as its vocabulary files write tokens.
std::string byte_level_text(const std::string& bytes) {
  std::string s;
  for (unsigned char b : bytes) {
    const uint32_t c = tg::gpt2_byte_to_unicode()[b];
    if (c < 0x80)
      s += char(c);
    else
      s += {char(0xC0 | (c >> 6)), char(0x80 | (c & 0x3F))};
  }
  return s;
}

// merges.txt with one merge split elsewhere (both halves still tokens): consistent with
// vocab.json, but not GPT-2's vocabulary.
std::string resplit_one_merge(const tg::BpeTokenizer& tok, const std::string& merges) {
  std::set<std::string> tokens;
  for (uint32_t i = 0; i < tg::kGpt2EndOfText; i++) tokens.insert(tok.token_bytes(i));
  for (uint32_t n = 1000; n < 50000; n++) {
    const std::string& t = tok.token_bytes(256 + n);
    for (size_t cut = 1; cut < t.size(); cut++) {
      const std::string a = t.substr(0, cut), b = t.substr(cut);
      const std::string line = byte_level_text(a) + " " + byte_level_text(b) + "\n";
      if (!tokens.count(a) || !tokens.count(b) || merges.find("\n" + line) != std::string::npos)
        continue;
      // Merge n is line n + 2 of the file (after "#version").
      size_t at = 0;
      for (uint32_t k = 0; k < n + 1; k++) at = merges.find('\n', at) + 1;
      const size_t end = merges.find('\n', at) + 1;
      return merges.substr(0, at) + line + merges.substr(end);
    }
  }
  return "";
}

std::vector<std::string> corpus_lines() {
  const std::string text = tgt::slurp(repo_file("tests/data/bpe_corpus.txt"));
  std::vector<std::string> lines;
  size_t at = 0;
  for (size_t nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1)
    lines.push_back(text.substr(at, nl + 1 - at));
  lines.push_back(text);  // and the whole file as one document
  return lines;
}

}  // namespace

TEST_CASE("bpe: UTF-8 validation names the first bad byte") {
  CHECK(tg::first_invalid_utf8("plain ascii") == std::string::npos);
  CHECK(tg::first_invalid_utf8("caf\xc3\xa9 \xf0\x9f\x98\x80") == std::string::npos);
  CHECK(tg::first_invalid_utf8("ab\x80") == 2);            // a lone continuation byte
  CHECK(tg::first_invalid_utf8("ab\xc3") == 2);            // cut short
  CHECK(tg::first_invalid_utf8("\xc0\xaf") == 0);          // overlong
  CHECK(tg::first_invalid_utf8("x\xe0\x80\xaf") == 1);     // overlong, 3 bytes
  CHECK(tg::first_invalid_utf8("xy\xed\xa0\x80") == 2);    // a surrogate
  CHECK(tg::first_invalid_utf8("\xf4\x90\x80\x80") == 0);  // above U+10FFFF
  CHECK(tg::first_invalid_utf8("ok\xe2\x82") == 2);        // truncated 3-byte form
  CHECK(tg::first_invalid_utf8(std::string("a\0b", 3)) == std::string::npos);  // NUL is valid
}

TEST_CASE("bpe: GPT-2's byte map is a bijection onto printable characters") {
  const std::vector<uint32_t>& m = tg::gpt2_byte_to_unicode();
  REQUIRE(m.size() == 256);
  CHECK(m['A'] == 'A');
  CHECK(m[' '] == 0x120);  // the "G with dot" that starts GPT-2's word tokens
  CHECK(m['\n'] == 0x10A);
  std::vector<bool> used(512, false);
  for (uint32_t c : m) {
    REQUIRE(c < 512);
    CHECK_FALSE(used[c]);
    used[c] = true;
  }
}

TEST_CASE("bpe: ids equal tiktoken's on the hard-case corpus and on random text") {
  if (!have_vocab()) {
    MESSAGE(tgt::kNoGpt2Vocab);
    return;
  }
  // setup.sh --gpt2 alone fetches the vocabulary, not tiktoken: skip, unless this run must
  // have the oracle (.ci/run sets TG_REQUIRE_ORACLES=1 after setup.sh --hf).
  if (tiktoken_python().empty() && !tgt::oracles_required()) {
    MESSAGE("SKIPPED: no python3 with tiktoken (scripts/setup.sh --hf installs it; .ci/run does)");
    return;
  }
  const tg::BpeTokenizer tok(vocab_dir());
  std::vector<std::string> docs = corpus_lines();
  tg::Rng r(7);
  for (int i = 0; i < 300; i++) docs.push_back(random_text(r, 1 + r.below(40)));
  const std::vector<std::vector<uint32_t>> want = tiktoken_ids(docs);
  REQUIRE(want.size() == docs.size());
  tg::BpeTokenizer::Encoder enc(tok);  // one encoder for all: its cache must not leak state
  size_t tokens = 0;
  for (size_t i = 0; i < docs.size(); i++) {
    std::vector<uint32_t> got;
    enc.encode(docs[i], &got);
    INFO("document " << i << ": " << tg::printable(docs[i].substr(0, 200)));
    CHECK(got == want[i]);
    CHECK(tok.decode(got) == docs[i]);
    tokens += got.size();
  }
  CHECK(tokens > 5000);
  // Well-known ids, independent of the oracle.
  CHECK(tok.encode("Hello world") == std::vector<uint32_t>{15496, 995});
}

TEST_CASE("bpe: the pattern splits as GPT-2's does") {
  if (!have_vocab()) return;  // the pattern lives in the tokenizer, which needs the files
  const tg::BpeTokenizer tok(vocab_dir());
  using V = std::vector<std::string>;
  CHECK(tok.pieces("I'm here  now \n") == V{"I", "'m", " here", " ", " now", " \n"});
  CHECK(tok.pieces("x   ") == V{"x", "   "});  // \s+$ at the end
  CHECK(tok.pieces("a1 22b") == V{"a", "1", " 22", "b"});
  CHECK(tok.pieces("\xe1\xa0\x8e") == V{"\xe1\xa0\x8e"});  // U+180E is not a space
}

TEST_CASE("bpe: damaged files and bad text are clear errors") {
  if (!have_vocab()) return;
  tgt::TempDir d;
  const std::string vocab = tgt::slurp(vocab_dir() + "/vocab.json");
  const std::string merges = tgt::slurp(vocab_dir() + "/merges.txt");
  auto write = [&](const std::string& name, const std::string& s) {
    tg::write_file_atomic(d / name, s.data(), s.size());
  };
  auto error_of = [&]() {
    try {
      tg::BpeTokenizer t(d.path);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(has(error_of(), "vocab.json not found"));
  CHECK(has(error_of(), "scripts/setup.sh --gpt2"));
  write("vocab.json", vocab);
  CHECK(has(error_of(), "merges.txt not found"));
  // A merge line changed: named with its line number.
  std::string m = merges;
  m.replace(m.find("\nĠ t\n"), 5, "\nĠ q\n");
  write("merges.txt", m);
  CHECK(has(error_of(), "merges.txt:2: 'Ġ q' does not make token 256"));
  write("merges.txt", merges.substr(0, merges.size() / 2));
  CHECK(has(error_of(), "merges, GPT-2 has 50000"));
  write("merges.txt", merges);
  write("vocab.json", "{\"a\": 1}");
  CHECK(has(error_of(), "expected an object of 50257 tokens"));
  // The same vocabulary written another way (Hugging Face's vocab.json is): accepted.
  const json reformatted = json::parse(vocab);
  write("vocab.json", reformatted.dump(1));
  CHECK(error_of() == "no error");
  // Consistent files whose content is not GPT-2's: refused by the content digest.
  const tg::BpeTokenizer tok(d.path);
  CHECK(tok.describe()["vocab_sha256"] != tg::sha256_hex(vocab));
  const std::string resplit = resplit_one_merge(tok, merges);
  REQUIRE(!resplit.empty());
  write("merges.txt", resplit);
  CHECK(has(error_of(), "a consistent BPE vocabulary, but not GPT-2's"));
  CHECK(has(error_of(), "scripts/setup.sh --gpt2"));
  write("merges.txt", merges);
  write("vocab.json", vocab);
  CHECK(error_of() == "no error");
  CHECK(tok.describe()["content_sha256"] ==
        "20110f1734707c7518e97afb3d1be66564aa191403e715bf87ea8dcb586ddec0");
  CHECK(has(tgt::error_of([&] { tok.encode("good \xe2\x82 bad", "notes.txt"); }),
            "notes.txt: invalid UTF-8 at byte offset 5 (byte 0xE2)"));
  CHECK(has(tgt::error_of([&] { tok.decode({50257}); }), "token id 50257"));
  CHECK(tok.decode({tg::kGpt2EndOfText}) == "<|endoftext|>");
}

namespace {

// A tokenizer whose pieces longer than `bytes` take the long-piece merge (SIZE_MAX: never).
std::unique_ptr<tg::BpeTokenizer> tokenizer_with_long_pieces_past(size_t bytes) {
  setenv("TG_TEST_BPE_LONG_PIECE", std::to_string(bytes).c_str(), 1);
  auto tok = std::make_unique<tg::BpeTokenizer>(vocab_dir());
  unsetenv("TG_TEST_BPE_LONG_PIECE");
  return tok;
}

// Peak resident memory of `train_gpt args` in its own process (wait4's accounting), bytes.
long long peak_rss_of(const std::string& args) {
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + tgt::binary() + " " + args + " >/dev/null 2>&1").c_str(),
          (char*)nullptr);
    _exit(127);
  }
  int status = 0;
  struct rusage ru {};
  REQUIRE(wait4(pid, &status, 0, &ru) == pid);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  return ru.ru_maxrss * 1024LL;
}

}  // namespace

TEST_CASE("bpe: the long-piece merge gives the heap merge's ids, piece for piece") {
  if (!have_vocab()) {
    MESSAGE(tgt::kNoGpt2Vocab);
    return;
  }
  const auto all_long = tokenizer_with_long_pieces_past(1);
  const auto none_long = tokenizer_with_long_pieces_past(SIZE_MAX);
  std::vector<std::string> docs = corpus_lines();
  tg::Rng r(11);
  for (int i = 0; i < 200; i++) docs.push_back(random_text(r, 1 + r.below(40)));
  // Long pieces of the kinds a pathological line has: letters without spaces, one letter
  // repeated (equal-rank pairs overlapping: leftmost first), digits, punctuation, CJK.
  std::string letters, digits, punct;
  for (int i = 0; i < 200000; i++) letters += char('a' + r.below(26));
  for (int i = 0; i < 50000; i++) digits += char('0' + r.below(10));
  for (int i = 0; i < 50000; i++) punct += "!?.,-=+*"[r.below(8)];
  docs.push_back(letters);
  docs.push_back(std::string(100001, 'a'));
  docs.push_back(digits);
  docs.push_back(punct);
  std::string cjk;
  for (int i = 0; i < 20000; i++) cjk += i % 3 ? "\xe6\xbc\xa2" : "\xe5\xad\x97";
  docs.push_back(cjk);
  for (size_t i = 0; i < docs.size(); i++) {
    INFO("document " << i << ": " << tg::printable(docs[i].substr(0, 80)));
    const std::vector<uint32_t> got = all_long->encode(docs[i]);
    CHECK(got == none_long->encode(docs[i]));
    CHECK(all_long->decode(got) == docs[i]);
  }
}

TEST_CASE("bpe: prepare's memory on a line of letters without a space is a few times the line") {
  if (!have_vocab()) {
    MESSAGE(tgt::kNoGpt2Vocab);
    return;
  }
  tgt::TempDir d;
  tg::Rng r(5);
  std::string line;
  for (int i = 0; i < 8000000; i++) line += char('a' + r.below(26));
  tg::write_text_atomic(d / "line.txt", line + "\n\nand a second document.\n");
  tg::write_text_atomic(d / "small.txt", "a first document.\n\nand a second document.\n");
  const std::string common = " --tokenizer gpt2 --vocab_dir '" + vocab_dir() + "' --threads 1";
  const long long base = peak_rss_of("prepare text --input '" + (d / "small.txt") + "' --out '" +
                                     (d / "small") + "'" + common);
  const long long peak = peak_rss_of("prepare text --input '" + (d / "line.txt") + "' --out '" +
                                     (d / "line") + "'" + common);
  const double times = double(peak - base) / double(line.size());
  MESSAGE("peak " << peak / 1048576 << " MiB, " << times << "x the line above a small input's "
                  << base / 1048576 << " MiB");
  // The ids alone are 4 bytes per token (0.6 tokens per byte here): 2.4x. The heap merge
  // took about 28x.
  CHECK(times < 7);
}
