// Fuzz target: parallel text readers (qkv/data/parallel.h), two-file and TSV.
// Input: byte 0 picks the reader (bit 0: TSV) and the empty-line policy (bit 1: Error); the rest
// is the TSV file, or the source and target files separated by the first NUL byte.
// Invariants of an accepted corpus: src, tgt and line_numbers have one entry per kept pair, line
// numbers rise strictly and stay within the file, every kept side is valid UTF-8 without a
// line break and not blank, and kept + dropped pairs = lines in the file.
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/data/parallel.h"
#include "qkv/text/utf8.h"

namespace {

using qkv::data::EmptyLinePolicy;
using qkv::data::ParallelText;

int64_t count_lines(std::string_view text) {
  int64_t lines = 0;
  for (char c : text) lines += c == '\n';
  return lines + (!text.empty() && text.back() != '\n' ? 1 : 0);
}

bool is_blank(std::string_view s) { return s.find_first_not_of(" \t\r\n\v\f") == std::string_view::npos; }

void check_side(const std::string& side) {
  QKV_FUZZ_REQUIRE(qkv::text::valid_utf8(side));
  QKV_FUZZ_REQUIRE(side.find('\n') == std::string::npos);
  QKV_FUZZ_REQUIRE(!is_blank(side));
}

void check_corpus(const ParallelText& p, int64_t lines, bool tsv) {
  QKV_FUZZ_REQUIRE(p.src.size() == p.tgt.size() && p.src.size() == p.line_numbers.size());
  QKV_FUZZ_REQUIRE(p.size() + p.empty_dropped == lines);
  int64_t previous = 0;
  for (size_t i = 0; i < p.src.size(); ++i) {
    QKV_FUZZ_REQUIRE(p.line_numbers[i] > previous && p.line_numbers[i] <= lines);
    previous = p.line_numbers[i];
    check_side(p.src[i]);
    check_side(p.tgt[i]);
    if (tsv) QKV_FUZZ_REQUIRE(p.src[i].find('\t') == std::string::npos && p.tgt[i].find('\t') == std::string::npos);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool tsv = (data[0] & 1) != 0;
  const EmptyLinePolicy policy = (data[0] & 2) != 0 ? EmptyLinePolicy::Error : EmptyLinePolicy::Skip;
  const std::string_view rest = qkv::fuzz::as_text(data + 1, size - 1);
  static const std::string src_path = qkv::fuzz::scratch_path("src.txt");
  static const std::string tgt_path = qkv::fuzz::scratch_path("tgt.txt");
  ParallelText corpus;
  int64_t lines = 0;
  try {
    if (tsv) {
      qkv::fuzz::write_file(src_path, rest);
      lines = count_lines(rest);
      corpus = qkv::data::read_parallel_tsv(src_path, policy);
    } else {
      const auto files = qkv::fuzz::split_at_nul(rest, 2);
      qkv::fuzz::write_file(src_path, files[0]);
      qkv::fuzz::write_file(tgt_path, files.size() > 1 ? files[1] : std::string_view());
      lines = count_lines(files[0]);
      corpus = qkv::data::read_parallel(src_path, tgt_path, policy);
    }
  } catch (const qkv::Error&) {
    return 0;
  }
  check_corpus(corpus, lines, tsv);
  return 0;
}
