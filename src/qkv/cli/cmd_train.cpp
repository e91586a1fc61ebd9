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
#include "qkv/core/threads.h"
#include "qkv/data/synthetic.h"
#include "qkv/io/atomic_file.h"
#include "qkv/models/checkpoint.h"
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
  int64_t log_every = 1;
  bool recompute_ffn = false;
};

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
  QKV_CHECK(o.synthetic || !o.resume.empty(),
            "training on a corpus is not available yet: use --synthetic (seed 000's example or --task copy)");
  set_num_threads(o.threads);
  Plan plan = make_plan(o);
  int64_t start_step = 0;
  uint64_t data_seed = o.seed;
  std::unique_ptr<models::Transformer> model;
  if (!o.resume.empty()) {
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
    const train::StepResult r = train::train_step(*model, opt, b.src, b.tgt);
    loss = r.loss;
    tokens += r.target_tokens;
    const int64_t done = step + 1 - start_step, total = plan.steps - start_step;
    if (done % o.log_every == 0 || step + 1 == plan.steps) {
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
  app.add_flag("--recompute-ffn", o->recompute_ffn,
               "Recompute feed-forward activations in backward: less memory, one extra fc1 forward per layer");
  app.add_option("--log-every", o->log_every, "Print a progress line every N steps")->capture_default_str();
  return [o]() { return run_train(*o); };
}

}  // namespace qkv::cli
