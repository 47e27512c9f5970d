#include "tokenizer.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "bpe.h"
#include "src/base/common.h"
#include "src/base/fileio.h"

namespace tg {

Tokenizer::Tokenizer(const std::string& path) {
  std::vector<char> buf = read_file(path, "tokenizer file");
  if (buf.size() < 1024) throw Error(strf("tokenizer file %s is truncated", path.c_str()));
  uint32_t h[256];
  memcpy(h, buf.data(), sizeof(h));
  if (h[0] != 20240328 || (h[1] != 1 && h[1] != 2))
    throw Error(
        strf("tokenizer file %s has bad magic or version (%u, %u)", path.c_str(), h[0], h[1]));
  size_t off = 1024;
  for (uint32_t i = 0; i < h[2]; i++) {
    if (off >= buf.size()) throw Error(strf("tokenizer file %s is truncated", path.c_str()));
    size_t len = uint8_t(buf[off++]);
    if (len == 0 || off + len > buf.size())
      throw Error(strf("tokenizer file %s is corrupt at token %u", path.c_str(), i));
    pieces_.emplace_back(buf.data() + off, len);
    off += len;
  }
}

std::string Tokenizer::decode(int32_t id) const {
  if (byte_level()) return id >= 0 && id < 256 ? std::string(1, char(id)) : "";
  return id >= 0 && size_t(id) < pieces_.size() ? pieces_[id] : "";
}

std::vector<int32_t> Tokenizer::encode(const std::string& text) const {
  std::vector<int32_t> ids;
  if (byte_level()) {
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  if (!bpe_)
    throw UsageError(strf("the prompt needs GPT-2's encoder: %s",
                          why_not_.empty() ? "no vocabulary folder given" : why_not_.c_str()));
  for (uint32_t id : bpe_->encode(text, "the prompt")) ids.push_back(int32_t(id));
  return ids;
}

void Tokenizer::set_encoder(const std::string& vocab_dir) {
  try {
    bpe_ = std::make_shared<const BpeTokenizer>(vocab_dir);
  } catch (const std::exception& e) {
    why_not_ = e.what();
  }
}

std::string dataset_vocab_dir(const nlohmann::json& meta) {
  if (!meta.is_object() || meta.value("tokenizer", std::string("byte")) != "gpt2") return "";
  const nlohmann::json g = meta.value("gpt2", nlohmann::json::object());
  const nlohmann::json f = g.is_object() ? g.value("vocab_file", nlohmann::json()) : nullptr;
  return f.is_string() ? dirname_of(f.get<std::string>()) : "data/gpt2";
}

Tokenizer dataset_tokenizer(const nlohmann::json& meta, const std::string& data_dir) {
  const std::string vocab_dir = dataset_vocab_dir(meta);
  if (vocab_dir.empty()) return Tokenizer();
  const std::string file = meta.value("tokenizer_file", std::string("gpt2_tokenizer.bin"));
  Tokenizer t(join_path(data_dir, file));
  t.set_encoder(vocab_dir);
  return t;
}

std::string printable(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (int k = 1; ok && k < len; k++) ok = (uint8_t(s[i + k]) >> 6) == 2;
    if (ok && len == 1 && c < 0x20 && c != '\n' && c != '\t') ok = false;
    if (ok && c == 0x7f) ok = false;
    if (ok) {
      out.append(s, i, len);
      i += len;
    } else {
      out += strf("\\x%02x", c);
      i++;
    }
  }
  return out;
}

}  // namespace tg
