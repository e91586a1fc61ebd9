#include "qkv/api/translator.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/models/checkpoint.h"
#include "qkv/text/cleanup.h"
#include "qkv/text/marian_tokenizer.h"
#include "qkv/text/t5_tokenizer.h"

namespace qkv::api {

namespace {
// A tokenizer.json of a translation model (BART's) as transformers decodes an output with
// skip_special_tokens=True: its added tokens (<s>, </s>, <pad>, <unk>, <mask>: all special in BART's
// file) are left out of the text.
// With clean_up (tokenizer_config.json's clean_up_tokenization_spaces, false when absent as in
// transformers 4.47), the decoded text gets transformers' clean_up_tokenization.
class WithoutAddedTokensInOutput final : public text::Tokenizer {
 public:
  WithoutAddedTokensInOutput(std::unique_ptr<text::Tokenizer> inner, bool clean_up)
      : inner_(std::move(inner)), clean_up_(clean_up) {}
  std::vector<int32_t> encode(std::string_view text) const override { return inner_->encode(text); }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::vector<int32_t> kept;
    for (const int32_t id : ids)
      if (id < 0 || id >= inner_->vocab_size() || inner_->special_token_id(inner_->id_to_token(id)) != id) kept.push_back(id);
    const std::string text = inner_->decode(kept);
    return clean_up_ ? text::clean_up_tokenization(text) : text;
  }
  int64_t vocab_size() const override { return inner_->vocab_size(); }
  std::string id_to_token(int32_t id) const override { return inner_->id_to_token(id); }
  std::vector<int32_t> with_special_tokens(std::vector<int32_t> ids) const override {
    return inner_->with_special_tokens(std::move(ids));
  }
  int32_t special_token_id(std::string_view token) const override { return inner_->special_token_id(token); }

 private:
  std::unique_ptr<text::Tokenizer> inner_;
  bool clean_up_;
};

// tokenizer_config.json's clean_up_tokenization_spaces in `dir` (false without the file or field).
bool clean_up_tokenization_spaces(const std::string& dir) {
  const std::string path = dir + "/tokenizer_config.json";
  if (!std::filesystem::exists(path)) return false;
  std::ifstream in(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not valid JSON: " + e.what());
  }
  QKV_CHECK(j.is_object(), path << ": expected a JSON object");
  if (!j.contains("clean_up_tokenization_spaces") || j["clean_up_tokenization_spaces"].is_null()) return false;
  QKV_CHECK(j["clean_up_tokenization_spaces"].is_boolean(), path << ": field \"clean_up_tokenization_spaces\" is not "
                                                                     "true or false");
  return j["clean_up_tokenization_spaces"].get<bool>();
}
}  // namespace

Translator::Translator(const std::string& checkpoint_dir, nn::ComputeType compute_type, Device device)
    : dir_(checkpoint_dir) {
  models::check_checkpoint_dir(checkpoint_dir);
  model_ = models::load_seq2seq(checkpoint_dir);
  model_->eval();
  model_->to(device);
  model_->set_compute_type(compute_type);
  const std::string s = checkpoint_dir + "/" + models::kSourceSpmFile, t = checkpoint_dir + "/" + models::kTargetSpmFile;
  if (text::MarianTokenizer::present(checkpoint_dir)) {
    src_tok_ = text::MarianTokenizer::load(checkpoint_dir, false);
    tgt_tok_ = text::MarianTokenizer::load(checkpoint_dir, true);
  } else if (text::MultilingualTokenizer::present(checkpoint_dir)) {  // M2M100, NLLB, mBART: both sides
    languages_ = text::MultilingualTokenizer::load(checkpoint_dir);
    src_tok_ = languages_;
    tgt_tok_ = languages_;
  } else if (text::T5Tokenizer::present(checkpoint_dir)) {  // one tokenizer for both sides
    src_tok_ = text::T5Tokenizer::load(checkpoint_dir);
    tgt_tok_ = src_tok_;
  } else if (std::filesystem::exists(s) && std::filesystem::exists(t)) {
    src_tok_ = text::load_tokenizer(s);
    tgt_tok_ = text::load_tokenizer(t);
  } else if (std::filesystem::exists(checkpoint_dir + "/tokenizer.json")) {  // BART's byte-level BPE, both sides
    src_tok_ = std::make_shared<WithoutAddedTokensInOutput>(text::load_tokenizer(checkpoint_dir + "/tokenizer.json"),
                                                            clean_up_tokenization_spaces(checkpoint_dir));
    tgt_tok_ = src_tok_;
  }
}

Translator::~Translator() = default;

data::IdLine Translator::encode_source(const std::string& text, const TranslationOptions& options,
                                       const std::string& where, bool* truncated) const {
  QKV_CHECK(src_tok_, dir_ << ": no tokenizer (source.spm.model and target.spm.model, or an imported model's "
                               "source.spm, target.spm and vocab.json, or spiece.model, or sentencepiece.bpe.model, "
                               "or tokenizer.json) for text input; give token ids instead");
  data::IdLine ids = src_tok_->encode(text);
  // The tokenizer's own tokens (a Marian source's EOS) stay at the end of a cut source, as
  // transformers truncates before adding them.
  const int64_t extra = static_cast<int64_t>(src_tok_->with_special_tokens({}).size());
  const int64_t context = model_->config().max_seq_length;
  const int64_t max_len = options.truncate && options.max_source_tokens > 0 ? std::min(options.max_source_tokens, context)
                                                                             : context;
  if (truncated) *truncated = false;
  if (static_cast<int64_t>(ids.size()) + extra > max_len) {
    QKV_CHECK(options.truncate, where << ": " << ids.size() + extra << " tokens exceed the model's max_seq_length "
                                      << max_len << " (use --too-long truncate)");
    ids.resize(static_cast<size_t>(std::max<int64_t>(0, max_len - extra)));
    if (truncated) *truncated = true;
  }
  if (!options.source_lang.empty()) {  // refused by language_id unless the tokenizer has languages
    const int32_t language = language_id(options.source_lang, "source language");
    return languages_->with_language(std::move(ids), language);
  }
  return src_tok_->with_special_tokens(std::move(ids));
}

int32_t Translator::language_id(const std::string& language, const std::string& flag) const {
  QKV_CHECK(languages_, dir_ << ": " << flag << " \"" << language
                             << "\" given, but the checkpoint's tokenizer has no language codes (an imported "
                                "M2M100, NLLB or mBART model's has)");
  const int32_t id = languages_->language_id(language);
  QKV_CHECK(id >= 0, dir_ << ": " << flag << " \"" << language << "\" is not a language of the tokenizer ("
                          << languages_->some_languages() << ")");
  QKV_CHECK(id < model_->config().tgt_vocab_size, dir_ << ": " << flag << " \"" << language << "\" is id " << id
                                                       << ", outside the model's vocabulary");
  return id;
}

// The first target token a translation starts with: the options' target language, else the
// model's forced_bos_id (-1: none). mBART-cc25-style models start the decoder from the language
// code instead (no forced token): there the one target language is the decoder start, fixed at import.
int32_t Translator::forced_first_token(const std::string& target_lang) const {
  if (target_lang.empty()) return model_->config().forced_bos_id;
  const int32_t id = language_id(target_lang, "target language");
  if (languages_->kind() == text::MultilingualTokenizer::Kind::MBart) {
    QKV_CHECK(id == model_->config().bos_id && model_->config().forced_bos_id < 0,
              dir_ << ": target language \"" << target_lang
                   << "\": this mBART model (MBartTokenizer) starts its decoder from the target language's code, id "
                   << model_->config().bos_id << " (its decoder_start_token_id); it translates into that language only");
    return -1;
  }
  return id;
}

data::IdLine Translator::encode_target(const std::string& text, const std::string& target_lang) const {
  QKV_CHECK(tgt_tok_, dir_ << ": no target tokenizer to encode with");
  const auto& c = model_->config();
  data::IdLine ids{c.bos_id};
  if (const int32_t forced = forced_first_token(target_lang); forced >= 0) ids.push_back(forced);
  for (const int32_t id : tgt_tok_->encode(text)) ids.push_back(id);
  ids.push_back(c.eos_id);
  return ids;
}

std::string Translator::decode_target(const std::vector<int32_t>& tokens) const {
  QKV_CHECK(tgt_tok_, dir_ << ": no target tokenizer to decode with");
  return tgt_tok_->decode(tokens);
}

std::string Translator::source_piece(int32_t id) const {
  return src_tok_ && id >= 0 && id < src_tok_->vocab_size() ? src_tok_->id_to_token(id) : std::to_string(id);
}

std::string Translator::target_piece(int32_t id) const {
  return tgt_tok_ && id >= 0 && id < tgt_tok_->vocab_size() ? tgt_tok_->id_to_token(id) : std::to_string(id);
}

void Translator::translate_ids_each(const std::vector<data::IdLine>& sources, const TranslationOptions& options,
                                    const TranslationCallback& on_translated, const ProgressCallback& progress) const {
  decoding::SearchOptions search = options.search;
  if (!options.target_lang.empty()) search.forced_bos_id = forced_first_token(options.target_lang);
  // Batches of similar length sharing the key/value storage; each sentence handed on as found.
  decoding::search_each(*model_, sources, search, options.batch_size, options.sort_window,
                        [&](size_t index, std::vector<decoding::Hypothesis>&& found) {
                          std::vector<Translation> translations;
                          translations.reserve(found.size());
                          for (auto& h : found) {
                            Translation t;
                            t.text = tgt_tok_ ? tgt_tok_->decode(h.tokens) : "";
                            t.tokens = std::move(h.tokens);
                            t.log_prob = h.log_prob;
                            t.score = h.score;
                            t.attention = std::move(h.attention);
                            translations.push_back(std::move(t));
                          }
                          on_translated(index, std::move(translations));
                        },
                        progress);
}

std::vector<std::vector<Translation>> Translator::translate_ids(const std::vector<data::IdLine>& sources,
                                                                const TranslationOptions& options,
                                                                const ProgressCallback& progress) const {
  std::vector<std::vector<Translation>> results(sources.size());
  translate_ids_each(
      sources, options, [&](size_t i, std::vector<Translation>&& found) { results[i] = std::move(found); }, progress);
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
