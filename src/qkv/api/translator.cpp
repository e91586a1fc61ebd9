#include "qkv/api/translator.h"

#include <algorithm>
#include <filesystem>

#include "qkv/models/checkpoint.h"

namespace qkv::api {

Translator::Translator(const std::string& checkpoint_dir) : dir_(checkpoint_dir) {
  models::check_checkpoint_dir(checkpoint_dir);
  model_ = models::load_seq2seq(checkpoint_dir);
  model_->eval();
  const std::string s = checkpoint_dir + "/" + models::kSourceSpmFile, t = checkpoint_dir + "/" + models::kTargetSpmFile;
  if (std::filesystem::exists(s) && std::filesystem::exists(t)) {
    src_spm_ = std::make_unique<text::SentencePiece>(s);
    tgt_spm_ = std::make_unique<text::SentencePiece>(t);
  }
}

Translator::~Translator() = default;

data::IdLine Translator::encode_source(const std::string& text, const TranslationOptions& options,
                                       const std::string& where, bool* truncated) const {
  QKV_CHECK(src_spm_, dir_ << ": no source.spm.model / target.spm.model for text input; give token ids instead");
  data::IdLine ids = src_spm_->encode(text);
  const int64_t max_len = model_->config().max_seq_length;
  if (truncated) *truncated = false;
  if (static_cast<int64_t>(ids.size()) > max_len) {
    QKV_CHECK(options.truncate, where << ": " << ids.size() << " tokens exceed the model's max_seq_length " << max_len
                                      << " (use --too-long truncate)");
    ids.resize(static_cast<size_t>(max_len));
    if (truncated) *truncated = true;
  }
  return ids;
}

std::string Translator::decode_target(const std::vector<int32_t>& tokens) const {
  QKV_CHECK(tgt_spm_, dir_ << ": no target.spm.model to decode with");
  return tgt_spm_->decode(tokens);
}

std::string Translator::source_piece(int32_t id) const {
  return src_spm_ && id >= 0 && id < src_spm_->vocab_size() ? src_spm_->piece(id) : std::to_string(id);
}

std::string Translator::target_piece(int32_t id) const {
  return tgt_spm_ && id >= 0 && id < tgt_spm_->vocab_size() ? tgt_spm_->piece(id) : std::to_string(id);
}

std::vector<std::vector<Translation>> Translator::translate_ids(const std::vector<data::IdLine>& sources,
                                                                const TranslationOptions& options,
                                                                const ProgressCallback& progress) const {
  QKV_CHECK(options.batch_size >= 1, "batch_size must be at least 1, got " << options.batch_size);
  decoding::validate_search_options(options.search, model_->config().tgt_vocab_size);
  // Batches of similar length; results go back to input order.
  std::vector<size_t> order;
  for (size_t i = 0; i < sources.size(); ++i)
    if (!sources[i].empty()) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sources[a].size() < sources[b].size(); });
  const bool greedy = options.search.beam_size == 1 && options.search.n_best == 1;
  std::vector<std::vector<Translation>> results(sources.size());
  const auto batch_size = static_cast<size_t>(options.batch_size);
  // Several batches: pack the decoder once for all of them, not once per batch. The encoder's
  // packs live only while a batch is encoded: kept, they would add their size to decoding's peak.
  decoding::SearchOptions search = options.search;
  if (search.use_cache && order.size() > batch_size && !search.decoder_packs)
    search.decoder_packs = model_->pack_decoder_linears(search.precision);
  // And the batches write their keys and values into the same storage (faulted in once, not once per batch).
  if (search.use_cache && order.size() > batch_size && !search.kv_storage)
    search.kv_storage = std::make_shared<nn::KVCacheStorage>();
  for (size_t begin = 0; begin < order.size(); begin += batch_size) {
    const size_t end = std::min(order.size(), begin + batch_size);
    std::vector<data::IdLine> batch;
    for (size_t i = begin; i < end; ++i) batch.push_back(sources[order[i]]);
    std::vector<std::vector<decoding::Hypothesis>> found;
    if (greedy)
      for (auto& h : decoding::greedy_search(*model_, batch, search)) found.push_back({std::move(h)});
    else
      found = decoding::beam_search(*model_, batch, search);
    for (size_t i = begin; i < end; ++i)
      for (auto& h : found[i - begin]) {
        Translation t;
        t.text = tgt_spm_ ? tgt_spm_->decode(h.tokens) : "";
        t.tokens = std::move(h.tokens);
        t.log_prob = h.log_prob;
        t.score = h.score;
        t.attention = std::move(h.attention);
        results[order[i]].push_back(std::move(t));
      }
    if (progress) progress(static_cast<int64_t>(end), static_cast<int64_t>(order.size()));
  }
  return results;
}

std::vector<std::vector<Translation>> Translator::translate(const std::vector<std::string>& texts,
                                                            const TranslationOptions& options,
                                                            const ProgressCallback& progress) const {
  std::vector<data::IdLine> sources;
  sources.reserve(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) sources.push_back(encode_source(texts[i], options, "line " + std::to_string(i + 1)));
  return translate_ids(sources, options, progress);
}

}  // namespace qkv::api
