// make_seeds.cpp: writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/) from
// real files made by the project's own writers: shards by write_shard, model files by
// write_model_file, checkpoints by save_checkpoint / publish_checkpoint (so sizes and
// checksums match), configs from configs/*.json. Run from the repository root by
// `make fuzz-seeds`; the outputs are committed.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "fuzz_entries.h"
#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/base/rng.h"
#include "src/data/data.h"
#include "src/io/checkpoint.h"
#include "src/io/hf.h"
#include "src/io/run_state.h"
#include "src/numerics/moment_block.h"
#include "src/numerics/state_format.h"

using json = nlohmann::json;

namespace {

const std::string kCorpus = "tests/fuzz/corpus";

void put(const std::string& target, const std::string& name, const void* data, size_t n) {
  tg::make_dirs(kCorpus + "/" + target);
  tg::write_file_atomic(kCorpus + "/" + target + "/" + name, data, n);
}
void put(const std::string& target, const std::string& name, const std::vector<uint8_t>& b) {
  put(target, name, b.data(), b.size());
}

std::string temp_dir() {
  char tmpl[] = "/tmp/tg_seeds_XXXXXX";
  if (!mkdtemp(tmpl)) abort();
  return tmpl;
}

std::vector<float> randn(size_t n, uint64_t seed) {
  tg::Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float(r.normal());
  return v;
}

std::vector<char> file(const std::string& path) { return tg::read_file(path, "seed"); }

// Shards: the 11 control bytes (fuzz_entries.h), then a shard from write_shard.
void shard_seed(const std::string& name, std::vector<uint8_t> control,
                const std::vector<uint32_t>& tokens) {
  const std::string dir = temp_dir(), path = dir + "/s.bin";
  tg::write_shard(path, tokens);
  std::vector<char> b = file(path);
  control.resize(11, 0);
  control.insert(control.end(), b.begin(), b.end());
  put("shard", name, control);
  tg::remove_tree(dir);
}

void shard_seeds() {
  std::vector<uint32_t> small(40), wide(30);
  for (size_t i = 0; i < small.size(); i++) small[i] = uint32_t(i * 7 % 256);
  for (size_t i = 0; i < wide.size(); i++) wide[i] = uint32_t(65530 + i * 3);
  shard_seed("u16_vocab256", {0x03, 0x03}, small);        // vocab 256, B=1, T=4
  shard_seed("u16_shuffle_world2", {0x5b, 0x0b}, small);  // shuffle, B=2, world 2, rank 1
  shard_seed("u32_no_vocab", {0x00, 0x02, 2}, wide);      // no vocab check, row 2
  shard_seed("u32_vocab16M", {0x17, 0x01}, wide);         // vocab 2^24, B=2
  shard_seed("bad_empty", {0x03, 0x00}, {});
}

void model_seeds() {
  const std::string dir = temp_dir();
  tg::GPTConfig c = tg::gpt_config(1, 1, 2, 3, 2);
  std::vector<float> p = randn(tg::num_parameters(c), 1);
  tg::write_model_file(dir + "/m.bin", c, p);
  std::vector<char> b = file(dir + "/m.bin");
  put("model_file", "v3_fp32", b.data(), b.size());
  // The same as bf16 (version 5): the top halves of the fp32 words.
  std::vector<char> h(b.begin(), b.begin() + 1024);
  h[4] = 5;
  for (size_t i = 0; i < p.size(); i++)
    h.insert(h.end(), b.begin() + 1024 + 4 * i + 2, b.begin() + 1024 + 4 * i + 4);
  put("model_file", "v5_bf16", h.data(), h.size());
  put("model_file", "bad_header_only", b.data(), 1024);
  tg::remove_tree(dir);
}

// A state as the Trainer saves it (src/io/run_state.h), for the seed checkpoint's model.
json train_state(int64_t step) {
  tg::RunState st;
  st.run_id = "00112233445566ff";
  st.step = step;
  st.opt_step = step;
  st.data.row = 4;
  st.batch_size = 1;
  st.seq_len = 3;
  st.world_size = 1;
  st.sample_rng = tg::Rng(7);
  st.counters.tokens_seen = 3 * step;
  st.counters.train_seconds = 0.5;
  st.mode = tg::Mode::FP32;
  st.loss_scale.kind = tg::LossScaling::None;
  st.initial_val_loss = 1.6;
  st.config = json::object();
  st.model = tgfuzz::seed_checkpoint_config();
  st.num_params = tg::num_parameters(st.model);
  return tg::run_state_to_json(st);
}

// fp8 moments (E4M3 m, E5M2 v in blocks of 16 with e8m0 scales and COAT's expansion): codes,
// padding and each block's meta, whole and over two ZeRO-1 files split inside a block, so
// that the fuzzer starts from the blocking fields of the header and state.json.
void fp8_checkpoint_seeds(const std::string& out, const tg::GPTConfig& c,
                          const std::vector<float>& p, const std::vector<float>& m,
                          const std::vector<float>& v) {
  using tgfuzz::kFixChecksums;
  using tgfuzz::kRangeShift;
  const size_t n = p.size();
  const tg::MomentBlocking b{16, tg::MomentScale::E8M0, tg::MomentExpand::Coat};
  const tg::MomentFormats f =
      tg::moment_formats(tg::StateFormat::FP8E4M3, tg::StateFormat::FP8E5M2, b);
  std::vector<uint8_t> mq(n), vq(n);
  std::vector<float> mm(tg::moment_blocks(n, 16) * 2), vm(mm.size());
  tg::moment_encode_blocks(m.data(), n, f.m, mq.data(), mm.data());
  tg::moment_encode_blocks(v.data(), n, f.v, vq.data(), vm.data());
  tg::MomentBytes mb{tg::StateFormat::FP8E4M3, tg::StateFormat::FP8E5M2, mq.data(), vq.data()};
  mb.blocking = b;
  mb.m_meta = mm.data();
  mb.v_meta = vm.data();
  std::string d = tg::save_checkpoint(out, 12, c, train_state(12), p, mb, 9);
  std::vector<std::vector<char>> parts = {file(d + "/state.json"), file(d + "/model.bin"),
                                          file(d + "/optim.bin")};
  put("checkpoint", "fp8_moments", tgfuzz::pack_checkpoint_input(0, 0, 0, parts));
  put("checkpoint", "fp8_moments_fixed",
      tgfuzz::pack_checkpoint_input(kFixChecksums, 0, 0, parts));
  // Two files, the first holding 3 blocks: a range from the middle of a block is decoded.
  const size_t half = 3 * 16;
  tg::prepare_checkpoint_dir(out, 16);
  const std::string tmp = tg::checkpoint_tmp_dir(out, 16);
  tg::MomentBytes second = mb;
  second.m = mq.data() + half;
  second.v = vq.data() + half;
  second.m_meta = mm.data() + 3 * 2;
  second.v_meta = vm.data() + 3 * 2;
  std::vector<tg::OptimFileRecord> recs = {
      tg::write_optim_shard(tmp, n, 0, mb, half, 0, 2),
      tg::write_optim_shard(tmp, n, half, second, n - half, 1, 2)};
  d = tg::publish_checkpoint(out, 16, c, train_state(16), p, recs, 9);
  parts = {file(d + "/state.json"), file(d + "/model.bin"), file(d + "/optim_rank00000.bin"),
           file(d + "/optim_rank00001.bin")};
  put("checkpoint", "fp8_zero1_mid_block",
      tgfuzz::pack_checkpoint_input(kFixChecksums | 3 << kRangeShift, uint16_t(half - 5), 9,
                                    parts));
}

void checkpoint_seeds() {
  using tgfuzz::kArchFromModel;
  using tgfuzz::kFixChecksums;
  using tgfuzz::kRangeShift;
  const std::string out = temp_dir();
  const tg::GPTConfig c = tgfuzz::seed_checkpoint_config();
  const size_t n = tg::num_parameters(c);
  std::vector<float> p = randn(n, 2), m = randn(n, 3), v = randn(n, 4);
  for (auto& x : v) x = x * x;
  std::string d = tg::save_checkpoint(out, 4, c, train_state(4), p, m, v, 2);
  std::vector<std::vector<char>> parts = {file(d + "/state.json"), file(d + "/model.bin"),
                                          file(d + "/optim.bin")};
  put("checkpoint", "whole", tgfuzz::pack_checkpoint_input(0, 0, 0, parts));
  put("checkpoint", "whole_fixed", tgfuzz::pack_checkpoint_input(kFixChecksums, 0, 0, parts));
  // kRetype: one node of the state gets another type (node in byte 1, value in byte 2).
  // (A retyped field is refused by the field checks: a seed the reader rejects.)
  put("checkpoint", "bad_whole_fixed_retyped",
      tgfuzz::pack_checkpoint_input(kFixChecksums | tgfuzz::kRetype, 17 | 2 << 8, 0, parts));
  put("checkpoint", "arch_from_model_second_half",
      tgfuzz::pack_checkpoint_input(kArchFromModel | 2 << kRangeShift, 0, 0, parts));

  // ZeRO-1 over two ranks: optim_rank00000.bin and optim_rank00001.bin.
  const size_t half = n / 2;
  tg::prepare_checkpoint_dir(out, 8);
  const std::string tmp = tg::checkpoint_tmp_dir(out, 8);
  std::vector<tg::OptimFileRecord> recs = {
      tg::write_optim_shard(tmp, n, 0, m.data(), v.data(), half, 0, 2),
      tg::write_optim_shard(tmp, n, half, m.data() + half, v.data() + half, n - half, 1, 2)};
  d = tg::publish_checkpoint(out, 8, c, train_state(8), p, recs, 2);
  parts = {file(d + "/state.json"), file(d + "/model.bin"), file(d + "/optim_rank00000.bin"),
           file(d + "/optim_rank00001.bin")};
  put("checkpoint", "zero1", tgfuzz::pack_checkpoint_input(0, 0, 0, parts));
  put("checkpoint", "zero1_fixed_range",
      tgfuzz::pack_checkpoint_input(kFixChecksums | 3 << kRangeShift, uint16_t(half - 3), 7,
                                    parts));
  put("checkpoint", "zero1_first_half",
      tgfuzz::pack_checkpoint_input(kFixChecksums | 1 << kRangeShift, 0, 0, parts));
  fp8_checkpoint_seeds(out, c, p, m, v);
  tg::remove_tree(out);
}

// Configs: mode byte, JSON text, NUL, key=value lines (fuzz_entries.h).
void config_seed(const std::string& name, uint8_t mode, const std::string& text,
                 const std::string& lines) {
  std::vector<uint8_t> b = {mode};
  b.insert(b.end(), text.begin(), text.end());
  if (!lines.empty()) {
    b.push_back(0);
    b.insert(b.end(), lines.begin(), lines.end());
  }
  put("config", name, b);
}

void config_seeds() {
  const std::vector<char> def = file("configs/default.json");
  const std::string text(def.begin(), def.end());
  config_seed("default_file", 0, text, "");
  config_seed("default_json_world2", 1 | 1 << 2, text, "");
  config_seed("default_args", 2, text,
              "--train.steps=10\n--precision.fp8.keep_bf16=0,-1\n--data.shuffle=false");
  config_seed("keys_only", 0, "",
              "model.n_layer=4\nmodel.n_head=4\nmodel.n_embd=128\noptim.lr=1e-3\n"
              "precision.mode=bf16\nprecision.loss_scale.kind=dynamic\ndata.total_batch_tokens="
              "2048\ntrain.seed=42");
  config_seed("nested_sections", 1,
              "{\"precision\": {\"mode\": \"fp8\", \"fp8\": {\"recipe\": \"current\", "
              "\"keep_bf16\": [0, -1]}, \"loss_scale\": {\"min\": 2.0, \"max\": 4.0}}, "
              "\"eval\": {\"every\": 0}}",
              "");
  for (const char* f : {"configs/shakespeare.json", "configs/compare_shakespeare.json"}) {
    const std::vector<char> b = file(f);
    config_seed(std::string(f).substr(8, std::strlen(f) - 13), 0, std::string(b.begin(), b.end()),
                "");
  }
}

}  // namespace

// Hugging Face directories: export_hf of a small model in fp32 and bf16, and a truncated one.
void hf_seeds() {
  const std::string dir = temp_dir();
  tg::ModelFile mf;
  mf.cfg = tg::gpt_config(1, 1, 2, 3, 2);
  mf.params = randn(tg::num_parameters(mf.cfg), 4);
  for (size_t i = 3 * 2; i < size_t(mf.cfg.padded_vocab_size) * 2; i++) mf.params[i] = 0;
  for (const char* dtype : {"fp32", "bf16"}) {
    tg::export_hf(mf, dir, dtype);
    std::vector<char> cfg = file(dir + "/config.json"), st = file(dir + "/model.safetensors");
    std::vector<uint8_t> b = tgfuzz::pack_hf_input(std::string(cfg.begin(), cfg.end()), st);
    put("hf_model", dtype, b);
    if (std::string(dtype) == "fp32") {
      b.resize(b.size() - 5);
      put("hf_model", "bad_truncated", b);
    }
  }
  tg::remove_tree(dir);
}

int main() {
  try {
    shard_seeds();
    model_seeds();
    checkpoint_seeds();
    config_seeds();
    hf_seeds();
  } catch (const std::exception& e) {
    fprintf(stderr, "make_seeds: %s\n", e.what());
    return 1;
  }
  printf("seed corpora written under %s/\n", kCorpus.c_str());
  return 0;
}
