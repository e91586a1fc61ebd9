// Fuzz target: the 13a tokenizer, corpus BLEU and chrF (qkv/eval/*.h) on fuzzed text.
// Input: hypothesis text, then one or two reference texts, separated by NUL bytes; each text is
// split into lines as the `qkv bleu` command reads a file (invalid UTF-8 is refused there with a
// qkv::Error). Streams are cut to the shortest, as the metrics need equal line counts.
// Invariants: tokens are separated by single spaces and stay valid UTF-8; BLEU and chrF scores
// lie in [0, 100] (up to rounding) and are never NaN, every n-gram match count is at most its
// total, and formatting the scores works; a corpus scored against itself has chrF 100 whenever
// it has a non-space character (0 otherwise).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/eval/bleu.h"
#include "qkv/eval/chrf.h"
#include "qkv/eval/tokenizer_13a.h"

namespace {

using Lines = std::vector<std::string>;

void check_tokenizer(const std::string& line) {
  const std::string tokens = qkv::eval::tokenize_13a(line);
  QKV_FUZZ_REQUIRE(tokens.find("  ") == std::string::npos);
  QKV_FUZZ_REQUIRE(tokens.empty() || (tokens.front() != ' ' && tokens.back() != ' '));
  QKV_FUZZ_REQUIRE(qkv::eval::find_invalid_utf8(tokens) == std::string::npos);
}

// Scores are computed as sacreBLEU does, in floating point: a perfect BLEU can come out as
// 100.00000000000004, there as here.
bool in_score_range(double score) { return !std::isnan(score) && score >= 0.0 && score <= 100.0 + 1e-9; }

void check_bleu(const Lines& hyps, const std::vector<Lines>& refs) {
  const qkv::eval::BleuScore bleu = qkv::eval::corpus_bleu(hyps, refs);
  QKV_FUZZ_REQUIRE(in_score_range(bleu.score));
  for (int n = 0; n < qkv::eval::kBleuMaxOrder; ++n) {
    QKV_FUZZ_REQUIRE(bleu.counts[n] >= 0 && bleu.counts[n] <= bleu.totals[n]);
    QKV_FUZZ_REQUIRE(in_score_range(bleu.precisions[n]));
  }
  QKV_FUZZ_REQUIRE(!bleu.format().empty() && !bleu.format_json(static_cast<int>(refs.size())).empty());
}

void check_chrf(const Lines& hyps, const std::vector<Lines>& refs) {
  for (bool eps_smoothing : {false, true}) {
    const qkv::eval::ChrfScore chrf = qkv::eval::corpus_chrf(hyps, refs, eps_smoothing);
    QKV_FUZZ_REQUIRE(in_score_range(chrf.score));
    QKV_FUZZ_REQUIRE(!chrf.format().empty() && !chrf.format_json(static_cast<int>(refs.size())).empty());
  }
}

void check_self_chrf(const Lines& hyps) {
  bool has_character = false;
  for (const std::string& line : hyps) has_character |= !qkv::eval::code_points_without_space(line).empty();
  const double score = qkv::eval::corpus_chrf(hyps, {hyps}).score;
  QKV_FUZZ_REQUIRE(has_character ? std::fabs(score - 100.0) < 1e-9 : score == 0.0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto texts = qkv::fuzz::split_at_nul(qkv::fuzz::as_text(data, size), 3);
  std::vector<Lines> streams;
  try {
    for (size_t i = 0; i < texts.size(); ++i)
      streams.push_back(qkv::eval::split_text_lines(texts[i], "text" + std::to_string(i)));
  } catch (const qkv::Error&) {
    return 0;
  }
  size_t lines = streams[0].size();
  for (const Lines& s : streams) lines = std::min(lines, s.size());
  for (Lines& s : streams) s.resize(lines);
  for (const Lines& s : streams)
    for (const std::string& line : s) check_tokenizer(line);
  const Lines hyps = streams[0];
  std::vector<Lines> refs(streams.begin() + 1, streams.end());
  if (refs.empty()) refs.push_back(hyps);
  check_bleu(hyps, refs);
  check_chrf(hyps, refs);
  check_self_chrf(hyps);
  return 0;
}
