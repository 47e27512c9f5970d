// amax_records.h: what the CUDA backend (backend.cu) remembers of the amax words it hands from
// one op to another, so that a word is read only for the values it was taken of:
//   forward_read  what a per-tensor-scaled linear's forward that kept its input's and weight's
//                 amaxes read: its backward reads them again only given the same tensors;
//   written       the memory an op took a linear's input amax of as it wrote it (Backend's
//                 InputAmax): that linear's next forward reads the word only given that memory.
//   weights       the memory of a linear's weight AdamW took its amax of as it wrote it
//                 (Backend's WeightAmax): every forward of that linear reads the word given
//                 that memory, until the weights are written again.
// The first two are used once; every record goes when its memory is freed, uploaded, zeroed,
// converted into, or written again by an op that takes an amax or by AdamW (the model's order,
// the op then the linear, keeps them valid).
#pragma once
#include <iterator>
#include <map>

#include "src/backends/backend.h"

namespace tg::gpu {

struct ForwardRead {
  const void* inp;
  const void* w;
  int N, C, OC;
  bool operator==(const ForwardRead& o) const {
    return inp == o.inp && w == o.w && N == o.N && C == o.C && OC == o.OC;
  }
};
struct Written {
  const void* data;
  size_t bytes;
};
struct WeightWritten {
  Written mem;
  size_t word;  // its index among the backend's weight words
};
struct AmaxRecords {
  std::map<int, ForwardRead> forward_read;  // by slot
  std::map<int, Written> written;           // by slot
  std::map<int, WeightWritten> weights;     // by slot
  // Where each WeightAmax range's words lie among the weight words (its segs in a row, so that
  // one memset zeroes them): by its first slot, the first word and the count.
  std::map<int, std::pair<size_t, int>> weight_ranges;
  size_t weight_words = 0;  // the words given out
};

inline bool overlaps(const Written& m, Tensor t) {
  const char *lo = static_cast<const char*>(t.data), *d = static_cast<const char*>(m.data);
  return d < lo + t.bytes() && lo < d + m.bytes;
}

// Every record of t's memory goes (a forward's tensors by their start, written memory wherever
// t overlaps it).
inline void forget(AmaxRecords& r, Tensor t) {
  for (auto f = r.forward_read.begin(); f != r.forward_read.end();)
    f = f->second.inp == t.data || f->second.w == t.data ? r.forward_read.erase(f) : std::next(f);
  for (auto f = r.written.begin(); f != r.written.end();)
    f = overlaps(f->second, t) ? r.written.erase(f) : std::next(f);
  for (auto f = r.weights.begin(); f != r.weights.end();)
    f = overlaps(f->second.mem, t) ? r.weights.erase(f) : std::next(f);
}

// An op wrote `out` taking linear `slot`'s input amax as it did.
inline void record_written(AmaxRecords& r, int slot, Tensor out) {
  forget(r, out);
  r.written[slot] = {out.data, out.bytes()};
}

// Whether linear `slot`'s input amax word was taken of exactly inp since; the record is used up.
inline bool take_written(AmaxRecords& r, int slot, Tensor inp) {
  const auto f = r.written.find(slot);
  if (f == r.written.end()) return false;
  const bool same = f->second.data == inp.data && f->second.bytes == inp.bytes();
  r.written.erase(f);
  return same;
}

// The first of a WeightAmax range's `segs` words among the weight words (the same words for
// the same range each step).
inline size_t weight_range_words(AmaxRecords& r, int slot0, int segs) {
  auto f = r.weight_ranges.find(slot0);
  if (f == r.weight_ranges.end() || f->second.second != segs) {
    r.weight_ranges[slot0] = {r.weight_words, segs};
    r.weight_words += size_t(segs);
    f = r.weight_ranges.find(slot0);
  }
  return f->second.first;
}

// The index of the weight word holding linear `slot`'s weight amax, where AdamW took it of
// exactly w and nothing wrote w since; -1 where none. The record stays (every micro-batch's
// forward reads the same weights).
inline long weight_taken(const AmaxRecords& r, int slot, Tensor w) {
  const auto f = r.weights.find(slot);
  if (f == r.weights.end()) return -1;
  const Written& m = f->second.mem;
  return m.data == w.data && m.bytes == w.bytes() ? long(f->second.word) : -1;
}

// Whether `slot`'s kept words are of what a backward reading `now` reads; the record is used up.
inline bool take_forward_read(AmaxRecords& r, int slot, const ForwardRead& now) {
  const auto f = r.forward_read.find(slot);
  if (f == r.forward_read.end()) return false;
  const bool same = f->second == now;
  r.forward_read.erase(f);
  return same;
}

}  // namespace tg::gpu
