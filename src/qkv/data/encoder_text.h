// Text into the ids an encoder-only model reads: [CLS] tokens [SEP], as BERT's tokenizers build a
// single sentence. Too long a sentence is cut to `max_tokens` (specials included: the tokens are
// truncated and [SEP] still ends the row, as Hugging Face truncation does) or refused, naming the line.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "qkv/models/config.h"
#include "qkv/text/tokenizer.h"

namespace qkv::data {

enum class TooLong { Truncate, Error };

// `where` names the line in messages ("FILE:3").
std::vector<int32_t> encoder_ids(const text::Tokenizer& tokenizer, const models::TransformerConfig& config,
                                 std::string_view line, int64_t max_tokens, TooLong too_long, const std::string& where);
// Ids given as such (--ids): [CLS] / [SEP] are added unless the row already starts and ends with them.
std::vector<int32_t> encoder_ids_from_ids(std::vector<int32_t> ids, const models::TransformerConfig& config,
                                          int64_t max_tokens, TooLong too_long, const std::string& where);

}  // namespace qkv::data
