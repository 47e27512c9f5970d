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
  // GPT-2's, decoding and encoding, from the vocabulary folder vocab_dir (vocab.json and
  // merges.txt: an export, data/gpt2).
  static Tokenizer gpt2(const std::string& vocab_dir);
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

// What a checkpoint and an exported model record of the tokenizer they were trained with, so
// that `sample` and `export` use it without being told and refuse another by name, and
// model.init_from refuses data of another tokenizer. Files written before the record have none
// (kind ""): their readers fall back to bytes, saying so.
struct TokenizerRecord {
  std::string kind;    // "byte", "gpt2" (GPT-2's BPE) or "llm.c" (a decoding file alone)
  int vocab_size = 0;  // its token ids are 0 .. vocab_size - 1
  std::string digest;  // gpt2: the content SHA-256 of its tokens and merges; else ""
  std::string files;   // the folder of its files (a dataset folder or an export); "" for bytes
  bool known() const { return !kind.empty(); }
};
nlohmann::json tokenizer_record_to_json(const TokenizerRecord& r);
// A record from its JSON (null: unknown); `where` names the file in errors.
TokenizerRecord tokenizer_record_from_json(const nlohmann::json& j, const std::string& where);
// The record of a dataset's tokenizer, from its meta.json (unknown when meta names none).
TokenizerRecord dataset_tokenizer_record(const nlohmann::json& meta, const std::string& data_dir);
// The tokenizer in a folder: a dataset folder (its meta.json) or a vocabulary folder
// (vocab.json + merges.txt: data/gpt2, an export); or llm.c's gpt2_tokenizer.bin file.
TokenizerRecord tokenizer_record_at(const std::string& path);
// The tokenizer a record names, from its files; an error naming them when they are gone.
Tokenizer tokenizer_of_record(const TokenizerRecord& r);
// In words: "GPT-2's BPE (vocabulary 50257, data/x)", "bytes (vocabulary 256)".
std::string describe_tokenizer(const TokenizerRecord& r);
// Whether two known records name the same tokenizer: kind, vocabulary and (where both have
// one) digest; where the files are does not matter.
bool same_tokenizer(const TokenizerRecord& a, const TokenizerRecord& b);

// The tokenizer a command's --tokenizer names (`option`, see tokenizer_record_at) for a model
// called `model_name` that records `model` (or nothing) and has vocab_size tokens: a
// UsageError naming `command`, the option and both tokenizers when it is not the recorded
// one, or has more tokens than the model (exact_vocab: other than the model's).
TokenizerRecord tokenizer_option_record(const std::string& command, const std::string& option,
                                        const TokenizerRecord& model, const std::string& model_name,
                                        int vocab_size, bool exact_vocab);

// Makes text printable on a terminal: control and non-UTF-8 bytes become \xNN escapes
// (newlines and tabs are kept).
std::string printable(const std::string& s);

}  // namespace tg
