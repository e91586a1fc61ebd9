// qkv train --synthetic [--preset seed|tiny] [--task random|copy] [--steps N] [--batch-size B] [--len L] ...
// qkv train --src FILE --tgt FILE --output-dir DIR [--valid-src F --valid-tgt F] ...
// qkv train --arch decoder-only --text FILE --output-dir DIR [--valid-text F] [--block-size N] ...
// qkv train --arch encoder-only --objective mlm --text FILE --output-dir DIR [--valid-text F] ...
// qkv train --arch encoder-only --objective classify --labelled FILE --output-dir DIR [--valid-labelled F] [--init CKPT]
//
// --preset seed (default) is seed 000's example: vocab 5000, d_model 512, 8 heads, 6 layers,
// d_ff 2048, max length 100, dropout 0.1, one random 64 x 100 batch, Adam(1e-4, (0.9, 0.98), 1e-9).
// --preset tiny learns a copy task in seconds, for a first run.
// The library's train::run_training does the work; this file maps flags to its TrainRequest, shows
// progress, and turns Ctrl-C (SIGINT) and SIGTERM into a stop request that saves the last
// checkpoint (exit 130).
//
// Under mpirun (`mpirun -np N qkv train ...`) this file owns the MPI session: every rank runs the
// same request with the world communicator; rank 0 alone prints progress. A failure before
// training stops every rank with rank 0 reporting it (exit 1); one during training is reported by
// the failing rank, which then aborts the job (MPI_Abort: every rank exits).
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include "qkv/cli/commands.h"
#include "qkv/cli/quiet.h"
#include "qkv/cli/compute_type_option.h"
#include "qkv/cli/train_progress.h"
#include "qkv/core/cuda_runtime.h"
#include "qkv/cli/validators.h"
#include "qkv/core/threads.h"
#include "qkv/dist/mpi.h"
#include "qkv/models/config.h"
#include "qkv/train/corpus_trainer.h"
#include "qkv/train/encoder_trainer.h"
#include "qkv/train/lm_trainer.h"
#include "qkv/train/memory_budget.h"
#include "qkv/train/run.h"

namespace qkv::cli {

namespace {

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

struct TrainOptions : train::TrainRequest {
  std::string device_name = "cpu";
  int threads = 0;
  double dist_timeout = 300;
  double bucket_mb = 25;
  bool no_overlap = false;
  std::string allreduce = "mpi";
  bool quiet = false;  // no progress, validation or summary lines (errors still)
};

// Threads of one rank: --threads, else $QKV_THREADS, else the cores shared by the ranks on this host.
int rank_threads(int threads) {
  if (threads > 0 || std::getenv("QKV_THREADS")) return threads;
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int ranks = local ? std::max(1, std::atoi(local)) : 1;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / ranks);
}

// This rank's device. Under mpirun, `--device cuda` hands a host's GPUs to its ranks in turn (local
// rank r takes GPU r mod count: one each when there are as many ranks as GPUs); `cuda:N` puts every
// rank on GPU N.
Device rank_device(const std::string& name, const dist::MpiSession* mpi) {
  if (!mpi || name != "cuda" || cuda::device_count() == 0) return chosen_device(name);
  return chosen_device("cuda:" + std::to_string(mpi->local_rank() % cuda::device_count()));
}

void report_allreduce(TrainProgress& progress, const train::TrainResult& r, int64_t steps) {
  if (steps <= 0 || r.allreduce_bytes == 0) return;
  char line[256];
  std::snprintf(line, sizeof line,
                "all-reduce: %.1f MiB of gradients per step in %lld buckets (%lld of %lld started during backward); "
                "%.3f s per step after backward (%.1f%% of training time)",
                static_cast<double>(r.allreduce_bytes) / (1 << 20), static_cast<long long>(r.buckets),
                static_cast<long long>(r.buckets_in_backward), static_cast<long long>(r.buckets * steps),
                r.allreduce_seconds / static_cast<double>(steps), 100.0 * r.allreduce_seconds / std::max(1e-9, r.elapsed));
  progress.info(line);
}

int run_train(const TrainOptions& o) {
  std::optional<dist::MpiSession> mpi;
  if (dist::mpi_launched()) mpi.emplace();
  train::TrainRequest request = o;
  dist::Communicator* comm = mpi && mpi->world().size() > 1 ? &mpi->world() : nullptr;
  request.comm = comm;
  request.bucket_bytes = std::max<int64_t>(4, static_cast<int64_t>(o.bucket_mb * (1 << 20)));
  request.overlap = !o.no_overlap;
  request.nccl = o.allreduce == "nccl";
  request.device = rank_device(o.device_name, mpi ? &*mpi : nullptr);
  if (comm) comm->set_timeout(o.dist_timeout);
  set_num_threads(comm ? rank_threads(o.threads) : o.threads);
  const bool quiet = o.quiet || (comm && comm->rank() != 0);
  TrainProgress progress(::isatty(STDERR_FILENO));
  const StopOnSignal stop;
  if (comm && !quiet) progress.info("data parallel: " + comm->describe() + ", " + std::to_string(num_threads()) + " threads each");
  if (request.device.is_cuda() && !quiet)
    progress.info("device: " + request.device.name() + " (" + cuda::describe(request.device) + ")" +
                  (!comm ? "" : request.nccl ? "; the ranks' gradients are summed on the GPUs (NCCL)"
                                             : "; the ranks' gradients are summed through host memory (MPI)"));
  train::TrainResult r;
  try {
    r = train::run_training(request, quiet ? train::TrainerEvents{} : progress.events(), &g_stop_requested);
  } catch (const dist::CollectiveError& e) {
    // Every rank stops; rank 0 reports the failure, and the others wait until it has (mpirun ends
    // the job as soon as one rank exits non-zero).
    if (!(comm && comm->rank() != 0)) std::fprintf(stderr, "qkv: error: %s\n", e.what());
    comm->barrier();
    return 1;
  } catch (const std::exception& e) {
    if (!comm) throw;
    std::fprintf(stderr, "qkv: error: %s\n", e.what());  // "rank R: ..."
    mpi->abort(1);
  }
  if (quiet) return r.interrupted ? 130 : 0;
  progress.finished(r, train::last_checkpoint_dir(o));
  if (comm) report_allreduce(progress, r, r.steps_run);
  return r.interrupted ? 130 : 0;
}

void add_model_flags(CLI::App& app, TrainOptions& o) {
  app.add_option("--config", o.config_path, "Model config JSON (overrides the preset's model)");
  app.add_option("--vocab", o.vocab, "Vocabulary size (source and target; synthetic)")->check(FiniteRange(2, 1 << 24));
  app.add_option("--d-model", o.d_model, "Model width")->check(FiniteRange(1, 65536));
  app.add_option("--heads", o.heads, "Attention heads")->check(FiniteRange(1, 4096));
  app.add_option("--layers", o.layers, "Encoder and decoder layers")->check(FiniteRange(1, 1024));
  app.add_option("--d-ff", o.d_ff, "Feed-forward width")->check(FiniteRange(1, 65536));
  app.add_option("--dropout", o.dropout, "Dropout probability")->check(DropoutProbability());
  app.add_option("--max-seq-length", o.max_len, "Model max_seq_length (tokens)")->check(FiniteRange(1, 1 << 20));
}

// "translation X, language model Y, masked LM Z, classifier W": a setting's default in each mode,
// read from the trainers' own defaults so that the help cannot drift from them.
std::string defaults_by_mode(const std::function<std::string(const train::Hyper&)>& field) {
  return "translation " + field(train::default_hyper()) + ", language model " + field(train::default_lm_hyper()) +
         ", masked LM " + field(train::default_mlm_hyper()) + ", classifier " + field(train::default_classify_hyper());
}

std::string number_text(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", x);
  return text;
}

void add_optimisation_flags(CLI::App& app, TrainOptions& o) {
  app.add_option("--steps", o.steps, "Training steps (synthetic: default 100, tiny 400; corpus: 0 = no limit)")
      ->check(NonNegative());
  app.add_option("--lr", o.lr,
                 "Learning rate (peak for inverse_sqrt, linear and cosine; factor for noam). Default: " +
                     defaults_by_mode([](const train::Hyper& h) { return number_text(h.schedule.lr); }) +
                     "; synthetic: the preset's (noam: 1)")
      ->check(Positive());
  app.add_option("--schedule", o.schedule,
                 "Learning rate: inverse_sqrt (corpus default), noam, constant (synthetic default), or linear / "
                 "cosine: warm-up, then down to 0 at --steps (without --steps: at the end of --time-budget, from the "
                 "pace of the warm-up)")
      ->check(CLI::IsMember({"inverse_sqrt", "noam", "constant", "linear", "cosine"}));
  app.add_option("--warmup", o.warmup,
                 "Warm-up steps. Default: " +
                     defaults_by_mode([](const train::Hyper& h) { return std::to_string(h.schedule.warmup); }) +
                     ", synthetic 4000")
      ->check(FiniteRange(1, 1e12));
  app.add_option("--clip-norm", o.clip_norm,
                 "Gradient-norm clipping (0: off). Default: " +
                     defaults_by_mode([](const train::Hyper& h) { return number_text(h.clip_norm); }) +
                     ", synthetic 0")
      ->check(NonNegative());
  app.add_option("--label-smoothing", o.label_smoothing,
                 "Label smoothing. Default: " +
                     defaults_by_mode([](const train::Hyper& h) { return number_text(h.label_smoothing); }) +
                     ", synthetic 0")
      ->check(FiniteRange(0, 0.999999));
  app.add_option("--micro-batch", o.micro_batch,
                 "Run each batch in chunks of this many sentences, accumulating gradients (same update up to float "
                 "rounding, less memory); overrides --max-memory's choice")
      ->check(NonNegative());
  app.add_option("--max-memory", o.max_memory,
                 "Memory budget of a training step (e.g. 2G, 1500M; 0: no limit; default auto = the model's "
                 "weights, gradients and Adam moments plus 1.5 GiB of activations; with --device cuda, 80% of the "
                 "GPU's memory, split among the ranks that share the GPU under mpirun). A batch whose estimated "
                 "peak exceeds it runs in micro-batches of the most rows that "
                 "fit, chosen from the flags and the batch's shape only (a resumed run keeps its budget); "
                 "--micro-batch overrides the choice")
      ->check(MemorySize());
  app.add_flag("--share-all-embeddings", o.share_all_embeddings,
               "Encoder-decoder: one matrix for the source, target and output embeddings (a joint vocabulary, as "
               "qkv train --src/--tgt builds), drawn N(0, 1/d_model) and scaled by sqrt(d_model) on the embedding "
               "side as in the paper (config share_embeddings, tie_output_embedding, scale_embeddings)");
  app.add_flag("--recompute-ffn", o.recompute_ffn,
               "Recompute feed-forward activations in backward: less memory, one extra fc1 forward per layer");
  app.add_option("--optimizer", o.optimizer, "adam (translation default) or adamw (decoder-only default)")
      ->check(CLI::IsMember({"adam", "adamw"}));
  app.add_option("--precision", o.precision,
                 "Products of linear layers: float32 (default), or bf16 operands with float32 sums (mixed precision: "
                 "weights, gradients and Adam's moments stay float32; fastest where the CPU has AVX512_BF16, and on a GPU's "
                 "tensor cores). A "
                 "resumed run keeps its precision unless this is given")
      ->check(CLI::IsMember({"float32", "bf16"}));
  app.add_option("--weight-decay", o.weight_decay,
                 "AdamW's decoupled weight decay on weight matrices, not biases or norms (decoder-only default 0.1)")
      ->check(FiniteRange(0, 0.999999));
  app.add_option("--seed", o.seed, "Seed for initialisation, dropout and data")->capture_default_str();
  app.add_option("--threads", o.threads,
                 "Threads (default: $QKV_THREADS or all cores; under mpirun, per rank: the cores over the host's ranks)")
      ->check(FiniteRange(0, 4096));
  add_device_option(app, o.device_name);
  const char* g = "Data parallel (mpirun -np N qkv train ...)";
  app.add_option("--dist-timeout", o.dist_timeout,
                 "Seconds a rank waits for the others in a training step before stopping the job naming the rank "
                 "that did not answer (0: forever)")
      ->capture_default_str()->check(NonNegative())->group(g);
  app.add_option("--allreduce-bucket-mb", o.bucket_mb, "Gradient all-reduce bucket size in MiB")
      ->capture_default_str()->check(FiniteRange(1e-6, 1e6))->group(g);
  app.add_flag("--no-overlap", o.no_overlap, "All-reduce gradients after backward instead of during it")->group(g);
  app.add_option("--allreduce", o.allreduce,
                 "How the ranks sum gradients: mpi (through host memory; any device, ranks may share a GPU) or nccl "
                 "(on the GPUs, a GPU per rank; loads libnccl.so.2)")
      ->capture_default_str()->check(CLI::IsMember({"mpi", "nccl"}))->group(g);
}

void add_run_flags(CLI::App& app, TrainOptions& o) {
  add_quiet_flag(app, o.quiet,
                 "No progress, validation, summary or note lines on stderr (errors still; metrics.jsonl is written as always)");
  app.add_option("--output-dir", o.out, "Checkpoint directory (synthetic: the checkpoint; corpus: the run, with last/ and best/)");
  app.add_option("--save-every", o.save_every, "Also save the last checkpoint every N steps (0: only at validations and the end)")
      ->check(NonNegative());
  app.add_option("--resume", o.resume, "Continue the run saved in DIR exactly where it stopped");
  app.add_option("--metrics", o.metrics,
                 "Append every progress line and validation to this JSON-lines file (default: OUTPUT_DIR/metrics.jsonl for "
                 "text runs; synthetic runs write one only when asked)");
  app.add_option("--log-every", o.log_every, "Print a progress line every N steps (default 1; corpus: 100)")
      ->check(FiniteRange(1, 1e18, "a positive number of steps"));
}

void add_synthetic_flags(CLI::App& app, TrainOptions& o) {
  app.add_flag("--synthetic", o.synthetic, "Train on synthetic ids (seed 000's random batch, or --task copy)");
  app.add_option("--preset", o.preset,
                 "The model by name. --synthetic: seed (the default: seed 000's example) or tiny (a small copy task "
                 "that learns in seconds). Text runs (--src/--tgt, --text, --labelled): tiny (d 64, 4 heads, 2 layers), "
                 "small (d 256, 4 heads, 4 layers, d_ff 1024: the Bible recipe, for a corpus of ~30k pairs), base (the "
                 "paper's base, d 512, 8 heads, 6 layers, d_ff 2048; decoder- and encoder-only: GPT-2 small's and "
                 "BERT-base's 768, 12, 12, 3072) or big (the paper's big; GPT-2 medium's, BERT-large's). Without it: "
                 "the paper's base sizes in every family. --d-model, --heads, --layers, --d-ff override")
      ->check(CLI::IsMember({"seed", "tiny", "small", "base", "big"}));
  app.add_option("--task", o.task, "random (seed 000: one fixed random batch) or copy")
      ->check(CLI::IsMember({"random", "copy"}));
  app.add_option("--batch-size", o.batch, "Sequences per batch (synthetic; decoder-only: blocks, default 16; encoder-only: blocks or sentences, default 32)")
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
  app.add_option("--text", o.text,
                 "Training text, one document or sentence a line: a language model's (--arch decoder-only) or "
                 "masked-LM pretraining's (--arch encoder-only --objective mlm)")
      ->group(g);
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
  app.add_option("--too-long", o.too_long, "Training pairs longer than --max-seq-length: drop or truncate")
      ->capture_default_str()->check(CLI::IsMember({"drop", "truncate"}))->group(g);
  app.add_option("--max-batch-tokens", o.max_tokens, "Tokens per batch (padded)")
      ->capture_default_str()->check(FiniteRange(1, 1e12))->group(g);
  app.add_option("--max-epochs", o.max_epochs, "Stop after N epochs (0: no limit)")->check(NonNegative())->group(g);
  app.add_option("--time-budget", o.time_budget, "Stop after this much training time (2h, 90m, 1h55m, 45s)")->group(g);
  app.add_option("--valid-every", o.valid_every, "Validate and save every N steps (0: only at the end)")
      ->capture_default_str()->check(NonNegative())->group(g);
  app.add_option("--valid-bleu-sentences", o.valid_bleu_sentences, "Dev sentences translated for BLEU (0: all)")
      ->capture_default_str()->check(NonNegative())->group(g);
  app.add_option("--valid-beam-size", o.valid_beam, "Beam size for dev BLEU")
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
