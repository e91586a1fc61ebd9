// Translation as callers want it (the CLI's `qkv translate`, the Python module's Translator): a
// sequence-to-sequence checkpoint with its tokenizers, text in, text out, batched. The tokenizers
// are qkv's SentencePiece models (source.spm.model, target.spm.model: their ids are the model's) or
// an imported Marian model's (source.spm, target.spm, vocab.json: text/marian_tokenizer.h, whose
// sources end with its EOS), or a multilingual model's (M2M100, NLLB, mBART:
// text/multilingual_tokenizer.h), whose sources carry a language code and whose targets start with
// one (TranslationOptions::source_lang, target_lang).
//
// Sentences are decoded in batches of similar length (sorted by length, so little is spent on
// padding) and the results are put back in input order, or handed to a callback as each batch
// finishes (translate_ids_each: a caller writing results as they come). An empty source gives no
// hypotheses.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "qkv/data/id_lines.h"
#include "qkv/decoding/search.h"
#include "qkv/models/transformer.h"
#include "qkv/text/multilingual_tokenizer.h"
#include "qkv/text/tokenizer.h"

namespace qkv::api {

struct TranslationOptions {
  decoding::SearchOptions search;  // beam 4, n_best 1, length penalty 1 ...; beam 1 = greedy;
                                   // search.attention = true: each Translation carries its weights
  int64_t batch_size = 32;         // sentences decoded together
  bool truncate = true;            // a source over max_seq_length: cut it (false: an error naming it)
  // With truncate, a lower limit for a source's tokens (the tokenizer's own EOS included, which a
  // cut source keeps); 0: max_seq_length.
  int64_t max_source_tokens = 0;
  // Sources are sorted by length within consecutive windows of this many (0: all of them at once):
  // with translate_ids_each, every source of a window is delivered before any of the next, so a
  // caller writing in input order can write a window as soon as it is done. `qkv translate` reads
  // 16 batches at a time, as CTranslate2's file translation does.
  int64_t sort_window = 0;
  // A multilingual model's languages (an imported M2M100, NLLB or mBART checkpoint with its
  // tokenizer: text/multilingual_tokenizer.h), as its tokenizer names them ("fr" or "__fr__",
  // "fra_Latn", "fr_XX"). source_lang: the code put around each text source ("": the tokenizer's
  // src_lang); target_lang: the first target token search forces ("": the model's forced_bos_id).
  std::string source_lang, target_lang;
};

struct Translation {
  std::vector<int32_t> tokens;  // target ids, without BOS and EOS
  std::string text;             // decoded with the target SentencePiece model ("" without one)
  double log_prob = 0;          // sum of log p over the tokens and EOS
  double score = 0;             // log_prob / length^length_penalty
  // With options.search.attention: its attention weights (decoding/attention.h), encoder self
  // (H, S, S), decoder self (H, T, T) and cross (H, T, S) per layer, T = tokens + EOS.
  decoding::AttentionWeights attention;
};

// Sentences done so far and in all (empty sources not counted), after each batch.
using ProgressCallback = std::function<void(int64_t done, int64_t total)>;
// One source's translations as soon as its batch is done: its index in the input and its n_best
// translations, best first (none for an empty source). Called once per source, not in input order.
using TranslationCallback = std::function<void(size_t index, std::vector<Translation>&& translations)>;

class Translator {
 public:
  // Loads DIR (config.json, model.safetensors) in eval mode and, when present, its tokenizers
  // (without them only the *_ids calls work).
  // compute_type: how inference computes (nn/compute_type.h), set once here for every call.
  // device: where the model runs (a GPU: core/cuda_runtime.h); text in and out stays on the host.
  explicit Translator(const std::string& checkpoint_dir, nn::ComputeType compute_type = nn::ComputeType::Float32,
                 Device device = Device::cpu());
  ~Translator();

  const models::TransformerConfig& config() const { return model_->config(); }
  const models::Transformer& model() const { return *model_; }
  models::Transformer& model() { return *model_; }
  nn::ComputeType compute_type() const { return *model_->compute_type(); }
  Device device() const { return model_->device(); }
  void set_compute_type(nn::ComputeType type) { model_->set_compute_type(type); }
  bool has_tokenizers() const { return src_tok_ != nullptr; }

  // Source ids of a text, fitted to max_seq_length as options.truncate says; `where` names it in
  // errors ("input.txt:12"). `truncated` (optional) is set when it was cut.
  data::IdLine encode_source(const std::string& text, const TranslationOptions& options, const std::string& where,
                             bool* truncated = nullptr) const;
  std::string decode_target(const std::vector<int32_t>& tokens) const;
  // A target text as scoring reads it: BOS (the decoder start), the target language's code where
  // the model forces one (target_lang, else its forced_bos_id), its ids, EOS (the caller checks the
  // length: the positions scored are all but the first).
  data::IdLine encode_target(const std::string& text, const std::string& target_lang = "") const;
  // Whether the tokenizer names languages (M2M100, NLLB, mBART), and the id of one of them; errors
  // name `flag` and the checkpoint, with some of the codes it has.
  bool multilingual() const { return languages_ != nullptr; }
  int32_t language_id(const std::string& language, const std::string& flag) const;
  // The piece of a source / target id ("▁the"), or the id as text without the tokenizers: labels
  // for pictures of attention.
  std::string source_piece(int32_t id) const;
  std::string target_piece(int32_t id) const;

  // n_best translations per source, best first, in input order (none for an empty source).
  // Sources must hold ids in [0, source vocabulary) and fit max_seq_length.
  std::vector<std::vector<Translation>> translate_ids(const std::vector<data::IdLine>& sources,
                                                      const TranslationOptions& options,
                                                      const ProgressCallback& progress = {}) const;
  // translate_ids without keeping the results: each source's translations go to on_translated as
  // its batch finishes (within a window of options.sort_window sources, in the order the batches
  // run), then progress is called for the batch. Nothing is printed; exceptions from the callbacks
  // pass through.
  void translate_ids_each(const std::vector<data::IdLine>& sources, const TranslationOptions& options,
                          const TranslationCallback& on_translated, const ProgressCallback& progress = {}) const;
  // The same for texts (needs the SentencePiece models); texts named "line N" in errors.
  std::vector<std::vector<Translation>> translate(const std::vector<std::string>& texts,
                                                  const TranslationOptions& options,
                                                  const ProgressCallback& progress = {}) const;

 private:
  int32_t forced_first_token(const std::string& target_lang) const;

  std::unique_ptr<models::Transformer> model_;
  std::shared_ptr<const text::Tokenizer> src_tok_, tgt_tok_;  // one object for both sides of a T5
  std::shared_ptr<const text::MultilingualTokenizer> languages_;  // src_tok_ of a multilingual model
  std::string dir_;
};

}  // namespace qkv::api
