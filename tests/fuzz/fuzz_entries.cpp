// fuzz_entries.cpp: the fuzz targets' bodies (see fuzz_entries.h for the input layouts):
// each writes its input as files in a scratch directory of its own and runs one reader.
#include "fuzz_entries.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <nlohmann/json.hpp>

#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/config/config.h"
#include "src/data/bpe.h"
#include "src/data/data.h"
#include "src/io/checkpoint.h"
#include "src/io/hf.h"
#include "src/io/run_state.h"

namespace tgfuzz {
using json = nlohmann::json;

namespace {

// A directory of this process's own (mkdtemp under $TMPDIR, else /dev/shm, else /tmp) for
// one input, removed with everything in it when the input is done (also when an exception
// escapes; libFuzzer's single-input mode exits without static destructors).
struct Scratch {
  std::string path;
  Scratch() {
    const char* env = getenv("TMPDIR");
    std::string base = env && *env ? env : tg::dir_exists("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string tmpl = base + "/tg_fuzz_XXXXXX";
    if (!mkdtemp(&tmpl[0])) throw std::runtime_error("fuzz: cannot create " + tmpl);
    path = tmpl;
  }
  ~Scratch() { tg::remove_tree(path); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  std::string operator/(const std::string& name) const { return tg::join_path(path, name); }
};

void write_bytes(const std::string& path, const void* data, size_t n) {
  FILE* f = fopen(path.c_str(), "wb");
  bool ok = f && (n == 0 || fwrite(data, 1, n, f) == n);
  if (f && fclose(f) != 0) ok = false;
  if (!ok) throw std::runtime_error("fuzz: cannot write " + path);
}

void write_text(const std::string& path, const std::string& s) {
  write_bytes(path, s.data(), s.size());
}

uint64_t read_le(const uint8_t* p, int bytes) {
  uint64_t x = 0;
  for (int i = bytes - 1; i >= 0; i--) x = (x << 8) | p[i];
  return x;
}

// Runs f; a tg::Error or tg::UsageError is a rejection, anything else escapes.
template <typename F>
Outcome guarded(F&& f) {
  Outcome o;
  try {
    f();
    o.accepted = true;
  } catch (const tg::Error& e) {
    o.error = e.what();
  } catch (const tg::UsageError& e) {
    o.error = e.what();
  }
  return o;
}

void expect(bool ok, const std::string& what) {
  if (!ok) throw InvariantFailure(what);
}

// ---- shards ----

constexpr int kShardHeader = 11;  // input bytes before the shard file
constexpr int kVocabs[8] = {0, 1, 2, 256, 50257, 65535, 65536, 1 << 24};

struct LoaderArgs {
  int vocab, B, T, rank, world;
  bool shuffle;
  tg::LoaderPosition pos;
};

LoaderArgs loader_args(const uint8_t* d) {
  LoaderArgs a;
  a.vocab = kVocabs[d[0] & 7];
  a.shuffle = d[0] & 8;
  a.B = 1 + ((d[0] >> 4) & 3);
  a.world = 1 + (d[0] >> 6);
  a.T = 1 + (d[1] & 7);
  a.rank = ((d[1] >> 3) & 3) % a.world;
  a.pos.row = read_le(d + 2, 8);
  a.pos.epoch = d[10] & 15;
  a.pos.shard = d[10] >> 4;
  return a;
}

void check_tokens(const std::vector<int32_t>& t, int vocab) {
  for (int32_t x : t)
    expect(vocab <= 0 || (x >= 0 && x < vocab), "shard: loader returned an out-of-vocab token");
}

void check_shard(const std::string& path, const LoaderArgs& a) {
  const int64_t n = tg::shard_num_tokens(path);
  const std::vector<uint32_t> tok = tg::read_shard(path, a.vocab);
  expect(int64_t(tok.size()) == n, "shard: read_shard and shard_num_tokens disagree");
  for (uint32_t t : tok)
    expect(a.vocab <= 0 || t < uint32_t(a.vocab), "shard: read_shard kept an out-of-vocab token");
}

// A loader over the one shard: three batches from the start, then one from a position as a
// checkpoint would restore it.
void run_loader(const std::string& path, const LoaderArgs& a) {
  tg::DataLoader dl(path, "fuzz", a.B, a.T, a.rank, a.world, a.shuffle, 7, a.vocab);
  std::vector<int32_t> in(size_t(a.B) * a.T), tgt(in.size());
  for (int i = 0; i < 3; i++) {
    dl.next_batch(in.data(), tgt.data());
    check_tokens(in, a.vocab);
    check_tokens(tgt, a.vocab);
  }
  dl.set_position(a.pos);
  dl.next_batch(in.data(), tgt.data());
  check_tokens(in, a.vocab);
}

// ---- checkpoints ----

std::vector<std::string> split_parts(const uint8_t* p, size_t n) {
  std::vector<std::string> out;
  while (n >= 4) {
    size_t len = std::min<size_t>(read_le(p, 4), n - 4);
    out.emplace_back(reinterpret_cast<const char*>(p + 4), len);
    p += 4 + len;
    n -= 4 + len;
  }
  return out;
}

// A name that stays inside the checkpoint directory.
bool plain_name(const std::string& s) {
  return !s.empty() && s.size() < 200 && s != "." && s != ".." &&
         s.find_first_of(std::string("/\0", 2)) == std::string::npos;
}

std::string hex64(uint64_t x) { return tg::strf("%016llx", (unsigned long long)x); }

// What kRetype puts in place of a state.json node: every JSON type, and numbers no field
// can hold.
const char* const kRetypeValues[] = {
    "\"x\"", "1.5", "1e300", "-1",  "-9223372036854775808", "18446744073709551615",
    "[]",    "{}",  "null",  "true"};

// The nodes below j down to depth 8, depth first.
void collect_nodes(json& j, std::vector<json*>& out, int depth = 0) {
  if (!j.is_structured() || depth == 8) return;
  for (auto& v : j) {
    out.push_back(&v);
    collect_nodes(v, out, depth + 1);
  }
}

// kRetype: node `which` (depth first) of the state gets kRetypeValues[value].
void retype_node(json& st, uint8_t which, uint8_t value) {
  std::vector<json*> nodes;
  collect_nodes(st, nodes);
  if (nodes.empty()) return;
  *nodes[which % nodes.size()] = json::parse(kRetypeValues[value % std::size(kRetypeValues)]);
}

// Writes the parts as a checkpoint directory (control: the input's first 5 bytes); with
// kFixChecksums, state.json's entries of the files written get their true sizes and
// checksums, then with kRetype one node of the state changes type.
void write_checkpoint_dir(const std::string& dir, const uint8_t* control,
                          const std::vector<std::string>& parts) {
  if (parts.empty()) return;
  const uint8_t flags = control[0];
  json st = json::parse(parts[0], nullptr, false);
  const bool listed = st.is_object() && st.contains("files") && st["files"].is_object();
  std::vector<std::pair<std::string, const std::string*>> files;
  if (parts.size() > 1) files.push_back({"model.bin", &parts[1]});
  std::vector<std::string> names;
  if (listed)
    for (const auto& item : st["files"].items())
      if (item.key() != "model.bin") names.push_back(item.key());
  if (names.empty()) names.push_back("optim.bin");
  for (size_t i = 0; i < names.size() && i + 2 < parts.size(); i++)
    files.push_back({names[i], &parts[i + 2]});
  std::string state_text = parts[0];
  for (const auto& [name, bytes] : files) {
    if (!plain_name(name)) continue;
    write_text(tg::join_path(dir, name), *bytes);
    if ((flags & kFixChecksums) && listed && st["files"].contains(name) &&
        st["files"][name].is_object()) {
      st["files"][name]["bytes"] = bytes->size();
      st["files"][name]["fnv1a64"] = hex64(tg::fnv1a64(bytes->data(), bytes->size()));
    }
  }
  if ((flags & kRetype) && st.is_structured()) retype_node(st, control[1], control[2]);
  if (((flags & kFixChecksums) && listed) || ((flags & kRetype) && st.is_structured())) {
    try {
      state_text = st.dump(1);
    } catch (const json::exception&) {
    }
  }
  write_text(tg::join_path(dir, "state.json"), state_text);
  // A version-2 state is read only under a manifest that matches it: always written, so
  // that mutated state files reach the parser and the field checks behind it.
  {
    const json man = {
        {"format", "train_gpt-manifest"},
        {"version", 1},
        {"files",
         {{"state.json",
           {{"bytes", state_text.size()},
            {"fnv1a64", hex64(tg::fnv1a64(state_text.data(), state_text.size()))}}}}}};
    write_text(tg::join_path(dir, "manifest.json"), man.dump());
  }
}

// The architecture in a model file's header (unchecked: what the loader compares with).
tg::GPTConfig header_config(const std::string& model) {
  if (model.size() < 32) return seed_checkpoint_config();
  int32_t h[8];
  memcpy(h, model.data(), sizeof(h));
  return tg::model_header_config(h);
}

// ---- configs ----

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t next = s.find('\n', pos);
    if (next == std::string::npos) next = s.size();
    out.push_back(s.substr(pos, next - pos));
    pos = next + 1;
  }
  return out;
}

void set_line(tg::Config& cfg, const std::string& line) {
  size_t eq = line.find('=');
  if (eq == std::string::npos)
    tg::config_set(cfg, line, "");
  else
    tg::config_set(cfg, line.substr(0, eq), line.substr(eq + 1));
}

// An argument that would print --help (noise, not a finding).
bool asks_help(const std::string& a) {
  if (a.rfind("--h", 0) == 0) return true;
  return a.size() > 1 && a[0] == '-' && a[1] != '-' && a.find('h') != std::string::npos;
}

void parse_args(tg::Config& cfg, const std::string& config_path,
                const std::vector<std::string>& lines) {
  std::vector<std::string> args = {"train"};
  if (!config_path.empty()) args.insert(args.end(), {"--config", config_path});
  for (const auto& l : lines)
    if (!asks_help(l)) args.push_back(!l.empty() && l[0] == '-' ? l : "--" + l);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(&a[0]);
  argv.push_back(nullptr);
  tg::config_parse_args(&cfg, int(args.size()), argv.data(), "train_gpt train", {}, nullptr);
}

// A valid config must survive config_to_json -> text -> config_apply_json unchanged (that
// is how a run's config.json and a checkpoint's config are read back).
void check_round_trip(const tg::Config& cfg, int world) {
  const json j = tg::config_to_json(cfg);
  try {
    tg::Config back;
    tg::config_apply_json(back, json::parse(j.dump()), "round trip");
    tg::config_validate(back, world);
    expect(tg::config_to_json(back) == j, "config: round trip changed a value");
  } catch (const InvariantFailure&) {
    throw;
  } catch (const std::exception& e) {
    throw InvariantFailure(std::string("config: a valid config does not round-trip: ") + e.what());
  }
}

}  // namespace

Outcome fuzz_shard(const uint8_t* data, size_t size) {
  if (size < size_t(kShardHeader)) return {};
  const LoaderArgs a = loader_args(data);
  const Scratch tmp;
  const std::string path = tmp / "shard.bin";
  write_bytes(path, data + kShardHeader, size - kShardHeader);
  return guarded([&] {
    check_shard(path, a);
    run_loader(path, a);
  });
}

Outcome fuzz_model_file(const uint8_t* data, size_t size) {
  const Scratch tmp;
  const std::string path = tmp / "model.bin";
  write_bytes(path, data, size);
  return guarded([&] {
    tg::ModelFile mf = tg::read_model_file(path);
    expect(mf.params.size() == tg::num_parameters(mf.cfg), "model file: wrong parameter count");
    expect(mf.cfg.padded_vocab_size >= mf.cfg.vocab_size && mf.cfg.n_embd % mf.cfg.n_head == 0,
           "model file: inconsistent header accepted");
  });
}

Outcome fuzz_hf_model(const uint8_t* data, size_t size) {
  const Scratch tmp;
  const size_t head = std::min<size_t>(size, 4);
  const size_t n = size < 4 ? 0 : size_t(std::min<uint64_t>(read_le(data, 4), size - 4));
  write_bytes(tmp / "config.json", data + head, n);
  write_bytes(tmp / "model.safetensors", data + head + n, size - head - n);
  return guarded([&] {
    tg::ModelFile mf = tg::read_hf_model(tmp.path);
    expect(mf.params.size() == tg::num_parameters(mf.cfg), "hf model: wrong parameter count");
    expect(mf.cfg.padded_vocab_size == tg::pad_vocab(mf.cfg.vocab_size) &&
               mf.cfg.n_embd % mf.cfg.n_head == 0,
           "hf model: inconsistent shape accepted");
  });
}

// ---- GPT-2's encoder ----

namespace {
std::string bpe_vocab_dir() {
  const char* e = getenv("TG_GPT2_VOCAB");
  return e && *e ? e : "data/gpt2";
}
}  // namespace

bool bpe_vocab_present() { return tg::file_exists(tg::join_path(bpe_vocab_dir(), "vocab.json")); }

// A tokenizer whose every piece takes the long-piece merge (src/data/bpe_long_piece.h),
// which otherwise only pieces past 64 KiB reach: compared with the heap merge on every input.
const tg::BpeTokenizer& long_piece_tokenizer() {
  static const tg::BpeTokenizer* tok = [] {
    setenv("TG_TEST_BPE_LONG_PIECE", "1", 1);
    const auto* t = new tg::BpeTokenizer(bpe_vocab_dir());
    unsetenv("TG_TEST_BPE_LONG_PIECE");
    return t;
  }();
  return *tok;
}

Outcome fuzz_bpe(const uint8_t* data, size_t size) {
  static const tg::BpeTokenizer tok(bpe_vocab_dir());
  static tg::BpeTokenizer::Encoder cached(tok);  // its cache spans inputs
  const std::string text(reinterpret_cast<const char*>(data), size);
  const size_t bad = tg::first_invalid_utf8(text);
  Outcome o = guarded([&] {
    std::vector<uint32_t> ids;
    cached.encode(text, &ids);
    expect(bad == std::string::npos, "bpe: invalid UTF-8 accepted");
    expect(tok.decode(ids) == text, "bpe: decode(encode(x)) != x");
    expect(tok.encode(text) == ids, "bpe: a cached encoder disagrees with a fresh one");
    expect(long_piece_tokenizer().encode(text) == ids, "bpe: the long-piece merge disagrees");
    for (uint32_t id : ids)
      expect(id < tg::kGpt2EndOfText, "bpe: id out of range or <|endoftext|>");
  });
  if (!o.accepted)
    expect(bad != std::string::npos &&
               o.error.find(tg::strf("byte offset %zu", bad)) != std::string::npos,
           "bpe: rejected without naming the first invalid byte: " + o.error);
  const std::string fixed = tg::utf8_replace_invalid(text);
  expect(tg::first_invalid_utf8(fixed) == std::string::npos, "bpe: replacement left bad UTF-8");
  return o;
}

std::vector<uint8_t> pack_hf_input(const std::string& config, const std::vector<char>& st) {
  std::vector<uint8_t> out;
  for (int i = 0; i < 4; i++) out.push_back(uint8_t(config.size() >> (8 * i)));
  out.insert(out.end(), config.begin(), config.end());
  out.insert(out.end(), st.begin(), st.end());
  return out;
}

tg::GPTConfig seed_checkpoint_config() { return tg::gpt_config(2, 2, 2, 5, 3); }

std::vector<uint8_t> pack_checkpoint_input(uint8_t flags, uint16_t begin, uint16_t count,
                                           const std::vector<std::vector<char>>& parts) {
  std::vector<uint8_t> out = {flags, uint8_t(begin), uint8_t(begin >> 8), uint8_t(count),
                              uint8_t(count >> 8)};
  for (const auto& p : parts) {
    uint32_t n = uint32_t(p.size());
    for (int i = 0; i < 4; i++) out.push_back(uint8_t(n >> (8 * i)));
    out.insert(out.end(), p.begin(), p.end());
  }
  return out;
}

void fuzz_load_checkpoint_dir(const std::string& dir, const tg::GPTConfig& cfg, size_t begin,
                              size_t count) {
  const tg::CheckpointData cd = tg::load_checkpoint(dir, cfg, begin, count);
  const size_t n = tg::num_parameters(cfg);
  expect(cd.params.size() == n, "checkpoint: wrong parameter count");
  const size_t b = std::min(begin, n), e = count > n - b ? n : b + count;
  expect(cd.m.size() == e - b && cd.v.size() == e - b, "checkpoint: wrong optimizer range");
  expect(cd.state.is_object(), "checkpoint: state is not an object");
  // Then every field, as a resume checks it (the batch shape taken from the state itself,
  // so that the fuzzer gets past that check to the fields behind it).
  tg::ResumeRequirements req;
  req.model = cfg;
  req.num_params = n;
  const json& d =
      cd.state.contains("data") && cd.state["data"].is_object() ? cd.state["data"] : json::object();
  auto dim = [&](const char* key, int otherwise) {
    return d.contains(key) && d[key].is_number_integer() ? int(d[key].get<int64_t>()) : otherwise;
  };
  req.batch_size = dim("batch_size", 4);
  req.seq_len = dim("seq_len", 3);
  req.world_size = dim("world_size", 1);
  req.steps = int64_t(1) << 40;
  req.step_tokens = 12;
  req.train_shards = 2;
  req.train_tokens = 1 << 20;
  tg::run_state_from_json(cd.state, tg::join_path(dir, "state.json"), req);
}

Outcome fuzz_checkpoint(const uint8_t* data, size_t size) {
  if (size < 5) return {};
  const uint8_t flags = data[0];
  const std::vector<std::string> parts = split_parts(data + 5, size - 5);
  const Scratch tmp;
  const std::string dir = tmp.path;
  write_checkpoint_dir(dir, data, parts);
  const tg::GPTConfig cfg = (flags & kArchFromModel) && parts.size() > 1 ? header_config(parts[1])
                                                                         : seed_checkpoint_config();
  size_t begin = 0, count = SIZE_MAX;
  const size_t n = tg::num_parameters(cfg);
  switch ((flags >> kRangeShift) & 3) {
    case 1: count = n / 2; break;
    case 2: begin = n / 2; break;
    case 3:
      begin = size_t(read_le(data + 1, 2));
      count = read_le(data + 3, 2) == 0xffff ? SIZE_MAX : size_t(read_le(data + 3, 2));
      break;
    default: break;
  }
  return guarded([&] { fuzz_load_checkpoint_dir(dir, cfg, begin, count); });
}

Outcome fuzz_config(const uint8_t* data, size_t size) {
  if (size < 1) return {};
  const int mode = data[0] & 3, world = 1 + ((data[0] >> 2) & 7);
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t nul = rest.find('\0');
  const std::string text = rest.substr(0, nul);
  const std::vector<std::string> lines =
      split_lines(nul == std::string::npos ? "" : rest.substr(nul + 1));
  const Scratch tmp;
  std::string path;
  if (!text.empty() && mode != 1) {
    path = tmp / "config.json";
    write_text(path, text);
  }
  tg::Config cfg;
  return guarded([&] {
    if (mode == 2) {
      parse_args(cfg, path, lines);
    } else {
      if (!path.empty()) tg::config_load_file(cfg, path);
      if (mode == 1) {
        json j = json::parse(text, nullptr, false);
        if (!j.is_discarded()) tg::config_apply_json(cfg, j, "fuzz input");
      }
      for (const auto& l : lines) set_line(cfg, l);
    }
    tg::config_validate(cfg, world);
    check_round_trip(cfg, world);
  });
}

int run_target(Outcome (*entry)(const uint8_t*, size_t), const uint8_t* data, size_t size) {
  try {
    entry(data, size);
  } catch (const std::exception& e) {
    fprintf(stderr, "fuzz: an exception escaped the reader: %s\n", e.what());
    abort();
  } catch (...) {
    fprintf(stderr, "fuzz: a non-standard exception escaped the reader\n");
    abort();
  }
  return 0;
}

}  // namespace tgfuzz
