#include "qkv/text/cleanup.h"

#include <utility>

#include "qkv/text/bert_unicode.h"

namespace qkv::text {

namespace {
bool is_python_space(char32_t c) { return (c >= 0x1C && c <= 0x1F) || bert::is_whitespace(c); }

// The byte offset where the code point ending at `end` starts.
size_t char_start_before(std::string_view s, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  return start;
}
}  // namespace

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

std::string python_strip(std::string_view s) {
  size_t first = 0;
  for (size_t next = 0; first < s.size() && is_python_space(bert::next_char(s, next));) first = next;
  size_t end = s.size();
  while (end > first) {
    size_t start = char_start_before(s, end), at = start;
    if (!is_python_space(bert::next_char(s, at))) break;
    end = start;
  }
  return std::string(s.substr(first, end - first));
}

std::string clean_up_tokenization(std::string s) {
  for (const auto& [from, to] : {std::pair<std::string_view, std::string_view>{" .", "."}, {" ?", "?"}, {" !", "!"},
                                 {" ,", ","}, {" ' ", "'"}, {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"},
                                 {" 've", "'ve"}, {" 're", "'re"}})
    replace_all(s, from, to);
  return s;
}

}  // namespace qkv::text
