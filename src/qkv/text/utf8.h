// UTF-8 validation and a checked line reader for text corpora (one sentence a line).
//
// Validation is strict (Unicode Standard, Table 3-7 "Well-Formed UTF-8 Byte Sequences"): overlong
// forms, UTF-16 surrogates (U+D800..U+DFFF), code points above U+10FFFF, stray continuation bytes,
// the bytes C0, C1, F5..FF and sequences cut short are all rejected. U+0000 and noncharacters are
// accepted.
#pragma once
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::text {

// True if `s` is well-formed UTF-8. Otherwise false, and *bad_offset (if not null) is the 0-based
// byte offset of the first byte of the first ill-formed sequence.
bool valid_utf8(std::string_view s, size_t* bad_offset = nullptr);

// Throws qkv::Error "PATH:LINE: invalid UTF-8 at byte N" (N: 0-based byte offset in the line) if
// `line` is not well-formed UTF-8.
void check_utf8_line(std::string_view line, const std::string& path, int64_t line_no);

// Streams a text file line by line: strips the '\n' and one trailing '\r' (CRLF files), strips a
// UTF-8 byte order mark at the start of the file, and checks each line with check_utf8_line.
// A missing or unreadable file, a directory, or a read error is a qkv::Error naming the path.
// A final line without '\n' is returned; a trailing '\n' does not produce an extra empty line.
class TextLineReader {
 public:
  explicit TextLineReader(const std::string& path);
  // Reads the next line into `line`; false at end of file.
  bool next(std::string& line);
  // 1-based number of the line last returned by next() (0 before the first).
  int64_t line_no() const { return line_no_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ifstream in_;
  int64_t line_no_ = 0;
};

// All lines of a file, read with TextLineReader.
std::vector<std::string> read_text_lines(const std::string& path);
// The same, with "-" meaning standard input (named "<stdin>" in messages; CR stripped, UTF-8 checked).
std::vector<std::string> read_text_lines_or_stdin(const std::string& path);

}  // namespace qkv::text
