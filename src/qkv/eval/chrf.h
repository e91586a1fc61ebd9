// Corpus chrF exactly as sacreBLEU 2.x computes it with its defaults (sacrebleu.metrics.chrf.CHRF()):
// character n-grams of order 1..6 over code points, whitespace removed (Python's str.split()
// whitespace), no word n-grams, beta 2, case-sensitive. Per segment the reference with the best
// sentence F-score is kept (the first on ties); the statistics are summed over the corpus and the
// score is the F-beta of the precision and recall averaged over the orders that have both
// hypothesis and reference n-grams ("eff:yes" in sacreBLEU's signature: CHRF(eps_smoothing=False),
// the library's and the command line's default). eps_smoothing = true gives
// `sacrebleu --chrf-eps-smoothing` (chrF++.py/Moses/NLTK style: the F-scores of all orders averaged,
// 1e-16 standing in for undefined precision/recall).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::eval {

inline constexpr int kChrfCharOrder = 6;
inline constexpr int kChrfBeta = 2;

// Per order n = 1..6 the triple (hypothesis n-grams, reference n-grams, matches) at 3*(n-1)..3*(n-1)+2.
// The hypothesis count is 0 for an order where the reference has no n-gram (as in sacreBLEU).
struct ChrfStats {
  std::array<int64_t, 3 * kChrfCharOrder> v{};
  ChrfStats& operator+=(const ChrfStats& o);
};

struct ChrfScore {
  double score = 0.0;  // 0..100
  bool eps_smoothing = false;

  // str(CHRFScore) with `width` decimals: "chrF2 = 59.73".
  std::string format(int width = 2) const;
  // What `sacrebleu REF... -m chrf -f json -w WIDTH` prints (without the trailing newline).
  std::string format_json(int num_refs, int width = 2) const;
};

// CHRF._compute_f_score: the F-score (0..100) of summed statistics.
double chrf_f_score(const ChrfStats& stats, bool eps_smoothing = false);

// Statistics of one segment against its references (raw lines): those of the reference with the
// highest sentence chrF, the first of equals.
ChrfStats chrf_segment_stats(std::string_view hyp, const std::vector<std::string_view>& refs,
                             bool eps_smoothing = false);

// CHRF().corpus_score(hyps, refs): refs[k] is the k-th reference stream. Throws qkv::Error when there
// is no stream or a stream's length differs from hyps'.
ChrfScore corpus_chrf(const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs,
                      bool eps_smoothing = false);

}  // namespace qkv::eval
