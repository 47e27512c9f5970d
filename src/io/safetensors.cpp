#include "safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "src/base/common.h"

namespace tg {

namespace {

// The reference reader refuses headers above 100 MB; so do we (a bad length would
// otherwise make us parse anything up to the whole file as JSON).
constexpr uint64_t kMaxHeader = 100000000;

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); i++) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// A JSON value that is a non-negative integer (floats, negatives and other types are not).
bool as_uint(const nlohmann::json& j, uint64_t* out) {
  if (!j.is_number_unsigned()) return false;
  *out = j.get<uint64_t>();
  return true;
}

// Checks one header entry and fills *t (data still unset); returns its [begin, end).
std::pair<uint64_t, uint64_t> parse_entry(const std::string& path, const std::string& name,
                                          const nlohmann::json& e, SafeTensorIn* t) {
  auto fail = [&](const std::string& what) {
    throw Error(
        strf("safetensors file %s: tensor '%s': %s", path.c_str(), name.c_str(), what.c_str()));
  };
  if (!e.is_object()) fail("its header entry is not a JSON object");
  auto dt = e.find("dtype"), sh = e.find("shape"), off = e.find("data_offsets");
  if (dt == e.end() || !dt->is_string()) fail("no \"dtype\" string");
  t->dtype = dt->get<std::string>();
  const size_t esize = safetensors_dtype_size(t->dtype);
  if (esize == 0) fail("unknown dtype '" + t->dtype + "'");
  if (sh == e.end() || !sh->is_array()) fail("no \"shape\" array");
  // Elements, saturated: any product above 2^62 cannot match a real file anyway.
  uint64_t elems = 1;
  for (const auto& d : *sh) {
    uint64_t v;
    if (!as_uint(d, &v) || v > (uint64_t(1) << 62))
      fail("\"shape\" holds a value that is not a dimension");
    t->shape.push_back(int64_t(v));
    elems = (v != 0 && elems > (uint64_t(1) << 62) / v) ? (uint64_t(1) << 62) : elems * v;
  }
  uint64_t begin, end;
  if (off == e.end() || !off->is_array() || off->size() != 2 || !as_uint((*off)[0], &begin) ||
      !as_uint((*off)[1], &end))
    fail("\"data_offsets\" is not a pair of non-negative integers");
  if (end < begin)
    fail(strf("data_offsets [%llu, %llu] end before they begin", (unsigned long long)begin,
              (unsigned long long)end));
  const uint64_t need = elems > (uint64_t(1) << 62) / esize ? UINT64_MAX : elems * esize;
  if (end - begin != need)
    fail(strf("data_offsets [%llu, %llu] span %llu bytes, but shape %s of %s needs %llu",
              (unsigned long long)begin, (unsigned long long)end, (unsigned long long)(end - begin),
              shape_str(t->shape).c_str(), t->dtype.c_str(), (unsigned long long)need));
  t->bytes = size_t(need);
  return {begin, end};
}

}  // namespace

size_t safetensors_dtype_size(const std::string& d) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};
  auto it = sizes.find(d);
  return it == sizes.end() ? 0 : it->second;
}

std::vector<char> safetensors_bytes(const std::vector<SafeTensorOut>& tensors,
                                    const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps __metadata__ first and the tensors in data order: easy to read.
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::vector<size_t> sizes;
  uint64_t off = 0;
  for (const SafeTensorOut& t : tensors) {
    size_t n = safetensors_dtype_size(t.dtype);
    if (n == 0) throw Error("safetensors: unknown dtype " + t.dtype);
    for (int64_t d : t.shape) n *= size_t(d);
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + n}}};
    sizes.push_back(n);
    off += n;
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::vector<char> out(8 + text.size() + off);
  const uint64_t len = text.size();
  for (int i = 0; i < 8; i++) out[i] = char((len >> (8 * i)) & 0xff);
  memcpy(out.data() + 8, text.data(), text.size());
  char* p = out.data() + 8 + text.size();
  for (size_t i = 0; i < tensors.size(); i++) {
    if (sizes[i]) memcpy(p, tensors[i].data, sizes[i]);
    p += sizes[i];
  }
  return out;
}

namespace {

// The header's length, from the file's first 8 bytes (little-endian), checked against the
// file's size and the format's limit.
uint64_t header_length(const std::vector<char>& b, const char* p) {
  if (b.size() < 8)
    throw Error(
        strf("safetensors file %s is truncated: %zu bytes, shorter than the 8-byte "
             "header length",
             p, b.size()));
  uint64_t n = 0;
  for (int i = 0; i < 8; i++) n |= uint64_t(uint8_t(b[i])) << (8 * i);
  if (n > b.size() - 8)
    throw Error(
        strf("safetensors file %s: the header length %llu is larger than the file "
             "(%zu bytes): truncated or not a safetensors file",
             p, (unsigned long long)n, b.size()));
  if (n > kMaxHeader)
    throw Error(
        strf("safetensors file %s: the header length %llu is above the format's limit "
             "of %llu bytes",
             p, (unsigned long long)n, (unsigned long long)kMaxHeader));
  return n;
}

// The header: n bytes of JSON after the length, which must be an object.
nlohmann::json parse_header(const std::vector<char>& b, uint64_t n, const char* p) {
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(b.begin() + 8, b.begin() + 8 + std::ptrdiff_t(n));
  } catch (const nlohmann::json::exception& e) {
    throw Error(strf("safetensors file %s: the header is not valid JSON (%s)", p, e.what()));
  }
  if (!h.is_object()) throw Error(strf("safetensors file %s: the header is not a JSON object", p));
  return h;
}

// __metadata__: an object of strings.
std::map<std::string, std::string> parse_metadata(const nlohmann::json& m, const char* p) {
  if (!m.is_object())
    throw Error(strf("safetensors file %s: __metadata__ is not a JSON object", p));
  std::map<std::string, std::string> out;
  for (auto it = m.begin(); it != m.end(); ++it) {
    if (!it->is_string())
      throw Error(strf("safetensors file %s: __metadata__ entry '%s' is not a string", p,
                       it.key().c_str()));
    out[it.key()] = it->get<std::string>();
  }
  return out;
}

// One tensor's bytes in the data section, [begin, end).
struct Span {
  uint64_t begin, end;
  std::string name;
};

// The tensors must tile [0, data_size): sorted by start, each begins where the last ended.
void check_tiling(std::vector<Span> spans, uint64_t data_size, const char* p) {
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& c) {
    return a.begin != c.begin ? a.begin < c.begin : a.end < c.end;
  });
  uint64_t at = 0;
  const Span* prev = nullptr;
  for (const Span& s : spans) {
    if (s.begin < at)
      throw Error(strf(
          "safetensors file %s: tensors '%s' and '%s' overlap (bytes [%llu, %llu) "
          "and [%llu, %llu))",
          p, prev->name.c_str(), s.name.c_str(), (unsigned long long)prev->begin,
          (unsigned long long)prev->end, (unsigned long long)s.begin, (unsigned long long)s.end));
    if (s.begin > at)
      throw Error(
          strf("safetensors file %s: bytes [%llu, %llu) of the data section belong to "
               "no tensor (before '%s')",
               p, (unsigned long long)at, (unsigned long long)s.begin, s.name.c_str()));
    at = s.end;
    prev = &s;
  }
  if (at != data_size)
    throw Error(
        strf("safetensors file %s: the data section has %llu bytes after the last "
             "tensor that belong to no tensor",
             p, (unsigned long long)(data_size - at)));
}

}  // namespace

SafetensorsFile parse_safetensors(const std::vector<char>& b, const std::string& path) {
  const char* p = path.c_str();
  const uint64_t n = header_length(b, p);
  const nlohmann::json h = parse_header(b, n, p);
  SafetensorsFile f;
  const char* data = b.data() + 8 + n;
  const uint64_t data_size = b.size() - 8 - n;
  std::vector<Span> spans;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") {
      f.metadata = parse_metadata(*it, p);
      continue;
    }
    SafeTensorIn t;
    auto span = parse_entry(path, it.key(), *it, &t);
    if (span.second > data_size)
      throw Error(
          strf("safetensors file %s: tensor '%s': data_offsets [%llu, %llu] are beyond "
               "the data section (%llu bytes): truncated file or bad offsets",
               p, it.key().c_str(), (unsigned long long)span.first, (unsigned long long)span.second,
               (unsigned long long)data_size));
    t.data = data + span.first;
    f.tensors[it.key()] = t;
    spans.push_back({span.first, span.second, it.key()});
  }
  check_tiling(std::move(spans), data_size, p);
  return f;
}

}  // namespace tg
