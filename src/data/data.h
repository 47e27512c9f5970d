// data.h: token shards in llm.c's format, and the batch loader.
//
// A shard is 256 int32 header words ([0]=magic, [1]=version, [2]=token count) followed by
// the tokens: uint16 for version 1 (magic 20240520), uint32 for version 7 (magic
// 20240801). The loader cuts each shard into rows of T+1 tokens that start at multiples
// of T (row s holds tokens s*T .. s*T+T), and serves each optimizer micro-step a global
// batch of B*world consecutive rows of one shard, rank r taking rows r*B .. r*B+B-1, so
// N ranks x B rows see exactly the rows of 1 rank x N*B. With shuffling, the shard order
// and the row order inside each shard are permuted each epoch from (seed, epoch, shard),
// so the position (epoch, shard, row) is all the state a checkpoint needs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tg {

constexpr int32_t kShardMagic = 20240520;
constexpr int32_t kShardVersion = 1;
constexpr int32_t kShardMagicU32 = 20240801;
constexpr int32_t kShardVersionU32 = 7;

// Sorted paths matching a glob; throws Error naming the pattern when none match.
std::vector<std::string> expand_glob(const std::string& pattern, const char* what);

// Token count from the header after checking magic, version and file size.
int64_t shard_num_tokens(const std::string& path);
// All tokens; checks the header, the size and that every id is < vocab_size (when > 0).
std::vector<uint32_t> read_shard(const std::string& path, int vocab_size);
// Writes uint16 tokens (version 1) when every id fits, else uint32 (version 7); the file
// appears under its name only when complete.
void write_shard(const std::string& path, const std::vector<uint32_t>& tokens);
// The same shard from the concatenation of `parts` (no copy of the tokens into one vector).
struct TokenSpan {
  const uint32_t* data;
  size_t n;
};
void write_shard(const std::string& path, const std::vector<TokenSpan>& parts);

struct LoaderPosition {
  uint64_t epoch = 0;
  uint64_t shard = 0;  // index into this epoch's shard order
  uint64_t row = 0;    // index into this shard's row order
};

class DataLoader {
 public:
  DataLoader(const std::string& pattern, const char* what, int B, int T, int rank, int world,
             bool shuffle, uint64_t seed, int vocab_size);
  // Fills B*T inputs and targets of this rank's slice of the next global batch.
  void next_batch(int32_t* inputs, int32_t* targets);
  void reset() { set_position(LoaderPosition{}); }
  LoaderPosition position() const { return pos_; }
  // Throws naming the problem when p is not a position of these shards; changes nothing.
  void check_position(const LoaderPosition& p) const;
  void set_position(const LoaderPosition& p);  // checks p first: a bad p changes nothing
  const std::vector<std::string>& files() const { return files_; }
  int64_t total_tokens() const { return total_tokens_; }

 private:
  void load_current();
  std::vector<uint64_t> shard_order(uint64_t epoch) const;

  std::vector<std::string> files_;
  std::vector<int64_t> rows_per_shard_;
  int B_, T_, rank_, world_, vocab_;
  bool shuffle_;
  uint64_t seed_;
  int64_t total_tokens_ = 0;
  LoaderPosition pos_;
  // The shard in memory and its row order.
  int64_t loaded_file_ = -1;
  uint64_t loaded_epoch_ = ~0ull;
  std::vector<uint32_t> tokens_;
  std::vector<uint64_t> row_order_;
};

}  // namespace tg
