// Corpus BLEU exactly as sacreBLEU 2.x computes it with its defaults (sacrebleu.metrics.bleu.BLEU()):
// the 13a tokenizer, n-grams up to order 4, smoothing 'exp' (mteval-v13a's), no effective order,
// case-sensitive, statistics summed over the corpus, any number of references per segment (n-gram
// counts clipped by the maximum count over the references, length = the reference length closest
// to the hypothesis', ties to the shorter), brevity penalty exp(1 - ref_len / hyp_len).
//
//   std::vector<std::string> hyps = ...;                    // one segment a line
//   std::vector<std::vector<std::string>> refs = {r0, r1};  // reference streams, each as long as hyps
//   qkv::eval::BleuScore s = qkv::eval::corpus_bleu(hyps, refs);
//   s.format()  // "BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)"
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qkv::eval {

inline constexpr int kBleuMaxOrder = 4;

// The sacreBLEU release these metrics were checked against (tests/python/make_bleu_refs.py); it is
// the "version:" of the signature in the JSON output, as sacreBLEU prints its own version there.
inline constexpr const char* kSacrebleuVersion = "2.6.0";

// Sufficient statistics of one segment or, summed, of a corpus.
struct BleuStats {
  int64_t sys_len = 0;  // hypothesis tokens
  int64_t ref_len = 0;  // closest reference's tokens
  std::array<int64_t, kBleuMaxOrder> correct{};  // clipped n-gram matches, order 1..4
  std::array<int64_t, kBleuMaxOrder> total{};    // hypothesis n-grams, order 1..4

  BleuStats& operator+=(const BleuStats& o);
};

struct BleuScore {
  double score = 0.0;  // 0..100
  std::array<int64_t, kBleuMaxOrder> counts{};
  std::array<int64_t, kBleuMaxOrder> totals{};
  std::array<double, kBleuMaxOrder> precisions{};  // percent; the smoothed value where counts == 0
  double bp = 0.0;
  double ratio = 0.0;  // sys_len / ref_len, 0 when ref_len == 0
  int64_t sys_len = 0;
  int64_t ref_len = 0;

  // sacreBLEU's str(BLEUScore) with the score printed to `width` decimals (2 in str(), the command
  // line's --width defaults to 1): "BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944
  // hyp_len = 17 ref_len = 18)".
  std::string format(int width = 2) const;
  // The precisions and lengths after the score: "82.4/50.0/45.5/37.5 (BP = ... ref_len = 18)".
  std::string verbose() const;
  // What `sacrebleu REF... -m bleu -f json -w WIDTH` prints (without the trailing newline).
  std::string format_json(int num_refs, int width = 2) const;
};

// Statistics of one segment: `hyp` and `refs` are raw lines (tokenized here with tokenize_13a).
BleuStats bleu_segment_stats(std::string_view hyp, const std::vector<std::string_view>& refs);

// BLEU.compute_bleu(correct, total, sys_len, ref_len, smooth_method='exp').
BleuScore compute_bleu(const BleuStats& stats);

// BLEU().corpus_score(hyps, refs): refs[k] is the k-th reference stream, refs[k][i] a reference of
// hyps[i]. Throws qkv::Error when there is no stream or a stream's length differs from hyps'.
BleuScore corpus_bleu(const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs);

// Shared with chrF: Python's repr() of a finite double (shortest round-trip digits, exponent form
// below 1e-4 and from 1e16 on), e.g. 48.53, 0.0, 100.0, 1e-05.
std::string python_float_repr(double v);
// Score.format(width, signature=..., is_json=True): json.dumps(d, indent=1, ensure_ascii=False) of
// name, score rounded to `width` decimals, signature, verbose_score (when non-empty) and the
// signature's key:value pairs, in that order.
std::string sacrebleu_json(const std::string& name, double score, int width, const std::string& verbose,
                           const std::vector<std::pair<std::string, std::string>>& signature);

}  // namespace qkv::eval
