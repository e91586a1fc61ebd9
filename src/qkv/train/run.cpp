#include "qkv/train/run.h"

#include <filesystem>
#include <memory>
#include <optional>

#include "qkv/core/duration.h"
#include "qkv/core/invalid_arguments.h"
#include "qkv/core/threads.h"
#include "qkv/models/checkpoint.h"
#include "qkv/models/transformer.h"
#include "qkv/ops/ops.h"
#include "qkv/ops/precision.h"
#include "qkv/train/corpus_trainer.h"
#include "qkv/train/encoder_trainer.h"
#include "qkv/train/lm_trainer.h"
#include "qkv/train/memory_budget.h"
#include "qkv/io/checkpoint_lock.h"
#include "qkv/train/metrics_log.h"

namespace qkv::train {

namespace {
namespace fs = std::filesystem;

void info(const TrainerEvents& events, const std::string& message) {
  if (events.on_info) events.on_info(message);
}

std::string metrics_path(const TrainRequest& o, const std::string& out) {
  if (!o.metrics.empty()) return o.metrics;
  fs::create_directories(out);
  return out + "/metrics.jsonl";
}

bool writer(const TrainRequest& o) { return !o.comm || o.comm->rank() == 0; }

// metrics.jsonl, written by rank 0 alone; `events` unchanged elsewhere.
struct RunLog {
  RunLog(const TrainRequest& o, const std::string& out, const std::optional<TrainState>& saved) {
    if (writer(o)) log.emplace(metrics_path(o, out), saved ? saved->step : -1);
  }
  TrainerEvents wrap(const TrainerEvents& events) { return log ? log->wrap(events) : events; }
  std::optional<MetricsLog> log;
};

// A resumed run keeps the checkpoint's model. Model flags given with --resume must agree with it:
// silently ignoring `--d-model 512` would train a different model than the user asked for.
void check_resume_model_flags(const TrainRequest& o, const std::string& config_path) {
  if (!fs::exists(config_path)) return;  // load_model names the missing file
  const models::TransformerConfig c = models::load_config(config_path);
  const auto check = [&](const char* flag, const auto& given, auto saved) {
    if (given && static_cast<double>(*given) != static_cast<double>(saved))
      throw Error(std::string("--resume: ") + flag + " " + std::to_string(*given) + " differs from the checkpoint's " +
                  std::to_string(saved) + " (" + config_path + "); drop the flag to continue with the checkpoint's model");
  };
  check("--d-model", o.d_model, c.d_model);
  check("--heads", o.heads, c.num_heads);
  check("--layers", o.layers, c.num_layers);
  check("--d-ff", o.d_ff, c.d_ff);
  check("--dropout", o.dropout, c.dropout);
  check("--max-seq-length", o.max_len, c.max_seq_length);
  check("--vocab", o.vocab, c.src_vocab_size);
  QKV_CHECK(!o.share_all_embeddings || (c.share_embeddings && c.tie_output_embedding),
            "--resume: --share-all-embeddings, but the checkpoint's embeddings are not all shared (" << config_path
                                                                                                 << "); drop the flag");
}

// --share-all-embeddings: the source, target and output embeddings become one matrix, drawn
// N(0, 1 / d_model) (models::Transformer) and multiplied by sqrt(d_model) on the embedding side, as
// the paper's section 3.4 and fairseq's --share-all-embeddings do: without the factor the tokens'
// embeddings (spread 1 / sqrt(d_model)) would be small beside the positional encoding's.
void apply_share_all_embeddings(const TrainRequest& o, models::TransformerConfig& c) {
  if (!o.share_all_embeddings) return;
  QKV_CHECK(c.encoder_decoder(), "--share-all-embeddings: a" << (c.encoder_only() ? "n " : " ") << c.architecture
                                                             << " model has one token embedding already");
  c.share_embeddings = c.tie_output_embedding = c.scale_embeddings = true;
}

// The optimisation settings: a resumed run continues with the saved ones; flags given explicitly
// override them (and say so, since the run then differs from an uninterrupted one).
Hyper resolve_hyper(const TrainRequest& o, Hyper h, const std::optional<TrainState>& saved,
                           const TrainerEvents& events) {
  if (saved && saved->has_hyper) h = saved->hyper;
  if (saved) h.max_memory = saved->hyper.max_memory;  // runs of qkv 0.1 (no settings saved) never chunked
  const auto override_with = [&](const char* flag, const auto& given, auto& field) {
    if (!given) return;
    if (saved && saved->has_hyper && static_cast<double>(*given) != static_cast<double>(field))
      info(events, std::string(flag) + " " + std::to_string(*given) + " overrides the checkpoint's " +
                    std::to_string(field));
    field = *given;
  };
  if (o.schedule) {
    if (saved && saved->has_hyper && *o.schedule != h.schedule.kind)
      info(events, "--schedule " + *o.schedule + " overrides the checkpoint's " + h.schedule.kind);
    h.schedule.kind = *o.schedule;
    if (!o.lr && !(saved && saved->has_hyper)) h.schedule.lr = *o.schedule == "noam" ? 1.0 : h.schedule.lr;
  }
  override_with("--lr", o.lr, h.schedule.lr);
  override_with("--warmup", o.warmup, h.schedule.warmup);
  if (schedule_needs_total_steps(h.schedule.kind)) override_with("--steps", o.steps, h.schedule.total_steps);
  override_with("--clip-norm", o.clip_norm, h.clip_norm);
  override_with("--label-smoothing", o.label_smoothing, h.label_smoothing);
  override_with("--micro-batch", o.micro_batch, h.micro_batch);
  if (o.max_memory) {
    const int64_t m = parse_memory_size(*o.max_memory);
    if (saved && m != h.max_memory)
      info(events, "--max-memory " + format_memory_size(m) + " overrides the checkpoint's " +
                       format_memory_size(h.max_memory));
    h.max_memory = m;
  }
  override_with("--weight-decay", o.weight_decay, h.weight_decay);
  if (o.optimizer) {
    if (saved && saved->has_hyper && *o.optimizer != h.optimizer)
      info(events, "--optimizer " + *o.optimizer + " overrides the checkpoint's " + h.optimizer);
    h.optimizer = *o.optimizer;
  }
  if (h.optimizer == "adam" && !o.weight_decay) h.weight_decay = 0;  // decay is AdamW's
  if (o.precision) {
    const std::string given = ops::precision_name(ops::parse_precision(*o.precision));  // "bfloat16" -> "bf16"
    if (saved && saved->has_hyper && given != h.precision)
      info(events, "--precision " + given + " overrides the checkpoint's " + h.precision);
    h.precision = given;
  }
  if (h.precision == "bf16") {
    info(events, "precision: bf16 products with float32 sums, float32 weights and moments (" +
                     (o.device.is_cuda() ? std::string("cuBLAS on the GPU's tensor cores") : ops::bf16_product_kernel()) +
                     ")");
    // Without vdpbf16ps each product rounds its operands and multiplies them widened: the same
    // numbers, about 1.25x float32's step time (docs/compute.md), so say once that float32 is faster.
    if (!o.device.is_cuda() && ops::linear_kernel_is_reference(DType::BF16))
      info(events, "note: this CPU lacks AVX512_BF16 (or QKV_ISA chose a lower level: qkv info --system): bf16's "
                   "roundings are kept, but its products run widened to float32, slower than --precision float32");
  }
  return h;
}

std::optional<TrainState> saved_state_if_resuming(const std::string& checkpoint, bool resuming) {
  if (!resuming) return std::nullopt;
  models::check_checkpoint_dir(checkpoint);
  return read_train_state(checkpoint + "/train_state.json");
}

// The model the flags describe: --config (or `base`), then each size flag given.
// A text run's --preset: the model's sizes by name, per family, on top of the family's defaults
// (`c`); size flags given as well override them.
//   tiny:  d 64, 4 heads, 2 layers, d_ff 256, for a first run in seconds;
//   small: d 256, 4 heads, 4 layers, d_ff 1024 (the Bible recipe, bench/translate_bible.sh);
//   base:  the paper's base (512, 8, 6, 2048), GPT-2 small's (768, 12, 12, 3072), BERT-base's (the same);
//   big:   the paper's big (1024, 16, 6, 4096, dropout 0.3), GPT-2 medium's and BERT-large's (1024, 16, 24, 4096).
void apply_text_preset(const std::string& preset, models::TransformerConfig& c) {
  if (preset.empty()) return;
  const bool seq2seq = c.encoder_decoder();
  struct Sizes {
    int64_t d_model, heads, layers, d_ff;
  };
  Sizes s{};
  if (preset == "tiny") s = {64, 4, 2, 256};
  else if (preset == "small") s = {256, 4, 4, 1024};
  else if (preset == "base") s = seq2seq ? Sizes{512, 8, 6, 2048} : Sizes{768, 12, 12, 3072};
  else if (preset == "big") s = seq2seq ? Sizes{1024, 16, 6, 4096} : Sizes{1024, 16, 24, 4096};
  else
    throw InvalidArgumentsError("--preset " + preset + " is for --synthetic; a text run takes tiny, small, base or big");
  c.d_model = s.d_model;
  c.num_heads = s.heads;
  c.num_layers = s.layers;
  c.d_ff = s.d_ff;
  if (preset == "big" && seq2seq) c.dropout = 0.3f;  // the paper's big model (Table 3)
}

models::TransformerConfig model_config(const TrainRequest& o, models::TransformerConfig base) {
  models::TransformerConfig c = o.config_path.empty() ? std::move(base) : models::load_config(o.config_path);
  apply_text_preset(o.preset, c);
  if (o.d_model) c.d_model = *o.d_model;
  if (o.heads) c.num_heads = *o.heads;
  if (o.layers) c.num_layers = *o.layers;
  if (o.d_ff) c.d_ff = *o.d_ff;
  if (o.dropout) c.dropout = *o.dropout;
  if (o.max_len) c.max_seq_length = *o.max_len;
  apply_share_all_embeddings(o, c);
  c.validate();
  return c;
}

double parse_time_budget(const std::string& text) {
  if (text.empty()) return 0;
  try {
    return parse_duration(text);
  } catch (const Error& e) {
    throw Error(std::string("--time-budget: ") + e.what());
  }
}

// The settings every text run shares, from the flags; returns the saved state when resuming.
std::optional<TrainState> fill_run_options(const TrainRequest& o, const Hyper& defaults,
                                                  RunOptions& r, const TrainerEvents& events) {
  r.out = o.out.empty() ? o.resume : o.out;
  r.resume = !o.resume.empty();
  if (r.resume) check_resume_model_flags(o, r.out + "/last/config.json");
  std::optional<TrainState> saved = saved_state_if_resuming(r.out + "/last", r.resume);
  r.spm_vocab = o.spm_vocab;
  r.spm_sample = o.spm_sample;
  r.recompute_ffn = o.recompute_ffn;
  r.hyper = resolve_hyper(o, defaults, saved, events);
  r.max_steps = o.steps.value_or(0);
  r.max_epochs = o.max_epochs;
  r.time_budget = parse_time_budget(o.time_budget);
  check_schedule_end(r.hyper.schedule, r.time_budget);  // before reading any data
  r.valid_every = o.valid_every;
  r.save_every = o.save_every;
  r.patience = o.patience;
  r.keep_checkpoints = o.keep_checkpoints;
  r.seed = o.seed;
  r.log_every = o.log_every.value_or(100);
  r.comm = o.comm;
  r.bucket_bytes = o.bucket_bytes;
  r.device = o.device;
  r.overlap = o.overlap;
  r.nccl = o.nccl;
  return saved;
}

TrainResult run_lm_train(const TrainRequest& o, const TrainerEvents& events, const std::atomic<bool>* stop) {
  LmTrainOptions l;
  l.text = o.text;
  l.valid_text = o.valid_text;
  const auto saved = fill_run_options(o, default_lm_hyper(), l, events);
  RunLog log(o, l.out, saved);
  models::TransformerConfig base = models::decoder_only_defaults();
  base.max_seq_length = o.block_size;
  l.model = model_config(o, base);
  QKV_CHECK(l.model.decoder_only(), o.config_path << ": --text trains a decoder-only model, but the config is of an "
                                                  << l.model.architecture << " model");
  l.block_size = o.block_size;
  l.batch_size = o.batch.value_or(16);
  return train_language_model(l, log.wrap(events), stop);
}

TrainResult run_corpus_train(const TrainRequest& o, const TrainerEvents& events, const std::atomic<bool>* stop) {
  CorpusTrainOptions c;
  c.src = o.src;
  c.tgt = o.tgt;
  c.tsv = o.tsv;
  c.valid_src = o.valid_src;
  c.valid_tgt = o.valid_tgt;
  const auto saved = fill_run_options(o, default_hyper(), c, events);
  RunLog log(o, c.out, saved);
  c.model = model_config(o, c.model);
  QKV_CHECK(c.model.encoder_decoder(), (o.config_path.empty() ? "--arch" : o.config_path)
                                           << ": a" << (c.model.encoder_only() ? "n " : " ") << c.model.architecture
                                           << " model trains on --text, not on --src/--tgt");
  c.max_tokens = o.max_tokens;
  c.too_long = o.too_long;
  c.valid_bleu_sentences = o.valid_bleu_sentences;
  c.valid_beam = o.valid_beam;
  return train_on_corpus(c, log.wrap(events), stop);
}

// The encoder-only model the flags describe (BERT's defaults, positions = --block-size), refusing
// a --config of another family.
models::TransformerConfig encoder_only_model(const TrainRequest& o) {
  models::TransformerConfig base = models::encoder_only_defaults();
  base.max_seq_length = o.block_size;
  models::TransformerConfig c = model_config(o, base);
  QKV_CHECK(c.encoder_only(), o.config_path << ": --arch encoder-only, but the config is of a"
                                            << (c.decoder_only() ? " " : "n ") << c.architecture << " model");
  return c;
}

TrainResult run_mlm_train(const TrainRequest& o, const TrainerEvents& events, const std::atomic<bool>* stop) {
  MlmTrainOptions m;
  m.text = o.text;
  m.valid_text = o.valid_text;
  const auto saved = fill_run_options(o, default_mlm_hyper(), m, events);
  RunLog log(o, m.out, saved);
  m.model = encoder_only_model(o);
  m.block_size = o.block_size;
  m.batch_size = o.batch.value_or(32);
  return train_masked_lm(m, log.wrap(events), stop);
}

TrainResult run_classify_train(const TrainRequest& o, const TrainerEvents& events, const std::atomic<bool>* stop) {
  ClassifyTrainOptions c;
  c.labelled = o.labelled;
  c.valid_labelled = o.valid_labelled;
  c.init = o.resume.empty() ? o.init : "";  // a resumed run has its weights already
  const auto saved = fill_run_options(o, default_classify_hyper(), c, events);
  RunLog log(o, c.out, saved);
  c.model = encoder_only_model(o);
  c.max_tokens = o.block_size;
  c.batch_size = o.batch.value_or(32);
  return train_classifier(c, log.wrap(events), stop);
}

TrainResult run_encoder_train(const TrainRequest& o, const TrainerEvents& events, const std::atomic<bool>* stop) {
  if (o.objective == "mlm") return run_mlm_train(o, events, stop);
  return run_classify_train(o, events, stop);
}

struct Plan {
  models::TransformerConfig config;
  std::string task;
  int64_t steps, batch, len;
  double lr;
};

Plan make_plan(const TrainRequest& o) {
  Plan p;
  if (o.preset.empty() || o.preset == "seed") {
    p = {models::TransformerConfig{}, "random", 100, 64, 100, 1e-4};
  } else if (o.preset == "tiny") {
    models::TransformerConfig c;
    c.src_vocab_size = c.tgt_vocab_size = 24;
    c.d_model = 64;
    c.num_heads = 4;
    c.num_layers = 2;
    c.d_ff = 128;
    c.max_seq_length = 32;
    c.dropout = 0.f;
    p = {c, "copy", 400, 32, 10, 1e-3};
  } else {
    throw InvalidArgumentsError("--preset " + o.preset + " sizes a text run's model; --synthetic takes seed or tiny");
  }
  if (!o.config_path.empty()) p.config = models::load_config(o.config_path);
  if (!o.task.empty()) p.task = o.task;
  if (o.steps) p.steps = *o.steps;
  if (o.batch) p.batch = *o.batch;
  if (o.len) p.len = *o.len;
  if (o.lr) p.lr = *o.lr;
  if (o.vocab) p.config.src_vocab_size = p.config.tgt_vocab_size = *o.vocab;
  if (o.d_model) p.config.d_model = *o.d_model;
  if (o.heads) p.config.num_heads = *o.heads;
  if (o.layers) p.config.num_layers = *o.layers;
  if (o.d_ff) p.config.d_ff = *o.d_ff;
  if (o.dropout) p.config.dropout = *o.dropout;
  if (o.max_len) p.config.max_seq_length = *o.max_len;
  apply_share_all_embeddings(o, p.config);
  p.config.validate();
  QKV_CHECK(p.steps >= 1, "--steps must be at least 1 for --synthetic, got " << p.steps);
  QKV_CHECK(p.batch > 0 && p.len >= 2, "--batch-size must be positive and --len at least 2");
  const int64_t tgt_len = p.task == "copy" ? p.len + 2 : p.len;  // copy adds BOS and EOS
  QKV_CHECK(p.len <= p.config.max_seq_length && tgt_len - 1 <= p.config.max_seq_length,
            "--len " << p.len << " exceeds the model's max_seq_length " << p.config.max_seq_length);
  return p;
}

void print_synthetic_summary(const models::Transformer& model, const SyntheticData& data, int64_t from,
                             int64_t to, const TrainerEvents& events) {
  int64_t params = 0;
  for (const Var& p : model.parameters()) params += p.value().numel();
  const auto& c = model.config();
  info(events, "task " + data.task() + ", " + std::to_string(params) + " parameters (d_model " +
                std::to_string(c.d_model) + ", " + std::to_string(c.num_heads) + " heads, " +
                std::to_string(c.num_layers) + " layers, d_ff " + std::to_string(c.d_ff) + ", vocab " +
                std::to_string(c.tgt_vocab_size) + "), batch " + std::to_string(data.batch()) + " x " +
                std::to_string(data.len()) + ", " + std::to_string(num_threads()) + " threads, steps " +
                std::to_string(from + 1) + ".." + std::to_string(to));
}

TrainResult run_synthetic_train(const TrainRequest& o, const TrainerEvents& events, const std::atomic<bool>* stop) {
  const bool resuming = !o.resume.empty();
  const std::string out = resuming ? o.resume : o.out;
  if (resuming) check_resume_model_flags(o, o.resume + "/config.json");
  const std::optional<TrainState> saved = saved_state_if_resuming(o.resume, resuming);
  Plan plan = make_plan(o);
  std::unique_ptr<models::Transformer> model = resuming ? models::load_seq2seq(o.resume, o.seed)
                                                        : std::make_unique<models::Transformer>(plan.config, o.seed);
  model->set_recompute_ffn(o.recompute_ffn);
  SyntheticData data(plan.task, plan.batch, plan.len, model->config().tgt_vocab_size, o.seed);
  Hyper defaults;
  defaults.schedule = {"constant", plan.lr, 4000, model->config().d_model};
  TrainerOptions t;
  t.hyper = resolve_hyper(o, defaults, saved, events);
  t.hyper.schedule.d_model = model->config().d_model;
  if (schedule_needs_total_steps(t.hyper.schedule.kind) && !o.steps && !saved) t.hyper.schedule.total_steps = plan.steps;
  t.comm = o.comm;
  t.bucket_bytes = o.bucket_bytes;
  t.overlap = o.overlap;
  t.nccl = o.nccl;
  t.device = o.device;
  t.last_dir = out;
  t.max_steps = plan.steps;
  t.save_every = o.save_every;
  t.log_every = o.log_every.value_or(1);
  t.stop_flag = stop;
  Trainer trainer(*model, data, t);
  if (saved) trainer.resume(o.resume, *saved);
  print_synthetic_summary(*model, data, trainer.step(), plan.steps, events);
  std::optional<MetricsLog> log;  // synthetic runs log only where asked (--output-dir is the checkpoint itself)
  if (!o.metrics.empty() && writer(o)) log.emplace(o.metrics, saved ? saved->step : -1);
  const TrainResult r = trainer.run(log ? log->wrap(events) : events);
  return r;
}

// Flags that cannot go together, or a missing one, for each kind of run: all checked here, before
// anything is written (the run directory, its lock), and reported as usage errors.
void check_flag_combinations(const TrainRequest& o) {
  QKV_CHECK_ARGS(o.resume.empty() || o.out.empty() || fs::path(o.resume) == fs::path(o.out),
                 "--resume DIR continues the run in DIR; drop --output-dir or make it the same");
  // A text run's --preset sizes a new model (a synthetic run's also sets its task and batch).
  const bool text_preset = !o.synthetic && !o.preset.empty();
  QKV_CHECK_ARGS(!o.synthetic || o.preset.empty() || o.preset == "seed" || o.preset == "tiny",
                 "--preset " << o.preset << " sizes a text run's model; --synthetic takes seed or tiny");
  QKV_CHECK_ARGS(!text_preset || o.preset != "seed",
                 "--preset seed is for --synthetic; a text run takes tiny, small, base or big");
  QKV_CHECK_ARGS(!text_preset || o.config_path.empty(), "--config brings its own model; drop --preset");
  QKV_CHECK_ARGS(!text_preset || o.resume.empty(), "--resume continues the checkpoint's model; drop --preset");
  QKV_CHECK_ARGS(!o.nccl || o.device.is_cuda(),
                 "--allreduce nccl sums gradients on GPUs: it needs --device cuda, not " << o.device.name());
  const bool corpus = !o.src.empty() || !o.tgt.empty() || !o.tsv.empty();
  const bool resuming = !o.resume.empty();
  if (o.arch == models::kEncoderOnly) {
    QKV_CHECK_ARGS(!corpus && !o.synthetic,
                   "--arch encoder-only trains on --text or --labelled, not on --src/--tgt/--tsv or --synthetic");
    QKV_CHECK_ARGS(!o.objective.empty(), "--arch encoder-only needs --objective mlm (pretraining on --text) or "
                                         "classify (fine-tuning on --labelled)");
    if (o.objective == "mlm") {
      QKV_CHECK_ARGS(o.labelled.empty() && o.valid_labelled.empty() && o.init.empty(),
                     "--objective mlm pretrains on --text FILE; --labelled, --valid-labelled and --init are for "
                     "--objective classify");
      QKV_CHECK_ARGS(!o.text.empty() || resuming, "--objective mlm needs --text FILE (and --output-dir DIR)");
      return;
    }
    QKV_CHECK_ARGS(o.text.empty() && o.valid_text.empty(),
                   "--objective classify trains on --labelled FILE (label<TAB>text lines), not on --text/--valid-text");
    QKV_CHECK_ARGS(!o.labelled.empty() || resuming, "--objective classify needs --labelled FILE (and --output-dir DIR)");
    QKV_CHECK_ARGS(o.init.empty() || (o.config_path.empty() && !o.d_model && !o.heads && !o.layers && !o.d_ff),
                   "--init CKPT brings its own model; drop --config and the size flags");
    return;
  }
  QKV_CHECK_ARGS(o.objective.empty() && o.init.empty(), "--objective and --init are for --arch encoder-only");
  QKV_CHECK_ARGS(o.labelled.empty() && o.valid_labelled.empty(),
                 "--labelled trains a classifier: add --arch encoder-only --objective classify");
  const bool lm = o.arch == models::kDecoderOnly;
  if (lm || !o.text.empty()) {
    QKV_CHECK_ARGS(lm, "--text trains a language model: add --arch decoder-only");
    QKV_CHECK_ARGS(!corpus && !o.synthetic,
                   "--arch decoder-only trains on --text FILE, not on --src/--tgt/--tsv or --synthetic");
    QKV_CHECK_ARGS(!o.text.empty() || resuming, "--arch decoder-only needs --text FILE (and --output-dir DIR)");
    return;
  }
  QKV_CHECK_ARGS(o.valid_text.empty(), "--valid-text is for language models (--arch decoder-only --text FILE)");
  QKV_CHECK_ARGS(!(corpus && o.synthetic), "--synthetic and corpus files (--src/--tgt/--tsv) exclude each other");
  QKV_CHECK_ARGS(corpus || o.synthetic || resuming,
                 "nothing to train on: give --src FILE --tgt FILE (or --tsv FILE), or --synthetic");
}

// A text run writes OUTPUT_DIR/last, best/ and metrics.jsonl, so it needs the directory (a resumed
// run has its own; a synthetic run saves only where asked).
void check_output_dir(const TrainRequest& o) {
  QKV_CHECK_ARGS(o.synthetic || !o.out.empty() || !o.resume.empty(),
                 "give --output-dir DIR: a text run writes its checkpoints (last/, best/) and metrics.jsonl there");
}

TrainResult dispatch(const TrainRequest& o, const TrainerEvents& events, const std::atomic<bool>* stop) {
  // The writer holds the checkpoint it writes for the whole run (io/checkpoint_lock.h); a refusal
  // on rank 0 reaches the other ranks as any failure while preparing does (run_training).
  check_flag_combinations(o);
  check_output_dir(o);
  const std::string last = last_checkpoint_dir(o);
  std::optional<io::CheckpointLock> lock;
  if (!last.empty() && writer(o)) lock.emplace(last);
  if (o.arch == models::kEncoderOnly) return run_encoder_train(o, events, stop);
  const bool corpus = !o.src.empty() || !o.tgt.empty() || !o.tsv.empty();
  if (o.arch == models::kDecoderOnly) return run_lm_train(o, events, stop);
  if (corpus) return run_corpus_train(o, events, stop);
  return run_synthetic_train(o, events, stop);
}

}  // namespace

TrainResult run_training(const TrainRequest& request, const TrainerEvents& events, const std::atomic<bool>* stop) {
  if (!request.comm || request.comm->size() == 1) return dispatch(request, events, stop);
  try {
    return dispatch(request, events, stop);
  } catch (const dist::CollectiveError&) {
    throw;
  } catch (const dist::RankFailure&) {
    throw;
  } catch (const std::exception& e) {
    // Failed while preparing (reading data, loading a checkpoint): the other ranks are on their way
    // to the same check (on_rank0, or the one Trainer::run starts with); all stop with this message.
    dist::check_all_ranks(*request.comm, e.what());
    throw;
  }
}

std::string last_checkpoint_dir(const TrainRequest& request) {
  const bool text_run = !request.text.empty() || !request.src.empty() || !request.tsv.empty() ||
                        !request.labelled.empty() || request.arch != models::kEncoderDecoder;
  const std::string out = request.out.empty() ? request.resume : request.out;
  if (out.empty()) return "";
  return text_run ? out + "/last" : out;
}

}  // namespace qkv::train
