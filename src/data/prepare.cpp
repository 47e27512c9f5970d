#include "prepare.h"

#include <algorithm>

#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "data.h"
#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/base/rng.h"

namespace tg {
using json = nlohmann::json;

double toy_loss_floor(int record_len) {
  int k = (record_len - 2) / 2;  // letters per half
  return (k * std::log(16.0) + std::log(2.0)) / record_len;
}

double toy_plateau_loss(int record_len) {
  int k = (record_len - 2) / 2;  // the copied half is as random as the first to such a model
  return (2 * k * std::log(16.0) + std::log(2.0)) / record_len;
}

namespace {

void toy_record(Rng& rng, int k, std::vector<uint32_t>& out) {
  uint32_t x[64];
  for (int i = 0; i < k; i++) x[i] = 'a' + uint32_t(rng.below(16));
  bool reverse = rng.below(2) == 1;
  out.push_back('|');
  for (int i = 0; i < k; i++) out.push_back(x[i]);
  out.push_back(reverse ? '~' : '=');
  for (int i = 0; i < k; i++) out.push_back(x[reverse ? k - 1 - i : i]);
}

std::vector<uint32_t> toy_stream(uint64_t seed, uint64_t stream, int64_t ntok, int record_len) {
  Rng rng = Rng::derive(seed, 0x544F59ull /*"TOY"*/, stream);
  std::vector<uint32_t> out;
  out.reserve(ntok + 1 + record_len);
  // One extra token so that the last full row of T tokens still has its target.
  while (int64_t(out.size()) < ntok + 1) toy_record(rng, (record_len - 2) / 2, out);
  out.resize(ntok + 1);
  return out;
}

void write_meta(const std::string& dir, const json& meta) {
  write_text_atomic(join_path(dir, "meta.json"), meta.dump(2) + "\n");
}

}  // namespace

void prepare_toy(const std::string& out_dir, uint64_t seed, int64_t train_tokens,
                 int64_t val_tokens, int record_len) {
  if (record_len < 4 || record_len > 128 || record_len % 2 != 0)
    throw UsageError("prepare toy: --record_len must be even, in [4, 128]");
  if (train_tokens < record_len || val_tokens < record_len)
    throw UsageError("prepare toy: --train_tokens and --val_tokens must be at least one record");
  make_dirs(out_dir);
  write_shard(join_path(out_dir, "toy_train_000000.bin"),
              toy_stream(seed, 0, train_tokens, record_len));
  write_shard(join_path(out_dir, "toy_val_000000.bin"),
              toy_stream(seed, 1, val_tokens, record_len));
  json meta = {{"vocab_size", 256},
               {"tokenizer", "byte"},
               {"task", strf("toy: copy or reverse %d letters; see src/data/prepare.h",
                             (record_len - 2) / 2)},
               {"record_len", record_len},
               {"loss_floor", toy_loss_floor(record_len)},
               {"plateau_loss", toy_plateau_loss(record_len)},
               {"seed", seed},
               {"train_tokens", train_tokens},
               {"val_tokens", val_tokens}};
  write_meta(out_dir, meta);
}

void prepare_text(const std::string& input, const std::string& out_dir, const std::string& name,
                  double val_fraction, int64_t shard_tokens) {
  if (!(val_fraction > 0 && val_fraction < 1))
    throw UsageError("prepare text: --val_fraction must be in (0, 1)");
  if (shard_tokens < 2) throw UsageError("prepare text: --shard_tokens must be at least 2");
  std::vector<char> bytes = read_file(input, "text file");
  // As the GPT-2 path: a NUL byte is no text (an executable, an image, a shard).
  const auto nul = std::find(bytes.begin(), bytes.end(), '\0');
  if (nul != bytes.end())
    throw Error(strf("%s: a NUL byte at byte offset %lld: not text (a binary file?)",
                     input.c_str(), (long long)(nul - bytes.begin())));
  int64_t n = int64_t(bytes.size());
  int64_t nval = int64_t(double(n) * val_fraction);
  if (nval < 2 || n - nval < 2)
    throw Error(strf("text file %s is too short (%lld bytes) to split into train and val",
                     input.c_str(), (long long)n));
  make_dirs(out_dir);
  auto write_split = [&](const char* split, int64_t begin, int64_t end) {
    int idx = 0;
    for (int64_t s = begin; s < end; s += shard_tokens, idx++) {
      int64_t e = std::min(end, s + shard_tokens);
      std::vector<uint32_t> tok(e - s);
      for (int64_t i = s; i < e; i++) tok[i - s] = uint8_t(bytes[i]);
      write_shard(join_path(out_dir, strf("%s_%s_%06d.bin", name.c_str(), split, idx)), tok);
    }
  };
  write_split("val", n - nval, n);
  write_split("train", 0, n - nval);
  json meta = {{"vocab_size", 256},     {"tokenizer", "byte"},      {"source", input},
               {"loss_floor", nullptr}, {"train_tokens", n - nval}, {"val_tokens", nval}};
  write_meta(out_dir, meta);
}

json read_dataset_meta(const std::string& pattern) {
  std::vector<std::string> files = expand_glob(pattern, "training shard");
  std::string path = join_path(dirname_of(files[0]), "meta.json");
  if (!file_exists(path)) return json::object();
  return read_meta_file(path);
}

json read_meta_file(const std::string& path) {
  std::vector<char> text = read_file(path, "dataset meta");
  try {
    json j = json::parse(text.begin(), text.end());
    if (!j.is_object()) throw Error("not an object");
    return j;
  } catch (const std::exception& e) {
    throw Error(strf("dataset meta %s is not valid: %s", path.c_str(), e.what()));
  }
}

namespace {
double meta_loss(const json& meta, const char* key, int seq_len) {
  if (!meta.contains(key) || !meta[key].is_number()) return NAN;
  int record = meta.value("record_len", 0);
  if (record > 0 && seq_len % record != 0) return NAN;  // rows would cut records
  return meta[key].get<double>();
}
}  // namespace

double dataset_loss_floor(const json& meta, int seq_len) {
  return meta_loss(meta, "loss_floor", seq_len);
}

double dataset_plateau_loss(const json& meta, int seq_len) {
  return meta_loss(meta, "plateau_loss", seq_len);
}

TokensPerByte dataset_tokens_per_byte(const json& meta) {
  const json tok = meta.is_object() ? meta.value("tokenizer", json(nullptr)) : json(nullptr);
  if (!tok.is_string())
    return {NAN, meta.empty() ? "unknown (no meta.json beside the val shards)"
                              : "unknown (meta.json names no tokenizer)"};
  if (tok == "byte") return {1.0, "byte-level tokenizer (1 token per byte)"};
  for (const char* key : {"val_tokens_per_byte", "tokens_per_byte"}) {
    const json r = meta.value(key, json(nullptr));
    if (r.is_number() && std::isfinite(r.get<double>()) && r.get<double>() > 0)
      return {r.get<double>(), std::string("meta.json ") + key};
  }
  return {NAN, "unknown (meta.json of tokenizer " + tok.get<std::string>() +
                   " gives no tokens_per_byte)"};
}

double bits_per_byte(double nats_per_token, double tokens_per_byte) {
  return nats_per_token * tokens_per_byte / std::log(2.0);
}

}  // namespace tg
