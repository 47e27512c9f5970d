#include "checkpoint.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/numerics/moment_block.h"
#include "src/training/checkpoint_cleanup.h"

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

// Fields of state.json, read without trusting their types (json's value() throws on a
// wrong type, and converts a float like 1e300 to an integer with undefined behavior).
// obj[key] when it is a string, else "".
std::string string_field(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}
// obj[key] when it is a non-negative integer, else `otherwise`.
uint64_t uint_field(const json& obj, const char* key, uint64_t otherwise) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_number_unsigned() ? it->get<uint64_t>() : otherwise;
}

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
  std::vector<char> buf = model_file_bytes(cfg, p);
  write_file_atomic(path, buf.data(), buf.size());
}

namespace {
// Parses a model file already in memory; `path` is for messages.
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
}  // namespace

ModelFile read_model_file(const std::string& path) {
  return parse_model_file(path, read_file(path, "model file"));
}

namespace {
// "ckpt_" followed by at least 8 digits (the step, zero-padded): the step, else -1.
long long checkpoint_step_of(const char* name) {
  if (strncmp(name, "ckpt_", 5) != 0) return -1;
  const char* d = name + 5;
  size_t n = strlen(d);
  if (n < 8 || n > 18) return -1;
  for (size_t i = 0; i < n; i++)
    if (d[i] < '0' || d[i] > '9') return -1;
  return atoll(d);
}
}  // namespace

std::vector<std::string> list_checkpoints(const std::string& out_dir) {
  std::vector<std::pair<long long, std::string>> found;
  if (DIR* d = opendir(out_dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const long long step = checkpoint_step_of(e->d_name);
      if (step >= 0 && dir_exists(join_path(out_dir, e->d_name)))
        found.push_back({step, join_path(out_dir, e->d_name)});
    }
    closedir(d);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

std::string checkpoint_model_file(const std::string& dir) {
  if (file_exists(join_path(dir, "model.bin"))) return join_path(dir, "model.bin");
  std::vector<std::string> all = list_checkpoints(dir);
  if (all.empty()) throw Error(strf("no checkpoint found in %s", dir.c_str()));
  return join_path(all.back(), "model.bin");
}

int64_t checkpoint_dir_step(const std::string& dir) {
  return checkpoint_step_of(dir.substr(dir.find_last_of('/') + 1).c_str());
}

std::string checkpoint_tmp_dir(const std::string& out_dir, int64_t step) {
  return join_path(out_dir, strf(".ckpt_%08lld.tmp", (long long)step));
}

void prepare_checkpoint_dir(const std::string& out_dir, int64_t step) {
  const std::string tmp_dir = checkpoint_tmp_dir(out_dir, step);
  remove_tree(tmp_dir);
  make_dirs(tmp_dir);
}

namespace {

// rank < 0 names the unsharded optim.bin.
std::string optim_file_name(int rank) {
  return rank < 0 ? "optim.bin" : strf("optim_rank%05d.bin", rank);
}

// Bytes per parameter of the master weights' state kept in the optimizer files: bf16-kahan's
// compensation (the fp32 master and the bf16 weights live in model.bin).
size_t comp_bytes(MasterFormat f) { return f == MasterFormat::BF16Kahan ? 2 : 0; }

// Bytes of `count` elements of a moment in the optimizer files.
size_t moment_file_bytes(StateFormat f, bool second, const MomentBlocking& b, size_t count) {
  return moment_storage_bytes(count, moment_format(f, second, b));
}
bool any_blocked(StateFormat m, StateFormat v) {
  return state_format_blocked(m) || state_format_blocked(v);
}

// One moment's storage into the file at `out`: its bytes, or fp8's codes and blocks' meta.
void put_moment(char* out, const void* data, const float* meta, StateFormat f, bool second,
                const MomentBlocking& b, size_t count) {
  const MomentFormat mf = moment_format(f, second, b);
  if (!moment_is_blocked(mf)) return (void)memcpy(out, data, moment_storage_bytes(count, mf));
  memcpy(out, data, count);
  memcpy(out + moment_meta_offset(count), meta,
         moment_blocks(count, mf.block) * size_t(moment_meta_words(mf)) * sizeof(float));
}

std::vector<char> optim_file_bytes(int64_t total, int64_t begin, const MomentBytes& mb,
                                   int64_t count, int rank, int world) {
  const size_t sm = moment_file_bytes(mb.m_format, false, mb.blocking, size_t(count)),
               sv = moment_file_bytes(mb.v_format, true, mb.blocking, size_t(count));
  const size_t sc = comp_bytes(mb.master) * size_t(count);
  std::vector<char> out(1024 + sm + sv + sc);
  int32_t h[256] = {};
  h[0] = kStateMagic;
  h[1] = rank < 0 ? 1 : 2;
  memcpy(&h[2], &total, 8);
  if (rank >= 0) {
    memcpy(&h[4], &begin, 8);
    memcpy(&h[6], &count, 8);
    h[8] = rank;
    h[9] = world;
  }
  h[10] = state_format_info(mb.m_format).file_code;
  h[11] = state_format_info(mb.v_format).file_code;
  h[12] = master_format_info(mb.master).file_code;
  if (any_blocked(mb.m_format, mb.v_format)) {
    h[13] = mb.blocking.block;
    h[14] = (mb.blocking.pow2 ? 1 : 0) + (mb.blocking.expand ? 2 : 0);
  }
  memcpy(out.data(), h, sizeof(h));
  if (count > 0) {
    put_moment(out.data() + 1024, mb.m, mb.m_meta, mb.m_format, false, mb.blocking, size_t(count));
    put_moment(out.data() + 1024 + sm, mb.v, mb.v_meta, mb.v_format, true, mb.blocking,
               size_t(count));
    if (sc) memcpy(out.data() + 1024 + sm + sv, mb.comp, sc);
  }
  return out;
}

json file_entry(const std::vector<char>& bytes) {
  return {{"bytes", bytes.size()}, {"fnv1a64", hex64(fnv1a64(bytes.data(), bytes.size()))}};
}

}  // namespace

OptimFileRecord write_optim_shard(const std::string& tmp_dir, int64_t total, int64_t begin,
                                  const MomentBytes& moments, int64_t count, int rank, int world) {
  std::vector<char> bytes = optim_file_bytes(total, begin, moments, count, rank, world);
  write_file_atomic(join_path(tmp_dir, optim_file_name(rank)), bytes.data(), bytes.size());
  OptimFileRecord r;
  r.bytes = bytes.size();
  r.fnv1a64 = fnv1a64(bytes.data(), bytes.size());
  r.begin = begin;
  r.count = count;
  r.rank = rank;
  r.world = world;
  r.m_format = moments.m_format;
  r.v_format = moments.v_format;
  r.master = moments.master;
  r.blocking = moments.blocking;
  return r;
}

OptimFileRecord write_optim_shard(const std::string& tmp_dir, int64_t total, int64_t begin,
                                  const float* m, const float* v, int64_t count, int rank,
                                  int world) {
  MomentBytes mb;
  mb.m = m;
  mb.v = v;
  return write_optim_shard(tmp_dir, total, begin, mb, count, rank, world);
}

namespace {

const char* kManifest = "manifest.json";

// manifest.json, written last: the size and checksum of state.json, so that an edited or
// damaged state file is detected like a damaged binary.
void write_manifest(const std::string& dir, const std::string& state_text) {
  json man = {{"format", "train_gpt-manifest"},
              {"version", 1},
              {"files",
               {{"state.json",
                 {{"bytes", state_text.size()},
                  {"fnv1a64", hex64(fnv1a64(state_text.data(), state_text.size()))}}}}}};
  write_text_atomic(join_path(dir, kManifest), man.dump(1) + "\n");
}

// The run id recorded in a checkpoint, or "" when its state cannot be read and verified.
std::string checkpoint_run_id(const std::string& dir) {
  try {
    return string_field(read_checkpoint_state(dir), "run_id");
  } catch (const std::exception&) {
    return "";
  }
}

// Moves a checkpoint that is not this run's out of the way without deleting it.
void move_aside(const std::string& dir) {
  for (int k = 1;; k++) {
    const std::string to = strf("%s.replaced-%d", dir.c_str(), k);
    if (dir_exists(to) || file_exists(to)) continue;
    if (rename(dir.c_str(), to.c_str()) != 0)
      throw Error(strf("cannot move checkpoint %s aside: %s", dir.c_str(), strerror(errno)));
    printf("note: %s is not a checkpoint of this run; moved to %s\n", dir.c_str(), to.c_str());
    return;
  }
}

// Removes this run's checkpoints beyond the newest `keep`; other runs' (or unreadable)
// checkpoints are never touched.
void prune_own_checkpoints(const std::string& out_dir, const std::string& run_id, int keep) {
  std::vector<std::string> own;
  for (const std::string& d : list_checkpoints(out_dir))
    if (!run_id.empty() && checkpoint_run_id(d) == run_id) own.push_back(d);
  for (size_t i = 0; i + size_t(keep) < own.size(); i++) remove_checkpoint_dir(own[i]);
}

}  // namespace

std::string publish_checkpoint(const std::string& out_dir, int64_t step, const GPTConfig& cfg,
                               const json& state_in, const std::vector<float>& params,
                               const std::vector<OptimFileRecord>& shards, int keep) {
  const std::string final_dir = join_path(out_dir, strf("ckpt_%08lld", (long long)step));
  const std::string tmp_dir = checkpoint_tmp_dir(out_dir, step);
  const std::string run_id = state_in.is_object() ? string_field(state_in, "run_id") : "";
  try {
    std::vector<char> model = model_file_bytes(cfg, params);
    write_file_atomic(join_path(tmp_dir, "model.bin"), model.data(), model.size());
    json state = state_in;
    state["format"] = "train_gpt-state";
    state["version"] = kStateVersion;
    state["step"] = step;
    state["files"] = {{"model.bin", file_entry(model)}};
    int64_t covered = 0;
    for (const OptimFileRecord& r : shards) {
      state["files"][optim_file_name(r.rank)] = {{"bytes", r.bytes},
                                                 {"fnv1a64", hex64(r.fnv1a64)},
                                                 {"begin", r.begin},
                                                 {"count", r.count},
                                                 {"adam_m", state_format_name(r.m_format)},
                                                 {"adam_v", state_format_name(r.v_format)},
                                                 {"master", master_format_name(r.master)}};
      if (any_blocked(r.m_format, r.v_format)) {
        json& e = state["files"][optim_file_name(r.rank)];
        e["moment_block"] = r.blocking.block;
        e["moment_scale"] = moment_scale_name(r.blocking.pow2);
        e["moment_expand"] = moment_expand_name(r.blocking.expand);
      }
      covered += r.count;
    }
    if (covered != int64_t(params.size()))
      throw Error(strf("checkpoint %s: the optimizer files hold %lld of %zu parameters",
                       tmp_dir.c_str(), (long long)covered, params.size()));
    const std::string state_text = state.dump(1) + "\n";
    write_text_atomic(join_path(tmp_dir, "state.json"), state_text);
    write_manifest(tmp_dir, state_text);
  } catch (...) {
    remove_tree(tmp_dir);
    throw;
  }
  // Publish: an existing checkpoint of the same step is replaced only after the new one
  // is complete; one of another run (or a damaged one) is moved aside, not deleted.
  std::string old_dir;
  if (dir_exists(final_dir)) {
    if (run_id.empty() || checkpoint_run_id(final_dir) != run_id) {
      move_aside(final_dir);
    } else {
      old_dir = join_path(out_dir, strf(".ckpt_%08lld.old", (long long)step));
      remove_tree(old_dir);
      if (rename(final_dir.c_str(), old_dir.c_str()) != 0)
        throw Error(strf("cannot replace checkpoint %s: %s", final_dir.c_str(), strerror(errno)));
    }
  }
  if (rename(tmp_dir.c_str(), final_dir.c_str()) != 0) {
    std::string e = strerror(errno);
    remove_tree(tmp_dir);
    throw Error(strf("cannot publish checkpoint %s: %s", final_dir.c_str(), e.c_str()));
  }
  fsync_dir(out_dir);
  if (!old_dir.empty()) remove_tree(old_dir);
  prune_own_checkpoints(out_dir, run_id, keep);
  return final_dir;
}

std::string save_checkpoint(const std::string& out_dir, int64_t step, const GPTConfig& cfg,
                            const json& state, const std::vector<float>& params,
                            const MomentBytes& moments, int keep) {
  const size_t n = params.size();
  prepare_checkpoint_dir(out_dir, step);
  const std::string tmp_dir = checkpoint_tmp_dir(out_dir, step);
  OptimFileRecord rec;
  try {
    rec = write_optim_shard(tmp_dir, int64_t(n), 0, moments, int64_t(n), -1, 1);
  } catch (...) {
    remove_tree(tmp_dir);
    throw;
  }
  return publish_checkpoint(out_dir, step, cfg, state, params, {rec}, keep);
}

std::string save_checkpoint(const std::string& out_dir, int64_t step, const GPTConfig& cfg,
                            const json& state, const std::vector<float>& params,
                            const std::vector<float>& m, const std::vector<float>& v, int keep) {
  const size_t n = params.size();
  if (m.size() != n || v.size() != n) throw Error("checkpoint: optimizer state size mismatch");
  MomentBytes mb;
  mb.m = m.data();
  mb.v = v.data();
  return save_checkpoint(out_dir, step, cfg, state, params, mb, keep);
}

json read_checkpoint_state(const std::string& dir) {
  const std::string state_path = join_path(dir, "state.json");
  std::vector<char> text = read_file(state_path, "checkpoint state");
  const std::string man_path = join_path(dir, kManifest);
  const bool has_manifest = file_exists(man_path);
  if (has_manifest) {
    std::vector<char> mt = read_file(man_path, "checkpoint manifest");
    json man;
    try {
      man = json::parse(mt.begin(), mt.end());
    } catch (const std::exception& e) {
      throw Error(strf("checkpoint manifest %s is not valid JSON: %s", man_path.c_str(), e.what()));
    }
    const json* f = nullptr;
    if (man.is_object() && string_field(man, "format") == "train_gpt-manifest" &&
        man.contains("files") && man["files"].is_object() && man["files"].contains("state.json"))
      f = &man["files"]["state.json"];
    if (!f || !f->is_object())
      throw Error(strf("checkpoint manifest %s does not list state.json", man_path.c_str()));
    if (uint_field(*f, "bytes", UINT64_MAX) != text.size() ||
        string_field(*f, "fnv1a64") != hex64(fnv1a64(text.data(), text.size())))
      throw Error(
          strf("checkpoint state %s is damaged or was edited: its size or checksum does "
               "not match %s",
               state_path.c_str(), man_path.c_str()));
  }
  json state;
  try {
    state = json::parse(text.begin(), text.end());
  } catch (const std::exception& e) {
    throw Error(strf("checkpoint state %s is not valid JSON: %s", state_path.c_str(), e.what()));
  }
  if (!state.is_object() || string_field(state, "format") != "train_gpt-state")
    throw Error(strf("checkpoint state %s is not a train_gpt state file", state_path.c_str()));
  const json version = state.value("version", json(0));
  if (!version.is_number_integer() || version.get<int64_t>() < 1 ||
      version.get<int64_t>() > kStateVersion)
    throw Error(strf("checkpoint state %s has unsupported version %s (this build reads 1 to %d)",
                     state_path.c_str(), version.dump().c_str(), kStateVersion));
  if (version.get<int64_t>() >= 2 && !has_manifest)
    throw Error(strf("checkpoint %s is incomplete: %s is missing", dir.c_str(), man_path.c_str()));
  if (!state.contains("files") || !state["files"].is_object())
    throw Error(strf("checkpoint state %s lists no files", state_path.c_str()));
  return state;
}

namespace {

// The bytes of checkpoint file `name` of `dir`, after checking its size and checksum against
// its entry in state.json's files.
std::vector<char> verified_file(const std::string& dir, const json& files,
                                const std::string& name) {
  std::string path = join_path(dir, name);
  std::vector<char> bytes = read_file(path, "checkpoint file");
  const json& f = files[name];
  if (!f.is_object() || uint_field(f, "bytes", UINT64_MAX) != bytes.size())
    throw Error(
        strf("checkpoint file %s is truncated or corrupt: size %zu does not match "
             "state.json",
             path.c_str(), bytes.size()));
  if (string_field(f, "fnv1a64") != hex64(fnv1a64(bytes.data(), bytes.size())))
    throw Error(strf("checkpoint file %s is corrupt: checksum mismatch", path.c_str()));
  return bytes;
}

// One optimizer file of a checkpoint: which parameters [begin, begin + count) of the n it
// holds the Adam moments of (all of them for optim.bin, a shard for optim_rank<R>.bin).
struct OptimFile {
  std::string name;
  bool sharded = false;
  int64_t begin = 0, count = 0;
  StateFormat m_format = StateFormat::FP32, v_format = StateFormat::FP32;
  MasterFormat master = MasterFormat::FP32;
  MomentBlocking blocking;
};

// An optimizer file entry's fp8 moment blocking (moment_block, moment_scale, moment_expand).
MomentBlocking entry_blocking(const std::string& state_path, const std::string& name,
                              const json& f) {
  MomentBlocking b;
  if (!f.is_object() || !f.contains("moment_block")) return b;
  const json& k = f["moment_block"];
  const bool ok_block = k.is_number_integer() && k.get<int64_t>() >= kMomentBlockMin &&
                        k.get<int64_t>() <= kMomentBlockMax &&
                        (k.get<int64_t>() & (k.get<int64_t>() - 1)) == 0;
  const std::string scale = f.contains("moment_scale") ? string_field(f, "moment_scale") : "",
                    expand = f.contains("moment_expand") ? string_field(f, "moment_expand") : "";
  if (!ok_block || !parse_moment_scale(scale, &b.pow2) || !parse_moment_expand(expand, &b.expand))
    throw Error(strf("checkpoint state %s: entry %s has a bad fp8 moment blocking "
                     "(moment_block %s, moment_scale '%s', moment_expand '%s')",
                     state_path.c_str(), name.c_str(), k.dump().c_str(), scale.c_str(),
                     expand.c_str()));
  b.block = int(k.get<int64_t>());
  return b;
}

// An optimizer file entry's master-weight format: fp32 when absent (files from before it).
MasterFormat entry_master(const std::string& state_path, const std::string& name, const json& f) {
  if (!f.is_object() || !f.contains("master")) return MasterFormat::FP32;
  try {
    return parse_master_format(string_field(f, "master"), "master");
  } catch (const UsageError&) {
    throw Error(strf("checkpoint state %s: entry %s has an unknown master format %s",
                     state_path.c_str(), name.c_str(), f["master"].dump().c_str()));
  }
}

// An optimizer file entry's format field `key` ("adam_m", "adam_v"): fp32 when absent (files
// from before the formats), else a registered name.
StateFormat entry_format(const std::string& state_path, const std::string& name, const json& f,
                         const char* key) {
  if (!f.is_object() || !f.contains(key)) return StateFormat::FP32;
  try {
    return parse_state_format(string_field(f, key), key);  // the registry reads the name
  } catch (const UsageError&) {
    throw Error(strf("checkpoint state %s: entry %s has an unknown %s format %s",
                     state_path.c_str(), name.c_str(), key, f[key].dump().c_str()));
  }
}

// The optimizer file `name` as state.json lists it (entry f); an error for names the
// writers never use (nothing outside the checkpoint directory is read) and for ranges
// outside the model's n parameters.
OptimFile optim_file_entry(const std::string& state_path, const std::string& name, const json& f,
                           size_t n) {
  int r = -1;
  char tail = 0;
  if (name != "optim.bin" &&
      !(name.size() == 19 && sscanf(name.c_str(), "optim_rank%5d.bi%c", &r, &tail) == 2 &&
        tail == 'n' && r >= 0))
    throw Error(strf("checkpoint state %s lists an unknown optimizer file '%s'", state_path.c_str(),
                     name.c_str()));
  OptimFile o;
  o.name = name;
  o.sharded = name != "optim.bin";
  o.count = int64_t(n);
  o.m_format = entry_format(state_path, name, f, "adam_m");
  o.v_format = entry_format(state_path, name, f, "adam_v");
  o.master = entry_master(state_path, name, f);
  o.blocking = entry_blocking(state_path, name, f);
  if (o.sharded) {
    if (!f.is_object() || !f.contains("begin") || !f.contains("count") ||
        !f["begin"].is_number_integer() || !f["count"].is_number_integer())
      throw Error(strf("checkpoint state %s: entry %s has no parameter range", state_path.c_str(),
                       name.c_str()));
    o.begin = f["begin"].get<int64_t>();
    o.count = f["count"].get<int64_t>();
  }
  if (o.begin < 0 || o.count < 0 || size_t(o.begin) + size_t(o.count) > n)
    throw Error(strf("checkpoint state %s: %s covers parameters outside the model",
                     state_path.c_str(), name.c_str()));
  return o;
}

// Checks the header and size of optimizer file `o`'s bytes (read from `path`) for a model of
// n parameters.
void check_optim_header(const std::string& path, const std::vector<char>& bytes, const OptimFile& o,
                        size_t n) {
  if (bytes.size() < 1024)
    throw Error(
        strf("checkpoint file %s is truncated: %zu bytes, shorter than the 1024-byte "
             "header",
             path.c_str(), bytes.size()));
  int32_t h[256];
  memcpy(h, bytes.data(), sizeof(h));
  int64_t total = 0, hb = 0, hc = int64_t(n);
  memcpy(&total, &h[2], 8);
  if (o.sharded) {
    memcpy(&hb, &h[4], 8);
    memcpy(&hc, &h[6], 8);
  }
  const size_t c = size_t(o.count);
  const size_t size = 1024 + moment_file_bytes(o.m_format, false, o.blocking, c) +
                      moment_file_bytes(o.v_format, true, o.blocking, c) + comp_bytes(o.master) * c;
  const bool blocked = any_blocked(o.m_format, o.v_format);
  const int32_t block = blocked ? o.blocking.block : 0,
                flags = blocked ? (o.blocking.pow2 ? 1 : 0) + (o.blocking.expand ? 2 : 0) : 0;
  if (h[0] != kStateMagic || h[1] != (o.sharded ? 2 : 1) || total != int64_t(n) || hb != o.begin ||
      hc != o.count || h[10] != state_format_info(o.m_format).file_code ||
      h[11] != state_format_info(o.v_format).file_code ||
      h[12] != master_format_info(o.master).file_code || h[13] != block || h[14] != flags ||
      bytes.size() != size)
    throw Error(strf("checkpoint file %s has a bad header or size", path.c_str()));
}

// The pieces [lo, hi) read, sorted, must tile [begin, end) without gaps or overlaps.
void check_tiled(const std::string& dir, std::vector<std::pair<size_t, size_t>> pieces,
                 size_t begin, size_t end) {
  std::sort(pieces.begin(), pieces.end());
  size_t at = begin;
  bool tiled = true;
  for (const auto& [lo, hi] : pieces) {
    tiled &= lo == at;
    at = hi;
  }
  if (!tiled || at != end)
    throw Error(
        strf("checkpoint %s does not hold the optimizer state of parameters [%zu, %zu) "
             "exactly once (missing or overlapping optimizer files)",
             dir.c_str(), begin, end));
}

// Elements [lo, lo + count) of an fp8 moment of a file holding `total` of them at p, decoded
// a block at a time.
void decode_blocked(const char* p, const MomentFormat& mf, size_t total, size_t lo, size_t count,
                    float* out) {
  const size_t words = size_t(moment_meta_words(mf)), block = size_t(mf.block);
  const char* meta = p + moment_meta_offset(total);
  float x[kMomentBlockMax], m[2];
  for (size_t b = lo / block; b * block < lo + count; b++) {
    const size_t i0 = b * block;
    const int len = int(std::min(block, total - i0));
    memcpy(m, meta + b * words * sizeof(float), words * sizeof(float));
    moment_decode_block(reinterpret_cast<const uint8_t*>(p) + i0, m, len, mf, x);
    for (size_t i = std::max(i0, lo); i < std::min(i0 + size_t(len), lo + count); i++)
      out[i - lo] = x[i - i0];
  }
}

// Elements [lo, lo + count) of a moment stored in format f at p (a file of `total` elements),
// widened to fp32 (exact).
void decode_moments(const char* p, StateFormat f, bool second, const MomentBlocking& b,
                    size_t total, size_t lo, size_t count, float* out) {
  const MomentFormat mf = moment_format(f, second, b);
  if (moment_is_blocked(mf)) return decode_blocked(p, mf, total, lo, count, out);
  if (moment_is_plain(mf)) {
    memcpy(out, p + 4 * lo, 4 * count);
    return;
  }
  for (size_t i = 0; i < count; i++) {
    uint16_t code;
    memcpy(&code, p + 2 * (lo + i), 2);
    out[i] = moment_decode16(code, mf);
  }
}

// The formats of the moments, from state.json's optimizer entries: one pair for all of them
// (every rank reads the same entries, so every rank learns the same formats).
void entry_formats(const std::string& dir, const json& files, size_t n, CheckpointData* cd) {
  const std::string state_path = join_path(dir, "state.json");
  bool first = true;
  for (const auto& [name, f] : files.items()) {
    if (name.rfind("optim", 0) != 0) continue;
    const OptimFile o = optim_file_entry(state_path, name, f, n);
    if (!first &&
        (o.m_format != cd->m_format || o.v_format != cd->v_format || o.master != cd->master))
      throw Error(
          strf("checkpoint state %s: the optimizer files store their state in "
               "different formats",
               state_path.c_str()));
    if (!first && any_blocked(o.m_format, o.v_format) &&
        (o.blocking.block != cd->blocking.block || o.blocking.pow2 != cd->blocking.pow2 ||
         o.blocking.expand != cd->blocking.expand))
      throw Error(strf("checkpoint state %s: the optimizer files block their fp8 moments "
                       "differently",
                       state_path.c_str()));
    cd->m_format = o.m_format;
    cd->v_format = o.v_format;
    cd->master = o.master;
    cd->blocking = o.blocking;
    first = false;
  }
}

// An fp8 moment's piece [lo, hi) of file o (at p) kept as stored, codes and blocks' meta, at
// [lo - begin, ...) of the range. False when the piece does not start on a block in both
// (a checkpoint blocked otherwise): the range then resumes from the decoded values.
bool keep_blocks(const char* p, StateFormat f, bool second, const OptimFile& o, size_t lo,
                 size_t hi, size_t begin, std::vector<uint8_t>* codes, std::vector<float>* meta) {
  const MomentFormat mf = moment_format(f, second, o.blocking);
  if (!moment_is_blocked(mf)) return true;
  const size_t block = size_t(mf.block), words = size_t(moment_meta_words(mf));
  const size_t at = lo - size_t(o.begin), to = lo - begin, len = hi - lo;
  if (at % block || to % block) return false;
  if (codes->size() < to + len) codes->resize(to + len);
  memcpy(codes->data() + to, p + at, len);
  const size_t nb = moment_blocks(len, mf.block);
  if (meta->size() < (to / block + nb) * words) meta->resize((to / block + nb) * words);
  memcpy(meta->data() + to / block * words,
         p + moment_meta_offset(size_t(o.count)) + at / block * words * sizeof(float),
         nb * words * sizeof(float));
  return true;
}

// The Adam moments of [begin, end) into cd.m and cd.v (widened to fp32), gathered from the
// optimizer files that overlap it (the others are not even read).
void load_moments(const std::string& dir, const json& files, size_t n, size_t begin, size_t end,
                  CheckpointData* cd) {
  const std::string state_path = join_path(dir, "state.json");
  entry_formats(dir, files, n, cd);
  cd->m.assign(end - begin, 0.0f);
  cd->v.assign(end - begin, 0.0f);
  cd->comp.assign(comp_bytes(cd->master) ? end - begin : 0, 0);
  std::vector<std::pair<size_t, size_t>> pieces;  // the [lo, hi) read from each file
  bool whole = true;                               // fp8 pieces kept as stored
  for (const auto& [name, f] : files.items()) {
    if (name.rfind("optim", 0) != 0) continue;
    const OptimFile o = optim_file_entry(state_path, name, f, n);
    const size_t lo = std::max(begin, size_t(o.begin));
    const size_t hi = std::min(end, size_t(o.begin + o.count));
    if (lo >= hi) continue;
    const std::vector<char> bytes = verified_file(dir, files, name);
    check_optim_header(join_path(dir, name), bytes, o, n);
    const size_t c = size_t(o.count);
    const char* mp = bytes.data() + 1024;
    const char* vp = mp + moment_file_bytes(o.m_format, false, o.blocking, c);
    decode_moments(mp, o.m_format, false, o.blocking, c, lo - o.begin, hi - lo,
                   cd->m.data() + (lo - begin));
    decode_moments(vp, o.v_format, true, o.blocking, c, lo - o.begin, hi - lo,
                   cd->v.data() + (lo - begin));
    whole &= keep_blocks(mp, o.m_format, false, o, lo, hi, begin, &cd->m_codes, &cd->m_meta);
    whole &= keep_blocks(vp, o.v_format, true, o, lo, hi, begin, &cd->v_codes, &cd->v_meta);
    if (!cd->comp.empty()) {
      const char* cp = vp + moment_file_bytes(o.v_format, true, o.blocking, c);
      memcpy(cd->comp.data() + (lo - begin), cp + 2 * (lo - o.begin), 2 * (hi - lo));
    }
    pieces.push_back({lo, hi});
  }
  check_tiled(dir, std::move(pieces), begin, end);
  if (!whole) {
    cd->m_codes.clear(), cd->v_codes.clear(), cd->m_meta.clear(), cd->v_meta.clear();
  }
}

// model.bin of checkpoint `dir` under state's files: its size and checksum, then its weights.
ModelFile verified_model_file(const std::string& dir, const json& state) {
  const json& files = state["files"];
  if (!files.contains("model.bin"))
    throw Error(
        strf("checkpoint state %s does not list model.bin", join_path(dir, "state.json").c_str()));
  return parse_model_file(join_path(dir, "model.bin"), verified_file(dir, files, "model.bin"));
}

}  // namespace

ModelFile load_checkpoint_model(const std::string& dir) {
  const std::string ckpt = dirname_of(checkpoint_model_file(dir));
  const json state = read_checkpoint_state(ckpt);
  ModelFile mf = verified_model_file(ckpt, state);
  mf.tokenizer =
      tokenizer_record_from_json(state.value("tokenizer", json()), join_path(ckpt, "state.json"));
  return mf;
}

CheckpointData load_checkpoint(const std::string& dir, const GPTConfig& cfg, size_t begin,
                               size_t count) {
  CheckpointData cd;
  cd.state = read_checkpoint_state(dir);
  const json& files = cd.state["files"];
  ModelFile mf = verified_model_file(dir, cd.state);
  check_arch(join_path(dir, "model.bin"), mf.cfg, cfg);
  cd.params = std::move(mf.params);
  const size_t n = cd.params.size();
  if (begin > n) begin = n;
  const size_t end = count > n - begin ? n : begin + count;
  load_moments(dir, files, n, begin, end, &cd);
  return cd;
}

}  // namespace tg
