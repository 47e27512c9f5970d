// bpe.h: GPT-2's byte-level BPE, text <-> token ids, the same ids as tiktoken's "gpt2"
// encoding (tiktoken 0.14, r50k_pat_str), read from OpenAI's files (encoder.json and
// vocab.bpe, which Hugging Face calls vocab.json and merges.txt).
//
// Encoding, as tiktoken does it:
//   1. pre-tokenisation: the text (valid UTF-8) is cut into pieces by GPT-2's pattern
//        's|'t|'re|'ve|'m|'ll|'d | ?\p{L}+ | ?\p{N}+ | ?[^\s\p{L}\p{N}]+ | \s+$ | \s+(?!\S) | \s
//      run by PCRE2 (UTF, UCP, JIT). `\s` is written \p{White_Space} (Rust's \s, which
//      tiktoken's regex uses; PCRE2's own \s also takes U+180E) and `$` is the end of the text
//      only (PCRE2_DOLLAR_ENDONLY), as in Rust.
//   2. each piece's bytes: one token when the whole piece is one; else, starting from single
//      bytes, the adjacent pair whose concatenation has the lowest rank (= token id) is merged,
//      the leftmost of equal ranks first, until no concatenation is a token.
// Frequent pieces are cached. The end-of-text token (50256) is never produced from text:
// callers insert it between documents (encode treats "<|endoftext|>" as ordinary text, as
// tiktoken's encode_ordinary does).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace tg {

constexpr uint32_t kGpt2EndOfText = 50256;
constexpr int kGpt2VocabSize = 50257;

// The byte offset of the first byte that does not begin or continue a valid UTF-8 sequence
// (overlong forms, surrogates and code points above U+10FFFF are invalid); npos if none.
size_t first_invalid_utf8(std::string_view s);
// Each invalid sequence replaced by U+FFFD, one per maximal invalid subpart (the longest
// prefix of a well-formed sequence, or one byte), as Python's decode(errors="replace") does.
std::string utf8_replace_invalid(std::string_view s);

// GPT-2's reversible byte <-> printable-character map of its vocabulary files: byte b is the
// character of code point byte_to_unicode()[b].
const std::vector<uint32_t>& gpt2_byte_to_unicode();

class BpeTokenizer {
 public:
  // Reads `dir`/vocab.json and `dir`/merges.txt (or OpenAI's names encoder.json and
  // vocab.bpe) and checks them against each other (every id 0..50255 once, the 256 byte
  // tokens, each merge line n making token 256 + n from the two tokens it names) and against
  // GPT-2's content digest (a SHA-256 of the tokens and merges, whatever the files' JSON
  // formatting). Error naming the file, the line or the token otherwise, and the way out.
  explicit BpeTokenizer(const std::string& dir);
  ~BpeTokenizer();
  BpeTokenizer(const BpeTokenizer&) = delete;
  BpeTokenizer& operator=(const BpeTokenizer&) = delete;

  // One thread's encoder: PCRE2's match data and a cache of the pieces it has merged. Each
  // thread makes its own; the tokenizer must outlive it.
  class Encoder {
   public:
    explicit Encoder(const BpeTokenizer& tok);
    ~Encoder();
    Encoder(const Encoder&) = delete;
    Encoder& operator=(const Encoder&) = delete;
    // Text (UTF-8) to ids, appended to *out. Error naming `where` and the byte offset of the
    // first invalid UTF-8 byte (nothing appended then).
    void encode(std::string_view text, std::vector<uint32_t>* out,
                const std::string& where = "text");

   private:
    struct State;
    std::unique_ptr<State> st_;
  };
  // One-off encoding (a new Encoder each call).
  std::vector<uint32_t> encode(std::string_view text, const std::string& where = "text") const;
  // Ids to bytes; the end-of-text token decodes as "<|endoftext|>". Error on an id >= 50257.
  std::string decode(const std::vector<uint32_t>& ids) const;
  const std::string& token_bytes(uint32_t id) const;
  // For meta.json: the name, vocabulary size, files and their sha256, the content digest.
  nlohmann::json describe() const;

  // Each pre-tokenisation piece of `text` (valid UTF-8), for tests.
  std::vector<std::string> pieces(std::string_view text) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tg
