// amax_words.h: the device words in which the CUDA backend's per-tensor-scaled linears leave and
// hand on their operands' amax bits (|x| as fp32 bits, kernels/amax.cuh), and the records of
// what each word was taken of (amax_records.h), so that no word is read for other values:
//   slot    each linear's kTensorOperands words, which its quantizers fill and take_amaxes
//           reads back once per pass (no wait per GEMM);
//   kept    a current-scaled forward's input and weight words (and the rotated input's,
//           scaled.h's KeptWord), for its backward given the tensors that forward read (one
//           pass per operand, not two);
//   input   a linear's input amax, taken by the op that wrote the input (Backend's InputAmax);
//   weight  the linears' weight amaxes, taken by AdamW as it writes them (Backend's
//           WeightAmax), read by every forward given those weights until they are written.
// Each set grows on demand (its words move to the larger buffer in stream order).
#pragma once
#include <vector>

#include "amax_records.h"
#include "device_memory.h"
#include "launch.h"

namespace tg::gpu {

class AmaxWords {
 public:
  AmaxWords(Ctx& ctx, DeviceMemory& mem) : ctx_(ctx), mem_(mem) {}
  AmaxWords(const AmaxWords&) = delete;
  AmaxWords& operator=(const AmaxWords&) = delete;

  // t's memory is freed, uploaded, zeroed or written by an op that takes no amax: the records
  // of it go.
  void forget(Tensor t) { gpu::forget(records_, t); }
  // The word in which an op writing `out` takes its amax for linear a.slot's input (zeroed
  // first, in stream order), recorded as written for that linear; null where none is asked.
  unsigned* input_word(InputAmax a, Tensor out);
  // Where an adamw call writing params takes its linears' weight amaxes (wa): the words, zeroed
  // in stream order, and the records of the weights they are of (what was taken of params
  // before goes: they are written again).
  SegmentAmax weight_segments(Tensor params, const WeightAmax& wa);

  // A per-tensor-scaled linear's forward: its slot's words; where it keeps its input's and
  // weight's amaxes for its backward, the words (else null); the amaxes taken before of its
  // input and weight (null where none was taken of exactly these tensors).
  struct Forward {
    unsigned* slot;
    unsigned* kept;
    const unsigned* input;
    const unsigned* weight;
  };
  Forward forward(const ScaledLinear& q, Tensor inp, Tensor w, int N, int C, int OC);
  // Its backward: the slot's words, and its forward's kept words where given the same tensors.
  struct Backward {
    unsigned* slot;
    const unsigned* kept;
  };
  Backward backward(const ScaledLinear& q, Tensor inp, Tensor w, int N, int C, int OC);
  // Backend::take_amaxes: the slots' words read back (the one wait) and cleared.
  std::vector<float> take(int n_slots);

 private:
  // Word `index` x per of buf (holding `words`), grown to hold it, zero where new.
  unsigned* grow(unsigned*& buf, size_t& words, size_t index, size_t per);

  Ctx& ctx_;
  DeviceMemory& mem_;
  unsigned* slot_ = nullptr;  // kTensorOperands a slot
  size_t slot_words_ = 0;
  unsigned* kept_ = nullptr;  // kKeptWords a slot (scaled.h)
  size_t kept_words_ = 0;
  unsigned* input_ = nullptr;  // 1 a slot
  size_t input_words_ = 0;
  unsigned* weight_ = nullptr;  // by AmaxRecords::weight_ranges
  size_t weight_words_ = 0;
  AmaxRecords records_;
};

}  // namespace tg::gpu
