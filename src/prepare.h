// prepare.h: dataset makers for `train_gpt prepare`.
//
// toy: a synthetic task whose best possible loss is known exactly. The stream is made
// of independent 32-byte records
//     '|' x1 .. x15 op y1 .. y15
// where x1..x15 are uniform over the 16 letters 'a'..'p', op is '=' or '~' with equal
// probability, and y is x copied ('=') or reversed ('~'). Predicting y needs attention
// back over 16..30 positions, steered by the op token; everything random is uniform, so
// the loss floor is the entropy per token: (15 ln 16 + ln 2) / 32 nats, reached when
// rows start at record boundaries (seq_len a multiple of 32, which the loader keeps).
//
// text: any file as bytes (vocab 256), the last val_fraction of it as validation.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace tg {

constexpr int kToyRecordLen = 32;
double toy_loss_floor(int record_len = kToyRecordLen);

void prepare_toy(const std::string& out_dir, uint64_t seed, int64_t train_tokens,
                 int64_t val_tokens, int record_len = kToyRecordLen);
void prepare_text(const std::string& input, const std::string& out_dir, const std::string& name,
                  double val_fraction, int64_t shard_tokens);

// Dataset facts from meta.json beside the first shard matching `pattern` (an empty
// object when there is none): vocab_size, tokenizer, loss_floor, record_len.
nlohmann::json read_dataset_meta(const std::string& pattern);
// The loss floor that applies to rows of seq_len tokens, or NaN when unknown.
double dataset_loss_floor(const nlohmann::json& meta, int seq_len);

}  // namespace tg
