// prepare_gpt2.cpp: text to GPT-2 token shards (see prepare_gpt2.h).
#include "prepare_gpt2.h"

#include <omp.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "bpe.h"
#include "data.h"
#include "src/base/common.h"
#include "src/base/fileio.h"

namespace tg {
using json = nlohmann::json;

namespace {

struct Document {
  std::string_view text;
  std::string where;  // the file, and the line of a JSONL document
  size_t offset = 0;  // of the text in its file (not for JSONL)
  bool continued = false;  // the rest of the document before it: no <|endoftext|> between
};

// The documents and the buffers their text lives in (a deque: buffers never move).
struct Corpus {
  std::deque<std::string> buffers;
  std::vector<Document> docs;
  int64_t bytes = 0;
};

std::string read_text(const std::string& path) {
  const std::vector<char> v = read_file(path, "text file");
  return std::string(v.begin(), v.end());
}

// A text file as one document.
void add_file(Corpus* c, const std::string& path) {
  const std::string& text = c->buffers.emplace_back(read_text(path));
  c->docs.push_back({text, path, 0});
}

// Documents at blank lines: each ends after a "\n\n" (or at the end of the file).
void add_paragraphs(Corpus* c, const std::string& path) {
  const std::string& text = c->buffers.emplace_back(read_text(path));
  for (size_t at = 0; at < text.size();) {
    const size_t sep = text.find("\n\n", at);
    const size_t end = sep == std::string::npos ? text.size() : sep + 2;
    c->docs.push_back({std::string_view(text).substr(at, end - at), path, at});
    at = end;
  }
}

void add_jsonl(Corpus* c, const std::string& path) {
  const std::string text = read_text(path);
  size_t line_no = 0;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    line_no++;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank line
    const std::string where = strf("%s:%zu", path.c_str(), line_no);
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      throw Error(strf("%s: not JSON (%s)", where.c_str(), e.what()));
    }
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
      throw Error(strf("%s: expected an object with a string field \"text\"", where.c_str()));
    c->docs.push_back({c->buffers.emplace_back(j["text"].get<std::string>()), where, 0});
  }
}

// A folder's files, recursively, in name order. Symlinks to files are read, with a note when
// they lead out of the folder (the corpus then holds files nobody sees in it); a symlink that
// cannot be resolved (a loop, a dangling link) and a symlinked folder (never entered: a loop
// could never end) are skipped with a warning.
std::vector<std::string> folder_files(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string root = fs::canonical(dir, ec).string() + "/";
  std::vector<std::string> files, outside, skipped;
  fs::recursive_directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const fs::directory_entry& e = *it;
    const std::string path = e.path().string();
    std::error_code lec;
    if (!e.is_symlink(lec)) {
      if (e.is_regular_file(lec)) files.push_back(path);
      continue;
    }
    const fs::path target = fs::canonical(e.path(), lec);
    if (lec)
      skipped.push_back(path + " (" + lec.message() + ")");
    else if (fs::is_directory(target, lec))
      skipped.push_back(path + " -> " + target.string() + " (a symlinked folder: not entered)");
    else if (fs::is_regular_file(target, lec)) {
      files.push_back(path);
      if (target.string().compare(0, root.size(), root) != 0)
        outside.push_back(path + " -> " + target.string());
    }
  }
  if (ec) throw Error(strf("input folder %s: cannot list it: %s", dir.c_str(), ec.message().c_str()));
  auto say = [&](const char* kind, const char* what, const std::vector<std::string>& v) {
    std::string list;
    for (const std::string& s : v) list += (list.empty() ? "" : ", ") + s;
    if (!v.empty()) fprintf(stderr, "%s: input folder %s: %s: %s\n", kind, dir.c_str(), what, list.c_str());
  };
  say("note", "read these symlinks, which lead out of it", outside);
  say("warning", "skipped these symlinks", skipped);
  std::sort(files.begin(), files.end());
  return files;
}

void add_folder(Corpus* c, const std::string& dir) {
  const std::vector<std::string> files = folder_files(dir);
  if (files.empty()) throw Error(strf("input folder %s holds no files", dir.c_str()));
  for (const std::string& f : files) add_file(c, f);
}

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// NUL bytes, empty documents and invalid UTF-8 (replaced, or an error naming the offset).
void check_documents(Corpus* c, const std::string& errors) {
  for (Document& d : c->docs) {
    if (d.text.empty())
      throw Error(strf("%s: an empty document (remove it: a document is at least one byte)",
                       d.where.c_str()));
    const size_t nul = d.text.find('\0');
    if (nul != std::string_view::npos)
      throw Error(strf("%s: a NUL byte at byte offset %zu: not text (a binary file?)",
                       d.where.c_str(), d.offset + nul));
    const size_t bad = first_invalid_utf8(d.text);
    if (bad != std::string_view::npos) {
      if (errors != "replace")
        throw Error(strf(
            "%s: invalid UTF-8 at byte offset %zu (byte 0x%02X); --errors replace "
            "turns each invalid sequence into U+FFFD",
            d.where.c_str(), d.offset + bad, unsigned(static_cast<unsigned char>(d.text[bad]))));
      d.text = c->buffers.emplace_back(utf8_replace_invalid(d.text));
    }
    c->bytes += int64_t(d.text.size());
  }
}

// One document (a text file) is cut in two, as nanoGPT's prepare.py cuts its text: the val
// split is its last val_fraction of the bytes, from the start of the nearest line within half
// that (else of a UTF-8 character), continuing the train split's document.
void cut_for_val(Corpus* c, double val_fraction) {
  const std::string_view text = c->docs[0].text;
  size_t cut = text.size() - size_t(double(text.size()) * val_fraction);
  const size_t slack = (text.size() - cut) / 2;
  const size_t back = cut == 0 ? std::string_view::npos : text.rfind('\n', cut - 1);
  const size_t ahead = text.find('\n', cut);
  if (back != std::string_view::npos && cut - (back + 1) <= slack)
    cut = back + 1;
  else if (ahead != std::string_view::npos && ahead + 1 - cut <= slack)
    cut = ahead + 1;
  while (cut < text.size() && (uint8_t(text[cut]) & 0xC0) == 0x80) cut++;  // continuation bytes
  if (cut == 0 || cut >= text.size()) return;  // too short to cut: read_corpus says so
  Document val = c->docs[0];
  val.text = text.substr(cut);
  val.offset += cut;
  val.continued = true;
  c->docs[0].text = text.substr(0, cut);
  c->docs.push_back(val);
}

Corpus read_corpus(const Gpt2PrepareOptions& o) {
  Corpus c;
  if (std::filesystem::is_directory(o.input))
    add_folder(&c, o.input);
  else if (ends_with(o.input, ".jsonl"))
    add_jsonl(&c, o.input);
  else if (o.split == "paragraphs")
    add_paragraphs(&c, o.input);
  else
    add_file(&c, o.input);
  check_documents(&c, o.errors);
  if (c.docs.size() == 1) cut_for_val(&c, o.val_fraction);
  if (c.docs.size() == 1)
    throw Error(strf("%s: %zu byte(s), too few to split into train and val", o.input.c_str(),
                     c.docs[0].text.size()));
  if (c.docs.empty()) throw Error(strf("%s: no documents", o.input.c_str()));
  return c;
}

// A progress line on stderr: in place on a terminal, every few seconds in a log.
struct Progress {
  using Clock = std::chrono::steady_clock;
  Clock::time_point start = Clock::now(), last = start;
  int64_t total;
  bool tty = isatty(2) != 0;
  explicit Progress(int64_t t) : total(t) {}
  void show(int64_t done, bool final = false) {
    const auto now = Clock::now();
    if (!final && now - last < std::chrono::milliseconds(tty ? 500 : 5000)) return;
    last = now;
    const double s = std::chrono::duration<double>(now - start).count();
    const double rate = s > 0 ? double(done) / s : 0;
    fprintf(stderr, "%stokenizing: %.1f of %.1f MB, %.1f MB/s, %s%s", tty ? "\r" : "", done / 1e6,
            total / 1e6, rate / 1e6,
            final ? strf("%.1fs", s).c_str()
                  : strf("eta %.0fs", rate > 0 ? double(total - done) / rate : 0.0).c_str(),
            tty && !final ? "   " : "\n");
    fflush(stderr);
  }
};

// Each document's tokens, <|endoftext|> first, on all the threads (one encoder each).
std::vector<std::vector<uint32_t>> tokenize(const Corpus& c, const BpeTokenizer& tok, int threads) {
  std::vector<std::vector<uint32_t>> ids(c.docs.size());
  std::atomic<int64_t> done{0};
  std::string first_error;
  Progress progress(c.bytes);
#pragma omp parallel num_threads(threads)
  {
    BpeTokenizer::Encoder enc(tok);
#pragma omp for schedule(dynamic, 4)
    for (size_t i = 0; i < c.docs.size(); i++) {
      try {
        if (!c.docs[i].continued) ids[i].push_back(kGpt2EndOfText);
        enc.encode(c.docs[i].text, &ids[i], c.docs[i].where);
      } catch (const std::exception& e) {
#pragma omp critical
        if (first_error.empty()) first_error = e.what();
      }
      done += int64_t(c.docs[i].text.size());
      if (omp_get_thread_num() == 0) progress.show(done);
    }
  }
  if (!first_error.empty()) throw Error(first_error);
  progress.show(done, true);
  return ids;
}

// The documents [begin, end) in shards of at most shard_tokens; returns the shard count.
// A shard is written from spans of the documents' ids, not a copy of them.
int write_split(const Gpt2PrepareOptions& o, const char* split,
                const std::vector<std::vector<uint32_t>>& ids, size_t begin, size_t end) {
  std::vector<TokenSpan> shard;
  int64_t in_shard = 0;
  int n = 0;
  auto flush = [&] {
    write_shard(join_path(o.out_dir, strf("%s_%s_%06d.bin", o.name.c_str(), split, n++)), shard);
    shard.clear();
    in_shard = 0;
  };
  for (size_t d = begin; d < end; d++)
    for (size_t at = 0; at < ids[d].size();) {
      const size_t take = size_t(std::min<int64_t>(int64_t(ids[d].size() - at),
                                                   o.shard_tokens - in_shard));
      shard.push_back({ids[d].data() + at, take});
      at += take;
      in_shard += int64_t(take);
      if (in_shard == o.shard_tokens) flush();
    }
  if (!shard.empty() || n == 0) flush();
  return n;
}

// Earlier shards of this name, and meta.json (marking the folder incomplete until rewritten).
void clear_old_output(const Gpt2PrepareOptions& o) {
  if (!std::filesystem::is_directory(o.out_dir)) return;
  std::filesystem::remove(join_path(o.out_dir, "meta.json"));
  for (const auto& e : std::filesystem::directory_iterator(o.out_dir)) {
    const std::string f = e.path().filename().string();
    if ((f.rfind(o.name + "_train_", 0) == 0 || f.rfind(o.name + "_val_", 0) == 0) &&
        ends_with(f, ".bin"))
      std::filesystem::remove(e.path());
  }
}

}  // namespace

void write_gpt2_tokenizer_file(const std::string& path, const std::string& vocab_dir) {
  const BpeTokenizer tok(vocab_dir);
  int32_t h[256] = {};
  h[0] = 20240328;
  h[1] = 2;
  h[2] = kGpt2VocabSize;
  h[3] = int32_t(kGpt2EndOfText);
  std::string buf(reinterpret_cast<const char*>(h), sizeof(h));
  for (uint32_t i = 0; i < uint32_t(kGpt2VocabSize); i++) {
    const std::string& t = tok.token_bytes(i);
    buf += char(uint8_t(t.size()));
    buf += t;
  }
  write_file_atomic(path, buf.data(), buf.size());
}

Gpt2PrepareResult prepare_text_gpt2(const Gpt2PrepareOptions& o) {
  if (!(o.val_fraction > 0 && o.val_fraction < 1))
    throw UsageError("prepare text: --val_fraction must be in (0, 1)");
  if (o.split != "none" && o.split != "paragraphs")
    throw UsageError(
        strf("prepare text: --split is none or paragraphs, not '%s'", o.split.c_str()));
  if (o.errors != "strict" && o.errors != "replace")
    throw UsageError(
        strf("prepare text: --errors is strict or replace, not '%s'", o.errors.c_str()));
  const BpeTokenizer tok(o.vocab_dir);
  const Corpus c = read_corpus(o);
  const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();
  const std::vector<std::vector<uint32_t>> ids = tokenize(c, tok, threads);
  // The val split: the last whole documents holding about val_fraction of the bytes.
  size_t first_val = c.docs.size() - 1;
  int64_t val_bytes = int64_t(c.docs[first_val].text.size());
  while (first_val > 1 && val_bytes + int64_t(c.docs[first_val - 1].text.size()) <=
                              int64_t(o.val_fraction * double(c.bytes)))
    val_bytes += int64_t(c.docs[--first_val].text.size());
  Gpt2PrepareResult r;
  r.bytes = c.bytes;
  r.train_docs = int64_t(first_val);
  r.val_docs = int64_t(c.docs.size() - first_val);
  for (size_t d = 0; d < ids.size(); d++)
    (d < first_val ? r.train_tokens : r.val_tokens) += int64_t(ids[d].size());
  make_dirs(o.out_dir);
  clear_old_output(o);
  r.val_shards = write_split(o, "val", ids, first_val, ids.size());
  r.train_shards = write_split(o, "train", ids, 0, first_val);
  write_gpt2_tokenizer_file(join_path(o.out_dir, "gpt2_tokenizer.bin"), o.vocab_dir);
  const json meta = {{"vocab_size", kGpt2VocabSize},
                     {"tokenizer", "gpt2"},
                     {"tokenizer_file", "gpt2_tokenizer.bin"},
                     {"gpt2", tok.describe()},
                     {"source", o.input},
                     {"documents", {{"train", r.train_docs}, {"val", r.val_docs}}},
                     {"train_tokens", r.train_tokens},
                     {"val_tokens", r.val_tokens},
                     {"bytes", {{"train", c.bytes - val_bytes}, {"val", val_bytes}}},
                     {"val_tokens_per_byte", double(r.val_tokens) / double(val_bytes)},
                     {"tokens_per_byte", double(r.train_tokens + r.val_tokens) / double(c.bytes)},
                     {"loss_floor", nullptr}};
  write_text_atomic(join_path(o.out_dir, "meta.json"), meta.dump(2) + "\n");
  return r;
}

}  // namespace tg
