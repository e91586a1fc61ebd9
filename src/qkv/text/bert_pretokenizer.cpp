#include "qkv/text/bert_pretokenizer.h"

#include "qkv/text/bert_unicode.h"

namespace qkv::text {

void bert_pretokenize(std::string_view text, std::vector<std::string_view>& words) {
  size_t word_start = 0;
  auto end_word = [&](size_t at) {
    if (at > word_start) words.push_back(text.substr(word_start, at - word_start));
  };
  for (size_t i = 0; i < text.size();) {
    const size_t start = i;
    const char32_t c = bert::next_char(text, i);
    if (bert::is_whitespace(c)) {
      end_word(start);
      word_start = i;
    } else if (bert::is_punctuation(c)) {
      end_word(start);
      words.push_back(text.substr(start, i - start));
      word_start = i;
    }
  }
  end_word(text.size());
}

}  // namespace qkv::text
