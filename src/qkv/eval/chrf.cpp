#include "qkv/eval/chrf.h"

#include <cstdio>
#include <unordered_map>

#include "qkv/core/error.h"
#include "qkv/eval/bleu.h"
#include "qkv/eval/tokenizer_13a.h"

namespace qkv::eval {

namespace {

using CharNgrams = std::array<std::unordered_map<std::u32string_view, int64_t>, kChrfCharOrder>;

// extract_all_char_ngrams(line, 6, include_whitespace=False) over `chars` (already without spaces).
CharNgrams char_ngrams(const std::u32string& chars) {
  CharNgrams out;
  const std::u32string_view s(chars);
  for (std::size_t n = 1; n <= kChrfCharOrder; ++n)
    for (std::size_t i = 0; i + n <= s.size(); ++i) ++out[n - 1][s.substr(i, n)];
  return out;
}

// Python evaluates `a * b + c` as two rounded operations; keep the compiler from fusing them into an
// FMA (-ffp-contract=fast is GCC's default), which could change the last bit and hence a tie between
// two references' sentence scores.
double rounded(double x) {
  volatile double v = x;
  return v;
}

}  // namespace

ChrfStats& ChrfStats::operator+=(const ChrfStats& o) {
  for (std::size_t i = 0; i < v.size(); ++i) v[i] += o.v[i];
  return *this;
}

double chrf_f_score(const ChrfStats& stats, bool eps_smoothing) {
  const double eps = 1e-16;
  const int factor = kChrfBeta * kChrfBeta;
  double score = 0.0, avg_prec = 0.0, avg_rec = 0.0;
  int effective_order = 0;
  for (int i = 0; i < kChrfCharOrder; ++i) {
    const int64_t n_hyp = stats.v[3 * i], n_ref = stats.v[3 * i + 1], n_match = stats.v[3 * i + 2];
    const double prec = n_hyp > 0 ? static_cast<double>(n_match) / static_cast<double>(n_hyp) : eps;
    const double rec = n_ref > 0 ? static_cast<double>(n_match) / static_cast<double>(n_ref) : eps;
    const double denom = rounded(factor * prec) + rec;
    score += denom > 0 ? rounded((1 + factor) * prec * rec / denom) : eps;
    if (n_hyp > 0 && n_ref > 0) {
      avg_prec += prec;
      avg_rec += rec;
      ++effective_order;
    }
  }
  if (eps_smoothing) return 100 * score / kChrfCharOrder;
  if (effective_order == 0) {
    avg_prec = avg_rec = 0.0;
  } else {
    avg_prec /= effective_order;
    avg_rec /= effective_order;
  }
  if (avg_prec + avg_rec != 0.0) {
    double f = (1 + factor) * avg_prec * avg_rec;
    f /= rounded(factor * avg_prec) + avg_rec;
    return 100 * f;
  }
  return 0.0;
}

ChrfStats chrf_segment_stats(std::string_view hyp, const std::vector<std::string_view>& refs, bool eps_smoothing) {
  const std::u32string hyp_chars = code_points_without_space(hyp);
  const CharNgrams hyp_ngrams = char_ngrams(hyp_chars);
  ChrfStats best;
  double best_f = -1.0;
  for (std::string_view ref : refs) {
    const std::u32string ref_chars = code_points_without_space(ref);
    const CharNgrams ref_ngrams = char_ngrams(ref_chars);
    ChrfStats st;
    for (int n = 0; n < kChrfCharOrder; ++n) {  // CHRF._get_match_statistics
      int64_t hyp_count = 0, ref_count = 0, match = 0;
      for (const auto& [ng, count] : hyp_ngrams[n]) {
        hyp_count += count;
        const auto it = ref_ngrams[n].find(ng);
        if (it != ref_ngrams[n].end()) match += std::min(count, it->second);
      }
      for (const auto& [ng, count] : ref_ngrams[n]) ref_count += count;
      st.v[3 * n] = ref_ngrams[n].empty() ? 0 : hyp_count;
      st.v[3 * n + 1] = ref_count;
      st.v[3 * n + 2] = match;
    }
    const double f = chrf_f_score(st, eps_smoothing);
    if (f > best_f) {
      best_f = f;
      best = st;
    }
  }
  return best;
}

ChrfScore corpus_chrf(const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs,
                      bool eps_smoothing) {
  QKV_CHECK(!refs.empty(), "corpus_chrf: no reference stream");
  for (std::size_t k = 0; k < refs.size(); ++k)
    QKV_CHECK(refs[k].size() == hyps.size(), "corpus_chrf: reference stream " << k << " has " << refs[k].size()
                                                 << " segments but there are " << hyps.size() << " hypotheses");
  ChrfStats total;
  std::vector<std::string_view> seg_refs(refs.size());
  for (std::size_t i = 0; i < hyps.size(); ++i) {
    for (std::size_t k = 0; k < refs.size(); ++k) seg_refs[k] = refs[k][i];
    total += chrf_segment_stats(hyps[i], seg_refs, eps_smoothing);
  }
  ChrfScore s;
  s.score = chrf_f_score(total, eps_smoothing);
  s.eps_smoothing = eps_smoothing;
  return s;
}

std::string ChrfScore::format(int width) const {
  char buf[512];
  std::snprintf(buf, sizeof buf, "chrF%d = %.*f", kChrfBeta, width, score);
  return buf;
}

std::string ChrfScore::format_json(int num_refs, int width) const {
  return sacrebleu_json("chrF" + std::to_string(kChrfBeta), score, width, "",
                        {{"nrefs", std::to_string(num_refs)},
                         {"case", "mixed"},
                         {"eff", eps_smoothing ? "no" : "yes"},
                         {"nc", std::to_string(kChrfCharOrder)},
                         {"nw", "0"},
                         {"space", "no"},
                         {"version", kSacrebleuVersion}});
}

}  // namespace qkv::eval
