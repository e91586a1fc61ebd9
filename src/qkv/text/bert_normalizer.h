// BERT's normalizer (`tokenizers`' BertNormalizer), in its order: clean_text, handle_chinese_chars,
// strip_accents, lowercase. Character classes: bert_unicode.h.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace qkv::text {

struct BertNormalizerOptions {
  bool clean_text = true;            // drop U+0000, U+FFFD and control characters; whitespace -> ' '
  bool handle_chinese_chars = true;  // a space on each side of every CJK ideograph
  std::optional<bool> strip_accents; // NFD, then nonspacing marks removed; unset: follow lowercase
  bool lowercase = true;             // Rust's char::to_lowercase, character by character

  bool strips_accents() const { return strip_accents.value_or(lowercase); }
};

// Appends the normalized `text` to `out`. Ill-formed UTF-8 reads as U+FFFD.
void bert_normalize(std::string_view text, const BertNormalizerOptions& options, std::string& out);

}  // namespace qkv::text
