// amax_words.cu: the CUDA backend's amax words and their records (amax_words.h).
#include <algorithm>
#include <cmath>

#include "amax_words.h"
#include "scaled.h"

namespace tg::gpu {

unsigned* AmaxWords::grow(unsigned*& buf, size_t& words, size_t index, size_t per) {
  const size_t need = (index + 1) * per;
  if (need > words) {
    const size_t grown = std::max(need, size_t(64) * per);
    unsigned* fresh = static_cast<unsigned*>(mem_.alloc(grown * sizeof(unsigned)));
    TG_CUDA_CHECK(cudaMemsetAsync(fresh, 0, grown * sizeof(unsigned), ctx_.stream));
    if (buf) {
      TG_CUDA_CHECK(cudaMemcpyAsync(fresh, buf, words * sizeof(unsigned), cudaMemcpyDeviceToDevice,
                                    ctx_.stream));
      mem_.free(buf);  // waits for the copy
    }
    buf = fresh;
    words = grown;
  }
  return buf + index * per;
}

unsigned* AmaxWords::input_word(InputAmax a, Tensor out) {
  gpu::forget(records_, out);  // written again
  if (a.slot < 0) return nullptr;
  unsigned* word = grow(input_, input_words_, size_t(a.slot), 1);
  TG_CUDA_CHECK(cudaMemsetAsync(word, 0, sizeof(unsigned), ctx_.stream));
  record_written(records_, a.slot, out);
  return word;
}

SegmentAmax AmaxWords::weight_segments(Tensor params, const WeightAmax& wa) {
  gpu::forget(records_, params);
  SegmentAmax s;
  size_t first[WeightAmax::kMax];
  for (int r = 0; r < wa.n; r++) {
    if (wa.segs[r] < 1 || wa.lo[r] + uint64_t(wa.segs[r]) * wa.seg_len[r] > params.numel)
      throw Error("cuda backend: adamw: a weight amax range outside the call's elements");
    first[r] = weight_range_words(records_, wa.slot0[r], wa.segs[r]);
    grow(weight_, weight_words_, first[r] + size_t(wa.segs[r]) - 1, 1);
  }
  const size_t esize = dtype_size(params.dtype);
  for (int r = 0; r < wa.n; r++) {  // (the words may have moved above)
    s.words[r] = weight_ + first[r];
    TG_CUDA_CHECK(cudaMemsetAsync(s.words[r], 0, wa.segs[r] * sizeof(unsigned), ctx_.stream));
    s.lo[r] = wa.lo[r];
    s.hi[r] = wa.lo[r] + uint64_t(wa.segs[r]) * wa.seg_len[r];
    s.seg_len[r] = wa.seg_len[r];
    for (int k = 0; k < wa.segs[r]; k++) {
      const uint64_t at = wa.lo[r] + uint64_t(k) * wa.seg_len[r];
      records_.weights[wa.slot0[r] + k * wa.slot_step[r]] = {
          {static_cast<const char*>(params.data) + at * esize, wa.seg_len[r] * esize},
          first[r] + size_t(k)};
    }
  }
  s.n = wa.n;
  return s;
}

AmaxWords::Forward AmaxWords::forward(const ScaledLinear& q, Tensor inp, Tensor w, int N, int C,
                                      int OC) {
  const int slot = q.tensor.slot;
  Forward f{nullptr, nullptr, nullptr, nullptr};
  if (slot < 0) return f;
  f.slot = grow(slot_, slot_words_, size_t(slot), kTensorOperands);
  if (take_written(records_, slot, inp)) f.input = input_ + slot;
  const long word = weight_taken(records_, slot, w);
  if (word >= 0) f.weight = weight_ + word;
  records_.forward_read.erase(slot);
  if (forward_amax_kept(q)) {
    f.kept = grow(kept_, kept_words_, size_t(slot), kKeptWords);
    records_.forward_read[slot] = {inp.data, w.data, N, C, OC};
  }
  return f;
}

AmaxWords::Backward AmaxWords::backward(const ScaledLinear& q, Tensor inp, Tensor w, int N, int C,
                                        int OC) {
  const int slot = q.tensor.slot;
  if (slot < 0) return {nullptr, nullptr};
  // The forward's kept amaxes serve this one backward, and only for the tensors it read.
  const bool kept = take_forward_read(records_, slot, {inp.data, w.data, N, C, OC});
  return {grow(slot_, slot_words_, size_t(slot), kTensorOperands),
          kept ? kept_ + size_t(slot) * kKeptWords : nullptr};
}

std::vector<float> AmaxWords::take(int n_slots) {
  std::vector<float> r(size_t(n_slots) * kTensorOperands, 0.0f);
  const size_t n = std::min(r.size(), slot_words_);
  if (n == 0) return r;
  std::vector<unsigned> bits(n);
  download(ctx_, bits.data(), slot_, n * sizeof(unsigned));  // the one wait
  TG_CUDA_CHECK(cudaMemsetAsync(slot_, 0, slot_words_ * sizeof(unsigned), ctx_.stream));
  for (size_t i = 0; i < n; i++) r[i] = bits[i] < 0x7f800000u ? bits_f32(bits[i]) : INFINITY;
  return r;
}

}  // namespace tg::gpu
