// GPT-2's pre-tokenizer: splits text into the pieces byte-level BPE encodes one at a time, exactly
// as the regular expression GPT-2 (and the `tokenizers` ByteLevel pre-tokenizer) uses:
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// \p{L}, \p{N} are Unicode letters and numbers; \s is the White_Space property (as Oniguruma,
// the regex engine of `tokenizers`, reads it). The contractions are case-sensitive ("'S" is not
// one). Every character falls under one alternative, so the pieces cover the text without gaps.
//
// Input that is not well-formed UTF-8 is split too (byte-level BPE encodes any bytes): each
// ill-formed sequence counts as one character that is neither letter, number nor space.
#pragma once
#include <string_view>
#include <vector>

namespace qkv::text {

// Appends the pieces of `text`, in order, to `out`; they are views into `text` and concatenate to it.
void gpt2_pretokenize(std::string_view text, std::vector<std::string_view>& out);

}  // namespace qkv::text
