// Added tokens ([CLS], [MASK], <|endoftext|>...) cut out of text before the model sees it, as
// `tokenizers`' AddedVocabulary does: leftmost-longest matches, searched on from the end of each
// match (a match dropped by single_word is skipped over too), with the token's options:
//   single_word  matches only where no word character (Rust regex \w) touches it on either side;
//   lstrip       the match takes the whitespace before it (never text already cut);
//   rstrip       the match takes the whitespace after it.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::text {

struct AddedTokenPattern {
  std::string text;  // what is searched for: the token, or its normalized form
  int32_t id = -1;
  bool single_word = false, lstrip = false, rstrip = false;
};

struct TextSegment {
  std::string_view text;
  int32_t added_id = -1;  // >= 0: the segment is this added token; -1: text for the model
};

class AddedTokenMatcher {
 public:
  void add(AddedTokenPattern pattern);
  bool empty() const { return patterns_.empty(); }
  // Appends the pieces of `text` to `out`: added tokens and the (non-empty) text between them.
  void split(std::string_view text, std::vector<TextSegment>& out) const;

 private:
  // The longest pattern starting at `pos`, or nullptr.
  const AddedTokenPattern* longest_at(std::string_view text, size_t pos) const;

  std::vector<AddedTokenPattern> patterns_;
  std::array<bool, 256> first_bytes_{};  // bytes some pattern starts with: the only places to look
};

}  // namespace qkv::text
