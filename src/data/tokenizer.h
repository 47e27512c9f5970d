// tokenizer.h: a run's tokenizer: token ids to text and prompts to ids.
//
// Byte-level (vocab 256, no file) is the default. llm.c's gpt2_tokenizer.bin (256 uint32
// header: [0]=20240328, [1]=version 1 or 2, [2]=vocab size, [3]=end-of-text id in version
// 2; then per token a uint8 length and that many bytes) decodes GPT-2 ids; prompts are
// encoded by GPT-2's BPE (src/data/bpe.h) when its vocabulary files are at hand.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace tg {

class BpeTokenizer;

class Tokenizer {
 public:
  Tokenizer() = default;  // byte-level
  explicit Tokenizer(const std::string& path);
  std::string decode(int32_t id) const;
  // Text to ids: bytes, or GPT-2's BPE (an error saying what is missing without it).
  std::vector<int32_t> encode(const std::string& text) const;
  bool byte_level() const { return pieces_.empty(); }
  int vocab_size() const { return byte_level() ? 256 : int(pieces_.size()); }
  // GPT-2's encoder from the vocabulary folder vocab_dir; `why_not` says why prompts cannot
  // be encoded when it does not load.
  void set_encoder(const std::string& vocab_dir);

 private:
  std::vector<std::string> pieces_;
  std::shared_ptr<const BpeTokenizer> bpe_;
  std::string why_not_;
};

// The tokenizer of the dataset in data_dir, from its meta.json (`meta`): byte-level, or
// GPT-2's (meta "tokenizer": "gpt2": its tokenizer_file beside the shards decodes, the
// vocabulary folder meta names encodes).
Tokenizer dataset_tokenizer(const nlohmann::json& meta, const std::string& data_dir);
// The GPT-2 vocabulary folder a dataset's meta.json names ("" when its tokenizer is not
// GPT-2's; data/gpt2 when it names no folder).
std::string dataset_vocab_dir(const nlohmann::json& meta);

// Makes text printable on a terminal: control and non-UTF-8 bytes become \xNN escapes
// (newlines and tabs are kept).
std::string printable(const std::string& s);

}  // namespace tg
