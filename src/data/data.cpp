#include "data.h"

#include <glob.h>

#include <algorithm>
#include <cstring>

#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/base/rng.h"

namespace tg {

namespace {

struct ShardHeader {
  int64_t ntok;
  int width;  // bytes per token
};

ShardHeader check_header(const std::string& path) {
  uint64_t size = file_size(path, "shard");
  if (size < 1024)
    throw Error(strf("shard %s is truncated: %llu bytes, shorter than the 1024-byte header",
                     path.c_str(), (unsigned long long)size));
  int32_t h[256];
  read_at(path, 0, h, sizeof(h), "shard");
  int width;
  if (h[0] == kShardMagic && h[1] == kShardVersion)
    width = 2;
  else if (h[0] == kShardMagicU32 && h[1] == kShardVersionU32)
    width = 4;
  else if (h[0] == kShardMagic || h[0] == kShardMagicU32)
    throw Error(strf("shard %s has unsupported version %d", path.c_str(), h[1]));
  else
    throw Error(strf("shard %s has bad magic %d (expected %d or %d): not a token shard; a text "
                     "file becomes shards with `train_gpt prepare text --input FILE`",
                     path.c_str(), h[0], kShardMagic, kShardMagicU32));
  if (h[2] < 0) throw Error(strf("shard %s has negative token count %d", path.c_str(), h[2]));
  uint64_t expect = 1024 + uint64_t(h[2]) * width;
  if (size != expect)
    throw Error(strf("shard %s is %s: header says %d tokens (%llu bytes), file has %llu bytes",
                     path.c_str(), size < expect ? "truncated" : "corrupt", h[2],
                     (unsigned long long)expect, (unsigned long long)size));
  return {h[2], width};
}

}  // namespace

std::vector<std::string> expand_glob(const std::string& pattern, const char* what) {
  glob_t g;
  memset(&g, 0, sizeof(g));
  int rc = glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; i++) out.push_back(g.gl_pathv[i]);
  globfree(&g);
  if (out.empty())
    throw Error(strf("no %s files match '%s' (make a dataset with `train_gpt prepare toy` or "
                     "`train_gpt prepare text --input FILE`, then point data.train and data.val "
                     "at its shards)",
                     what, pattern.c_str()));
  std::sort(out.begin(), out.end());
  return out;
}

int64_t shard_num_tokens(const std::string& path) { return check_header(path).ntok; }

std::vector<uint32_t> read_shard(const std::string& path, int vocab_size) {
  ShardHeader h = check_header(path);
  std::vector<uint32_t> tok(h.ntok);
  if (h.width == 2) {
    std::vector<uint16_t> raw(h.ntok);
    if (h.ntok) read_at(path, 1024, raw.data(), raw.size() * 2, "shard");
    for (int64_t i = 0; i < h.ntok; i++) tok[i] = raw[i];
  } else if (h.ntok) {
    read_at(path, 1024, tok.data(), tok.size() * 4, "shard");
  }
  if (vocab_size > 0)
    for (int64_t i = 0; i < h.ntok; i++)
      if (tok[i] >= uint32_t(vocab_size))
        throw Error(strf("shard %s: token %u at position %lld is >= vocab_size %d", path.c_str(),
                         tok[i], (long long)i, vocab_size));
  return tok;
}

void write_shard(const std::string& path, const std::vector<uint32_t>& tokens) {
  write_shard(path, std::vector<TokenSpan>{{tokens.data(), tokens.size()}});
}

void write_shard(const std::string& path, const std::vector<TokenSpan>& parts) {
  size_t count = 0;
  bool narrow = true;
  for (const TokenSpan& p : parts) {
    count += p.n;
    narrow = narrow && std::all_of(p.data, p.data + p.n, [](uint32_t t) { return t < 65536; });
  }
  if (count > uint64_t(INT32_MAX))
    throw Error(strf("shard %s: too many tokens (%zu)", path.c_str(), count));
  const int width = narrow ? 2 : 4;
  std::vector<char> buf(1024 + count * width);
  int32_t h[256] = {};
  h[0] = narrow ? kShardMagic : kShardMagicU32;
  h[1] = narrow ? kShardVersion : kShardVersionU32;
  h[2] = int32_t(count);
  memcpy(buf.data(), h, sizeof(h));
  char* at = buf.data() + 1024;
  for (const TokenSpan& p : parts)
    for (size_t i = 0; i < p.n; i++, at += width) {
      if (narrow) {
        const uint16_t t = uint16_t(p.data[i]);
        memcpy(at, &t, 2);
      } else {
        memcpy(at, &p.data[i], 4);
      }
    }
  write_file_atomic(path, buf.data(), buf.size());
}

DataLoader::DataLoader(const std::string& pattern, const char* what, int B, int T, int rank,
                       int world, bool shuffle, uint64_t seed, int vocab_size)
    : B_(B), T_(T), rank_(rank), world_(world), vocab_(vocab_size), shuffle_(shuffle), seed_(seed) {
  files_ = expand_glob(pattern, what);
  const int64_t rows_needed = int64_t(B) * world;
  for (const auto& f : files_) {
    int64_t n = shard_num_tokens(f);
    int64_t rows = n > 0 ? (n - 1) / T : 0;
    if (rows < rows_needed)
      throw Error(
          strf("%s shard %s has %lld tokens: too few for one batch of %lld rows of %d+1 "
               "tokens",
               what, f.c_str(), (long long)n, (long long)rows_needed, T));
    rows_per_shard_.push_back(rows);
    total_tokens_ += n;
  }
  set_position(LoaderPosition{});
}

std::vector<uint64_t> DataLoader::shard_order(uint64_t epoch) const {
  if (!shuffle_) {
    std::vector<uint64_t> o(files_.size());
    for (size_t i = 0; i < o.size(); i++) o[i] = i;
    return o;
  }
  Rng r = Rng::derive(seed_, 0x5348415244ull /*"SHARD"*/, epoch);
  return random_permutation(files_.size(), r);
}

void DataLoader::check_position(const LoaderPosition& p) const {
  if (p.shard >= files_.size())
    throw Error(strf("data position: shard index %llu out of range (%zu shards)",
                     (unsigned long long)p.shard, files_.size()));
  const uint64_t file = shard_order(p.epoch)[p.shard];
  const uint64_t rows = uint64_t(rows_per_shard_[file]);
  // Written so that a huge row from a damaged checkpoint cannot wrap around.
  if (p.row > rows || rows - p.row < uint64_t(B_) * world_)
    throw Error(strf("data position: row %llu out of range for shard %s", (unsigned long long)p.row,
                     files_[file].c_str()));
}

void DataLoader::set_position(const LoaderPosition& p) {
  check_position(p);
  pos_ = p;
  load_current();
}

void DataLoader::load_current() {
  int64_t file = int64_t(shard_order(pos_.epoch)[pos_.shard]);
  if (file != loaded_file_) {
    tokens_ = read_shard(files_[file], vocab_);
    loaded_file_ = file;
    loaded_epoch_ = ~0ull;
  }
  if (loaded_epoch_ != pos_.epoch) {
    uint64_t rows = uint64_t(rows_per_shard_[file]);
    if (shuffle_) {
      Rng r = Rng::derive(seed_, 0x524F5753ull /*"ROWS"*/ ^ (uint64_t(file) << 32), pos_.epoch);
      row_order_ = random_permutation(rows, r);
    } else {
      row_order_.resize(rows);
      for (uint64_t i = 0; i < rows; i++) row_order_[i] = i;
    }
    loaded_epoch_ = pos_.epoch;
  }
}

void DataLoader::next_batch(int32_t* inputs, int32_t* targets) {
  for (int b = 0; b < B_; b++) {
    uint64_t row = row_order_[pos_.row + uint64_t(rank_) * B_ + b];
    const uint32_t* src = tokens_.data() + row * uint64_t(T_);
    for (int t = 0; t < T_; t++) {
      inputs[b * T_ + t] = int32_t(src[t]);
      targets[b * T_ + t] = int32_t(src[t + 1]);
    }
  }
  // Advance by one global batch; move to the next shard (and epoch) when the rest of
  // this shard cannot fill another one. The tail rows of a shard are skipped.
  pos_.row += uint64_t(B_) * world_;
  if (pos_.row + uint64_t(B_) * world_ > row_order_.size()) {
    pos_.row = 0;
    if (++pos_.shard == files_.size()) {
      pos_.shard = 0;
      pos_.epoch++;
    }
    load_current();
  }
}

}  // namespace tg
