#include "qkv/train/encoder_trainer.h"

#include <filesystem>
#include <map>

#include "qkv/data/encoder_text.h"
#include "qkv/data/parallel.h"
#include "qkv/models/checkpoint.h"
#include "qkv/models/encoder_model.h"
#include "qkv/text/utf8.h"
#include "qkv/train/encoder_data.h"
#include "qkv/train/encoder_eval.h"
#include "qkv/train/vocabulary.h"

namespace qkv::train {
namespace fs = std::filesystem;

namespace {
// Validation masks with its own seed, so that it never shares draws with training.
constexpr uint64_t kValidationMaskSeed = 0x5eed0fda7aULL;

Hyper bert_adamw(double lr, int64_t warmup) {
  Hyper h;
  h.schedule = {"inverse_sqrt", lr, warmup, 512};
  h.clip_norm = 1.0;
  h.beta1 = 0.9;
  h.beta2 = 0.999;
  h.eps = 1e-6;
  h.optimizer = "adamw";
  h.weight_decay = 0.01;
  return h;
}

std::vector<std::string> read_nonblank_lines(const std::string& path) {
  std::vector<std::string> lines;
  for (std::string& line : text::read_text_lines(path))
    if (!data::is_blank(line)) lines.push_back(std::move(line));
  return lines;
}

Masker make_masker(const models::TransformerConfig& c, const text::SentencePiece& spm, double probability) {
  MaskingOptions m;
  m.probability = probability;
  m.mask_id = c.mask_id;
  m.vocab_size = c.tgt_vocab_size;
  m.specials = {c.pad_id, c.cls_id, c.sep_id, spm.unk_id(), spm.bos_id(), spm.eos_id()};
  return Masker(m);
}

void check_mlm_options(const MlmTrainOptions& o) {
  QKV_CHECK(!o.out.empty(), "masked-LM training needs --output-dir DIR");
  QKV_CHECK(!o.text.empty(), "masked-LM training needs --text FILE");
  QKV_CHECK(o.block_size >= 3, "--block-size must be at least 3 ([CLS], a token, [SEP]), got " << o.block_size);
  QKV_CHECK(o.batch_size >= 1, "--batch-size must be positive, got " << o.batch_size);
  QKV_CHECK(o.model.encoder_only(), "masked-LM training needs an encoder-only model config");
  check_hyper(o.hyper);
  o.model.validate();
}

Validator mlm_validator(const std::vector<MaskedSequence>& dev) {
  if (dev.empty()) return {};
  return [&dev](const models::Model& m, const AfterBatch& after_batch) {
    const MaskedLmScore s = masked_lm_score(m, dev, 16, after_batch);
    ValidationResult v;
    v.loss = s.loss;
    v.accuracy = s.accuracy;
    return v;
  };
}
}  // namespace

void ensure_bert_vocabulary(const RunOptions& o, const std::vector<std::string>& lines, const std::string& spm_path) {
  on_rank0(o.comm, [&] {
    if (fs::exists(spm_path)) return;
    train_vocabulary({&lines}, o.out, {o.spm_vocab, o.spm_type, o.spm_sample, o.seed, {"[CLS]", "[SEP]", "[MASK]"}},
                     spm_path);
  });
}

models::TransformerConfig with_bert_vocabulary(models::TransformerConfig c, const text::SentencePiece& spm) {
  c.src_vocab_size = c.tgt_vocab_size = spm.vocab_size();
  c.pad_id = spm.pad_id();
  c.cls_id = spm.piece_id("[CLS]");
  c.sep_id = spm.piece_id("[SEP]");
  c.mask_id = spm.piece_id("[MASK]");
  QKV_CHECK(c.cls_id >= 0 && c.sep_id >= 0 && c.mask_id >= 0,
            spm.path() << ": the vocabulary lacks [CLS], [SEP] or [MASK] (not trained by encoder-only training)");
  return c;
}

Hyper default_mlm_hyper() { return bert_adamw(1e-4, 1000); }
Hyper default_classify_hyper() { return bert_adamw(5e-5, 100); }

TrainResult train_masked_lm(const MlmTrainOptions& o, const TrainerEvents& events, const std::atomic<bool>* stop) {
  check_mlm_options(o);
  const std::string spm_path = prepare_run_directory(o), last = o.out + "/last";
  const std::vector<std::string> lines = read_nonblank_lines(o.text);
  ensure_bert_vocabulary(o, lines, spm_path);
  const text::SentencePiece spm(spm_path);
  std::unique_ptr<models::EncoderModel> model;
  if (o.resume) {
    model = models::load_encoder(last, "masked-LM training", o.seed);
  } else {
    models::TransformerConfig c = with_bert_vocabulary(o.model, spm);
    c.mlm_head = true;
    c.labels.clear();
    c.max_seq_length = std::max(c.max_seq_length, o.block_size);
    model = std::make_unique<models::EncoderModel>(c, o.seed);
  }
  const models::TransformerConfig& c = model->config();
  QKV_CHECK(c.tgt_vocab_size == spm.vocab_size() && c.mlm_head && c.mask_id >= 0,
            last << ": not a masked-LM model of " << spm_path << " (vocabulary " << c.tgt_vocab_size << " vs "
                 << spm.vocab_size() << ", mlm_head " << c.mlm_head << ", mask_id " << c.mask_id << ")");
  QKV_CHECK(o.block_size <= c.max_seq_length,
            "--block-size " << o.block_size << " exceeds the model's positions (max_seq_length " << c.max_seq_length << ")");
  model->set_recompute_ffn(o.recompute_ffn);
  const Masker masker = make_masker(c, spm, o.mask_probability);
  MaskedLmData data(mlm_blocks(encode_all(spm, lines), o.block_size, c.cls_id, c.sep_id, false), masker, o.batch_size,
                    o.seed);
  if (events.on_info)
    events.on_info(std::to_string(lines.size()) + " lines: " + std::to_string(data.blocks()) + " blocks of " +
                   std::to_string(o.block_size) + ", " + std::to_string(data.batches_per_epoch()) +
                   " batches/epoch of " + std::to_string(o.batch_size) + "; " +
                   std::to_string(static_cast<int>(o.mask_probability * 100 + 0.5)) + "% of tokens masked");
  std::vector<MaskedSequence> dev;
  if (!o.valid_text.empty()) {
    const std::vector<data::IdLine> blocks =
        mlm_blocks(encode_all(spm, read_nonblank_lines(o.valid_text)), o.block_size, c.cls_id, c.sep_id, true);
    for (size_t i = 0; i < blocks.size(); ++i) dev.push_back(masker.mask(blocks[i], kValidationMaskSeed, 0, i));
  }
  Trainer trainer(*model, data, run_trainer_options(o, c.d_model, {{models::kLmSpmFile, spm_path}}, stop),
                  mlm_validator(dev));
  if (o.resume) trainer.resume(last, read_train_state(last + "/train_state.json"));
  return trainer.run(events);
}

}  // namespace qkv::train
