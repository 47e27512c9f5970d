// optim_file.cpp: a checkpoint's optimizer files, optim.bin or one optim_rank<R>.bin per ZeRO-1
// shard: the Adam moments of a range of parameters in their state formats (fp32, 16-bit, or FP8
// codes with their blocks' scales) and bf16-kahan's compensation, behind a 1024-byte header.
// Written by each rank (write_optim_shard), described in state.json (optim_file_state_entry),
// and read back for any range of parameters from the files that overlap it (load_moments),
// every entry, header, size and checksum checked first.
#include "optim_file.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "checkpoint_fields.h"
#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/numerics/moment_block.h"

namespace tg {
using json = nlohmann::json;

// rank < 0 names the unsharded optim.bin.
std::string optim_file_name(int rank) {
  return rank < 0 ? "optim.bin" : strf("optim_rank%05d.bin", rank);
}

namespace {

// Bytes per parameter of the master weights' state kept in the optimizer files: bf16-kahan's
// compensation (the fp32 master and the bf16 weights live in model.bin).
size_t comp_bytes(MasterFormat f) { return f == MasterFormat::BF16Kahan ? 2 : 0; }

// Bytes of `count` elements of a moment in the optimizer files.
size_t moment_file_bytes(StateFormat f, bool second, const MomentBlocking& b, size_t count) {
  return moment_storage_bytes(count, moment_format(f, second, b));
}
// The header's word 14: bit 0 e8m0 scales, bit 1 COAT's expansion.
int32_t blocking_flags(const MomentBlocking& b) {
  return (b.scale == MomentScale::E8M0 ? 1 : 0) + (b.expand == MomentExpand::Coat ? 2 : 0);
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
    h[14] = blocking_flags(mb.blocking);
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

json optim_file_state_entry(const OptimFileRecord& r) {
  json e = {{"bytes", r.bytes},
            {"fnv1a64", hex64(r.fnv1a64)},
            {"begin", r.begin},
            {"count", r.count},
            {"adam_m", state_format_name(r.m_format)},
            {"adam_v", state_format_name(r.v_format)},
            {"master", master_format_name(r.master)}};
  if (any_blocked(r.m_format, r.v_format)) {
    e["moment_block"] = r.blocking.block;
    e["moment_scale"] = enum_name(r.blocking.scale);
    e["moment_expand"] = enum_name(r.blocking.expand);
  }
  return e;

}

namespace {

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
  if (!ok_block || !parse_enum(scale, &b.scale) || !parse_enum(expand, &b.expand))
    throw Error(
        strf("checkpoint state %s: entry %s has a bad fp8 moment blocking "
             "(moment_block %s, moment_scale '%s', moment_expand '%s')",
             state_path.c_str(), name.c_str(), k.dump().c_str(), scale.c_str(), expand.c_str()));
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
                flags = blocked ? blocking_flags(o.blocking) : 0;
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
        (o.blocking.block != cd->blocking.block || o.blocking.scale != cd->blocking.scale ||
         o.blocking.expand != cd->blocking.expand))
      throw Error(
          strf("checkpoint state %s: the optimizer files block their fp8 moments "
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

}  // namespace

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

}  // namespace tg
