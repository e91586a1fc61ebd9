#include "qkv/text/utf8.h"

#include <iostream>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "qkv/core/error.h"

namespace qkv::text {

namespace {

inline bool is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

}  // namespace

bool valid_utf8(std::string_view s, size_t* bad_offset) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    // ASCII fast path: 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      if (w & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= n) break;
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;       // overlong
      else if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;       // overlong
      else if (c == 0xF4) hi = 0x8F;  // > U+10FFFF
    }
    bool ok = len != 0 && i + len <= n && p[i + 1] >= lo && p[i + 1] <= hi;
    for (size_t k = 2; ok && k < len; ++k) ok = is_cont(p[i + k]);
    if (!ok) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    i += len;
  }
  return true;
}

void check_utf8_line(std::string_view line, const std::string& path, int64_t line_no) {
  size_t bad = 0;
  QKV_CHECK(valid_utf8(line, &bad), path << ":" << line_no << ": invalid UTF-8 at byte " << bad);
}

TextLineReader::TextLineReader(const std::string& path) : path_(path) {
  std::error_code ec;
  QKV_CHECK(!std::filesystem::is_directory(path, ec), path << ": is a directory, expected a text file");
  if (!std::filesystem::exists(path, ec)) throw NotFoundError(path + ": cannot open text file: No such file or directory");
  in_.open(path, std::ios::binary);
  QKV_CHECK(in_.is_open(), path << ": cannot open text file: " << std::strerror(errno));
}

bool TextLineReader::next(std::string& line) {
  if (!std::getline(in_, line)) {
    QKV_CHECK(!in_.bad(), path_ << ": read error after line " << line_no_);
    return false;
  }
  ++line_no_;
  if (line_no_ == 1 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  check_utf8_line(line, path_, line_no_);
  return true;
}

std::vector<std::string> read_text_lines(const std::string& path) {
  TextLineReader reader(path);
  std::vector<std::string> lines;
  std::string line;
  while (reader.next(line)) lines.push_back(line);
  return lines;
}

std::vector<std::string> read_text_lines_or_stdin(const std::string& path) {
  if (path != "-") return read_text_lines(path);
  std::vector<std::string> lines;
  std::string line;
  int64_t n = 0;
  while (std::getline(std::cin, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    check_utf8_line(line, "<stdin>", n);
    lines.push_back(line);
  }
  return lines;
}

}  // namespace qkv::text
