// prepare_gpt2.h: `train_gpt prepare text --tokenizer gpt2`: text to GPT-2 token shards, as
// llm.c's data scripts make them.
//
// Input: a text file (one document; with split "paragraphs" one per paragraph, cut at blank
// lines, "\n\n", each keeping its separator, as llm.c's tinyshakespeare script does), a
// folder (every regular file below it, in path order, one document each) or a .jsonl file (one
// JSON object per line, the document in its "text" field). Each document is preceded by
// <|endoftext|> (50256): prose cut at every blank line would fill samples with it. The
// validation split is the last documents, whole, holding about val_fraction of the bytes; a
// single document is cut instead, its last val_fraction (from a line's start) the val split.
//
// Output in out_dir: NAME_{train,val}_NNNNNN.bin in llm.c's shard format (magic 20240520,
// version 1, uint16 tokens, at most shard_tokens each), gpt2_tokenizer.bin (llm.c's decoding
// file, version 2) and meta.json (the tokenizer and its files' hashes, documents, tokens,
// bytes and tokens per byte, for bits per byte). Everything is read and tokenised before
// anything is written; meta.json is written last, so a folder without it is incomplete.
//
// Bad input is an error naming the file (and line or byte offset): invalid UTF-8 (or, with
// errors=replace, each invalid sequence becomes U+FFFD as Python's errors="replace" does),
// NUL bytes, empty documents, JSONL lines that are not objects with a string "text".
#pragma once
#include <cstdint>
#include <string>

namespace tg {

struct Gpt2PrepareOptions {
  std::string input;  // file, folder or .jsonl
  std::string out_dir;
  std::string name;               // shard name prefix
  std::string vocab_dir;          // vocab.json + merges.txt
  std::string errors = "strict";  // strict | replace (invalid UTF-8)
  std::string split = "none";     // a text file: none (one document) | paragraphs
  double val_fraction = 0.1;
  int64_t shard_tokens = 100000000;
  int threads = 0;  // 0: all
};

// What prepare wrote, for the closing message.
struct Gpt2PrepareResult {
  int64_t train_tokens = 0, val_tokens = 0, bytes = 0;
  int64_t train_docs = 0, val_docs = 0;
  int train_shards = 0, val_shards = 0;
};

Gpt2PrepareResult prepare_text_gpt2(const Gpt2PrepareOptions& o);

// llm.c's gpt2_tokenizer.bin (version 2) for the GPT-2 vocabulary in vocab_dir.
void write_gpt2_tokenizer_file(const std::string& path, const std::string& vocab_dir);

}  // namespace tg
