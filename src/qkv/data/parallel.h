// Line-aligned parallel text: a source and a target file (line i of one translates line i of the
// other), or one TSV file with a source and a target column.
//
// Every reader checks, and throws qkv::Error naming file:line on failure:
//   - the file opens                            "a.es: cannot open file"
//   - it is not a directory                     "a.es: is a directory, expected a text file"
//   - both files have the same number of lines  "a.es has 100 lines but a.en has 99"
//   - every line is strict UTF-8                "a.es:7: invalid UTF-8 at byte 12"
//     (byte = 1-based offset in the line; overlong forms, surrogates and code points above
//     U+10FFFF are invalid)
//   - TSV lines have exactly one tab            "a.tsv:3: expected 2 tab-separated columns, found 3"
//   - empty lines, per EmptyLinePolicy          "a.en:5: empty line" / "a.tsv:5: empty target column"
// A trailing '\r' (CRLF files) and a UTF-8 byte-order mark at the start of a file are stripped.
// A line (or TSV column) is empty if it holds nothing or only ASCII whitespace. In a TSV file a
// completely empty line counts as an empty pair (policy applies), not as a missing tab.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::data {

enum class EmptyLinePolicy {
  Skip,   // drop the pair when either side is empty, and count it in ParallelText::empty_dropped
  Error,  // throw, naming file:line
};

struct ParallelText {
  std::vector<std::string> src, tgt;  // kept pairs, text without the line break
  std::vector<int64_t> line_numbers;  // 1-based input line of each kept pair
  int64_t empty_dropped = 0;          // pairs dropped by EmptyLinePolicy::Skip

  int64_t size() const { return static_cast<int64_t>(src.size()); }
};

// True when `s` holds nothing or only ASCII whitespace: what the readers count as an empty line.
bool is_blank(std::string_view s);

ParallelText read_parallel(const std::string& src_path, const std::string& tgt_path,
                           EmptyLinePolicy policy = EmptyLinePolicy::Skip);

// One pair a line: "source<TAB>target".
ParallelText read_parallel_tsv(const std::string& tsv_path, EmptyLinePolicy policy = EmptyLinePolicy::Skip);

}  // namespace qkv::data
