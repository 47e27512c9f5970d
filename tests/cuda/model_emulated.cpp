// model_emulated.cpp: the model's own arithmetic between the kernels, on the CUDA backend under
// the emulation (its streams run queued work only when waited for): precision.state.grads=fp32,
// a step's micro-step gradients folded into an fp32 buffer (GPT::fold_grads: convert and add on
// the backend's stream) and rounded once (GPT::finish_grads).
#include "emulated_util.h"
// (first: it includes the emulation, which redefines the CUDA keywords the kernels use)
#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda_test_util.h"
#include "src/backends/cuda/cuda_backend.h"
#include "src/model/model.h"

namespace {

constexpr int kB = 2, kT = 8, kVocab = 64;

tg::GPTConfig tiny_gpt() { return tg::gpt_config(1, 2, 32, kVocab, 16); }

// Micro-step k's forward and backward on its own tokens (the loss's gradient scaled by 1/3,
// as a step of three micro-steps scales it).
void micro_step(tg::GPT& m, int k) {
  const std::vector<int32_t> in = tgc::random_tokens(kB * kT, kVocab, 5 + 2 * k),
                             tgt = tgc::random_tokens(kB * kT, kVocab, 6 + 2 * k);
  m.forward(in.data(), tgt.data(), kB, kT, 1.0f / 3);
  m.backward();
}

std::vector<double> read(tg::Backend& be, tg::Tensor t) {
  std::vector<char> b(t.bytes());
  be.download(b.data(), t);
  return tgc::decode(b, t.dtype, t.numel);
}

}  // namespace

TEST_CASE("emulated: fp32 gradient accumulation: the micro-steps' bf16 gradients summed in fp32 "
          "in order, rounded once to bf16") {
  auto be = tg::make_cuda_backend();
  constexpr int kMicro = 3;
  // Each micro-step's gradients alone, summed here in fp32 from +0 in micro-step order.
  tg::GPT alone(tiny_gpt(), *be, tg::DType::BF16, tg::DataParallel{});
  alone.init_random(7);
  std::vector<float> sum;
  for (int k = 0; k < kMicro; k++) {
    alone.zero_grad();
    micro_step(alone, k);
    const std::vector<double> g = read(*be, alone.grads());
    sum.resize(g.size(), 0.f);
    for (size_t i = 0; i < g.size(); i++) sum[i] += float(g[i]);  // bf16 values: exact floats
  }
  tg::GPT acc(tiny_gpt(), *be, tg::DType::BF16, tg::DataParallel{});
  acc.init_random(7);
  acc.set_fp32_grad_accumulation(true);
  REQUIRE(acc.fp32_grad_accumulation());
  acc.zero_grad();
  for (int k = 0; k < kMicro; k++) micro_step(acc, k);
  const std::vector<double> zeros = read(*be, acc.grads());  // held in the fp32 buffer so far
  size_t nonzero = 0;
  for (double z : zeros) nonzero += z != 0;
  CHECK(nonzero == 0);
  acc.finish_grads();
  const std::vector<double> got = read(*be, acc.grads());
  REQUIRE(got.size() == sum.size());
  size_t wrong = 0, first = got.size(), differs_from_bf16_sums = 0;
  for (size_t i = 0; i < got.size(); i++) {
    const float want = tg::bf16_to_f32(tg::f32_to_bf16(sum[i]));
    if (double(want) != got[i] || std::signbit(want) != std::signbit(got[i])) {
      wrong++;
      first = std::min(first, i);
    }
  }
  INFO("first wrong gradient " << first);
  CHECK(wrong == 0);
  // The same three micro-steps summed in bf16 (precision.state.grads=compute) round each
  // partial sum: some gradients differ, or the test would not see the fp32 buffer at all.
  tg::GPT plain(tiny_gpt(), *be, tg::DType::BF16, tg::DataParallel{});
  plain.init_random(7);
  plain.zero_grad();
  for (int k = 0; k < kMicro; k++) micro_step(plain, k);
  const std::vector<double> bf16_sums = read(*be, plain.grads());
  for (size_t i = 0; i < got.size(); i++) differs_from_bf16_sums += bf16_sums[i] != got[i];
  MESSAGE(differs_from_bf16_sums << " of " << got.size()
                                 << " gradients differ from the bf16 partial sums'");
  CHECK(differs_from_bf16_sums > 0);
  emu_test::check_emu();
}
