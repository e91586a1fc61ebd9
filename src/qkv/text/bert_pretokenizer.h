// BERT's pre-tokenizer (`tokenizers`' BertPreTokenizer): words are split at whitespace (removed)
// and every punctuation character is a word of its own (bert_unicode.h's classes).
#pragma once
#include <string_view>
#include <vector>

namespace qkv::text {

// Appends the words of `text` to `words` (views into `text`, never empty).
void bert_pretokenize(std::string_view text, std::vector<std::string_view>& words);

}  // namespace qkv::text
