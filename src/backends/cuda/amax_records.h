// amax_records.h: what the CUDA backend (backend.cu) remembers of the amax words it hands from
// one op to another, so that a word is read only for the values it was taken of:
//   forward_read  what a per-tensor-scaled linear's forward that kept its input's and weight's
//                 amaxes read: its backward reads them again only given the same tensors;
//   written       the memory an op took a linear's input amax of as it wrote it (Backend's
//                 InputAmax): that linear's next forward reads the word only given that memory.
// A record is used once, and goes when its memory is freed, uploaded, zeroed or written again
// by an op that takes an amax (the model's order, the op then the linear, keeps it valid).
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
struct AmaxRecords {
  std::map<int, ForwardRead> forward_read;  // by slot
  std::map<int, Written> written;           // by slot
};

// Every record of t's memory goes (a forward's tensors by their start, written memory wherever
// t overlaps it).
inline void forget(AmaxRecords& r, Tensor t) {
  for (auto f = r.forward_read.begin(); f != r.forward_read.end();)
    f = f->second.inp == t.data || f->second.w == t.data ? r.forward_read.erase(f) : std::next(f);
  const char* lo = static_cast<const char*>(t.data);
  for (auto f = r.written.begin(); f != r.written.end();) {
    const char* d = static_cast<const char*>(f->second.data);
    f = d < lo + t.bytes() && lo < d + f->second.bytes ? r.written.erase(f) : std::next(f);
  }
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

// Whether `slot`'s kept words are of what a backward reading `now` reads; the record is used up.
inline bool take_forward_read(AmaxRecords& r, int slot, const ForwardRead& now) {
  const auto f = r.forward_read.find(slot);
  if (f == r.forward_read.end()) return false;
  const bool same = f->second == now;
  r.forward_read.erase(f);
  return same;
}

}  // namespace tg::gpu
