// sample.h: autoregressive generation with temperature and top-k.
#pragma once
#include <cstdint>
#include <vector>

#include "model.h"
#include "rng.h"

namespace tg {

// Extends `prompt` by n tokens. Each step runs the model on the last max_seq_len tokens
// and draws from softmax(logits / temperature) restricted to the top_k most likely ids
// (top_k = 0: all); temperature 0 picks the most likely id.
std::vector<int32_t> generate(GPT& model, std::vector<int32_t> prompt, int n, double temperature,
                              int top_k, Rng& rng);

}  // namespace tg
