#include "cli/nearest_names.h"

#include <algorithm>

namespace mt {

namespace {

std::string without_dashes(const std::string& s) {
  const size_t start = s.find_first_not_of('-');
  return start == std::string::npos ? "" : s.substr(start);
}

// How far a name may be from a word of this length and still be offered.
size_t tolerance(size_t length) {
  return length <= 4 ? 1 : length <= 8 ? 2 : 3;
}

}  // namespace

size_t edit_distance(const std::string& a, const std::string& b) {
  // d[i][j]: the distance between a's first i letters and b's first j, three rows kept.
  std::vector<size_t> before(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitute = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, substitute});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        cur[j] = std::min(cur[j], before[j - 2] + 1);
    }
    std::swap(before, prev);
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::vector<std::string> nearest_names(const std::string& word,
                                       const std::vector<std::string>& names) {
  const std::string w = without_dashes(word);
  if (w.empty()) return {};
  // Score each name in half edits: twice its distance, or 3 for a name the word begins (after
  // a one-letter typo, before two: "--rank" means --ranks rather than --ranks-per-process).
  std::vector<std::pair<size_t, std::string>> scored;
  for (const std::string& name : names) {
    const std::string n = without_dashes(name);
    if (n == w) continue;
    const size_t d = edit_distance(w, n);
    const bool prefix = w.size() >= 3 && n.compare(0, w.size(), w) == 0;
    if (d <= tolerance(w.size()) || prefix)
      scored.emplace_back(
          std::min<size_t>(d <= tolerance(w.size()) ? 2 * d : 3, prefix ? 3 : 2 * d), name);
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> out;
  for (const auto& [d, name] : scored)
    if (d == scored.front().first && out.size() < 3) out.push_back(name);
  return out;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& names) {
  const std::vector<std::string> near = nearest_names(word, names);
  if (near.empty()) return "";
  std::string out = "; did you mean ";
  for (size_t i = 0; i < near.size(); ++i)
    out += (i == 0 ? "" : i + 1 == near.size() ? " or " : ", ") + near[i];
  return out + "?";
}

}  // namespace mt
