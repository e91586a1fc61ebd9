#include "qkv/train/corpus_trainer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "qkv/core/threads.h"
#include "qkv/data/batcher.h"
#include "qkv/data/parallel.h"
#include "qkv/decoding/search.h"
#include "qkv/eval/bleu.h"
#include "qkv/models/checkpoint.h"
#include "qkv/ops/precision.h"
#include "qkv/text/sentencepiece.h"
#include "qkv/train/step.h"
#include "qkv/train/vocabulary.h"

namespace qkv::train {
namespace fs = std::filesystem;

namespace {

// The joint vocabulary over both sides of the training text.
void train_joint_vocabulary(const data::ParallelText& text, const CorpusTrainOptions& o, const std::string& spm_path) {
  train_vocabulary({&text.src, &text.tgt}, o.out, {o.spm_vocab, o.spm_type, o.spm_sample, o.seed, {}}, spm_path);
}

struct DevSet {
  std::vector<data::IdLine> src, tgt_full;  // tgt_full = [BOS] tgt [EOS]
  std::vector<std::string> refs;            // raw target text, for BLEU
};

DevSet read_dev_set(const CorpusTrainOptions& o, const text::SentencePiece& spm) {
  DevSet dev;
  if (o.valid_src.empty()) return dev;
  const data::ParallelText d = data::read_parallel(o.valid_src, o.valid_tgt);
  dev.src = encode_all(spm, d.src);
  const std::vector<data::IdLine> t = encode_all(spm, d.tgt);
  const int64_t cap = o.model.max_seq_length;
  for (size_t i = 0; i < t.size(); ++i) {
    data::IdLine full{spm.bos_id()};
    full.insert(full.end(), t[i].begin(), t[i].end());
    full.push_back(spm.eos_id());
    if (static_cast<int64_t>(dev.src[i].size()) > cap) dev.src[i].resize(cap);
    if (static_cast<int64_t>(full.size()) > cap + 1) {  // keep EOS last
      full.resize(cap + 1);
      full.back() = spm.eos_id();
    }
    dev.tgt_full.push_back(std::move(full));
  }
  dev.refs = d.tgt;
  return dev;
}

// Dev loss over every pair; BLEU of the first valid_bleu_sentences translated with valid_beam.
ValidationResult validate(models::Transformer& model, const DevSet& dev, const text::SentencePiece& spm,
                          const CorpusTrainOptions& o, const AfterBatch& after_batch) {
  ValidationResult r;
  r.loss = score(model, dev.src, dev.tgt_full, 32, after_batch).mean_loss();
  if (o.valid_bleu_sentences < 0) return r;
  const size_t n = o.valid_bleu_sentences == 0 ? dev.src.size()
                                               : std::min(dev.src.size(), static_cast<size_t>(o.valid_bleu_sentences));
  decoding::SearchOptions so;
  so.beam_size = o.valid_beam;
  // Sorted by length in batches of 32 (the first validation of the 2-hour Bible run took 66 s in
  // file order, where a batch runs as long as its longest sentence).
  const std::vector<data::IdLine> sources(dev.src.begin(), dev.src.begin() + static_cast<int64_t>(n));
  // The search multiplies in float32 with weights packed for it (as `qkv translate` does), from the
  // weights of this step; the packs go when it ends, before the next optimizer step. The run's
  // product precision (bf16 under --precision bf16) is set aside too: a GPU's float32 weights are
  // not packed and would multiply, and its attention run, in bf16, so that BLEU and the best
  // checkpoint would depend on the device.
  const models::ScopedComputeType packed(model, nn::ComputeType::Float32);
  const ops::ProductPrecisionScope float32(ops::Precision::Float32);
  const auto found = decoding::search_in_batches(model, sources, so, 32, [&](int64_t, int64_t) { after_batch(); });
  std::vector<std::string> hyps, refs(dev.refs.begin(), dev.refs.begin() + static_cast<int64_t>(n));
  for (const auto& hs : found) hyps.push_back(hs.empty() ? "" : spm.decode(hs[0].tokens));
  r.bleu = eval::corpus_bleu(hyps, {refs}).score;
  return r;
}

std::unique_ptr<models::Transformer> make_model(const CorpusTrainOptions& o, const text::SentencePiece& spm,
                                                const std::string& last) {
  if (o.resume) return models::load_seq2seq(last, o.seed);
  models::TransformerConfig c = o.model;
  c.src_vocab_size = c.tgt_vocab_size = spm.vocab_size();
  c.pad_id = spm.pad_id();
  c.bos_id = spm.bos_id();
  c.eos_id = spm.eos_id();
  return std::make_unique<models::Transformer>(c, o.seed);
}

data::BatcherOptions batcher_options(const CorpusTrainOptions& o, const models::TransformerConfig& c) {
  data::BatcherOptions bo;
  bo.pad_id = c.pad_id;
  bo.bos_id = c.bos_id;
  bo.eos_id = c.eos_id;
  bo.max_tokens = o.max_tokens;
  bo.length_order = o.length_order;
  bo.max_src_len = c.max_seq_length;
  bo.max_tgt_len = c.max_seq_length;
  bo.too_long = o.too_long == "drop" ? data::LengthPolicy::Drop : data::LengthPolicy::Truncate;
  bo.seed = o.seed;
  return bo;
}

// "174 batches/epoch of <= 6000 tokens, sorted by the longer side (padding: 6.5% of source cells,
// 3.2% of target cells)"
std::string batches_summary(const data::Batcher& batcher, int64_t max_tokens) {
  const data::EpochPadding p = batcher.padding();
  const bool longer_side = batcher.options().length_order == data::LengthOrder::LongerSide;
  char padding[96];
  std::snprintf(padding, sizeof padding, " (padding: %.1f%% of source cells, %.1f%% of target cells)",
                100.0 * p.src_fraction(), 100.0 * p.tgt_fraction());
  return std::to_string(batcher.batches_per_epoch()) + " batches/epoch of <= " + std::to_string(max_tokens) +
         " tokens, sorted by " + (longer_side ? "the longer side" : "source length") + padding;
}

void check_options(const CorpusTrainOptions& o) {
  QKV_CHECK(!o.out.empty(), "corpus training needs --output-dir DIR");
  QKV_CHECK(!o.tsv.empty() || (!o.src.empty() && !o.tgt.empty()), "corpus training needs --src and --tgt, or --tsv");
  QKV_CHECK(o.keep_checkpoints >= 0, "--keep-checkpoints must be >= 0, got " << o.keep_checkpoints);
  QKV_CHECK(o.too_long == "drop" || o.too_long == "truncate", "--too-long must be drop or truncate, got '" << o.too_long << "'");
  QKV_CHECK(o.max_tokens > 0, "--max-batch-tokens must be positive, got " << o.max_tokens);
  QKV_CHECK(o.valid_beam >= 1, "--valid-beam-size must be >= 1, got " << o.valid_beam);
  check_hyper(o.hyper);
  o.model.validate();
}

}  // namespace

Hyper default_hyper() {
  Hyper h;
  h.schedule = {"inverse_sqrt", 5e-4, 4000, 512};
  h.clip_norm = 1.0;
  h.label_smoothing = 0.1f;
  return h;
}

TrainResult train_on_corpus(const CorpusTrainOptions& o, const TrainerEvents& events, const std::atomic<bool>* stop) {
  check_options(o);
  const auto info = [&](const std::string& m) {
    if (events.on_info) events.on_info(m);
  };
  const std::string spm_path = prepare_run_directory(o), last = o.out + "/last";

  data::ParallelText train_text = o.tsv.empty() ? data::read_parallel(o.src, o.tgt) : data::read_parallel_tsv(o.tsv);
  info(std::to_string(train_text.size()) + " training pairs (" + std::to_string(train_text.empty_dropped) +
       " with an empty side skipped)");
  on_rank0(o.comm, [&] {
    if (!fs::exists(spm_path)) train_joint_vocabulary(train_text, o, spm_path);
  });
  const text::SentencePiece spm(spm_path);
  std::vector<data::IdLine> src_ids = encode_all(spm, train_text.src), tgt_ids = encode_all(spm, train_text.tgt);
  const DevSet dev = read_dev_set(o, spm);

  std::unique_ptr<models::Transformer> model = make_model(o, spm, last);
  const models::TransformerConfig& c = model->config();
  QKV_CHECK(c.src_vocab_size == spm.vocab_size() && c.tgt_vocab_size == spm.vocab_size(),
            last << ": checkpoint vocabulary " << c.src_vocab_size << " does not match " << spm_path << " ("
                 << spm.vocab_size() << ")");
  model->set_recompute_ffn(o.recompute_ffn);
  std::optional<TrainState> saved;
  if (o.resume) saved = read_train_state(last + "/train_state.json");
  data::BatcherOptions bo = batcher_options(o, c);
  if (saved) bo.length_order = ParallelData::saved_length_order(saved->data);  // the plans the run was saved in
  ParallelData data(data::Batcher(std::move(src_ids), std::move(tgt_ids), bo));
  info(data.batcher().stats().summary());
  info(batches_summary(data.batcher(), o.max_tokens));

  Validator validator;
  if (!dev.src.empty())
    validator = [&](const models::Model&, const AfterBatch& after_batch) {  // the model being trained
      return validate(*model, dev, spm, o, after_batch);
    };
  Trainer trainer(*model, data, run_trainer_options(o, c.d_model, {{models::kSourceSpmFile, spm_path}, {models::kTargetSpmFile, spm_path}}, stop), validator);
  if (saved) trainer.resume(last, *saved);
  return trainer.run(events);
}

}  // namespace qkv::train
