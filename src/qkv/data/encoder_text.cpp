#include "qkv/data/encoder_text.h"

#include "qkv/core/error.h"

namespace qkv::data {

namespace {
std::vector<int32_t> with_specials(std::vector<int32_t> tokens, const models::TransformerConfig& c, int64_t max_tokens,
                                   TooLong too_long, const std::string& where) {
  QKV_CHECK(max_tokens >= 2, "encoder_ids: max_tokens " << max_tokens << " leaves no room for [CLS] and [SEP]");
  const int64_t room = max_tokens - 2;
  if (static_cast<int64_t>(tokens.size()) > room) {
    QKV_CHECK(too_long == TooLong::Truncate, where << ": " << tokens.size() + 2 << " tokens with [CLS] and [SEP], more than "
                                                   << max_tokens << " (use --too-long truncate to cut it)");
    tokens.resize(static_cast<size_t>(room));
  }
  std::vector<int32_t> ids;
  ids.reserve(tokens.size() + 2);
  ids.push_back(c.cls_id);
  ids.insert(ids.end(), tokens.begin(), tokens.end());
  ids.push_back(c.sep_id);
  return ids;
}
}  // namespace

std::vector<int32_t> encoder_ids(const text::Tokenizer& tokenizer, const models::TransformerConfig& config,
                                 std::string_view line, int64_t max_tokens, TooLong too_long, const std::string& where) {
  std::vector<int32_t> tokens = tokenizer.encode(line);
  for (const int32_t id : tokens)
    QKV_CHECK(id >= 0 && id < config.tgt_vocab_size,
              where << ": the tokenizer gave id " << id << ", outside the model's vocab_size " << config.tgt_vocab_size);
  return with_specials(std::move(tokens), config, max_tokens, too_long, where);
}

std::vector<int32_t> encoder_ids_from_ids(std::vector<int32_t> ids, const models::TransformerConfig& config,
                                          int64_t max_tokens, TooLong too_long, const std::string& where) {
  if (ids.size() >= 2 && ids.front() == config.cls_id && ids.back() == config.sep_id) {
    ids.erase(ids.begin());
    ids.pop_back();
  }
  return with_specials(std::move(ids), config, max_tokens, too_long, where);
}

}  // namespace qkv::data
