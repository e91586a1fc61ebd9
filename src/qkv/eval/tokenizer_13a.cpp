#include "qkv/eval/tokenizer_13a.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "qkv/core/error.h"

namespace qkv::eval {

bool is_python_space(char32_t c) {
  if (c < 0x80) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
  switch (c) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

char32_t decode_utf8(std::string_view s, std::size_t i, std::size_t* len) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  std::size_t n = 1;
  char32_t c = b0;
  if (b0 >= 0xC0 && b0 < 0xE0) {
    n = 2;
    c = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 < 0xF0) {
    n = 3;
    c = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 < 0xF8) {
    n = 4;
    c = b0 & 0x07;
  }
  if (n == 1 || i + n > s.size()) {
    *len = 1;
    return b0;
  }
  for (std::size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) {
      *len = 1;
      return b0;
    }
    c = (c << 6) | (b & 0x3F);
  }
  *len = n;
  return c;
}

std::size_t find_invalid_utf8(std::string_view s) {
  const std::size_t size = s.size();
  auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  auto cont = [&](std::size_t i, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
    return i < size && byte(i) >= lo && byte(i) <= hi;
  };
  std::size_t i = 0;
  while (i < size) {
    const unsigned char b = byte(i);
    if (b < 0x80) {
      ++i;
    } else if (b >= 0xC2 && b <= 0xDF) {
      if (!cont(i + 1)) return i;
      i += 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      const unsigned char lo = b == 0xE0 ? 0xA0 : 0x80;  // no overlongs
      const unsigned char hi = b == 0xED ? 0x9F : 0xBF;  // no surrogates
      if (!cont(i + 1, lo, hi) || !cont(i + 2)) return i;
      i += 3;
    } else if (b >= 0xF0 && b <= 0xF4) {
      const unsigned char lo = b == 0xF0 ? 0x90 : 0x80;  // no overlongs
      const unsigned char hi = b == 0xF4 ? 0x8F : 0xBF;  // nothing above U+10FFFF
      if (!cont(i + 1, lo, hi) || !cont(i + 2) || !cont(i + 3)) return i;
      i += 4;
    } else {
      return i;  // stray continuation byte, C0/C1 (always overlong) or F5..FF
    }
  }
  return std::string_view::npos;
}

std::vector<std::string_view> python_split(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t i = 0, start = std::string_view::npos;
  while (i < s.size()) {
    std::size_t len = 1;
    const char32_t c = decode_utf8(s, i, &len);
    if (is_python_space(c)) {
      if (start != std::string_view::npos) out.push_back(s.substr(start, i - start));
      start = std::string_view::npos;
    } else if (start == std::string_view::npos) {
      start = i;
    }
    i += len;
  }
  if (start != std::string_view::npos) out.push_back(s.substr(start));
  return out;
}

std::string_view python_rstrip(std::string_view s) {
  std::size_t end = 0;  // one past the last non-space character
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t len = 1;
    const char32_t c = decode_utf8(s, i, &len);
    i += len;
    if (!is_python_space(c)) end = i;
  }
  return s.substr(0, end);
}

std::u32string code_points_without_space(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t len = 1;
    const char32_t c = decode_utf8(s, i, &len);
    if (!is_python_space(c)) out.push_back(c);
    i += len;
  }
  return out;
}

namespace {

// Python's str.replace(from, to): left to right, non-overlapping, the replacement not rescanned.
void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::size_t pos = s.find(from);
  if (pos == std::string::npos) return;
  std::string out;
  out.reserve(s.size());
  std::size_t last = 0;
  while (pos != std::string::npos) {
    out.append(s, last, pos - last);
    out.append(to);
    last = pos + from.size();
    pos = s.find(from, last);
  }
  out.append(s, last, std::string::npos);
  s.swap(out);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// [\{-\~\[-\` -\&\(-\+\:-\@\/]: { | } ~  [ \ ] ^ _ `  space ! " # $ % &  ( ) * +  : ; < = > ? @  /
bool is_13a_symbol(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (u >= 0x7B && u <= 0x7E) || (u >= 0x5B && u <= 0x60) || (u >= 0x20 && u <= 0x26) ||
         (u >= 0x28 && u <= 0x2B) || (u >= 0x3A && u <= 0x40) || u == 0x2F;
}

}  // namespace

std::string tokenize_13a(std::string_view line) {
  // Tokenizer13a.__call__: the language-independent part.
  std::string s(python_rstrip(line));
  replace_all(s, "<skipped>", "");
  replace_all(s, "-\n", "");
  replace_all(s, "\n", " ");
  if (s.find('&') != std::string::npos) {
    replace_all(s, "&quot;", "\"");
    replace_all(s, "&amp;", "&");
    replace_all(s, "&lt;", "<");
    replace_all(s, "&gt;", ">");
  }
  s = " " + s + " ";

  // TokenizerRegexp: four re.sub passes, each scanning left to right without overlapping matches.
  std::string t;
  t.reserve(s.size() * 2);
  // 1. ([\{-\~\[-\` -\&\(-\+\:-\@\/]) -> ' \1 '
  for (char c : s) {
    if (is_13a_symbol(c)) {
      t.push_back(' ');
      t.push_back(c);
      t.push_back(' ');
    } else {
      t.push_back(c);
    }
  }
  // 2. ([^0-9])([\.,]) -> '\1 \2 '   (period and comma unless preceded by a digit)
  s.clear();
  for (std::size_t i = 0; i < t.size();) {
    if (i + 1 < t.size() && !is_digit(t[i]) && (t[i + 1] == '.' || t[i + 1] == ',')) {
      s.push_back(t[i]);
      s.push_back(' ');
      s.push_back(t[i + 1]);
      s.push_back(' ');
      i += 2;
    } else {
      s.push_back(t[i++]);
    }
  }
  // 3. ([\.,])([^0-9]) -> ' \1 \2'   (period and comma unless followed by a digit)
  t.clear();
  for (std::size_t i = 0; i < s.size();) {
    if (i + 1 < s.size() && (s[i] == '.' || s[i] == ',') && !is_digit(s[i + 1])) {
      t.push_back(' ');
      t.push_back(s[i]);
      t.push_back(' ');
      t.push_back(s[i + 1]);
      i += 2;
    } else {
      t.push_back(s[i++]);
    }
  }
  // 4. ([0-9])(-) -> '\1 \2 '   (dash when preceded by a digit)
  s.clear();
  for (std::size_t i = 0; i < t.size();) {
    if (i + 1 < t.size() && is_digit(t[i]) && t[i + 1] == '-') {
      s.push_back(t[i]);
      s.push_back(' ');
      s.push_back('-');
      s.push_back(' ');
      i += 2;
    } else {
      s.push_back(t[i++]);
    }
  }
  // ' '.join(line.split())
  std::string out;
  out.reserve(s.size());
  for (std::string_view tok : python_split(s)) {
    if (!out.empty()) out.push_back(' ');
    out.append(tok);
  }
  return out;
}

std::vector<std::string> split_text_lines(std::string_view text, const std::string& name) {
  const std::size_t bad = find_invalid_utf8(text);
  if (bad != std::string_view::npos) {
    const std::size_t line_start = text.rfind('\n', bad);  // text[bad] itself is never '\n'
    const std::size_t begin = line_start == std::string_view::npos ? 0 : line_start + 1;
    std::size_t line_no = 1;
    for (std::size_t i = 0; i < begin; ++i) line_no += text[i] == '\n';
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned>(static_cast<unsigned char>(text[bad])));
    QKV_CHECK(false, name << ":" << line_no << ": invalid UTF-8 (byte " << hex << " at column " << bad - begin + 1
                          << ")");
  }
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    lines.emplace_back(python_rstrip(text.substr(start, end - start)));
    start = end + 1;
  }
  return lines;
}

std::vector<std::string> read_text_lines(const std::string& path) {
  // A directory opens as a stream on Linux and only fails at the first read.
  std::error_code ec;
  QKV_CHECK(!std::filesystem::is_directory(path, ec), path << ": is a directory, expected a text file");
  std::ifstream in(path, std::ios::binary);
  QKV_CHECK(in, "cannot open " << path << ": " << std::strerror(errno));
  // istream::read, unlike istreambuf_iterator, turns a failing read into badbit instead of
  // letting libstdc++'s std::ios_base::failure escape.
  std::string text;
  char chunk[1 << 16];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) text.append(chunk, static_cast<std::size_t>(in.gcount()));
  QKV_CHECK(!in.bad(), "cannot read " << path << ": " << std::strerror(errno));
  return split_text_lines(text, path);
}

}  // namespace qkv::eval
