#include "qkv/train/lm_trainer.h"

#include <filesystem>

#include "qkv/data/parallel.h"
#include "qkv/text/utf8.h"
#include "qkv/models/checkpoint.h"
#include "qkv/train/lm_data.h"
#include "qkv/train/step.h"
#include "qkv/train/vocabulary.h"

namespace qkv::train {
namespace fs = std::filesystem;

Hyper default_lm_hyper() {
  Hyper h;
  h.schedule = {"inverse_sqrt", 1e-3, 1000, 512};
  h.clip_norm = 1.0;
  h.beta1 = 0.9;
  h.beta2 = 0.95;
  h.eps = 1e-8;
  h.optimizer = "adamw";
  h.weight_decay = 0.1;
  return h;
}

double language_model_loss(const models::Model& model, const std::vector<data::IdLine>& blocks, int64_t batch_size,
                           const std::function<void()>& after_batch) {
  return score(model, {}, blocks, batch_size, after_batch).mean_loss();
}

namespace {
void check_options(const LmTrainOptions& o) {
  QKV_CHECK(!o.out.empty(), "language-model training needs --output-dir DIR");
  QKV_CHECK(!o.text.empty(), "language-model training needs --text FILE");
  QKV_CHECK(o.block_size >= 1, "--block-size must be positive, got " << o.block_size);
  QKV_CHECK(o.batch_size >= 1, "--batch-size must be positive, got " << o.batch_size);
  QKV_CHECK(o.model.decoder_only(), "language-model training needs a decoder-only model config");
  check_hyper(o.hyper);
  o.model.validate();
}

// The non-blank lines of a text (the parallel-text reader's rules: BOM and CR stripped, strict
// UTF-8 naming file:line, lines of only ASCII whitespace skipped), read once.
std::vector<std::string> read_training_lines(const std::string& path) {
  std::vector<std::string> lines;
  for (std::string& line : text::read_text_lines(path))
    if (!data::is_blank(line)) lines.push_back(std::move(line));
  return lines;
}

std::unique_ptr<models::CausalLM> make_model(const LmTrainOptions& o, const text::SentencePiece& spm,
                                             const std::string& last) {
  if (o.resume) return models::load_causal_lm(last, o.seed);
  models::TransformerConfig c = o.model;
  c.src_vocab_size = c.tgt_vocab_size = spm.vocab_size();
  c.pad_id = -1;  // blocks have no padding
  // EOS separates lines in the stream, so it also starts a document (GPT-2's <|endoftext|>).
  c.bos_id = c.eos_id = spm.eos_id();
  c.max_seq_length = std::max(c.max_seq_length, o.block_size);
  return std::make_unique<models::CausalLM>(c, o.seed);
}

}  // namespace

TrainResult train_language_model(const LmTrainOptions& o, const TrainerEvents& events, const std::atomic<bool>* stop) {
  check_options(o);
  const auto info = [&](const std::string& m) {
    if (events.on_info) events.on_info(m);
  };
  const std::string spm_path = prepare_run_directory(o), last = o.out + "/last";
  const std::vector<std::string> lines = read_training_lines(o.text);
  on_rank0(o.comm, [&] {
    if (!fs::exists(spm_path))
      train_vocabulary({&lines}, o.out, {o.spm_vocab, o.spm_type, o.spm_sample, o.seed, {}}, spm_path);
  });
  const text::SentencePiece spm(spm_path);
  std::unique_ptr<models::CausalLM> model = make_model(o, spm, last);
  const models::TransformerConfig& c = model->config();
  QKV_CHECK(c.tgt_vocab_size == spm.vocab_size(), last << ": checkpoint vocabulary " << c.tgt_vocab_size
                                                       << " does not match " << spm_path << " (" << spm.vocab_size()
                                                       << ")");
  QKV_CHECK(o.block_size <= c.max_seq_length,
            "--block-size " << o.block_size << " exceeds the model's context (max_seq_length " << c.max_seq_length << ")");
  model->set_recompute_ffn(o.recompute_ffn);

  const std::vector<int32_t> stream = pack_lines(encode_all(spm, lines), c.bos_id, c.eos_id);
  LanguageModelData data(stream, o.block_size, o.batch_size, o.seed);
  info(std::to_string(lines.size()) + " lines, " + std::to_string(stream.size()) + " tokens: " +
       std::to_string(data.blocks()) + " blocks of " + std::to_string(o.block_size) + ", " +
       std::to_string(data.batches_per_epoch()) + " batches/epoch of " + std::to_string(o.batch_size));

  std::vector<data::IdLine> dev_blocks;
  if (!o.valid_text.empty())
    dev_blocks = cut_blocks(pack_lines(encode_all(spm, read_training_lines(o.valid_text)), c.bos_id, c.eos_id),
                            o.block_size, true);
  Validator validator;
  if (!dev_blocks.empty())
    validator = [&](const models::Model& m, const AfterBatch& after_batch) {
      ValidationResult v;
      v.loss = language_model_loss(m, dev_blocks, 16, after_batch);
      return v;
    };
  Trainer trainer(*model, data, run_trainer_options(o, c.d_model, {{models::kLmSpmFile, spm_path}}, stop), validator);
  if (o.resume) trainer.resume(last, read_train_state(last + "/train_state.json"));
  return trainer.run(events);
}

}  // namespace qkv::train
