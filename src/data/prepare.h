// prepare.h: dataset makers for `train_gpt prepare`.
//
// toy: a synthetic task whose best possible loss is known exactly. The stream is made
// of independent records of record_len tokens (16 by default; k = record_len/2 - 1)
//     '|' x1 .. xk op y1 .. yk
// where x1..xk are uniform over the 16 letters 'a'..'p', op is '=' or '~' with equal
// probability, and y is x copied ('=') or reversed ('~'). Predicting y needs attention
// back over k+1..2k positions, steered by the op token; everything random is uniform, so
// the loss floor is the entropy per token: (k ln 16 + ln 2) / record_len nats (1.2563 for
// 16), reached when rows start at record boundaries (seq_len a multiple of record_len,
// which the loader keeps). A model that ignores the context stays at the copy plateau
// (2k ln 16 + ln 2) / record_len (2.4690 for 16).
//
// text: any file as bytes (vocab 256), the last val_fraction of it as validation.
#pragma once
#include <cmath>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace tg {

constexpr int kToyRecordLen = 16;
double toy_loss_floor(int record_len = kToyRecordLen);
// The loss of a model that learned everything but the copy (the plateau runs sit on).
double toy_plateau_loss(int record_len = kToyRecordLen);

void prepare_toy(const std::string& out_dir, uint64_t seed, int64_t train_tokens,
                 int64_t val_tokens, int record_len = kToyRecordLen);
void prepare_text(const std::string& input, const std::string& out_dir, const std::string& name,
                  double val_fraction, int64_t shard_tokens);

// Dataset facts from meta.json beside the first shard matching `pattern` (an empty
// object when there is none): vocab_size, tokenizer, loss_floor, record_len, tokens_per_byte.
nlohmann::json read_dataset_meta(const std::string& pattern);
// A meta.json file, checked to be a JSON object.
nlohmann::json read_meta_file(const std::string& path);
// The loss floor that applies to rows of seq_len tokens, or NaN when unknown; likewise the
// toy task's copy plateau.
double dataset_loss_floor(const nlohmann::json& meta, int seq_len);
double dataset_plateau_loss(const nlohmann::json& meta, int seq_len);

// Tokens per byte of a dataset's text, to put a loss in nats per token into bits per byte
// (comparable across tokenizers): meta.json's val_tokens_per_byte (the val split's tokens
// over its bytes), else its tokens_per_byte (the whole text's); exactly 1 for a byte-level
// dataset ("tokenizer": "byte"); NaN (unknown) where meta.json names no tokenizer or gives
// no usable ratio. `source` says which, in words.
struct TokensPerByte {
  double ratio = NAN;
  std::string source;
};
TokensPerByte dataset_tokens_per_byte(const nlohmann::json& meta);
// nats_per_token * tokens_per_byte / ln 2; NaN where either is unknown.
double bits_per_byte(double nats_per_token, double tokens_per_byte);

}  // namespace tg
