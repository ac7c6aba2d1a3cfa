// text/: SentencePiece scores to BPE merges (see sentencepiece.h).
#include "text/sentencepiece.h"

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <unordered_map>

#include "text/unicode.h"

namespace wren::text {

std::vector<std::pair<std::string, std::string>> merges_from_scores(const std::vector<std::string>& pieces,
                                                                    const std::vector<double>& scores,
                                                                    const std::vector<bool>& mergeable) {
  std::unordered_map<std::string_view, int32_t> id;
  id.reserve(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i)
    if (mergeable[i]) id.emplace(pieces[i], int32_t(i));
  struct Split { int32_t result, left, right; };
  std::vector<Split> splits;
  for (size_t p = 0; p < pieces.size(); ++p) {
    if (!mergeable[p]) continue;
    const std::string_view s = pieces[p];
    size_t first = splits.size();
    for (size_t cut = 0; cut < s.size();) {
      next_code_point(s, cut);  // cut at character boundaries only
      if (cut >= s.size()) break;
      auto l = id.find(s.substr(0, cut)), r = id.find(s.substr(cut));
      if (l != id.end() && r != id.end()) splits.push_back({int32_t(p), l->second, r->second});
    }
    std::sort(splits.begin() + first, splits.end(),
              [](const Split& a, const Split& b) { return a.left != b.left ? a.left < b.left : a.right < b.right; });
  }
  std::stable_sort(splits.begin(), splits.end(),
                   [&](const Split& a, const Split& b) { return scores[a.result] > scores[b.result]; });
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(splits.size());
  for (const Split& s : splits) out.emplace_back(pieces[s.left], pieces[s.right]);
  return out;
}

}  // namespace wren::text
