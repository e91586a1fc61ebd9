#include "qkv/train/corpus_trainer.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "qkv/core/duration.h"
#include "qkv/core/threads.h"
#include "qkv/data/batcher.h"
#include "qkv/data/parallel.h"
#include "qkv/decoding/search.h"
#include "qkv/eval/bleu.h"
#include "qkv/io/atomic_file.h"
#include "qkv/models/checkpoint.h"
#include "qkv/text/sentencepiece.h"
#include "qkv/train/clip.h"
#include "qkv/train/step.h"

namespace qkv::train {
namespace fs = std::filesystem;

namespace {

std::atomic<int> g_stop_signal{0};
extern "C" void on_stop_signal(int sig) { g_stop_signal.store(sig); }

std::vector<data::IdLine> encode_all(const text::SentencePiece& spm, const std::vector<std::string>& lines) {
  std::vector<data::IdLine> out(lines.size());
#pragma omp parallel for schedule(dynamic, 256)
  for (size_t i = 0; i < lines.size(); ++i) out[i] = spm.encode(lines[i]);
  return out;
}

// Everything beyond weights and optimizer that an exact resume needs.
struct TrainState {
  int64_t step = 0;
  data::BatcherState batcher;
  uint64_t gen_seed = 0, gen_offset = 0;
  double best = -1e300;  // best dev score so far (BLEU, or -loss without BLEU)
  int64_t bad_validations = 0;
  double elapsed = 0;    // training seconds before this run
};

nlohmann::json to_json(const TrainState& s) {
  return {{"step", s.step},         {"epoch", s.batcher.epoch},          {"batch_index", s.batcher.index},
          {"batcher_seed", s.batcher.seed}, {"generator_seed", s.gen_seed}, {"generator_offset", s.gen_offset},
          {"best", s.best},         {"bad_validations", s.bad_validations}, {"elapsed_seconds", s.elapsed}};
}

TrainState from_json(const std::string& path) {
  std::ifstream in(path);
  QKV_CHECK(in, path << ": missing (not a training checkpoint)");
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    TrainState s;
    s.step = j.at("step").get<int64_t>();
    s.batcher = {j.at("epoch").get<int64_t>(), j.at("batch_index").get<int64_t>(), j.at("batcher_seed").get<uint64_t>()};
    s.gen_seed = j.at("generator_seed").get<uint64_t>();
    s.gen_offset = j.at("generator_offset").get<uint64_t>();
    s.best = j.at("best").get<double>();
    s.bad_validations = j.at("bad_validations").get<int64_t>();
    s.elapsed = j.at("elapsed_seconds").get<double>();
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": " + e.what());
  }
}

void save_checkpoint(const std::string& dir, const models::Transformer& model, const std::string& spm_path,
                     const Adam* opt, const TrainState* state) {
  models::save_model(dir, model);
  for (const char* name : {models::kSourceSpmFile, models::kTargetSpmFile})
    fs::copy_file(spm_path, dir + "/" + name, fs::copy_options::overwrite_existing);
  if (opt) opt->save(dir + "/optimizer.safetensors");
  if (state) io::write_file_atomic(dir + "/train_state.json", to_json(*state).dump(2) + "\n");
}

// OUT/step-NNNNNNN for `qkv average`: written after a validation, the oldest beyond
// keep_checkpoints deleted (zero-padded names sort by step).
void keep_step_checkpoint(const CorpusTrainOptions& o, int64_t step, const models::Transformer& model,
                          const std::string& spm_path) {
  if (o.keep_checkpoints <= 0) return;
  char name[32];
  std::snprintf(name, sizeof name, "step-%07lld", static_cast<long long>(step));
  save_checkpoint(o.out + "/" + name, model, spm_path, nullptr, nullptr);
  std::vector<std::string> kept;
  for (const auto& e : fs::directory_iterator(o.out)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.size() == 12 && n.rfind("step-", 0) == 0) kept.push_back(n);
  }
  std::sort(kept.begin(), kept.end());
  for (size_t i = 0; i + static_cast<size_t>(o.keep_checkpoints) < kept.size(); ++i) fs::remove_all(o.out + "/" + kept[i]);
}

struct DevSet {
  std::vector<data::IdLine> src, tgt_full;  // tgt_full = [BOS] tgt [EOS]
  std::vector<std::string> refs;            // raw target text, for BLEU
};

struct DevResult {
  double loss = 0;
  double bleu = -1;  // -1: not computed
};

DevResult validate(const models::Transformer& model, const DevSet& dev, const text::SentencePiece& spm,
                   const CorpusTrainOptions& o) {
  DevResult r;
  if (dev.src.empty()) return r;
  r.loss = score(model, dev.src, dev.tgt_full, 32).mean_loss();
  if (o.valid_bleu_sentences >= 0) {
    const size_t n = o.valid_bleu_sentences == 0 ? dev.src.size()
                                                 : std::min(dev.src.size(), static_cast<size_t>(o.valid_bleu_sentences));
    decoding::SearchOptions so;
    so.beam_size = o.valid_beam;
    std::vector<std::string> hyps, refs(dev.refs.begin(), dev.refs.begin() + static_cast<int64_t>(n));
    for (size_t begin = 0; begin < n; begin += 32) {
      const size_t end = std::min(n, begin + 32);
      const std::vector<data::IdLine> batch(dev.src.begin() + begin, dev.src.begin() + end);
      if (o.valid_beam == 1) {
        for (const auto& h : decoding::greedy_search(model, batch, so)) hyps.push_back(spm.decode(h.tokens));
      } else {
        for (const auto& hs : decoding::beam_search(model, batch, so)) hyps.push_back(spm.decode(hs[0].tokens));
      }
    }
    r.bleu = eval::corpus_bleu(hyps, {refs}).score;
  }
  return r;
}

}  // namespace

int train_on_corpus(const CorpusTrainOptions& o) {
  QKV_CHECK(!o.out.empty(), "corpus training needs --out DIR");
  QKV_CHECK(!o.tsv.empty() || (!o.src.empty() && !o.tgt.empty()), "corpus training needs --src and --tgt, or --tsv");
  QKV_CHECK(o.keep_checkpoints >= 0, "--keep-checkpoints must be >= 0, got " << o.keep_checkpoints);
  QKV_CHECK(o.too_long == "drop" || o.too_long == "truncate", "--too-long must be drop or truncate, got '" << o.too_long << "'");
  check_schedule(o.schedule);
  fs::create_directories(o.out);
  const std::string spm_path = o.out + "/spm.model";
  const std::string last = o.out + "/last", best = o.out + "/best";

  // Data and vocabulary.
  data::ParallelText train_text = o.tsv.empty() ? data::read_parallel(o.src, o.tgt) : data::read_parallel_tsv(o.tsv);
  std::fprintf(stderr, "qkv train: %lld training pairs (%lld with an empty side skipped)\n",
               static_cast<long long>(train_text.size()), static_cast<long long>(train_text.empty_dropped));
  if (!fs::exists(spm_path)) {
    QKV_CHECK(!o.resume, spm_path << ": missing; cannot resume without the run's SentencePiece model");
    // Joint vocabulary over both sides of the training text, written as plain files for the trainer.
    const std::string joint = o.out + "/spm_input.txt";
    {
      std::ofstream f(joint);
      for (const auto& s : train_text.src) f << s << '\n';
      for (const auto& t : train_text.tgt) f << t << '\n';
      QKV_CHECK(f, joint << ": write failed");
    }
    text::SpmTrainOptions so;
    so.vocab_size = o.spm_vocab;
    so.model_type = o.spm_type;
    so.input_sentence_size = o.spm_sample;
    so.seed = o.seed;
    so.num_threads = num_threads();
    text::train_sentencepiece({joint}, o.out + "/spm", so);
    fs::remove(joint);
  }
  const text::SentencePiece spm(spm_path);
  std::vector<data::IdLine> src_ids = encode_all(spm, train_text.src), tgt_ids = encode_all(spm, train_text.tgt);

  DevSet dev;
  if (!o.valid_src.empty()) {
    const data::ParallelText d = data::read_parallel(o.valid_src, o.valid_tgt);
    dev.src = encode_all(spm, d.src);
    const std::vector<data::IdLine> t = encode_all(spm, d.tgt);
    for (size_t i = 0; i < t.size(); ++i) {
      data::IdLine full{spm.bos_id()};
      full.insert(full.end(), t[i].begin(), t[i].end());
      full.push_back(spm.eos_id());
      const int64_t cap = o.model.max_seq_length;
      if (static_cast<int64_t>(dev.src[i].size()) > cap) dev.src[i].resize(cap);
      if (static_cast<int64_t>(full.size()) > cap + 1) {  // keep EOS last
        full.resize(cap + 1);
        full.back() = spm.eos_id();
      }
      dev.tgt_full.push_back(std::move(full));
    }
    dev.refs = d.tgt;
  }

  // Model, optimizer, state.
  std::unique_ptr<models::Transformer> model;
  TrainState st;
  if (o.resume) {
    model = models::load_model(last, o.seed);
    st = from_json(last + "/train_state.json");
    model->generator().set_state(st.gen_seed, st.gen_offset);
  } else {
    models::TransformerConfig c = o.model;
    c.src_vocab_size = c.tgt_vocab_size = spm.vocab_size();
    c.pad_id = spm.pad_id();
    c.bos_id = spm.bos_id();
    c.eos_id = spm.eos_id();
    model = std::make_unique<models::Transformer>(c, o.seed);
  }
  const models::TransformerConfig& c = model->config();
  QKV_CHECK(c.src_vocab_size == spm.vocab_size() && c.tgt_vocab_size == spm.vocab_size(),
            last << ": checkpoint vocabulary " << c.src_vocab_size << " does not match " << spm_path << " ("
                 << spm.vocab_size() << ")");
  model->train();
  model->set_recompute_ffn(o.recompute_ffn);
  Adam opt(model->named_parameters(), AdamOptions{o.schedule.lr, 0.9, 0.98, 1e-9, 0.0});
  if (o.resume) opt.load(last + "/optimizer.safetensors");
  Schedule schedule = o.schedule;
  schedule.d_model = c.d_model;

  data::BatcherOptions bo;
  bo.pad_id = c.pad_id;
  bo.bos_id = c.bos_id;
  bo.eos_id = c.eos_id;
  bo.max_tokens = o.max_tokens;
  bo.max_src_len = c.max_seq_length;
  bo.max_tgt_len = c.max_seq_length;
  bo.too_long = o.too_long == "drop" ? data::LengthPolicy::Drop : data::LengthPolicy::Truncate;
  bo.seed = o.seed;
  data::Batcher batcher(std::move(src_ids), std::move(tgt_ids), bo);
  std::fprintf(stderr, "qkv train: %s\n", batcher.stats().summary().c_str());
  if (o.resume) batcher.restore(st.batcher);

  int64_t params = 0;
  for (const Var& p : model->parameters()) params += p.value().numel();
  std::fprintf(stderr,
               "qkv train: %lld parameters (d_model %lld, %lld heads, %lld layers, d_ff %lld, vocab %lld), "
               "%lld batches/epoch of <= %lld tokens, %d threads%s\n",
               static_cast<long long>(params), static_cast<long long>(c.d_model), static_cast<long long>(c.num_heads),
               static_cast<long long>(c.num_layers), static_cast<long long>(c.d_ff),
               static_cast<long long>(c.tgt_vocab_size), static_cast<long long>(batcher.batches_per_epoch()),
               static_cast<long long>(o.max_tokens), num_threads(), o.resume ? ", resumed" : "");

  g_stop_signal.store(0);
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  const bool tty = ::isatty(STDERR_FILENO);
  const auto t0 = std::chrono::steady_clock::now();
  const double elapsed_before = st.elapsed;  // training time of earlier runs (resume)
  auto elapsed = [&] {
    return elapsed_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  int64_t window_tokens = 0;
  double window_loss = 0, window_start = elapsed();
  int64_t window_steps = 0;
  auto snapshot = [&] {
    st.batcher = batcher.state();
    st.gen_seed = model->generator().seed();
    st.gen_offset = model->generator().offset();
    st.elapsed = elapsed();
    save_checkpoint(last, *model, spm_path, &opt, &st);
  };
  int64_t last_validated = -1;
  // Dev loss and BLEU; a better score saves OUT/best; --keep-checkpoints keeps OUT/step-N.
  auto run_validation = [&] {
    model->eval();
    const DevResult d = validate(*model, dev, spm, o);
    model->train();
    last_validated = st.step;
    const double dev_score = d.bleu >= 0 ? d.bleu : -d.loss;
    const bool better = dev_score > st.best;
    if (better) {
      st.best = dev_score;
      st.bad_validations = 0;
      save_checkpoint(best, *model, spm_path, nullptr, nullptr);
    } else {
      ++st.bad_validations;
    }
    keep_step_checkpoint(o, st.step, *model, spm_path);
    if (tty) std::fprintf(stderr, "\n");
    std::fprintf(stderr, "validation step %lld: dev loss %.4f%s%s\n", static_cast<long long>(st.step), d.loss,
                 d.bleu >= 0 ? ("  dev BLEU " + std::to_string(d.bleu).substr(0, 5)).c_str() : "",
                 better ? "  (best, saved)" : "");
  };
  int exit_code = 0;
  std::string stop_reason = "done";
  while (true) {
    if (o.max_steps > 0 && st.step >= o.max_steps) { stop_reason = "reached --max-steps"; break; }
    if (o.max_epochs > 0 && batcher.epoch() >= o.max_epochs) { stop_reason = "reached --max-epochs"; break; }
    if (o.time_budget > 0 && elapsed() >= o.time_budget) { stop_reason = "time budget used"; break; }
    if (g_stop_signal.load()) {
      stop_reason = "interrupted";
      exit_code = 130;
      break;
    }
    const data::Batch batch = batcher.next();
    const double lr = schedule.at(st.step + 1);
    opt.set_lr(lr);
    opt.zero_grad();
    const StepResult r = forward_backward(*model, batch.src, batch.tgt, o.label_smoothing, o.micro_batch);
    const double norm = clip_grad_norm(model->parameters(), o.clip_norm);
    opt.step();
    ++st.step;
    window_loss += r.loss;
    window_tokens += r.target_tokens;
    ++window_steps;
    if (st.step % o.log_every == 0) {
      const double now = elapsed(), rate = window_tokens / std::max(1e-9, now - window_start);
      double eta = -1;
      if (o.max_steps > 0) eta = static_cast<double>(o.max_steps - st.step) * (now - window_start) / window_steps;
      if (o.time_budget > 0) eta = std::max(0.0, o.time_budget - now);
      std::fprintf(stderr, tty ? "\rstep %lld  epoch %lld  loss %.4f  lr %.2e  |g| %.2f  %.0f tok/s  elapsed %s  eta %s   "
                               : "step %lld  epoch %lld  loss %.4f  lr %.2e  |g| %.2f  %.0f tok/s  elapsed %s  eta %s\n",
                   static_cast<long long>(st.step), static_cast<long long>(batch.epoch + 1), window_loss / window_steps,
                   lr, norm, rate, format_duration(now).c_str(), format_duration(eta).c_str());
      std::fflush(stderr);
      window_loss = 0;
      window_tokens = 0;
      window_steps = 0;
      window_start = now;
    }
    if (o.valid_every > 0 && st.step % o.valid_every == 0 && dev.src.empty()) snapshot();  // no dev set: just save
    if (o.valid_every > 0 && st.step % o.valid_every == 0 && !dev.src.empty()) {
      run_validation();
      snapshot();
      if (o.patience > 0 && st.bad_validations >= o.patience) {
        stop_reason = "early stopping (no improvement in " + std::to_string(o.patience) + " validations)";
        break;
      }
    }
  }
  if (tty) std::fprintf(stderr, "\n");
  // Training that ends between validations (budget, step or epoch limit) is validated once more, so
  // OUT/best also considers the final weights. Not after Ctrl-C: that should exit promptly.
  if (exit_code == 0 && !dev.src.empty() && last_validated != st.step && st.step > 0) run_validation();
  snapshot();
  if (!fs::exists(best + "/model.safetensors")) save_checkpoint(best, *model, spm_path, nullptr, nullptr);
  std::fprintf(stderr, "qkv train: %s at step %lld after %s; saved %s%s\n", stop_reason.c_str(),
               static_cast<long long>(st.step), format_duration(elapsed()).c_str(), last.c_str(),
               exit_code ? " (resume with --resume)" : "");
  return exit_code;
}

}  // namespace qkv::train
