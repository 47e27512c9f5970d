#include "sample.h"

#include <algorithm>
#include <cmath>
#include <numeric>

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

}  // namespace tg
