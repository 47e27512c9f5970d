// bpe.cpp: GPT-2's byte-level BPE (see bpe.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "bpe.h"

#include <pcre2.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/base/sha256.h"
#include "src/base/test_hooks.h"
#include "bpe_long_piece.h"
#include "tokenizer.h"

namespace tg {

namespace {

// tiktoken's r50k_pat_str with \s as Unicode White_Space (see bpe.h). Possessive
// quantifiers as in tiktoken: they change no match here, they only spare backtracking.
const char* const kGpt2Pattern =
    R"('(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\p{White_Space}\p{L}\p{N}]++)"
    R"(|\p{White_Space}++$|\p{White_Space}+(?!\P{White_Space})|\p{White_Space})";

constexpr uint32_t kNoRank = UINT32_MAX;
// The content digest of GPT-2's vocabulary (BpeTokenizer::content_sha256): OpenAI's
// encoder.json and vocab.bpe, or Hugging Face's vocab.json and merges.txt, whatever their
// JSON formatting.
const char* const kGpt2ContentSha256 =
    "20110f1734707c7518e97afb3d1be66564aa191403e715bf87ea8dcb586ddec0";
constexpr size_t kCacheLimit = 1 << 16;    // pieces; the cache starts over when full
constexpr size_t kCachedPieceBytes = 256;  // longer pieces are rare: merged, not cached
// Pieces longer than this are merged in 3 bytes of scratch per byte (bpe_long_piece.h), not
// the heap's 40: only pathological text (a line of letters without spaces) has them.
constexpr size_t kLongPieceBytes = 1 << 16;

// A code point from s at *i (valid UTF-8), advancing *i.
uint32_t next_code_point(std::string_view s, size_t* i) {
  const unsigned char c = static_cast<unsigned char>(s[*i]);
  const int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
  for (int k = 1; k < n; k++) cp = (cp << 6) | (static_cast<unsigned char>(s[*i + k]) & 0x3F);
  *i += size_t(n);
  return cp;
}

// A vocabulary file's token (bytes written as GPT-2's printable characters) as bytes.
std::string token_from_text(std::string_view text, const std::vector<int>& byte_of,
                            const std::string& path) {
  std::string bytes;
  for (size_t i = 0; i < text.size();) {
    const uint32_t cp = next_code_point(text, &i);
    if (cp >= byte_of.size() || byte_of[cp] < 0)
      throw Error(
          strf("%s: token '%s' has the character U+%04X, which GPT-2's byte map does "
               "not use: not a GPT-2 vocabulary file",
               path.c_str(), std::string(text).c_str(), cp));
    bytes += char(byte_of[cp]);
  }
  return bytes;
}

std::vector<int> unicode_to_byte() {
  const std::vector<uint32_t>& b2u = gpt2_byte_to_unicode();
  std::vector<int> u2b(512, -1);
  for (int b = 0; b < 256; b++) u2b[b2u[b]] = b;
  return u2b;
}

// The first of the candidate names that exists in dir.
std::string pick_file(const std::string& dir, const char* name, const char* openai_name) {
  const std::string a = join_path(dir, name), b = join_path(dir, openai_name);
  if (file_exists(a)) return a;
  if (file_exists(b)) return b;
  throw Error(
      strf("GPT-2 tokenizer: %s not found (nor %s); scripts/setup.sh --gpt2 fetches "
           "GPT-2's vocabulary into data/gpt2/, or pass the folder that holds "
           "vocab.json and merges.txt",
           a.c_str(), b.c_str()));
}

// A 64-bit hash of a short byte string: 8 bytes at a time, then MurmurHash3's finaliser
// (every input bit reaches the low bits the table indexes with).
uint64_t hash_bytes(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0x87C37B91114253D5ull;
    h = (h << 31) | (h >> 33);
  }
  uint64_t tail = 0;
  memcpy(&tail, s.data() + i, s.size() - i);
  h ^= tail;
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 33;
  h *= 0xC4CEB9FE1A85EC53ull;
  return h ^ (h >> 33);
}

}  // namespace

// bytes -> token id, open addressing over 16-byte slots that hold a token's first 11 bytes:
// one lookup of a token of up to 11 bytes reads one cache line. (A node-based map's pointer
// chasing was a third of the encoding time.)
struct RankTable {
  static constexpr size_t kInline = 11;
  struct Slot {
    uint32_t id = kNoRank;
    uint8_t len = 0;
    char key[kInline] = {};
  };
  std::vector<Slot> slots;
  uint64_t mask = 0;
  const std::vector<std::string>* tokens = nullptr;

  void build(const std::vector<std::string>& toks, uint32_t count) {
    tokens = &toks;
    size_t n = 1;
    while (n < 3 * size_t(count)) n *= 2;  // load factor below 1/3
    slots.assign(n, Slot{});
    mask = n - 1;
    for (uint32_t t = 0; t < count; t++) {
      const std::string& k = toks[t];
      size_t i = hash_bytes(k) & mask;
      while (slots[i].id != kNoRank) i = (i + 1) & mask;
      slots[i].id = t;
      slots[i].len = uint8_t(std::min<size_t>(k.size(), 255));
      memcpy(slots[i].key, k.data(), std::min(k.size(), kInline));
    }
  }
  bool same(const Slot& sl, std::string_view s) const {
    if (sl.len != std::min<size_t>(s.size(), 255)) return false;
    if (memcmp(sl.key, s.data(), std::min(s.size(), kInline)) != 0) return false;
    return s.size() <= kInline || (*tokens)[sl.id] == s;
  }
  uint32_t find(std::string_view s) const {
    for (size_t i = hash_bytes(s) & mask; slots[i].id != kNoRank; i = (i + 1) & mask)
      if (same(slots[i], s)) return slots[i].id;
    return kNoRank;
  }
};

namespace {
// The UTF-8 sequence at p[0..n): its length when well formed, else 0 with *prefix the
// length of its longest well-formed prefix (at least 1: the byte that cannot start one).
size_t utf8_sequence(const unsigned char* p, size_t n, size_t* prefix) {
  const unsigned char c = p[0];
  *prefix = 1;
  if (c < 0x80) return 1;
  size_t len;
  unsigned lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (c >= 0xC2 && c <= 0xDF)
    len = 2;
  else if (c == 0xE0)
    len = 3, lo = 0xA0;  // no overlong 3-byte forms
  else if (c == 0xED)
    len = 3, hi = 0x9F;  // no surrogates
  else if (c >= 0xE1 && c <= 0xEF)
    len = 3;
  else if (c == 0xF0)
    len = 4, lo = 0x90;  // no overlong 4-byte forms
  else if (c >= 0xF1 && c <= 0xF3)
    len = 4;
  else if (c == 0xF4)
    len = 4, hi = 0x8F;  // nothing above U+10FFFF
  else
    return 0;
  if (n < 2 || p[1] < lo || p[1] > hi) return 0;
  *prefix = 2;
  for (size_t k = 2; k < len; k++) {
    if (k >= n || (p[k] & 0xC0) != 0x80) return 0;
    *prefix = k + 1;
  }
  return len;
}
}  // namespace

size_t first_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t prefix;
  for (size_t i = 0; i < s.size();) {
    if (p[i] < 0x80) {  // the common case, inline
      i++;
      continue;
    }
    const size_t len = utf8_sequence(p + i, s.size() - i, &prefix);
    if (len == 0) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string utf8_replace_invalid(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  std::string out;
  out.reserve(s.size());
  size_t prefix;
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_sequence(p + i, s.size() - i, &prefix);
    if (len > 0) {
      out.append(s.data() + i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD for the maximal invalid subpart
      i += prefix;
    }
  }
  return out;
}

const std::vector<uint32_t>& gpt2_byte_to_unicode() {
  static const std::vector<uint32_t> map = [] {
    // Printable Latin-1 bytes stand for themselves; the others take 256, 257, ... in order.
    std::vector<uint32_t> m(256);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; b++) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      m[b] = printable ? b : next++;
    }
    return m;
  }();
  return map;
}

struct BpeTokenizer::Impl {
  std::vector<std::string> tokens;  // id -> bytes
  RankTable rank;                   // bytes -> id
  pcre2_code* pattern = nullptr;
  std::string vocab_path, merges_path, vocab_sha, merges_sha;
  std::vector<uint8_t> merge_split;  // merge n: the length of its left part
  size_t long_piece_bytes = SIZE_MAX;  // longer pieces: merge_long_piece (SIZE_MAX: never)
  ~Impl() { pcre2_code_free(pattern); }

  void read_vocab(const std::string& path);
  void check_merges(const std::string& path);
  std::string content_sha256() const;
  void compile_pattern();
};

void BpeTokenizer::Impl::read_vocab(const std::string& path) {
  nlohmann::json j;
  try {
    const std::vector<char> text = read_file(path, "GPT-2 vocabulary");
    vocab_sha = sha256_hex(std::string_view(text.data(), text.size()));
    j = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    throw Error(strf("%s: not JSON (%s)", path.c_str(), e.what()));
  }
  if (!j.is_object() || j.size() != size_t(kGpt2VocabSize))
    throw Error(strf("%s: expected an object of %d tokens (GPT-2's vocabulary), found %s",
                     path.c_str(), kGpt2VocabSize,
                     j.is_object() ? std::to_string(j.size()).c_str() : "no object"));
  const std::vector<int> byte_of = unicode_to_byte();
  tokens.assign(kGpt2VocabSize, std::string());
  std::vector<bool> seen(kGpt2VocabSize, false);
  for (const auto& [text, id] : j.items()) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= uint64_t(kGpt2VocabSize) ||
        seen[id.get<size_t>()])
      throw Error(strf("%s: token '%s' has id %s: not an unused id below %d", path.c_str(),
                       text.c_str(), id.dump().c_str(), kGpt2VocabSize));
    const uint32_t i = id.get<uint32_t>();
    seen[i] = true;
    if (i == kGpt2EndOfText) {
      if (text != "<|endoftext|>")
        throw Error(strf("%s: id %u is '%s', not <|endoftext|>", path.c_str(), i, text.c_str()));
      tokens[i] = text;
      continue;
    }
    tokens[i] = token_from_text(text, byte_of, path);
  }
  rank.build(tokens, kGpt2EndOfText);
  for (uint32_t i = 0; i < kGpt2EndOfText; i++)
    if (rank.find(tokens[i]) != i)
      throw Error(
          strf("%s: ids %u and %u have the same bytes", path.c_str(), rank.find(tokens[i]), i));
}

// merges.txt: "#version" line, then line n ("A B") makes token 256 + n = A + B; the first
// 256 tokens are the single bytes. This is the check tiktoken makes of OpenAI's two files.
void BpeTokenizer::Impl::check_merges(const std::string& path) {
  for (uint32_t i = 0; i < 256; i++)
    if (tokens[i].size() != 1)
      throw Error(strf("GPT-2 vocabulary: token %u is not a single byte", i));
  const std::vector<int> byte_of = unicode_to_byte();
  const std::vector<char> bytes = read_file(path, "GPT-2 merges");
  const std::string text(bytes.begin(), bytes.end());
  merges_sha = sha256_hex(text);
  uint32_t next = 256;
  size_t line_no = 0;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + at, end - at);
    at = end + 1;
    line_no++;
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t sp = line.find(' ');
    const std::string left =
        sp == std::string_view::npos ? "" : token_from_text(line.substr(0, sp), byte_of, path);
    if (sp == std::string_view::npos || next >= kGpt2EndOfText ||
        left + token_from_text(line.substr(sp + 1), byte_of, path) != tokens[next])
      throw Error(
          strf("%s:%zu: '%s' does not make token %u of the vocabulary ('%s'): the two "
               "files are not a GPT-2 pair",
               path.c_str(), line_no, std::string(line).c_str(), next,
               next < kGpt2EndOfText ? printable(tokens[next]).c_str() : "none"));
    merge_split.push_back(uint8_t(left.size()));
    next++;
  }
  if (next != kGpt2EndOfText)
    throw Error(
        strf("%s: %u merges, GPT-2 has %u", path.c_str(), next - 256, kGpt2EndOfText - 256));
}

// SHA-256 over each token (a length byte, then its bytes, ids in order) and each merge's
// split (the length of its left part): the vocabulary itself, not its files' formatting.
std::string BpeTokenizer::Impl::content_sha256() const {
  Sha256 h;
  for (const std::string& t : tokens) {
    const uint8_t n = uint8_t(t.size());
    h.update(&n, 1);
    h.update(t);
  }
  h.update(merge_split.data(), merge_split.size());
  return h.hex();
}

void BpeTokenizer::Impl::compile_pattern() {
  int err = 0;
  PCRE2_SIZE off = 0;
  pattern = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Pattern), PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY | PCRE2_NO_UTF_CHECK, &err,
                          &off, nullptr);
  if (!pattern) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    throw Error(strf("GPT-2 pattern does not compile with this PCRE2 (%s at %zu)",
                     reinterpret_cast<const char*>(msg), size_t(off)));
  }
  pcre2_jit_compile(pattern, PCRE2_JIT_COMPLETE);  // without JIT (unsupported CPU): slower
}

BpeTokenizer::BpeTokenizer(const std::string& dir) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.vocab_path = pick_file(dir, "vocab.json", "encoder.json");
  m.merges_path = pick_file(dir, "merges.txt", "vocab.bpe");
  m.read_vocab(m.vocab_path);
  m.check_merges(m.merges_path);
  const std::string digest = m.content_sha256();
  if (digest != kGpt2ContentSha256)
    throw Error(
        strf("%s and %s: a consistent BPE vocabulary, but not GPT-2's (content digest "
             "%s; GPT-2's is %s): altered files? scripts/setup.sh --gpt2 fetches the "
             "originals into data/gpt2/",
             m.vocab_path.c_str(), m.merges_path.c_str(), digest.c_str(), kGpt2ContentSha256));
  m.compile_pattern();
  size_t longest = 0;
  for (const std::string& t : m.tokens) longest = std::max(longest, t.size());
  if (long_piece_merge_fits(m.tokens.size(), longest))
    m.long_piece_bytes = test_hooks::bpe_long_piece() ? test_hooks::bpe_long_piece() : kLongPieceBytes;
}

BpeTokenizer::~BpeTokenizer() = default;

nlohmann::json BpeTokenizer::describe() const {
  return {{"name", "gpt2"},
          {"vocab_size", kGpt2VocabSize},
          {"end_of_text", kGpt2EndOfText},
          {"vocab_file", impl_->vocab_path},
          {"vocab_sha256", impl_->vocab_sha},
          {"merges_file", impl_->merges_path},
          {"merges_sha256", impl_->merges_sha},
          {"content_sha256", kGpt2ContentSha256}};
}

const std::string& BpeTokenizer::token_bytes(uint32_t id) const {
  if (id >= uint32_t(kGpt2VocabSize))
    throw Error(strf("token id %u is not in GPT-2's vocabulary (%d ids)", id, kGpt2VocabSize));
  return impl_->tokens[id];
}

std::string BpeTokenizer::decode(const std::vector<uint32_t>& ids) const {
  std::string s;
  for (uint32_t id : ids) s += token_bytes(id);
  return s;
}

// ---- encoding ----

namespace {
// Calls f with each piece the pattern cuts from text (valid UTF-8), left to right.
template <typename F>
void for_each_piece(const pcre2_code* pattern, pcre2_match_data* match, std::string_view text,
                    const std::string& where, F&& f) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match);
  for (size_t at = 0; at < text.size();) {
    const int rc =
        pcre2_match(pattern, subject, text.size(), at, PCRE2_NO_UTF_CHECK, match, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0)
      throw Error(
          strf("%s: the GPT-2 pattern failed at byte %zu (PCRE2 error %d)", where.c_str(), at, rc));
    f(text.substr(ov[0], ov[1] - ov[0]));
    at = ov[1];
  }
}
}  // namespace

struct BpeTokenizer::Encoder::State {
  const BpeTokenizer::Impl& tok;
  pcre2_match_data* match;
  std::unordered_map<std::string, std::vector<uint32_t>> cache;
  // The merge's scratch: each part's start and the next part (or -1), and the pair heap.
  struct Pair {
    uint32_t rank, left, end;  // the pair starting at part `left`, ending at byte `end`
    bool operator>(const Pair& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::vector<uint32_t> start;
  std::vector<int32_t> next, prev;
  std::vector<uint8_t> alive;
  std::vector<Pair> heap;

  explicit State(const BpeTokenizer::Impl& t)
      : tok(t), match(pcre2_match_data_create_from_pattern(t.pattern, nullptr)) {}
  ~State() { pcre2_match_data_free(match); }

  uint32_t rank_of(std::string_view bytes) const { return tok.rank.find(bytes); }
  uint32_t part_end(std::string_view piece, int32_t i) const {
    return next[size_t(i)] < 0 ? uint32_t(piece.size()) : start[size_t(next[size_t(i)])];
  }
  void push_pair(std::string_view piece, int32_t left);
  void merge(std::string_view piece, std::vector<uint32_t>* out);
  void encode_piece(std::string_view piece, std::vector<uint32_t>* out);
};

// The pair of part `left` and its right neighbour, if their bytes together are a token.
void BpeTokenizer::Encoder::State::push_pair(std::string_view piece, int32_t left) {
  if (left < 0 || next[size_t(left)] < 0) return;
  const uint32_t b = start[size_t(left)], e = part_end(piece, next[size_t(left)]);
  const uint32_t r = rank_of(piece.substr(b, e - b));
  if (r == kNoRank) return;
  heap.push_back({r, uint32_t(left), e});
  std::push_heap(heap.begin(), heap.end(), std::greater<Pair>());
}

// Merges the lowest-ranked adjacent pair (leftmost among equals) until none is a token.
// A heap of pairs, each checked when it comes out (a pair whose left part was merged away
// or whose right part grew is stale): O(n log n), so a piece of any length is fine.
void BpeTokenizer::Encoder::State::merge(std::string_view piece, std::vector<uint32_t>* out) {
  const int32_t n = int32_t(piece.size());
  start.resize(size_t(n));
  next.resize(size_t(n));
  prev.resize(size_t(n));
  heap.clear();
  for (int32_t i = 0; i < n; i++) {
    start[size_t(i)] = uint32_t(i);
    next[size_t(i)] = i + 1 < n ? i + 1 : -1;
    prev[size_t(i)] = i - 1;
  }
  alive.assign(size_t(n), 1);
  for (int32_t i = 0; i + 1 < n; i++) push_pair(piece, i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<Pair>());
    const Pair p = heap.back();
    heap.pop_back();
    const int32_t l = int32_t(p.left), r = alive[size_t(l)] ? next[size_t(l)] : -1;
    if (r < 0 || part_end(piece, r) != p.end) continue;  // stale
    alive[size_t(r)] = 0;
    next[size_t(l)] = next[size_t(r)];
    if (next[size_t(l)] >= 0) prev[size_t(next[size_t(l)])] = l;
    push_pair(piece, prev[size_t(l)]);
    push_pair(piece, l);
  }
  for (int32_t i = 0; i >= 0; i = next[size_t(i)]) {
    const uint32_t b = start[size_t(i)];
    out->push_back(rank_of(piece.substr(b, part_end(piece, i) - b)));
  }
}

void BpeTokenizer::Encoder::State::encode_piece(std::string_view piece,
                                                std::vector<uint32_t>* out) {
  const uint32_t whole = rank_of(piece);
  if (whole != kNoRank) {
    out->push_back(whole);
    return;
  }
  if (piece.size() > tok.long_piece_bytes) {
    merge_long_piece(piece, [this](std::string_view b) { return rank_of(b); }, out);
    return;
  }
  if (piece.size() > kCachedPieceBytes) {
    merge(piece, out);
    return;
  }
  const std::string key(piece);
  const auto hit = cache.find(key);
  if (hit != cache.end()) {
    out->insert(out->end(), hit->second.begin(), hit->second.end());
    return;
  }
  const size_t from = out->size();
  merge(piece, out);
  if (cache.size() >= kCacheLimit) cache.clear();
  cache.emplace(key, std::vector<uint32_t>(out->begin() + long(from), out->end()));
}

BpeTokenizer::Encoder::Encoder(const BpeTokenizer& tok)
    : st_(std::make_unique<State>(*tok.impl_)) {}
BpeTokenizer::Encoder::~Encoder() = default;

void BpeTokenizer::Encoder::encode(std::string_view text, std::vector<uint32_t>* out,
                                   const std::string& where) {
  const size_t bad = first_invalid_utf8(text);
  if (bad != std::string_view::npos)
    throw Error(strf("%s: invalid UTF-8 at byte offset %zu (byte 0x%02X)", where.c_str(), bad,
                     unsigned(static_cast<unsigned char>(text[bad]))));
  for_each_piece(st_->tok.pattern, st_->match, text, where,
                 [&](std::string_view piece) { st_->encode_piece(piece, out); });
}

std::vector<uint32_t> BpeTokenizer::encode(std::string_view text, const std::string& where) const {
  Encoder e(*this);
  std::vector<uint32_t> ids;
  e.encode(text, &ids, where);
  return ids;
}

std::vector<std::string> BpeTokenizer::pieces(std::string_view text) const {
  if (first_invalid_utf8(text) != std::string_view::npos) throw Error("pieces: invalid UTF-8");
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(impl_->pattern, nullptr);
  std::vector<std::string> out;
  for_each_piece(impl_->pattern, md, text, "text",
                 [&](std::string_view piece) { out.emplace_back(piece); });
  pcre2_match_data_free(md);
  return out;
}

}  // namespace tg
