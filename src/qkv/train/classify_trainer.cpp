// train_classifier (train/encoder_trainer.h): fine-tuning an encoder-only model for classification.
#include <filesystem>
#include <map>

#include "qkv/data/encoder_text.h"
#include "qkv/data/parallel.h"
#include "qkv/models/checkpoint.h"
#include "qkv/models/encoder_model.h"
#include "qkv/train/encoder_data.h"
#include "qkv/train/encoder_eval.h"
#include "qkv/train/encoder_trainer.h"
#include "qkv/train/vocabulary.h"

namespace qkv::train {
namespace fs = std::filesystem;

namespace {
struct Classifier {
  std::unique_ptr<models::EncoderModel> model;
  std::string tokenizer_path;  // OUT/<file>: copied into every checkpoint
};

void check_options(const ClassifyTrainOptions& o) {
  QKV_CHECK(!o.out.empty(), "classification training needs --output-dir DIR");
  QKV_CHECK(!o.labelled.empty(), "classification training needs --labelled FILE");
  QKV_CHECK(o.max_tokens >= 2, "--block-size must be at least 2 ([CLS] and [SEP]), got " << o.max_tokens);
  QKV_CHECK(o.batch_size >= 1, "--batch-size must be positive, got " << o.batch_size);
  QKV_CHECK(o.model.encoder_only(), "classification training needs an encoder-only model config");
  check_hyper(o.hyper);
  o.model.validate();
}

// The file name of the run's tokenizer: the resumed run's, --init's, or a new spm.model.
std::string tokenizer_file(const ClassifyTrainOptions& o) {
  const std::string from = o.resume ? o.out + "/last" : o.init;
  if (from.empty()) return models::kLmSpmFile;
  models::check_checkpoint_dir(from);
  const std::string path = models::lm_tokenizer_path(from);
  QKV_CHECK(!path.empty(), from << ": no tokenizer (spm.model or tokenizer.json) to read the text with");
  return fs::path(path).filename().string();
}

// The encoder of --init (its embeddings, blocks, pooler) under a new classifier of `labels`; its
// masked-LM head, and a classifier it may have, are dropped.
std::unique_ptr<models::EncoderModel> from_init(const ClassifyTrainOptions& o, const std::vector<std::string>& labels) {
  const std::unique_ptr<models::EncoderModel> base = models::load_encoder(o.init, "fine-tuning (--init)", o.seed);
  models::TransformerConfig c = base->config();
  c.labels = labels;
  c.mlm_head = false;
  c.pooler = true;
  auto model = std::make_unique<models::EncoderModel>(c, o.seed);
  std::map<std::string, Var> given;
  for (const auto& [name, v] : base->named_parameters()) given.emplace(name, v);
  for (auto& [name, v] : model->named_parameters()) {
    const auto it = given.find(name);
    if (it == given.end() || it->second.value().shape() != v.value().shape()) continue;  // new: classifier, pooler
    const Tensor src = it->second.value().contiguous();
    std::copy(src.f32(), src.f32() + src.numel(), v.value().f32());
  }
  return model;
}

Classifier make_classifier(const ClassifyTrainOptions& o, const std::vector<std::string>& labels,
                           const std::vector<LabelledLine>& train) {
  Classifier k;
  k.tokenizer_path = prepare_run_directory(o, tokenizer_file(o));
  if (o.resume) {
    k.model = models::load_encoder(o.out + "/last", "classification training", o.seed);
    QKV_CHECK(k.model->config().labels == labels, o.out << "/last: the run's labels differ from those of " << o.labelled
                                                        << "; a resumed run trains on the same file");
  } else if (!o.init.empty()) {
    on_rank0(o.comm, [&] {
      fs::copy_file(models::lm_tokenizer_path(o.init), k.tokenizer_path, fs::copy_options::overwrite_existing);
    });
    k.model = from_init(o, labels);
  } else {
    std::vector<std::string> texts;
    for (const LabelledLine& l : train) texts.push_back(l.text);
    ensure_bert_vocabulary(o, texts, k.tokenizer_path);
    models::TransformerConfig c = with_bert_vocabulary(o.model, text::SentencePiece(k.tokenizer_path));
    c.labels = labels;
    c.mlm_head = false;
    c.max_seq_length = std::max(c.max_seq_length, o.max_tokens);
    k.model = std::make_unique<models::EncoderModel>(c, o.seed);
  }
  QKV_CHECK(k.model->config().pad_id >= 0, "classification pads sentences, but the model has no pad_id");
  return k;
}

// [CLS] text [SEP] of each line, cut to max_tokens; counts the cut ones.
std::vector<data::IdLine> encode_labelled(const text::Tokenizer& tok, const models::TransformerConfig& c,
                                          const std::vector<LabelledLine>& lines, int64_t max_tokens,
                                          const std::string& path, int64_t& truncated) {
  std::vector<data::IdLine> rows(lines.size());
  truncated = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string where = path + ":" + std::to_string(lines[i].line);
    rows[i] = data::encoder_ids(tok, c, lines[i].text, max_tokens, data::TooLong::Truncate, where);
    truncated += static_cast<int64_t>(rows[i].size()) == max_tokens &&
                 static_cast<int64_t>(tok.encode(lines[i].text).size()) + 2 > max_tokens;
  }
  return rows;
}
}  // namespace

TrainResult train_classifier(const ClassifyTrainOptions& o, const TrainerEvents& events, const std::atomic<bool>* stop) {
  check_options(o);
  const std::vector<LabelledLine> train = read_labelled(o.labelled);
  const std::vector<std::string> labels = collect_labels(train);
  QKV_CHECK(labels.size() >= 2, o.labelled << ": every line has the label '" << labels[0]
                                           << "'; a classifier needs at least two labels");
  std::vector<LabelledLine> valid;
  std::vector<int32_t> valid_gold;
  if (!o.valid_labelled.empty()) {  // before any training work: an unseen label fails at once
    valid = read_labelled(o.valid_labelled);
    valid_gold = label_indices(valid, labels, o.valid_labelled);
  }
  Classifier k = make_classifier(o, labels, train);
  const models::TransformerConfig& c = k.model->config();
  QKV_CHECK(o.max_tokens <= c.max_seq_length,
            "--block-size " << o.max_tokens << " exceeds the model's positions (max_seq_length " << c.max_seq_length << ")");
  k.model->set_recompute_ffn(o.recompute_ffn);
  const std::unique_ptr<text::Tokenizer> tok = text::load_tokenizer(k.tokenizer_path);
  int64_t cut = 0, valid_cut = 0;
  ClassificationData data(encode_labelled(*tok, c, train, o.max_tokens, o.labelled, cut),
                          label_indices(train, labels, o.labelled), c.pad_id, o.batch_size, o.seed);
  const std::vector<data::IdLine> dev = encode_labelled(*tok, c, valid, o.max_tokens, o.valid_labelled, valid_cut);
  if (events.on_info)
    events.on_info(std::to_string(train.size()) + " sentences, " + std::to_string(labels.size()) + " labels, " +
                   std::to_string(data.batches_per_epoch()) + " batches/epoch of " + std::to_string(o.batch_size) +
                   "; " + std::to_string(cut) + " training and " + std::to_string(valid_cut) +
                   " validation sentences truncated to " + std::to_string(o.max_tokens) + " tokens");
  Validator validator;
  if (!dev.empty())
    validator = [&](const models::Model& m, const AfterBatch& after_batch) {
      const ClassificationScore s = classification_score(class_probabilities(m, dev, 32, after_batch), valid_gold);
      ValidationResult v;
      v.loss = s.loss;
      v.accuracy = s.accuracy;
      v.macro_f1 = s.macro_f1;
      v.labels = labels;
      v.confusion = s.confusion;
      return v;
    };
  const std::string file = fs::path(k.tokenizer_path).filename().string();
  Trainer trainer(*k.model, data, run_trainer_options(o, c.d_model, {{file, k.tokenizer_path}}, stop), validator);
  if (o.resume) trainer.resume(o.out + "/last", read_train_state(o.out + "/last/train_state.json"));
  return trainer.run(events);
}

}  // namespace qkv::train
