// qkv train --synthetic [--preset seed|tiny] [--task random|copy] [--steps N] [--batch B] [--len L] ...
// qkv train --src FILE --tgt FILE --out DIR [--valid-src F --valid-tgt F] ...
// qkv train --arch decoder-only --text FILE --out DIR [--valid-text F] [--block-size N] ...
// qkv train --arch encoder-only --objective mlm --text FILE --out DIR [--valid-text F] ...
// qkv train --arch encoder-only --objective classify --labelled FILE --out DIR [--valid-labelled F] [--init CKPT]
//
// --preset seed (default) is seed 000's example: vocab 5000, d_model 512, 8 heads, 6 layers,
// d_ff 2048, max length 100, dropout 0.1, one random 64 x 100 batch, Adam(1e-4, (0.9, 0.98), 1e-9).
// --preset tiny learns a copy task in seconds, for a first run.
// Both run the library's train::Trainer; this file maps flags to it, shows progress, and turns
// Ctrl-C (SIGINT) and SIGTERM into a stop request that saves the last checkpoint (exit 130).
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <memory>
#include <optional>

#include "qkv/cli/commands.h"
#include "qkv/cli/train_progress.h"
#include "qkv/cli/validators.h"
#include "qkv/core/duration.h"
#include "qkv/core/threads.h"
#include "qkv/models/checkpoint.h"
#include "qkv/train/corpus_trainer.h"
#include "qkv/train/encoder_trainer.h"
#include "qkv/train/lm_trainer.h"

namespace qkv::cli {

namespace {
namespace fs = std::filesystem;

std::atomic<bool> g_stop_requested{false};
extern "C" void on_stop_signal(int sig) {
  g_stop_requested.store(true);
  std::signal(sig, SIG_DFL);  // a second Ctrl-C ends the process at once
}

// Ctrl-C and SIGTERM ask the trainer to stop after the current step and save.
struct StopOnSignal {
  StopOnSignal() {
    g_stop_requested.store(false);
    std::signal(SIGINT, on_stop_signal);
    std::signal(SIGTERM, on_stop_signal);
  }
  ~StopOnSignal() {
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
  }
};

struct TrainOptions {
  bool synthetic = false;
  std::string preset = "seed", task, config_path, out, resume;
  std::optional<int64_t> steps, batch, len, vocab, d_model, heads, layers, d_ff, warmup, micro_batch;
  std::optional<float> dropout, label_smoothing;
  std::optional<double> lr, clip_norm;
  std::optional<std::string> schedule;
  uint64_t seed = 0;
  int threads = 0;
  int64_t save_every = 0;
  std::optional<int64_t> log_every;  // default: every step (synthetic), every 100 steps (corpus)
  bool recompute_ffn = false;
  // Corpus training.
  std::string src, tgt, tsv, valid_src, valid_tgt, too_long = "drop", time_budget;
  int spm_vocab = 8000, valid_beam = 1;
  int64_t spm_sample = 0, max_tokens = 4096, max_epochs = 0, valid_every = 1000, valid_bleu_sentences = 200,
          patience = 0, keep_checkpoints = 0;
  std::optional<int64_t> max_len;
  // Language-model training (--arch decoder-only).
  std::string arch = models::kEncoderDecoder, text, valid_text;
  int64_t block_size = 128;
  std::optional<std::string> optimizer;
  std::optional<double> weight_decay;
  // Encoder-only training (--arch encoder-only).
  std::string objective, labelled, valid_labelled, init;
};

// A resumed run keeps the checkpoint's model. Model flags given with --resume must agree with it:
// silently ignoring `--d-model 512` would train a different model than the user asked for.
void check_resume_model_flags(const TrainOptions& o, const std::string& config_path) {
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
  check("--max-len", o.max_len, c.max_seq_length);
  check("--vocab", o.vocab, c.src_vocab_size);
}

// The optimisation settings: a resumed run continues with the saved ones; flags given explicitly
// override them (and say so, since the run then differs from an uninterrupted one).
train::Hyper resolve_hyper(const TrainOptions& o, train::Hyper h, const std::optional<train::TrainState>& saved,
                           TrainProgress& progress) {
  if (saved && saved->has_hyper) h = saved->hyper;
  const auto override_with = [&](const char* flag, const auto& given, auto& field) {
    if (!given) return;
    if (saved && saved->has_hyper && static_cast<double>(*given) != static_cast<double>(field))
      progress.info(std::string(flag) + " " + std::to_string(*given) + " overrides the checkpoint's " +
                    std::to_string(field));
    field = *given;
  };
  if (o.schedule) {
    if (saved && saved->has_hyper && *o.schedule != h.schedule.kind)
      progress.info("--schedule " + *o.schedule + " overrides the checkpoint's " + h.schedule.kind);
    h.schedule.kind = *o.schedule;
    if (!o.lr && !(saved && saved->has_hyper)) h.schedule.lr = *o.schedule == "noam" ? 1.0 : h.schedule.lr;
  }
  override_with("--lr", o.lr, h.schedule.lr);
  override_with("--warmup", o.warmup, h.schedule.warmup);
  override_with("--clip-norm", o.clip_norm, h.clip_norm);
  override_with("--label-smoothing", o.label_smoothing, h.label_smoothing);
  override_with("--micro-batch", o.micro_batch, h.micro_batch);
  override_with("--weight-decay", o.weight_decay, h.weight_decay);
  if (o.optimizer) {
    if (saved && saved->has_hyper && *o.optimizer != h.optimizer)
      progress.info("--optimizer " + *o.optimizer + " overrides the checkpoint's " + h.optimizer);
    h.optimizer = *o.optimizer;
  }
  if (h.optimizer == "adam" && !o.weight_decay) h.weight_decay = 0;  // decay is AdamW's
  return h;
}

std::optional<train::TrainState> saved_state_if_resuming(const std::string& checkpoint, bool resuming) {
  if (!resuming) return std::nullopt;
  models::check_checkpoint_dir(checkpoint);
  return train::read_train_state(checkpoint + "/train_state.json");
}

int finish(const train::TrainResult& r, const std::string& saved_to, TrainProgress& progress) {
  progress.finished(r, saved_to);
  return r.interrupted ? 130 : 0;
}

// The model the flags describe: --config (or `base`), then each size flag given.
models::TransformerConfig model_config(const TrainOptions& o, models::TransformerConfig base) {
  models::TransformerConfig c = o.config_path.empty() ? std::move(base) : models::load_config(o.config_path);
  if (o.d_model) c.d_model = *o.d_model;
  if (o.heads) c.num_heads = *o.heads;
  if (o.layers) c.num_layers = *o.layers;
  if (o.d_ff) c.d_ff = *o.d_ff;
  if (o.dropout) c.dropout = *o.dropout;
  if (o.max_len) c.max_seq_length = *o.max_len;
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
std::optional<train::TrainState> fill_run_options(const TrainOptions& o, const train::Hyper& defaults,
                                                  train::RunOptions& r, TrainProgress& progress) {
  r.out = o.out.empty() ? o.resume : o.out;
  r.resume = !o.resume.empty();
  QKV_CHECK(o.resume.empty() || o.out.empty() || fs::path(o.resume) == fs::path(o.out),
            "--resume DIR continues the run in DIR; drop --out or make it the same");
  if (r.resume) check_resume_model_flags(o, r.out + "/last/config.json");
  std::optional<train::TrainState> saved = saved_state_if_resuming(r.out + "/last", r.resume);
  r.spm_vocab = o.spm_vocab;
  r.spm_sample = o.spm_sample;
  r.recompute_ffn = o.recompute_ffn;
  r.hyper = resolve_hyper(o, defaults, saved, progress);
  r.max_steps = o.steps.value_or(0);
  r.max_epochs = o.max_epochs;
  r.time_budget = parse_time_budget(o.time_budget);
  r.valid_every = o.valid_every;
  r.patience = o.patience;
  r.keep_checkpoints = o.keep_checkpoints;
  r.seed = o.seed;
  r.log_every = o.log_every.value_or(100);
  return saved;
}

int run_lm_train(const TrainOptions& o, TrainProgress& progress) {
  train::LmTrainOptions l;
  l.text = o.text;
  l.valid_text = o.valid_text;
  fill_run_options(o, train::default_lm_hyper(), l, progress);
  models::TransformerConfig base = models::decoder_only_defaults();
  base.max_seq_length = o.block_size;
  l.model = model_config(o, base);
  QKV_CHECK(l.model.decoder_only(), o.config_path << ": --text trains a decoder-only model, but the config is of an "
                                                  << l.model.architecture << " model");
  l.block_size = o.block_size;
  l.batch_size = o.batch.value_or(16);
  const StopOnSignal stop;
  const train::TrainResult r = train::train_language_model(l, progress.events(), &g_stop_requested);
  return finish(r, l.out + "/last", progress);
}

int run_corpus_train(const TrainOptions& o, TrainProgress& progress) {
  train::CorpusTrainOptions c;
  c.src = o.src;
  c.tgt = o.tgt;
  c.tsv = o.tsv;
  c.valid_src = o.valid_src;
  c.valid_tgt = o.valid_tgt;
  fill_run_options(o, train::default_hyper(), c, progress);
  c.model = model_config(o, c.model);
  QKV_CHECK(c.model.encoder_decoder(), (o.config_path.empty() ? "--arch" : o.config_path)
                                           << ": a" << (c.model.encoder_only() ? "n " : " ") << c.model.architecture
                                           << " model trains on --text, not on --src/--tgt");
  c.max_tokens = o.max_tokens;
  c.too_long = o.too_long;
  c.valid_bleu_sentences = o.valid_bleu_sentences;
  c.valid_beam = o.valid_beam;
  const StopOnSignal stop;
  const train::TrainResult r = train::train_on_corpus(c, progress.events(), &g_stop_requested);
  return finish(r, c.out + "/last", progress);
}

int run_mlm_train(const TrainOptions& o, TrainProgress& progress) {
  QKV_CHECK(o.labelled.empty() && o.valid_labelled.empty() && o.init.empty(),
            "--objective mlm pretrains on --text FILE; --labelled, --valid-labelled and --init are for --objective classify");
  train::MlmTrainOptions m;
  m.text = o.text;
  m.valid_text = o.valid_text;
  fill_run_options(o, train::default_mlm_hyper(), m, progress);
  models::TransformerConfig base = models::encoder_only_defaults();
  base.max_seq_length = o.block_size;
  m.model = model_config(o, base);
  QKV_CHECK(m.model.encoder_only(), o.config_path << ": --arch encoder-only, but the config is of a"
                                                  << (m.model.decoder_only() ? " " : "n ") << m.model.architecture
                                                  << " model");
  m.block_size = o.block_size;
  m.batch_size = o.batch.value_or(32);
  const StopOnSignal stop;
  const train::TrainResult r = train::train_masked_lm(m, progress.events(), &g_stop_requested);
  return finish(r, m.out + "/last", progress);
}

int run_classify_train(const TrainOptions& o, TrainProgress& progress) {
  QKV_CHECK(o.text.empty() && o.valid_text.empty(),
            "--objective classify trains on --labelled FILE (label<TAB>text lines), not on --text/--valid-text");
  QKV_CHECK(!o.labelled.empty() || !o.resume.empty(), "--objective classify needs --labelled FILE (and --out DIR)");
  QKV_CHECK(o.init.empty() || (o.config_path.empty() && !o.d_model && !o.heads && !o.layers && !o.d_ff),
            "--init CKPT brings its own model; drop --config and the size flags");
  train::ClassifyTrainOptions c;
  c.labelled = o.labelled;
  c.valid_labelled = o.valid_labelled;
  c.init = o.resume.empty() ? o.init : "";  // a resumed run has its weights already
  fill_run_options(o, train::default_classify_hyper(), c, progress);
  models::TransformerConfig base = models::encoder_only_defaults();
  base.max_seq_length = o.block_size;
  c.model = model_config(o, base);
  QKV_CHECK(c.model.encoder_only(), o.config_path << ": --arch encoder-only, but the config is of a"
                                                  << (c.model.decoder_only() ? " " : "n ") << c.model.architecture
                                                  << " model");
  c.max_tokens = o.block_size;
  c.batch_size = o.batch.value_or(32);
  const StopOnSignal stop;
  const train::TrainResult r = train::train_classifier(c, progress.events(), &g_stop_requested);
  return finish(r, c.out + "/last", progress);
}

int run_encoder_train(const TrainOptions& o) {
  const bool corpus = !o.src.empty() || !o.tgt.empty() || !o.tsv.empty();
  QKV_CHECK(!corpus && !o.synthetic, "--arch encoder-only trains on --text or --labelled, not on --src/--tgt/--tsv or --synthetic");
  QKV_CHECK(!o.objective.empty(), "--arch encoder-only needs --objective mlm (pretraining on --text) or classify "
                                  "(fine-tuning on --labelled)");
  set_num_threads(o.threads);
  TrainProgress progress(::isatty(STDERR_FILENO));
  if (o.objective == "mlm") {
    QKV_CHECK(!o.text.empty() || !o.resume.empty(), "--objective mlm needs --text FILE (and --out DIR)");
    return run_mlm_train(o, progress);
  }
  return run_classify_train(o, progress);
}

struct Plan {
  models::TransformerConfig config;
  std::string task;
  int64_t steps, batch, len;
  double lr;
};

Plan make_plan(const TrainOptions& o) {
  Plan p;
  if (o.preset == "seed") {
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
    throw Error("unknown --preset '" + o.preset + "' (expected seed or tiny)");
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
  p.config.validate();
  QKV_CHECK(p.steps >= 1, "--steps must be at least 1 for --synthetic, got " << p.steps);
  QKV_CHECK(p.batch > 0 && p.len >= 2, "--batch must be positive and --len at least 2");
  const int64_t tgt_len = p.task == "copy" ? p.len + 2 : p.len;  // copy adds BOS and EOS
  QKV_CHECK(p.len <= p.config.max_seq_length && tgt_len - 1 <= p.config.max_seq_length,
            "--len " << p.len << " exceeds the model's max_seq_length " << p.config.max_seq_length);
  return p;
}

void print_synthetic_summary(const models::Transformer& model, const train::SyntheticData& data, int64_t from,
                             int64_t to, TrainProgress& progress) {
  int64_t params = 0;
  for (const Var& p : model.parameters()) params += p.value().numel();
  const auto& c = model.config();
  progress.info("task " + data.task() + ", " + std::to_string(params) + " parameters (d_model " +
                std::to_string(c.d_model) + ", " + std::to_string(c.num_heads) + " heads, " +
                std::to_string(c.num_layers) + " layers, d_ff " + std::to_string(c.d_ff) + ", vocab " +
                std::to_string(c.tgt_vocab_size) + "), batch " + std::to_string(data.batch()) + " x " +
                std::to_string(data.len()) + ", " + std::to_string(num_threads()) + " threads, steps " +
                std::to_string(from + 1) + ".." + std::to_string(to));
}

int run_synthetic_train(const TrainOptions& o, TrainProgress& progress) {
  const bool resuming = !o.resume.empty();
  QKV_CHECK(!resuming || o.out.empty() || fs::path(o.resume) == fs::path(o.out),
            "--resume DIR continues the run in DIR; drop --out or make it the same");
  const std::string out = resuming ? o.resume : o.out;
  if (resuming) check_resume_model_flags(o, o.resume + "/config.json");
  const std::optional<train::TrainState> saved = saved_state_if_resuming(o.resume, resuming);
  Plan plan = make_plan(o);
  std::unique_ptr<models::Transformer> model = resuming ? models::load_seq2seq(o.resume, o.seed)
                                                        : std::make_unique<models::Transformer>(plan.config, o.seed);
  model->set_recompute_ffn(o.recompute_ffn);
  train::SyntheticData data(plan.task, plan.batch, plan.len, model->config().tgt_vocab_size, o.seed);
  train::Hyper defaults;
  defaults.schedule = {"constant", plan.lr, 4000, model->config().d_model};
  train::TrainerOptions t;
  t.hyper = resolve_hyper(o, defaults, saved, progress);
  t.hyper.schedule.d_model = model->config().d_model;
  t.last_dir = out;
  t.max_steps = plan.steps;
  t.save_every = o.save_every;
  t.log_every = o.log_every.value_or(1);
  t.stop_flag = &g_stop_requested;
  train::Trainer trainer(*model, data, t);
  if (saved) trainer.resume(o.resume, *saved);
  print_synthetic_summary(*model, data, trainer.step(), plan.steps, progress);
  const StopOnSignal stop;
  const train::TrainResult r = trainer.run(progress.events());
  return finish(r, out, progress);
}

int run_train(const TrainOptions& o) {
  if (o.arch == models::kEncoderOnly) return run_encoder_train(o);
  QKV_CHECK(o.objective.empty() && o.init.empty(), "--objective and --init are for --arch encoder-only");
  QKV_CHECK(o.labelled.empty() && o.valid_labelled.empty(),
            "--labelled trains a classifier: add --arch encoder-only --objective classify");
  const bool corpus = !o.src.empty() || !o.tgt.empty() || !o.tsv.empty();
  const bool lm = o.arch == models::kDecoderOnly;
  if (lm || !o.text.empty()) {
    QKV_CHECK(lm, "--text trains a language model: add --arch decoder-only");
    QKV_CHECK(!corpus && !o.synthetic, "--arch decoder-only trains on --text FILE, not on --src/--tgt/--tsv or --synthetic");
    QKV_CHECK(!o.text.empty() || !o.resume.empty(), "--arch decoder-only needs --text FILE (and --out DIR)");
    set_num_threads(o.threads);
    TrainProgress progress(::isatty(STDERR_FILENO));
    return run_lm_train(o, progress);
  }
  QKV_CHECK(o.valid_text.empty(), "--valid-text is for language models (--arch decoder-only --text FILE)");
  QKV_CHECK(!(corpus && o.synthetic), "--synthetic and corpus files (--src/--tgt/--tsv) exclude each other");
  QKV_CHECK(corpus || o.synthetic || !o.resume.empty(),
            "nothing to train on: give --src FILE --tgt FILE (or --tsv FILE), or --synthetic");
  set_num_threads(o.threads);
  TrainProgress progress(::isatty(STDERR_FILENO));
  if (corpus) return run_corpus_train(o, progress);
  return run_synthetic_train(o, progress);
}

void add_model_flags(CLI::App& app, TrainOptions& o) {
  app.add_option("--config", o.config_path, "Model config JSON (overrides the preset's model)");
  app.add_option("--vocab", o.vocab, "Vocabulary size (source and target; synthetic)")->check(FiniteRange(2, 1 << 24));
  app.add_option("--d-model", o.d_model, "Model width")->check(FiniteRange(1, 65536));
  app.add_option("--heads", o.heads, "Attention heads")->check(FiniteRange(1, 4096));
  app.add_option("--layers", o.layers, "Encoder and decoder layers")->check(FiniteRange(1, 1024));
  app.add_option("--d-ff", o.d_ff, "Feed-forward width")->check(FiniteRange(1, 65536));
  app.add_option("--dropout", o.dropout, "Dropout probability")->check(DropoutProbability());
  app.add_option("--max-len", o.max_len, "Model max_seq_length (tokens)")->check(FiniteRange(1, 1 << 20));
}

void add_optimisation_flags(CLI::App& app, TrainOptions& o) {
  app.add_option("--steps", o.steps, "Training steps (synthetic: default 100, tiny 400; corpus: 0 = no limit)")
      ->check(NonNegative());
  app.add_option("--lr", o.lr, "Learning rate (peak for inverse_sqrt, factor for noam)")->check(Positive());
  app.add_option("--schedule", o.schedule,
                 "Learning rate: inverse_sqrt (corpus default), noam or constant (synthetic default)")
      ->check(CLI::IsMember({"inverse_sqrt", "noam", "constant"}));
  app.add_option("--warmup", o.warmup, "Warm-up steps (default 4000)")->check(FiniteRange(1, 1e12));
  app.add_option("--clip-norm", o.clip_norm, "Gradient-norm clipping (0: off; corpus default 1.0)")
      ->check(NonNegative());
  app.add_option("--label-smoothing", o.label_smoothing, "Label smoothing (corpus default 0.1)")
      ->check(FiniteRange(0, 0.999999));
  app.add_option("--micro-batch", o.micro_batch,
                 "Run each batch in chunks of this many sentences, accumulating gradients (same update, less memory)")
      ->check(NonNegative());
  app.add_flag("--recompute-ffn", o.recompute_ffn,
               "Recompute feed-forward activations in backward: less memory, one extra fc1 forward per layer");
  app.add_option("--optimizer", o.optimizer, "adam (translation default) or adamw (decoder-only default)")
      ->check(CLI::IsMember({"adam", "adamw"}));
  app.add_option("--weight-decay", o.weight_decay,
                 "AdamW's decoupled weight decay on weight matrices, not biases or norms (decoder-only default 0.1)")
      ->check(FiniteRange(0, 0.999999));
  app.add_option("--seed", o.seed, "Seed for initialisation, dropout and data")->capture_default_str();
  app.add_option("--threads", o.threads, "Threads (default: $QKV_THREADS or all cores)")->check(FiniteRange(0, 4096));
}

void add_run_flags(CLI::App& app, TrainOptions& o) {
  app.add_option("--out", o.out, "Checkpoint directory (synthetic: the checkpoint; corpus: the run, with last/ and best/)");
  app.add_option("--save-every", o.save_every, "Also save the last checkpoint every N steps (0: only at validations and the end)")
      ->check(NonNegative());
  app.add_option("--resume", o.resume, "Continue the run saved in DIR exactly where it stopped");
  app.add_option("--log-every", o.log_every, "Print a progress line every N steps (default 1; corpus: 100)")
      ->check(FiniteRange(1, 1e18, "a positive number of steps"));
}

void add_synthetic_flags(CLI::App& app, TrainOptions& o) {
  app.add_flag("--synthetic", o.synthetic, "Train on synthetic ids (seed 000's random batch, or --task copy)");
  app.add_option("--preset", o.preset, "seed: seed 000's example; tiny: a small copy task that learns in seconds")
      ->capture_default_str()->check(CLI::IsMember({"seed", "tiny"}));
  app.add_option("--task", o.task, "random (seed 000: one fixed random batch) or copy")
      ->check(CLI::IsMember({"random", "copy"}));
  app.add_option("--batch", o.batch, "Sequences per batch (synthetic; decoder-only: blocks, default 16; encoder-only: blocks or sentences, default 32)")
      ->check(FiniteRange(1, 1 << 20));
  app.add_option("--len", o.len, "Sequence length")->check(FiniteRange(2, 1 << 20));
}

void add_language_model_flags(CLI::App& app, TrainOptions& o) {
  const char* g = "Language model";
  app.add_option("--arch", o.arch,
                 "Model family: encoder-decoder (translation), decoder-only (language model) or encoder-only (BERT)")
      ->capture_default_str()
      ->check(CLI::IsMember({models::kEncoderDecoder, models::kDecoderOnly, models::kEncoderOnly}))
      ->group(g);
  app.add_option("--text", o.text, "Training text for --arch decoder-only, one document or sentence a line")->group(g);
  app.add_option("--valid-text", o.valid_text, "Held-out text (validation loss and perplexity)")->group(g);
  app.add_option("--block-size", o.block_size,
                 "Tokens per training sequence (lines packed, EOS between them; encoder-only: [CLS] and [SEP] "
                 "included; classify: longer sentences are truncated)")
      ->capture_default_str()->check(FiniteRange(1, 1 << 20))->group(g);
}

void add_encoder_flags(CLI::App& app, TrainOptions& o) {
  const char* g = "Encoder-only (BERT)";
  app.add_option("--objective", o.objective,
                 "mlm: masked-LM pretraining on --text; classify: fine-tuning on --labelled (--arch encoder-only)")
      ->check(CLI::IsMember({"mlm", "classify"}))->group(g);
  app.add_option("--labelled", o.labelled, "Training sentences as label<TAB>text lines (--objective classify)")->group(g);
  app.add_option("--valid-labelled", o.valid_labelled, "Held-out label<TAB>text lines (accuracy and macro-F1)")->group(g);
  app.add_option("--init", o.init,
                 "Start from this encoder-only checkpoint (its tokenizer, embeddings, blocks and pooler; a new "
                 "classifier) instead of from scratch")->group(g);
}

void add_corpus_flags(CLI::App& app, TrainOptions& o) {
  const char* g = "Corpus";
  app.add_option("--src", o.src, "Training source text, one sentence a line")->group(g);
  app.add_option("--tgt", o.tgt, "Training target text, line-aligned with --src")->group(g);
  app.add_option("--tsv", o.tsv, "Training pairs as source<TAB>target lines (instead of --src/--tgt)")->group(g);
  app.add_option("--valid-src", o.valid_src, "Dev source text (validation loss and BLEU)")->group(g);
  app.add_option("--valid-tgt", o.valid_tgt, "Dev target text")->group(g);
  app.add_option("--spm-vocab", o.spm_vocab, "SentencePiece vocabulary size (joint)")
      ->capture_default_str()->check(FiniteRange(8, 1 << 20))->group(g);
  app.add_option("--spm-sample", o.spm_sample, "Lines sampled to train SentencePiece (0: all)")
      ->check(NonNegative())->group(g);
  app.add_option("--too-long", o.too_long, "Training pairs longer than --max-len: drop or truncate")
      ->capture_default_str()->check(CLI::IsMember({"drop", "truncate"}))->group(g);
  app.add_option("--max-tokens", o.max_tokens, "Tokens per batch (padded)")
      ->capture_default_str()->check(FiniteRange(1, 1e12))->group(g);
  app.add_option("--max-epochs", o.max_epochs, "Stop after N epochs (0: no limit)")->check(NonNegative())->group(g);
  app.add_option("--time-budget", o.time_budget, "Stop after this much training time (2h, 90m, 1h55m, 45s)")->group(g);
  app.add_option("--valid-every", o.valid_every, "Validate and save every N steps (0: only at the end)")
      ->capture_default_str()->check(NonNegative())->group(g);
  app.add_option("--valid-bleu-sentences", o.valid_bleu_sentences, "Dev sentences translated for BLEU (0: all)")
      ->capture_default_str()->check(NonNegative())->group(g);
  app.add_option("--valid-beam", o.valid_beam, "Beam size for dev BLEU")
      ->capture_default_str()->check(FiniteRange(1, 1024))->group(g);
  app.add_option("--keep-checkpoints", o.keep_checkpoints,
                 "Also keep the weights of the last N validations as DIR/step-N (for qkv average)")
      ->check(NonNegative())->group(g);
  app.add_option("--patience", o.patience, "Early stopping: validations without improvement (0: off)")
      ->capture_default_str()->check(NonNegative())->group(g);
}
}  // namespace

Runner add_train_command(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  add_synthetic_flags(app, *o);
  add_model_flags(app, *o);
  add_optimisation_flags(app, *o);
  add_run_flags(app, *o);
  add_corpus_flags(app, *o);
  add_language_model_flags(app, *o);
  add_encoder_flags(app, *o);
  return [o]() { return run_train(*o); };
}

}  // namespace qkv::cli
