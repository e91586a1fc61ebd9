#include "qkv/data/parallel.h"

#include <filesystem>
#include <fstream>
#include <string_view>

#include "qkv/core/error.h"
#include "qkv/text/utf8.h"

namespace qkv::data {

bool is_blank(std::string_view s) {
  for (char c : s)
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n' && c != '\v' && c != '\f') return false;
  return true;
}

namespace {

// All lines of a file, '\r' and a leading BOM stripped, each checked for strict UTF-8.
std::vector<std::string> read_utf8_lines(const std::string& path) {
  // A directory opens as a stream on Linux and only fails at the first read, as "read error".
  std::error_code ec;
  QKV_CHECK(!std::filesystem::is_directory(path, ec), path << ": is a directory, expected a text file");
  std::ifstream in(path, std::ios::binary);
  QKV_CHECK(in, path << ": cannot open file");
  std::vector<std::string> lines;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    size_t skipped = 0;  // bytes removed from the front, so reported offsets match the raw file
    if (line_no == 1 && line.starts_with("\xEF\xBB\xBF")) {
      line.erase(0, 3);
      skipped = 3;
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    size_t bad = 0;
    QKV_CHECK(text::valid_utf8(line, &bad), path << ":" << line_no << ": invalid UTF-8 at byte " << bad + skipped + 1);
    lines.push_back(std::move(line));
  }
  QKV_CHECK(!in.bad(), path << ": read error after line " << line_no);
  return lines;
}

}  // namespace

ParallelText read_parallel(const std::string& src_path, const std::string& tgt_path, EmptyLinePolicy policy) {
  std::vector<std::string> src = read_utf8_lines(src_path);
  std::vector<std::string> tgt = read_utf8_lines(tgt_path);
  QKV_CHECK(src.size() == tgt.size(),
            src_path << " has " << src.size() << " lines but " << tgt_path << " has " << tgt.size());
  ParallelText out;
  out.src.reserve(src.size());
  out.tgt.reserve(src.size());
  out.line_numbers.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    const int64_t line_no = static_cast<int64_t>(i) + 1;
    const bool src_empty = is_blank(src[i]), tgt_empty = is_blank(tgt[i]);
    if (src_empty || tgt_empty) {
      QKV_CHECK(policy == EmptyLinePolicy::Skip, (src_empty ? src_path : tgt_path) << ":" << line_no << ": empty line");
      ++out.empty_dropped;
      continue;
    }
    out.src.push_back(std::move(src[i]));
    out.tgt.push_back(std::move(tgt[i]));
    out.line_numbers.push_back(line_no);
  }
  return out;
}

ParallelText read_parallel_tsv(const std::string& tsv_path, EmptyLinePolicy policy) {
  std::vector<std::string> lines = read_utf8_lines(tsv_path);
  ParallelText out;
  for (size_t i = 0; i < lines.size(); ++i) {
    const int64_t line_no = static_cast<int64_t>(i) + 1;
    const std::string& line = lines[i];
    if (line.empty()) {
      QKV_CHECK(policy == EmptyLinePolicy::Skip, tsv_path << ":" << line_no << ": empty line");
      ++out.empty_dropped;
      continue;
    }
    const size_t tab = line.find('\t');
    size_t tabs = 0;
    for (char c : line) tabs += c == '\t';
    QKV_CHECK(tabs == 1, tsv_path << ":" << line_no << ": expected 2 tab-separated columns, found " << tabs + 1);
    std::string_view src(line.data(), tab), tgt(line.data() + tab + 1, line.size() - tab - 1);
    const bool src_empty = is_blank(src), tgt_empty = is_blank(tgt);
    if (src_empty || tgt_empty) {
      QKV_CHECK(policy == EmptyLinePolicy::Skip,
                tsv_path << ":" << line_no << ": empty " << (src_empty ? "source" : "target") << " column");
      ++out.empty_dropped;
      continue;
    }
    out.src.emplace_back(src);
    out.tgt.emplace_back(tgt);
    out.line_numbers.push_back(line_no);
  }
  return out;
}

}  // namespace qkv::data
