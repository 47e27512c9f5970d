// fuzz_entries.h: the bodies of the libFuzzer targets (tests/fuzz/fuzz_*.cpp), shared with
// the doctest regression test (tests/test_fuzz_regressions.cpp) so that a saved crash input
// runs through exactly the code that found it.
//
// Each entry feeds one input to one reader of untrusted files: token shards, llm.c model
// files, checkpoint directories, configs, Hugging Face GPT-2 directories. A rejection with
// tg::Error or tg::UsageError is a normal outcome; any other exception (including InvariantFailure,
// thrown when a reader accepted an input but returned something inconsistent) escapes to the
// caller, and crashes, sanitizer reports and hangs are bugs by themselves.
//
// Input layouts (all integers little-endian):
//   shard:      [0] vocab selector (bits 0-2), shuffle (bit 3), B-1 (bits 4-5),
//               world-1 (bits 6-7); [1] T-1 (bits 0-2), rank (bits 3-4, mod world);
//               [2..9] a loader row (uint64), [10] its epoch; then the shard file.
//   model_file: the whole input is the model file.
//   checkpoint: [0] flags (kFix*, kArch*, range bits 2-3, kRetype); [1..2] begin, [3..4]
//               count (uint16, 0xffff: to the end; used with range 3), [1] and [2] also
//               pick the node and value of kRetype; then parts, each a uint32
//               length and its bytes (a length past the end takes the rest): state.json,
//               model.bin, then the optimizer files, named by the keys of state.json's
//               "files" other than model.bin, in order (optim.bin when there are none).
//   config:     [0] mode (bits 0-1: 0 config_load_file, 1 config_apply_json, 2
//               config_parse_args), world-1 (bits 2-4); then the JSON text, a NUL byte,
//               and key=value lines applied with config_set (mode 2: arguments, "--"
//               added in front of those without a leading '-').
//   hf_model:   [0..3] the length of config.json (uint32; a length past the end takes the
//               rest), config.json's text, then model.safetensors (src/io/hf.h).
//   bpe:        the whole input is text for GPT-2's encoder (src/data/bpe.h), whose
//               vocabulary is read once from $TG_GPT2_VOCAB or data/gpt2/: invalid UTF-8 is
//               rejected at its first bad byte; valid text must decode back to itself,
//               encode the same with a long-lived (cached) encoder as with a fresh one, and
//               never produce <|endoftext|>.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/model/model.h"

namespace tgfuzz {

// A reader accepted an input but returned an inconsistent result.
struct InvariantFailure : std::logic_error {
  using std::logic_error::logic_error;
};

// What an entry did with its input: accepted, or rejected with this message.
struct Outcome {
  bool accepted = false;
  std::string error;
};

Outcome fuzz_shard(const uint8_t* data, size_t size);
Outcome fuzz_model_file(const uint8_t* data, size_t size);
Outcome fuzz_checkpoint(const uint8_t* data, size_t size);
Outcome fuzz_config(const uint8_t* data, size_t size);
Outcome fuzz_hf_model(const uint8_t* data, size_t size);
Outcome fuzz_bpe(const uint8_t* data, size_t size);
// Whether the bpe target can run here (GPT-2's vocabulary files found).
bool bpe_vocab_present();
// Packs an hf_model input from a directory's config.json text and model.safetensors bytes.
std::vector<uint8_t> pack_hf_input(const std::string& config, const std::vector<char>& st);

// The checkpoint reader under test, in one place so it can be pointed at a fuller loader:
// loads `dir` for architecture `cfg` with the Adam moments of [begin, begin + count) and
// checks the result's sizes.
void fuzz_load_checkpoint_dir(const std::string& dir, const tg::GPTConfig& cfg, size_t begin,
                              size_t count);

// Checkpoint input flags (byte 0).
constexpr uint8_t kFixChecksums = 1;   // rewrite state.json's sizes and checksums to match
constexpr uint8_t kArchFromModel = 2;  // the architecture from model.bin's header
constexpr uint8_t kRangeShift = 2;     // 0 all, 1 first half, 2 second half, 3 bytes 1-4
constexpr uint8_t kRetype = 16;  // state.json node byte 1 gets a value of another type (byte 2)
// The architecture asked for when kArchFromModel is not set (the seeds' checkpoints).
tg::GPTConfig seed_checkpoint_config();
// Packs a checkpoint input from its parts (state.json text, model.bin, optimizer files).
std::vector<uint8_t> pack_checkpoint_input(uint8_t flags, uint16_t begin, uint16_t count,
                                           const std::vector<std::vector<char>>& parts);

// The libFuzzer side: runs entry on the input; prints and aborts on an escaped exception.
int run_target(Outcome (*entry)(const uint8_t*, size_t), const uint8_t* data, size_t size);

}  // namespace tgfuzz
