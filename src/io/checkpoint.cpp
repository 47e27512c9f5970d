// checkpoint.cpp: a run's checkpoints, ckpt_<step> directories holding model.bin (model_file.h),
// the optimizer files (optim_file.h) and state.json under manifest.json (sizes and checksums of
// everything): written to a temporary directory and published by a rename, pruned to the newest
// `keep` of this run, listed, and read back verified before anything is resumed from them.
#include "checkpoint.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "checkpoint_cleanup.h"
#include "checkpoint_fields.h"
#include "optim_file.h"
#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/numerics/moment_block.h"

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

std::string hex64(uint64_t x) { return strf("%016llx", (unsigned long long)x); }

std::string string_field(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}
uint64_t uint_field(const json& obj, const char* key, uint64_t otherwise) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_number_unsigned() ? it->get<uint64_t>() : otherwise;
}

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

namespace {

json file_entry(const std::vector<char>& bytes) {
  return {{"bytes", bytes.size()}, {"fnv1a64", hex64(fnv1a64(bytes.data(), bytes.size()))}};
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
      state["files"][optim_file_name(r.rank)] = optim_file_state_entry(r);
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
