#include "sample.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "src/base/fileio.h"

namespace tg {

std::vector<int32_t> generate(GPT& model, std::vector<int32_t> tokens, int n, double temperature,
                              int top_k, Rng& rng) {
  const GPTConfig& c = model.config();
  if (tokens.empty()) throw Error("sampling needs at least one prompt token");
  const int V = c.vocab_size, Vp = c.padded_vocab_size;
  std::vector<double> row(V);
  for (int i = 0; i < n; i++) {
    int T = std::min<int>(int(tokens.size()), c.max_seq_len);
    model.forward(tokens.data() + tokens.size() - T, nullptr, 1, T, 0.0f);
    Tensor last = model.logits().slice(size_t(T - 1) * Vp, Vp);
    if (last.dtype == DType::F64) {
      std::vector<double> tmp(Vp);
      model.backend().download(tmp.data(), last);
      std::copy(tmp.begin(), tmp.begin() + V, row.begin());
    } else {
      std::vector<float> tmp(Vp);
      model.backend().download(tmp.data(), last);
      std::copy(tmp.begin(), tmp.begin() + V, row.begin());
    }
    int next;
    if (temperature <= 0) {
      next = int(std::max_element(row.begin(), row.end()) - row.begin());
    } else {
      std::vector<int> ids(V);
      std::iota(ids.begin(), ids.end(), 0);
      int k = (top_k > 0 && top_k < V) ? top_k : V;
      // Ties are broken by the lower id, so the candidate set is deterministic.
      std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int a, int b) {
        return row[a] > row[b] || (row[a] == row[b] && a < b);
      });
      double maxv = row[ids[0]], sum = 0;
      std::vector<double> p(k);
      for (int j = 0; j < k; j++) sum += p[j] = std::exp((row[ids[j]] - maxv) / temperature);
      double r = rng.uniform() * sum, acc = 0;
      next = ids[k - 1];
      for (int j = 0; j < k; j++) {
        acc += p[j];
        if (r < acc) {
          next = ids[j];
          break;
        }
      }
    }
    tokens.push_back(next);
  }
  return tokens;
}

void write_prompt_logits(GPT& model, const std::vector<int32_t>& prompt, const std::string& path) {
  const GPTConfig& c = model.config();
  const int T = int(prompt.size());
  if (T == 0 || T > c.max_seq_len)
    throw UsageError(
        strf("sample --logits: the prompt has %d tokens; it needs 1 to max_seq_len "
             "(%d)",
             T, c.max_seq_len));
  model.forward(prompt.data(), nullptr, 1, T, 0.0f);
  const size_t V = c.vocab_size, Vp = c.padded_vocab_size;
  std::vector<float> all(size_t(T) * Vp), out(size_t(T) * V);
  if (model.logits().dtype == DType::F64) {
    std::vector<double> tmp(all.size());
    model.backend().download(tmp.data(), model.logits().slice(0, all.size()));
    std::copy(tmp.begin(), tmp.end(), all.begin());
  } else {
    model.backend().download(all.data(), model.logits().slice(0, all.size()));
  }
  for (int t = 0; t < T; t++)
    std::copy(all.begin() + t * Vp, all.begin() + t * Vp + V, out.begin() + t * V);
  write_file_atomic(path, out.data(), out.size() * 4);
}

}  // namespace tg
