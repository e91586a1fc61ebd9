// qkv train --synthetic [--preset seed|tiny] [--task random|copy] [--steps N] [--batch B] [--len L] ...
//
// --preset seed (default) is seed 000's example: vocab 5000, d_model 512, 8 heads, 6 layers,
// d_ff 2048, max length 100, dropout 0.1, one random 64 x 100 batch, Adam(1e-4, (0.9, 0.98), 1e-9).
// --preset tiny learns a copy task in seconds, for a first run.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "qkv/cli/commands.h"
#include "qkv/cli/progress.h"
#include "qkv/core/duration.h"
#include "qkv/core/threads.h"
#include "qkv/data/synthetic.h"
#include "qkv/io/atomic_file.h"
#include "qkv/models/checkpoint.h"
#include "qkv/train/corpus_trainer.h"
#include "qkv/train/step.h"

namespace qkv::cli {

namespace {
struct TrainOptions {
  bool synthetic = false;
  std::string preset = "seed", task, config_path, out, resume;
  std::optional<int64_t> steps, batch, len, vocab, d_model, heads, layers, d_ff;
  std::optional<float> dropout;
  std::optional<double> lr;
  float label_smoothing = 0.f;
  uint64_t seed = 0;
  int threads = 0;
  int64_t save_every = 0;
  std::optional<int64_t> log_every;  // default: every step (synthetic), every 100 steps (corpus)
  bool recompute_ffn = false;
  int64_t micro_batch = 0;
  // Corpus training.
  std::string src, tgt, tsv, valid_src, valid_tgt, schedule = "inverse_sqrt", too_long = "drop", time_budget;
  int spm_vocab = 8000, valid_beam = 1;
  int64_t spm_sample = 0, warmup = 4000, max_tokens = 4096, max_epochs = 0, valid_every = 1000,
          valid_bleu_sentences = 200, patience = 0, keep_checkpoints = 0;
  std::optional<int64_t> max_len;
  double clip_norm = 1.0;
  std::optional<float> label_smoothing_opt;
};

// A resumed run keeps the checkpoint's model. Model flags given with --resume must agree with it:
// silently ignoring `--d-model 512` would train a different model than the user asked for.
void check_resume_model_flags(const TrainOptions& o, const std::string& config_path) {
  if (!std::filesystem::exists(config_path)) return;  // load_model names the missing file
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

int run_corpus_train(const TrainOptions& o) {
  set_num_threads(o.threads);
  train::CorpusTrainOptions c;
  c.src = o.src;
  c.tgt = o.tgt;
  c.tsv = o.tsv;
  c.valid_src = o.valid_src;
  c.valid_tgt = o.valid_tgt;
  c.out = o.out.empty() ? o.resume : o.out;
  c.resume = !o.resume.empty();
  if (c.resume) check_resume_model_flags(o, c.out + "/last/config.json");
  QKV_CHECK(o.resume.empty() || o.out.empty() || o.resume == o.out, "--resume DIR continues the run in DIR; drop --out or make it the same");
  c.spm_vocab = o.spm_vocab;
  c.spm_sample = o.spm_sample;
  if (!o.config_path.empty()) c.model = models::load_config(o.config_path);
  if (o.d_model) c.model.d_model = *o.d_model;
  if (o.heads) c.model.num_heads = *o.heads;
  if (o.layers) c.model.num_layers = *o.layers;
  if (o.d_ff) c.model.d_ff = *o.d_ff;
  if (o.dropout) c.model.dropout = *o.dropout;
  if (o.max_len) c.model.max_seq_length = *o.max_len;
  c.recompute_ffn = o.recompute_ffn;
  c.micro_batch = o.micro_batch;
  c.schedule = {o.schedule, o.lr ? *o.lr : (o.schedule == "noam" ? 1.0 : 5e-4), o.warmup, c.model.d_model};
  c.clip_norm = o.clip_norm;
  c.label_smoothing = o.label_smoothing_opt ? *o.label_smoothing_opt : 0.1f;
  c.max_tokens = o.max_tokens;
  c.too_long = o.too_long;
  c.max_steps = o.steps ? *o.steps : 0;
  c.max_epochs = o.max_epochs;
  if (!o.time_budget.empty()) {
    try {
      c.time_budget = parse_duration(o.time_budget);
    } catch (const Error& e) {
      throw Error(std::string("--time-budget: ") + e.what());
    }
  }
  c.valid_every = o.valid_every;
  c.valid_bleu_sentences = o.valid_bleu_sentences;
  c.valid_beam = o.valid_beam;
  c.patience = o.patience;
  c.keep_checkpoints = o.keep_checkpoints;
  c.seed = o.seed;
  c.log_every = o.log_every.value_or(100);
  return train::train_on_corpus(c);
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
  p.config.validate();
  QKV_CHECK(p.steps >= 0 && p.batch > 0 && p.len >= 2, "--steps, --batch and --len must be positive (--len >= 2)");
  const int64_t tgt_len = p.task == "copy" ? p.len + 2 : p.len;  // copy adds BOS and EOS
  QKV_CHECK(p.len <= p.config.max_seq_length && tgt_len - 1 <= p.config.max_seq_length,
            "--len " << p.len << " exceeds the model's max_seq_length " << p.config.max_seq_length);
  return p;
}

// Everything beyond weights and optimizer that an exact resume needs.
void save_train_state(const std::string& dir, int64_t step, const Generator& gen, const Plan& plan, uint64_t seed) {
  nlohmann::json j = {{"step", step},          {"generator_seed", gen.seed()}, {"generator_offset", gen.offset()},
                      {"task", plan.task},     {"batch", plan.batch},          {"len", plan.len},
                      {"data_seed", seed},     {"lr", plan.lr}};
  io::write_file_atomic(dir + "/train_state.json", j.dump(2) + "\n");
}

void save_checkpoint(const std::string& dir, const models::Transformer& model, const train::Adam& opt, int64_t step,
                     const Plan& plan, uint64_t seed) {
  models::save_model(dir, model);
  opt.save(dir + "/optimizer.safetensors");
  save_train_state(dir, step, model.generator(), plan, seed);
}

int run_train(const TrainOptions& o) {
  const bool corpus = !o.src.empty() || !o.tgt.empty() || !o.tsv.empty();
  QKV_CHECK(!(corpus && o.synthetic), "--synthetic and corpus files (--src/--tgt/--tsv) exclude each other");
  if (corpus) return run_corpus_train(o);
  QKV_CHECK(o.synthetic || !o.resume.empty(),
            "nothing to train on: give --src FILE --tgt FILE (or --tsv FILE), or --synthetic");
  set_num_threads(o.threads);
  Plan plan = make_plan(o);
  int64_t start_step = 0;
  uint64_t data_seed = o.seed;
  std::unique_ptr<models::Transformer> model;
  if (!o.resume.empty()) {
    check_resume_model_flags(o, o.resume + "/config.json");
    model = models::load_model(o.resume, o.seed);
    plan.config = model->config();
    std::ifstream in(o.resume + "/train_state.json");
    QKV_CHECK(in, o.resume << "/train_state.json: missing (not a training checkpoint)");
    nlohmann::json st;
    try {
      st = nlohmann::json::parse(in);
      start_step = st.at("step").get<int64_t>();
      model->generator().set_state(st.at("generator_seed").get<uint64_t>(), st.at("generator_offset").get<uint64_t>());
      plan.task = st.at("task").get<std::string>();
      plan.batch = st.at("batch").get<int64_t>();
      plan.len = st.at("len").get<int64_t>();
      data_seed = st.at("data_seed").get<uint64_t>();
    } catch (const nlohmann::json::exception& e) {
      throw Error(o.resume + "/train_state.json: " + e.what());
    }
  } else {
    model = std::make_unique<models::Transformer>(plan.config, o.seed);
  }
  model->train();
  model->set_recompute_ffn(o.recompute_ffn);
  train::Adam opt(model->named_parameters(), train::AdamOptions{plan.lr, 0.9, 0.98, 1e-9, 0.0});
  if (!o.resume.empty()) opt.load(o.resume + "/optimizer.safetensors");

  int64_t params = 0;
  for (const Var& p : model->parameters()) params += p.value().numel();
  const auto& c = plan.config;
  std::fprintf(stderr,
               "qkv train: task %s, %lld parameters (d_model %lld, %lld heads, %lld layers, d_ff %lld, vocab %lld), "
               "batch %lld x %lld, %d threads, steps %lld..%lld\n",
               plan.task.c_str(), static_cast<long long>(params), static_cast<long long>(c.d_model),
               static_cast<long long>(c.num_heads), static_cast<long long>(c.num_layers), static_cast<long long>(c.d_ff),
               static_cast<long long>(c.tgt_vocab_size), static_cast<long long>(plan.batch),
               static_cast<long long>(plan.len), num_threads(), static_cast<long long>(start_step + 1),
               static_cast<long long>(plan.steps));

  Stopwatch clock;
  int64_t tokens = 0;
  float loss = 0;
  for (int64_t step = start_step; step < plan.steps; ++step) {
    const data::SyntheticBatch b =
        data::synthetic_batch(plan.task, plan.batch, plan.len, c.tgt_vocab_size, data_seed, step);
    const train::StepResult r = train::train_step(*model, opt, b.src, b.tgt, 0.f, o.micro_batch);
    loss = r.loss;
    tokens += r.target_tokens;
    const int64_t done = step + 1 - start_step, total = plan.steps - start_step;
    if (done % o.log_every.value_or(1) == 0 || step + 1 == plan.steps) {
      const double t = clock.seconds();
      std::printf("step %lld/%lld  loss %.4f  %.0f tok/s  elapsed %s  eta %s\n", static_cast<long long>(step + 1),
                  static_cast<long long>(plan.steps), loss, tokens / t, format_duration(t).c_str(),
                  format_duration(t / done * (total - done)).c_str());
      std::fflush(stdout);
    }
    if (!o.out.empty() && o.save_every > 0 && (step + 1) % o.save_every == 0)
      save_checkpoint(o.out, *model, opt, step + 1, plan, data_seed);
  }
  if (!o.out.empty()) {
    save_checkpoint(o.out, *model, opt, plan.steps, plan, data_seed);
    std::fprintf(stderr, "saved checkpoint to %s\n", o.out.c_str());
  }
  return 0;
}
}  // namespace

Runner add_train_command(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  app.add_flag("--synthetic", o->synthetic, "Train on synthetic ids (seed 000's random batch, or --task copy)");
  app.add_option("--preset", o->preset, "seed: seed 000's example; tiny: a small copy task that learns in seconds")
      ->capture_default_str();
  app.add_option("--task", o->task, "random (seed 000: one fixed random batch) or copy");
  app.add_option("--config", o->config_path, "Model config JSON (overrides the preset's model)");
  app.add_option("--steps", o->steps, "Training steps");
  app.add_option("--batch", o->batch, "Sentences per batch");
  app.add_option("--len", o->len, "Sequence length");
  app.add_option("--vocab", o->vocab, "Vocabulary size (source and target)");
  app.add_option("--d-model", o->d_model, "Model width");
  app.add_option("--heads", o->heads, "Attention heads");
  app.add_option("--layers", o->layers, "Encoder and decoder layers");
  app.add_option("--d-ff", o->d_ff, "Feed-forward width");
  app.add_option("--dropout", o->dropout, "Dropout probability");
  app.add_option("--lr", o->lr, "Adam learning rate");
  app.add_option("--seed", o->seed, "Seed for initialisation, dropout and data")->capture_default_str();
  app.add_option("--threads", o->threads, "Threads (default: $QKV_THREADS or all cores)");
  app.add_option("--out", o->out, "Checkpoint directory (written at the end and every --save-every steps)");
  app.add_option("--save-every", o->save_every, "Save a checkpoint every N steps (0: only at the end)");
  app.add_option("--resume", o->resume, "Continue from a checkpoint written by qkv train --out");
  app.add_option("--micro-batch", o->micro_batch,
                 "Run each batch in chunks of this many sentences, accumulating gradients (same update, less memory)");
  app.add_flag("--recompute-ffn", o->recompute_ffn,
               "Recompute feed-forward activations in backward: less memory, one extra fc1 forward per layer");
  app.add_option("--log-every", o->log_every, "Print a progress line every N steps (default 1; corpus: 100)");
  // Corpus training.
  app.add_option("--src", o->src, "Training source text, one sentence a line")->group("Corpus");
  app.add_option("--tgt", o->tgt, "Training target text, line-aligned with --src")->group("Corpus");
  app.add_option("--tsv", o->tsv, "Training pairs as source<TAB>target lines (instead of --src/--tgt)")->group("Corpus");
  app.add_option("--valid-src", o->valid_src, "Dev source text (validation loss and BLEU)")->group("Corpus");
  app.add_option("--valid-tgt", o->valid_tgt, "Dev target text")->group("Corpus");
  app.add_option("--spm-vocab", o->spm_vocab, "SentencePiece vocabulary size (joint)")->capture_default_str()->group("Corpus");
  app.add_option("--spm-sample", o->spm_sample, "Lines sampled to train SentencePiece (0: all)")->group("Corpus");
  app.add_option("--max-len", o->max_len, "Model max_seq_length (tokens)")->group("Corpus");
  app.add_option("--too-long", o->too_long, "Training pairs longer than --max-len: drop or truncate")
      ->capture_default_str()->group("Corpus");
  app.add_option("--schedule", o->schedule, "Learning rate: inverse_sqrt (peak --lr), noam (factor --lr) or constant")
      ->capture_default_str()->group("Corpus");
  app.add_option("--warmup", o->warmup, "Warm-up steps")->capture_default_str()->group("Corpus");
  app.add_option("--clip-norm", o->clip_norm, "Gradient-norm clipping (0: off)")->capture_default_str()->group("Corpus");
  app.add_option("--label-smoothing", o->label_smoothing_opt, "Label smoothing (default 0.1)")->group("Corpus");
  app.add_option("--max-tokens", o->max_tokens, "Tokens per batch (padded)")->capture_default_str()->group("Corpus");
  app.add_option("--max-epochs", o->max_epochs, "Stop after N epochs (0: no limit)")->group("Corpus");
  app.add_option("--time-budget", o->time_budget, "Stop after this much training time (2h, 90m, 1h55m, 45s)")->group("Corpus");
  app.add_option("--valid-every", o->valid_every, "Validate and save every N steps")->capture_default_str()->group("Corpus");
  app.add_option("--valid-bleu-sentences", o->valid_bleu_sentences, "Dev sentences translated for BLEU (0: all)")
      ->capture_default_str()->group("Corpus");
  app.add_option("--valid-beam", o->valid_beam, "Beam size for dev BLEU")->capture_default_str()->group("Corpus");
  app.add_option("--keep-checkpoints", o->keep_checkpoints,
                 "Also keep the weights of the last N validations as DIR/step-N (for qkv average)")
      ->group("Corpus");
  app.add_option("--patience", o->patience, "Early stopping: validations without improvement (0: off)")
      ->capture_default_str()->group("Corpus");
  return [o]() { return run_train(*o); };
}

}  // namespace qkv::cli
