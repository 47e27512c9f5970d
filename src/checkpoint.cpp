#include "checkpoint.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common.h"
#include "fileio.h"

namespace tg {
using json = nlohmann::json;

uint64_t fnv1a64(const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

namespace {

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

std::string hex64(uint64_t x) { return strf("%016llx", (unsigned long long)x); }

void check_arch(const std::string& path, const GPTConfig& got, const GPTConfig& want) {
  auto mismatch = [&](const char* key, int a, int b) {
    if (a != b)
      throw Error(strf("checkpoint %s does not match the config: %s is %d there, %d in the config",
                       path.c_str(), key, a, b));
  };
  mismatch("model.n_layer", got.n_layer, want.n_layer);
  mismatch("model.n_head", got.n_head, want.n_head);
  mismatch("model.n_embd", got.n_embd, want.n_embd);
  mismatch("model.max_seq_len", got.max_seq_len, want.max_seq_len);
  mismatch("model.vocab_size", got.vocab_size, want.vocab_size);
}

}  // namespace

void write_model_file(const std::string& path, const GPTConfig& cfg, const std::vector<float>& p) {
  std::vector<char> buf = model_file_bytes(cfg, p);
  write_file_atomic(path, buf.data(), buf.size());
}

namespace {
// Parses a model file already in memory; `path` is for messages.
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
  GPTConfig& c = mf.cfg;
  c.max_seq_len = h[2];
  c.vocab_size = h[3];
  c.n_layer = h[4];
  c.n_head = h[5];
  c.n_embd = h[6];
  c.padded_vocab_size = h[7];
  if (c.max_seq_len <= 0 || c.vocab_size <= 0 || c.n_layer <= 0 || c.n_head <= 0 || c.n_embd <= 0 ||
      c.n_embd % c.n_head != 0 || c.padded_vocab_size < c.vocab_size || c.max_seq_len > (1 << 20) ||
      c.n_layer > 1024 || c.n_embd > 65536 || c.padded_vocab_size > (1 << 24))
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
  return mf;
}
}  // namespace

ModelFile read_model_file(const std::string& path) {
  return parse_model_file(path, read_file(path, "model file"));
}

std::vector<std::string> list_checkpoints(const std::string& out_dir) {
  std::vector<std::pair<long long, std::string>> found;
  if (DIR* d = opendir(out_dir.c_str())) {
    while (dirent* e = readdir(d)) {
      long long step;
      char tail;
      if (sscanf(e->d_name, "ckpt_%lld%c", &step, &tail) == 1 && strlen(e->d_name) == 13 &&
          dir_exists(join_path(out_dir, e->d_name)))
        found.push_back({step, join_path(out_dir, e->d_name)});
    }
    closedir(d);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

std::string save_checkpoint(const std::string& out_dir, int64_t step, const GPTConfig& cfg,
                            const json& state_in, const std::vector<float>& params,
                            const std::vector<float>& m, const std::vector<float>& v, int keep) {
  const std::string final_dir = join_path(out_dir, strf("ckpt_%08lld", (long long)step));
  const std::string tmp_dir = join_path(out_dir, strf(".ckpt_%08lld.tmp", (long long)step));
  remove_tree(tmp_dir);
  make_dirs(tmp_dir);
  try {
    std::vector<char> model = model_file_bytes(cfg, params);
    write_file_atomic(join_path(tmp_dir, "model.bin"), model.data(), model.size());

    size_t n = params.size();
    if (m.size() != n || v.size() != n) throw Error("checkpoint: optimizer state size mismatch");
    std::vector<char> optim(1024 + 8 * n);
    int32_t h[256] = {};
    h[0] = kStateMagic;
    h[1] = 1;
    int64_t n64 = int64_t(n);
    memcpy(&h[2], &n64, 8);
    memcpy(optim.data(), h, sizeof(h));
    memcpy(optim.data() + 1024, m.data(), 4 * n);
    memcpy(optim.data() + 1024 + 4 * n, v.data(), 4 * n);
    write_file_atomic(join_path(tmp_dir, "optim.bin"), optim.data(), optim.size());

    json state = state_in;
    state["format"] = "train_gpt-state";
    state["version"] = 1;
    state["step"] = step;
    state["files"] = {
        {"model.bin",
         {{"bytes", model.size()}, {"fnv1a64", hex64(fnv1a64(model.data(), model.size()))}}},
        {"optim.bin",
         {{"bytes", optim.size()}, {"fnv1a64", hex64(fnv1a64(optim.data(), optim.size()))}}}};
    write_text_atomic(join_path(tmp_dir, "state.json"), state.dump(1) + "\n");
  } catch (...) {
    remove_tree(tmp_dir);
    throw;
  }
  // Publish: an existing checkpoint of the same step is replaced only after the new one
  // is complete.
  std::string old_dir;
  if (dir_exists(final_dir)) {
    old_dir = join_path(out_dir, strf(".ckpt_%08lld.old", (long long)step));
    remove_tree(old_dir);
    if (rename(final_dir.c_str(), old_dir.c_str()) != 0)
      throw Error(strf("cannot replace checkpoint %s: %s", final_dir.c_str(), strerror(errno)));
  }
  if (rename(tmp_dir.c_str(), final_dir.c_str()) != 0) {
    std::string e = strerror(errno);
    remove_tree(tmp_dir);
    throw Error(strf("cannot publish checkpoint %s: %s", final_dir.c_str(), e.c_str()));
  }
  fsync_dir(out_dir);
  if (!old_dir.empty()) remove_tree(old_dir);
  std::vector<std::string> all = list_checkpoints(out_dir);
  for (size_t i = 0; i + size_t(keep) < all.size(); i++) remove_tree(all[i]);
  return final_dir;
}

CheckpointData load_checkpoint(const std::string& dir, const GPTConfig& cfg) {
  CheckpointData cd;
  const std::string state_path = join_path(dir, "state.json");
  std::vector<char> text = read_file(state_path, "checkpoint state");
  try {
    cd.state = json::parse(text.begin(), text.end());
  } catch (const std::exception& e) {
    throw Error(strf("checkpoint state %s is not valid JSON: %s", state_path.c_str(), e.what()));
  }
  if (!cd.state.is_object() || cd.state.value("format", "") != "train_gpt-state")
    throw Error(strf("checkpoint state %s is not a train_gpt state file", state_path.c_str()));
  if (cd.state.value("version", 0) != 1)
    throw Error(strf("checkpoint state %s has unsupported version", state_path.c_str()));

  auto verify = [&](const char* name) {
    std::string path = join_path(dir, name);
    std::vector<char> bytes = read_file(path, "checkpoint file");
    const json& f = cd.state["files"][name];
    if (!f.is_object() || f.value("bytes", uint64_t(0)) != bytes.size())
      throw Error(
          strf("checkpoint file %s is truncated or corrupt: size %zu does not match "
               "state.json",
               path.c_str(), bytes.size()));
    if (f.value("fnv1a64", "") != hex64(fnv1a64(bytes.data(), bytes.size())))
      throw Error(strf("checkpoint file %s is corrupt: checksum mismatch", path.c_str()));
    return bytes;
  };
  ModelFile mf = parse_model_file(join_path(dir, "model.bin"), verify("model.bin"));
  check_arch(join_path(dir, "model.bin"), mf.cfg, cfg);
  cd.params = std::move(mf.params);

  std::vector<char> optim = verify("optim.bin");
  int32_t h[256];
  memcpy(h, optim.data(), std::min(optim.size(), sizeof(h)));
  int64_t n64;
  memcpy(&n64, &h[2], 8);
  const std::string optim_path = join_path(dir, "optim.bin");
  if (optim.size() < 1024 || h[0] != kStateMagic || h[1] != 1 || n64 != int64_t(cd.params.size()) ||
      optim.size() != 1024 + 8 * size_t(n64))
    throw Error(strf("checkpoint file %s has a bad header or size", optim_path.c_str()));
  size_t n = size_t(n64);
  cd.m.resize(n);
  cd.v.resize(n);
  memcpy(cd.m.data(), optim.data() + 1024, 4 * n);
  memcpy(cd.v.data(), optim.data() + 1024 + 4 * n, 4 * n);
  return cd;
}

}  // namespace tg
