// tokenizer.h: decoding token ids to text.
//
// Byte-level (vocab 256, no file) is the default. llm.c's gpt2_tokenizer.bin (256 uint32
// header: [0]=20240328, [1]=version 1 or 2, [2]=vocab size, [3]=end-of-text id in version
// 2; then per token a uint8 length and that many bytes) decodes GPT-2 ids.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tg {

class Tokenizer {
 public:
  Tokenizer() = default;  // byte-level
  explicit Tokenizer(const std::string& path);
  std::string decode(int32_t id) const;
  // Text to ids; only the byte-level tokenizer can encode.
  std::vector<int32_t> encode(const std::string& text) const;
  bool byte_level() const { return pieces_.empty(); }
  int vocab_size() const { return byte_level() ? 256 : int(pieces_.size()); }

 private:
  std::vector<std::string> pieces_;
};

// Makes text printable on a terminal: control and non-UTF-8 bytes become \xNN escapes
// (newlines and tabs are kept).
std::string printable(const std::string& s);

}  // namespace tg
