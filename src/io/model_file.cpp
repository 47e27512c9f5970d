// model_file.cpp: llm.c's GPT-2 model file (a 1024-byte header of int32 fields: magic
// 20240326, version 3 = fp32 or 5 = bf16 weights, maxT, V, L, NH, C, Vp; then every parameter
// tensor in param_sizes' order), written by train_gpt in fp32 and read in either width, with
// every field and weight checked before a model is built from it.
#include "model_file.h"

#include <cmath>
#include <cstring>

#include "src/base/common.h"
#include "src/base/fileio.h"

namespace tg {

std::vector<char> model_file_bytes(const GPTConfig& c, const std::vector<float>& p) {
  if (p.size() != num_parameters(c)) throw Error("model file: wrong parameter count");
  std::vector<char> buf(1024 + p.size() * 4);
  int32_t h[256] = {};
  h[0] = kModelMagic;
  h[1] = 3;
  h[2] = c.max_seq_len;
  h[3] = c.vocab_size;
  h[4] = c.n_layer;
  h[5] = c.n_head;
  h[6] = c.n_embd;
  h[7] = c.padded_vocab_size;
  memcpy(buf.data(), h, sizeof(h));
  memcpy(buf.data() + 1024, p.data(), p.size() * 4);
  return buf;
}

GPTConfig model_header_config(const int32_t h[8]) {
  GPTConfig c;
  c.max_seq_len = h[2];
  c.vocab_size = h[3];
  c.n_layer = h[4];
  c.n_head = h[5];
  c.n_embd = h[6];
  c.padded_vocab_size = h[7];
  return c;
}

bool model_config_valid(const GPTConfig& c) {
  return c.max_seq_len > 0 && c.vocab_size > 0 && c.n_layer > 0 && c.n_head > 0 && c.n_embd > 0 &&
         c.n_embd % c.n_head == 0 && c.padded_vocab_size >= c.vocab_size &&
         c.max_seq_len <= (1 << 20) && c.n_layer <= 1024 && c.n_embd <= 65536 &&
         c.padded_vocab_size <= (1 << 24);
}

void write_model_file(const std::string& path, const GPTConfig& cfg, const std::vector<float>& p) {
  const std::vector<char> buf = model_file_bytes(cfg, p);
  write_file_atomic(path, buf.data(), buf.size());
}

namespace {
// Every weight finite: a NaN or an infinity (a damaged or edited file whose checksums were made
// to match) is refused with the tensor named, rather than trained on, sampled or exported.
void check_finite_params(const std::string& path, const ModelFile& mf) {
  size_t off = 0;
  const auto sizes = param_sizes(mf.cfg);
  for (int t = 0; t < kNumParamTensors; t++) {
    for (size_t i = 0; i < sizes[t]; i++)
      if (!std::isfinite(mf.params[off + i]))
        throw Error(strf("model file %s: tensor %s holds a non-finite weight (%g, element %zu of "
                         "%zu)",
                         path.c_str(), param_name(t), double(mf.params[off + i]), i, sizes[t]));
    off += sizes[t];
  }
}

}  // namespace

ModelFile parse_model_file(const std::string& path, const std::vector<char>& b) {
  if (b.size() < 1024)
    throw Error(strf("model file %s is truncated: %zu bytes, shorter than the 1024-byte header",
                     path.c_str(), b.size()));
  int32_t h[256];
  memcpy(h, b.data(), sizeof(h));
  if (h[0] != kModelMagic)
    throw Error(
        strf("model file %s has bad magic %d (expected %d)", path.c_str(), h[0], kModelMagic));
  if (h[1] != 3 && h[1] != 5)
    throw Error(strf("model file %s has unsupported version %d (expected 3 = fp32 or 5 = bf16)",
                     path.c_str(), h[1]));
  ModelFile mf;
  mf.cfg = model_header_config(h);
  const GPTConfig& c = mf.cfg;
  if (!model_config_valid(c))
    throw Error(strf("model file %s has an invalid header (maxT=%d V=%d L=%d NH=%d C=%d Vp=%d)",
                     path.c_str(), h[2], h[3], h[4], h[5], h[6], h[7]));
  size_t n = num_parameters(c);
  int width = h[1] == 3 ? 4 : 2;
  uint64_t expect = 1024 + uint64_t(n) * width;
  if (b.size() != expect)
    throw Error(strf("model file %s is %s: the header implies %llu bytes, the file has %zu",
                     path.c_str(), b.size() < expect ? "truncated" : "corrupt",
                     (unsigned long long)expect, b.size()));
  mf.params.resize(n);
  if (width == 4) {
    memcpy(mf.params.data(), b.data() + 1024, n * 4);
  } else {
    // bf16 -> fp32 is exact: the bf16 bits are the top half of the fp32 bits.
    for (size_t i = 0; i < n; i++) {
      uint16_t raw;
      memcpy(&raw, b.data() + 1024 + 2 * i, 2);
      uint32_t bits = uint32_t(raw) << 16;
      memcpy(&mf.params[i], &bits, 4);
    }
  }
  check_finite_params(path, mf);
  return mf;
}

ModelFile read_model_file(const std::string& path) {
  return parse_model_file(path, read_file(path, "model file"));
}

}  // namespace tg
