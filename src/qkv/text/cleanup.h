// The text clean-up transformers' slow tokenizers apply after joining pieces (Marian, T5): Python's
// str.strip() and PreTrainedTokenizerBase.clean_up_tokenization, shared so both decode alike.
#pragma once
#include <string>
#include <string_view>

namespace qkv::text {

// Replaces every occurrence of `from`, left to right, as Python's str.replace does.
void replace_all(std::string& s, std::string_view from, std::string_view to);
// Python's str.strip() with no argument: the whitespace str.isspace() names (Unicode White_Space
// plus U+001C..U+001F) removed from both ends. `s` is UTF-8.
std::string python_strip(std::string_view s);
// transformers' clean_up_tokenization: the space before . ? ! , and English contractions removed
// (" ." -> ".", " ' " -> "'", " n't" -> "n't", ...), replacement by replacement in its order.
std::string clean_up_tokenization(std::string s);

}  // namespace qkv::text
