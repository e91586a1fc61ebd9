#include "qkv/eval/bleu.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "qkv/core/error.h"
#include "qkv/eval/tokenizer_13a.h"

namespace qkv::eval {

namespace {

// Every n-gram (order 1..kBleuMaxOrder) of a tokenized line, keyed by its text: tokenize_13a joins
// tokens with single spaces and no token holds a space, so an n-gram is a substring of the line and
// its text tells its order too.
using NgramCounts = std::unordered_map<std::string_view, int64_t>;

int64_t count_ngrams(const std::string& tokenized, NgramCounts& counts) {
  std::vector<std::size_t> begin, end;
  for (std::size_t i = 0; i < tokenized.size();) {
    std::size_t j = tokenized.find(' ', i);
    if (j == std::string::npos) j = tokenized.size();
    begin.push_back(i);
    end.push_back(j);
    i = j + 1;
  }
  const auto len = static_cast<int64_t>(begin.size());
  for (int64_t n = 1; n <= kBleuMaxOrder; ++n)
    for (int64_t i = 0; i + n <= len; ++i)
      ++counts[std::string_view(tokenized).substr(begin[i], end[i + n - 1] - begin[i])];
  return len;
}

int ngram_order(std::string_view ngram) {
  int n = 1;
  for (char c : ngram) n += c == ' ';
  return n;
}

// BLEU._get_closest_ref_len: the closest length, ties to the shorter.
int64_t closest_ref_len(int64_t hyp_len, const std::vector<int64_t>& ref_lens) {
  int64_t closest_diff = -1, closest_len = -1;
  for (int64_t ref_len : ref_lens) {
    const int64_t diff = std::llabs(hyp_len - ref_len);
    if (closest_diff == -1 || diff < closest_diff) {
      closest_diff = diff;
      closest_len = ref_len;
    } else if (diff == closest_diff && ref_len < closest_len) {
      closest_len = ref_len;
    }
  }
  return closest_len;
}

// sacrebleu.utils.my_log
double my_log(double x) { return x == 0.0 ? -9999999999.0 : std::log(x); }

std::string fixed(double v, int decimals) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace

BleuStats& BleuStats::operator+=(const BleuStats& o) {
  sys_len += o.sys_len;
  ref_len += o.ref_len;
  for (int n = 0; n < kBleuMaxOrder; ++n) {
    correct[n] += o.correct[n];
    total[n] += o.total[n];
  }
  return *this;
}

BleuStats bleu_segment_stats(std::string_view hyp, const std::vector<std::string_view>& refs) {
  // BLEU._extract_reference_info: n-gram counts merged by max over the references.
  std::vector<std::string> ref_tokens;
  ref_tokens.reserve(refs.size());
  std::vector<int64_t> ref_lens;
  NgramCounts ref_ngrams;
  for (std::string_view ref : refs) {
    ref_tokens.push_back(tokenize_13a(ref));
    NgramCounts these;
    ref_lens.push_back(count_ngrams(ref_tokens.back(), these));
    for (const auto& [ngram, count] : these) {
      int64_t& merged = ref_ngrams[ngram];
      if (count > merged) merged = count;
    }
  }
  // BLEU._compute_segment_statistics
  const std::string hyp_tokens = tokenize_13a(hyp);
  NgramCounts hyp_ngrams;
  BleuStats s;
  s.sys_len = count_ngrams(hyp_tokens, hyp_ngrams);
  s.ref_len = closest_ref_len(s.sys_len, ref_lens);
  for (const auto& [ngram, count] : hyp_ngrams) {
    const int n = ngram_order(ngram) - 1;
    s.total[n] += count;
    const auto it = ref_ngrams.find(ngram);
    if (it != ref_ngrams.end()) s.correct[n] += std::min(count, it->second);
  }
  return s;
}

BleuScore compute_bleu(const BleuStats& st) {
  BleuScore r;
  r.counts = st.correct;
  r.totals = st.total;
  r.sys_len = st.sys_len;
  r.ref_len = st.ref_len;
  r.ratio = st.ref_len ? static_cast<double>(st.sys_len) / static_cast<double>(st.ref_len) : 0.0;
  r.bp = 1.0;
  if (st.sys_len < st.ref_len)
    r.bp = st.sys_len > 0 ? std::exp(1.0 - static_cast<double>(st.ref_len) / static_cast<double>(st.sys_len)) : 0.0;
  r.precisions.fill(0.0);

  bool any_correct = false;
  for (int64_t c : st.correct) any_correct = any_correct || c != 0;
  if (!any_correct) {  // early stop (sacrebleu #141): score 0, precisions 0
    r.score = 0.0;
    return r;
  }
  double smooth_mteval = 1.0;
  for (int n = 0; n < kBleuMaxOrder; ++n) {
    if (st.total[n] == 0) break;
    if (st.correct[n] == 0) {
      smooth_mteval *= 2;
      r.precisions[n] = 100.0 / (smooth_mteval * static_cast<double>(st.total[n]));
    } else {
      r.precisions[n] = 100.0 * static_cast<double>(st.correct[n]) / static_cast<double>(st.total[n]);
    }
  }
  double log_sum = 0.0;  // summed left to right like Python's sum() (3.11; 3.12+ compensates)
  for (int n = 0; n < kBleuMaxOrder; ++n) log_sum += my_log(r.precisions[n]);
  r.score = r.bp * std::exp(log_sum / kBleuMaxOrder);
  return r;
}

BleuScore corpus_bleu(const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs) {
  QKV_CHECK(!refs.empty(), "corpus_bleu: no reference stream");
  for (std::size_t k = 0; k < refs.size(); ++k)
    QKV_CHECK(refs[k].size() == hyps.size(), "corpus_bleu: reference stream " << k << " has " << refs[k].size()
                                                 << " segments but there are " << hyps.size() << " hypotheses");
  BleuStats total;
  std::vector<std::string_view> seg_refs(refs.size());
  for (std::size_t i = 0; i < hyps.size(); ++i) {
    for (std::size_t k = 0; k < refs.size(); ++k) seg_refs[k] = refs[k][i];
    total += bleu_segment_stats(hyps[i], seg_refs);
  }
  return compute_bleu(total);
}

std::string BleuScore::verbose() const {
  std::string s;
  for (int n = 0; n < kBleuMaxOrder; ++n) {
    if (n) s += '/';
    s += fixed(precisions[n], 1);
  }
  s += " (BP = " + fixed(bp, 3) + " ratio = " + fixed(ratio, 3) + " hyp_len = " + std::to_string(sys_len) +
       " ref_len = " + std::to_string(ref_len) + ")";
  return s;
}

std::string BleuScore::format(int width) const { return "BLEU = " + fixed(score, width) + " " + verbose(); }

std::string BleuScore::format_json(int num_refs, int width) const {
  return sacrebleu_json("BLEU", score, width, verbose(),
                        {{"nrefs", std::to_string(num_refs)},
                         {"case", "mixed"},
                         {"eff", "no"},
                         {"tok", "13a"},
                         {"smooth", "exp"},
                         {"version", kSacrebleuVersion}});
}

std::string python_float_repr(double v) {
  if (v == 0.0) return std::signbit(v) ? "-0.0" : "0.0";
  std::string sign;
  if (v < 0) {
    sign = "-";
    v = -v;
  }
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);  // shortest: d.ddde[+-]XX
  const std::string sci(buf, res.ptr);
  const std::size_t e_pos = sci.find('e');
  std::string digits = sci.substr(0, e_pos);
  if (digits.size() > 1) digits.erase(1, 1);  // drop the '.'
  const int exp10 = std::atoi(sci.c_str() + e_pos + 1);
  const int decpt = exp10 + 1;  // digits = 0.DIGITS * 10^decpt
  const int nd = static_cast<int>(digits.size());
  std::string out;
  if (decpt <= -4 || decpt > 16) {
    out = digits.substr(0, 1);
    if (nd > 1) {
      out += '.';
      out.append(digits, 1, std::string::npos);
    }
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += e;
  } else if (decpt <= 0) {
    out = "0.";
    out.append(static_cast<std::size_t>(-decpt), '0');
    out += digits;
  } else if (decpt >= nd) {
    out = digits + std::string(decpt - nd, '0') + ".0";
  } else {
    out = digits.substr(0, decpt);
    out += '.';
    out.append(digits, decpt, std::string::npos);
  }
  return sign + out;
}

std::string sacrebleu_json(const std::string& name, double score, int width, const std::string& verbose,
                           const std::vector<std::pair<std::string, std::string>>& signature) {
  std::string sig;
  for (const auto& [k, v] : signature) sig += (sig.empty() ? "" : "|") + k + ":" + v;
  const double rounded = std::strtod(fixed(score, width).c_str(), nullptr);  // float(f"{score:.{width}f}")
  std::string out = "{\n \"name\": " + json_string(name) + ",\n \"score\": " + python_float_repr(rounded) +
                    ",\n \"signature\": " + json_string(sig);
  if (!verbose.empty()) out += ",\n \"verbose_score\": " + json_string(verbose);
  for (const auto& [k, v] : signature) out += ",\n " + json_string(k) + ": " + json_string(v);
  return out + "\n}";
}

}  // namespace qkv::eval
