#include "tokenizer.h"

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "bpe.h"
#include "prepare.h"
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

Tokenizer Tokenizer::gpt2(const std::string& vocab_dir) {
  auto bpe = std::make_shared<const BpeTokenizer>(vocab_dir);
  Tokenizer t;
  for (uint32_t i = 0; i < uint32_t(kGpt2VocabSize); i++) t.pieces_.push_back(bpe->token_bytes(i));
  t.bpe_ = std::move(bpe);
  return t;
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

nlohmann::json tokenizer_record_to_json(const TokenizerRecord& r) {
  if (!r.known()) return nullptr;
  nlohmann::json j = {{"kind", r.kind}, {"vocab_size", r.vocab_size}};
  if (!r.digest.empty()) j["digest"] = r.digest;
  if (!r.files.empty()) j["files"] = r.files;
  return j;
}

TokenizerRecord tokenizer_record_from_json(const nlohmann::json& j, const std::string& where) {
  TokenizerRecord r;
  if (j.is_null()) return r;
  auto bad = [&](const char* why) { throw Error(strf("%s: 'tokenizer' %s", where.c_str(), why)); };
  if (!j.is_object()) bad("is not an object");
  const nlohmann::json kind = j.value("kind", nlohmann::json()),
                       vocab = j.value("vocab_size", nlohmann::json());
  if (!kind.is_string() || kind.get<std::string>().empty()) bad("has no string 'kind'");
  if (!vocab.is_number_unsigned() || vocab.get<uint64_t>() == 0 || vocab.get<uint64_t>() > 1u << 30)
    bad("has no positive integer 'vocab_size'");
  r.kind = kind.get<std::string>();
  r.vocab_size = int(vocab.get<uint64_t>());
  for (auto [key, field] : {std::pair{"digest", &r.digest}, {"files", &r.files}}) {
    const nlohmann::json v = j.value(key, nlohmann::json(""));
    if (!v.is_string()) bad(strf("has a '%s' that is not a string", key).c_str());
    *field = v.get<std::string>();
  }
  return r;
}

TokenizerRecord dataset_tokenizer_record(const nlohmann::json& meta, const std::string& data_dir) {
  TokenizerRecord r;
  if (!meta.is_object() || !meta.value("tokenizer", nlohmann::json()).is_string()) return r;
  r.kind = meta["tokenizer"].get<std::string>();
  const nlohmann::json vocab = meta.value("vocab_size", nlohmann::json());
  r.vocab_size = vocab.is_number_integer() ? vocab.get<int>()
                 : r.kind == "gpt2"        ? kGpt2VocabSize
                                           : 256;
  if (r.kind == "byte") return r;  // no files
  r.files = data_dir;
  const nlohmann::json g = meta.value("gpt2", nlohmann::json::object());
  if (g.is_object() && g.value("content_sha256", nlohmann::json()).is_string())
    r.digest = g["content_sha256"].get<std::string>();
  return r;
}

namespace {
bool is_vocab_dir(const std::string& dir) {
  return file_exists(join_path(dir, "vocab.json")) || file_exists(join_path(dir, "encoder.json"));
}
}  // namespace

TokenizerRecord tokenizer_record_at(const std::string& path) {
  if (!std::filesystem::is_directory(path)) {  // llm.c's decoding file
    const int n = Tokenizer(path).vocab_size();
    return {n == kGpt2VocabSize ? "gpt2" : "llm.c", n, "", path};
  }
  const std::string meta = join_path(path, "meta.json");
  if (file_exists(meta)) {
    const TokenizerRecord r = dataset_tokenizer_record(read_meta_file(meta), path);
    if (!r.known()) throw Error(strf("%s names no tokenizer", meta.c_str()));
    return r;
  }
  if (is_vocab_dir(path)) {
    const BpeTokenizer bpe(path);  // checks the files
    return {"gpt2", kGpt2VocabSize, bpe.describe()["content_sha256"], path};
  }
  throw Error(strf("%s holds no tokenizer: neither a dataset's meta.json nor GPT-2's vocab.json",
                   path.c_str()));
}

Tokenizer tokenizer_of_record(const TokenizerRecord& r) {
  if (!r.known() || r.kind == "byte") return Tokenizer();
  const std::string& f = r.files;
  if (!f.empty() && std::filesystem::is_regular_file(f)) return Tokenizer(f);
  if (!f.empty() && file_exists(join_path(f, "meta.json")))
    return dataset_tokenizer(read_meta_file(join_path(f, "meta.json")), f);
  if (!f.empty() && is_vocab_dir(f)) return Tokenizer::gpt2(f);
  throw Error(
      strf("the model's tokenizer, %s, is not at hand (%s holds neither meta.json nor "
           "vocab.json); give --tokenizer DIR: its dataset folder, or data/gpt2",
           describe_tokenizer(r).c_str(), f.empty() ? "\"\"" : f.c_str()));
}

std::string describe_tokenizer(const TokenizerRecord& r) {
  if (!r.known()) return "no tokenizer named";
  const std::string name = r.kind == "byte" ? "bytes" : r.kind == "gpt2" ? "GPT-2's BPE" : r.kind;
  return strf("%s (vocabulary %d%s%s)", name.c_str(), r.vocab_size, r.files.empty() ? "" : ", ",
              r.files.c_str());
}

bool same_tokenizer(const TokenizerRecord& a, const TokenizerRecord& b) {
  return a.kind == b.kind && a.vocab_size == b.vocab_size &&
         (a.digest.empty() || b.digest.empty() || a.digest == b.digest);
}

TokenizerRecord tokenizer_option_record(const std::string& command, const std::string& option,
                                        const TokenizerRecord& model, const std::string& model_name,
                                        int vocab_size, bool exact_vocab) {
  const TokenizerRecord r = tokenizer_record_at(option);
  if (model.known() && !same_tokenizer(r, model))
    throw UsageError(
        strf("%s: --tokenizer %s is %s, but %s was trained with %s; leave "
             "--tokenizer out to use the model's own",
             command.c_str(), option.c_str(), describe_tokenizer(r).c_str(), model_name.c_str(),
             describe_tokenizer(model).c_str()));
  if (exact_vocab ? r.vocab_size != vocab_size : r.vocab_size > vocab_size)
    throw UsageError(strf("%s: --tokenizer %s is %s, but the model's vocabulary is %d",
                          command.c_str(), option.c_str(), describe_tokenizer(r).c_str(),
                          vocab_size));
  return r;
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
