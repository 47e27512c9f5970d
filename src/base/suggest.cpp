#include "suggest.h"

#include <algorithm>
#include <utility>

namespace tg {

int edit_distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  // d[i][j]: distance of a's first i and b's first j characters; three rows suffice.
  std::vector<int> prev2(m + 1), prev(m + 1), cur(m + 1);
  for (size_t j = 0; j <= m; j++) prev[j] = int(j);
  for (size_t i = 1; i <= n; i++) {
    cur[0] = int(i);
    for (size_t j = 1; j <= m; j++) {
      const int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        cur[j] = std::min(cur[j], prev2[j - 2] + 1);
    }
    std::swap(prev2, prev);
    std::swap(prev, cur);
  }
  return prev[m];
}

namespace {
std::string last_part(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}
}  // namespace

std::vector<std::string> closest_names(const std::string& given,
                                       const std::vector<std::string>& known, size_t max_names) {
  if (given.size() > 256) return {};  // no misspelling of a name: and quadratic to compare
  auto limit = [](const std::string& s) { return std::clamp(int(s.size()) / 4, 1, 3); };
  const std::string leaf = last_part(given);
  std::vector<std::pair<int, size_t>> scored;  // (score, index in known)
  for (size_t i = 0; i < known.size(); i++) {
    if (known[i] == given) continue;
    const int d = edit_distance(given, known[i]);
    if (d <= limit(given)) {
      scored.push_back({d, i});
      continue;
    }
    // The key without its section, or in the wrong one: ranked one edit below a close name.
    if (known[i].find('.') == std::string::npos || leaf.size() < 2) continue;
    const int dl = edit_distance(leaf, last_part(known[i]));
    if (dl <= limit(leaf)) scored.push_back({dl + 1, i});
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> out;
  for (const auto& s : scored) {
    // Only the best: a name one edit away hides those two or three away.
    if (out.size() == max_names || s.first > scored[0].first) break;
    out.push_back(known[s.second]);
  }
  return out;
}

std::string did_you_mean(const std::string& given, const std::vector<std::string>& known,
                         const std::string& prefix) {
  const std::vector<std::string> names = closest_names(given, known);
  if (names.empty()) return "";
  std::string s = " (did you mean ";
  for (size_t i = 0; i < names.size(); i++) {
    if (i > 0) s += i + 1 == names.size() ? " or " : ", ";
    s += "'" + prefix + names[i] + "'";
  }
  return s + "?)";
}

}  // namespace tg
