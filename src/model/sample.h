// sample.h: autoregressive generation with temperature and top-k, and the logits of a prompt
// (sample --logits) for checking other implementations against this one.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model.h"
#include "src/base/rng.h"

namespace tg {

// Extends `prompt` by n tokens. Each step runs the model on the last max_seq_len tokens
// and draws from softmax(logits / temperature) restricted to the top_k most likely ids
// (top_k = 0: all); temperature 0 picks the most likely id.
std::vector<int32_t> generate(GPT& model, std::vector<int32_t> prompt, int n, double temperature,
                              int top_k, Rng& rng);

// One forward pass over the prompt (at most max_seq_len tokens) and its logits written to
// `path`: fp32 little-endian, prompt length x vocab_size (padding dropped), row-major. Lets
// another implementation (transformers, after `train_gpt export`) be checked against ours.
void write_prompt_logits(GPT& model, const std::vector<int32_t>& prompt, const std::string& path);

}  // namespace tg
