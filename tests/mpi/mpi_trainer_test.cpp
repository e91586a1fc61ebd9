// Data parallelism over MPI against one process: N ranks give the weights and optimizer moments,
// byte for byte, of one process with one thread and --micro-batch equal to each rank's share
// (dropout on in every place it exists, gradient clipping on, uneven shares, a rank without rows),
// for an encoder-decoder (seed 000's architecture) and a decoder-only model; the overlapped and the
// after-backward all-reduce agree; a run resumed with another number of ranks continues exactly;
// a failure on one rank stops them all.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "mpi_world.h"
#include "qkv/models/causal_lm.h"
#include "qkv/models/checkpoint.h"
#include "qkv/models/transformer.h"
#include "qkv/train/lm_data.h"
#include "qkv/train/trainer.h"

namespace qkv::train {
namespace {
namespace fs = std::filesystem;

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A directory every rank names alike (rank 0's pid), removed by rank 0.
std::string shared_dir(const std::string& name) {
  dist::Communicator& w = mpi_world();
  int64_t pid = w.rank() == 0 ? ::getpid() : 0;
  w.allreduce_max(&pid, 1);
  const std::string d = ::testing::TempDir() + "/qkv_mpi_" + std::to_string(pid) + "_" + name;
  if (w.rank() == 0) fs::remove_all(d);
  w.barrier();
  return d;
}

models::TransformerConfig seq2seq_config() {
  models::TransformerConfig c;
  c.src_vocab_size = c.tgt_vocab_size = 20;
  c.d_model = 16;
  c.num_heads = 2;
  c.num_layers = 2;
  c.d_ff = 32;
  c.max_seq_length = 16;
  c.dropout = 0.1f;
  c.attention_dropout = 0.1f;
  c.ffn_dropout = 0.1f;
  return c;
}

models::TransformerConfig lm_config() {
  models::TransformerConfig c = models::decoder_only_defaults();
  c.src_vocab_size = c.tgt_vocab_size = 23;
  c.d_model = 16;
  c.num_heads = 2;
  c.num_layers = 2;
  c.d_ff = 32;
  c.max_seq_length = 12;
  c.dropout = 0.1f;
  c.attention_dropout = 0.1f;
  c.bos_id = c.eos_id = 3;
  return c;
}

struct RunSpec {
  std::string arch = "seq2seq";
  int64_t batch = 6;
  int64_t micro = 0;
  int64_t steps = 10;
  bool overlap = true;
  bool recompute = false;
  int64_t bucket_bytes = 1024;  // several buckets even for a tiny model
  bool resume = false;
  std::string precision = "float32";  // Hyper::precision
};

// Trains into `dir` with `comm` (rank 0 writes), from scratch or resuming from dir.
void train(const std::string& dir, dist::Communicator& comm, const RunSpec& run) {
  std::unique_ptr<models::Model> model;
  if (run.arch == "seq2seq")
    model = run.resume ? std::unique_ptr<models::Model>(models::load_seq2seq(dir))
                       : std::make_unique<models::Transformer>(seq2seq_config(), 7);
  else
    model = run.resume ? std::unique_ptr<models::Model>(models::load_causal_lm(dir))
                       : std::make_unique<models::CausalLM>(lm_config(), 11);
  model->set_recompute_ffn(run.recompute);
  std::unique_ptr<TrainingData> data;
  if (run.arch == "seq2seq") {
    data = std::make_unique<SyntheticData>("copy", run.batch, 10, 20, 3);
  } else {
    std::vector<int32_t> stream(300);  // 37 blocks of 8: batches of 4 end an epoch with 1 block
    for (size_t i = 0; i < stream.size(); ++i) stream[i] = static_cast<int32_t>((i * 7 + i / 5) % 23);
    data = std::make_unique<LanguageModelData>(stream, 8, run.batch, 3);
  }
  TrainerOptions o;
  o.hyper.schedule = {"inverse_sqrt", 3e-3, 3, 16};
  o.hyper.clip_norm = 0.5;
  o.hyper.label_smoothing = 0.1f;
  o.hyper.micro_batch = run.micro;
  o.hyper.precision = run.precision;
  if (run.arch == "lm") {
    o.hyper.optimizer = "adamw";
    o.hyper.weight_decay = 0.1;
  }
  o.last_dir = dir;
  o.max_steps = run.steps;
  o.comm = &comm;
  o.overlap = run.overlap;
  o.bucket_bytes = run.bucket_bytes;
  Trainer trainer(*model, *data, o);
  if (run.resume) trainer.resume(dir, read_train_state(dir + "/train_state.json"));
  const TrainResult r = trainer.run();
  EXPECT_EQ(r.step, run.steps);
  if (comm.size() > 1) {
    EXPECT_GT(r.allreduce_bytes, 0);
    if (run.bucket_bytes < 4096) {
      EXPECT_GT(r.buckets, 1);
    }
    // With overlap, buckets of the later layers start while backward runs on the earlier ones.
    if (run.overlap && r.buckets > 1) {
      EXPECT_GT(r.buckets_in_backward, 0);
    }
    if (!run.overlap) {
      EXPECT_EQ(r.buckets_in_backward, 0);
    }
  }
}

// Rank 0: the files of two checkpoints are the same bytes.
void expect_same_checkpoint(const std::string& a, const std::string& b) {
  if (mpi_world().rank() != 0) return;
  for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
    const std::string x = file_bytes(a + "/" + f), y = file_bytes(b + "/" + f);
    ASSERT_FALSE(x.empty()) << a << "/" << f;
    EXPECT_TRUE(x == y) << f << " of " << a << " and " << b << " differ";
  }
}

// The run on every rank, then on rank 0 alone with micro-batches of one rank's share.
void expect_ranks_equal_micro_batches(const std::string& name, RunSpec run) {
  dist::Communicator& world = mpi_world();
  const std::string root = shared_dir(name);
  const int64_t share = (run.batch + world.size() - 1) / world.size();
  train(root + "/ranks", world, run);
  world.barrier();
  if (world.rank() == 0) {
    RunSpec one = run;
    one.micro = share;
    train(root + "/one", dist::single_process(), one);
    expect_same_checkpoint(root + "/ranks", root + "/one");
    fs::remove_all(root);
  }
  world.barrier();
}

TEST(MpiTrainer, RanksEqualOneProcessWithMicroBatchesOfTheirShare) {
  expect_ranks_equal_micro_batches("seq2seq", RunSpec{});
}

TEST(MpiTrainer, UnevenSharesAndRecomputedFeedForward) {
  RunSpec run;
  run.batch = 5;  // 3 + 2 rows
  run.recompute = true;
  expect_ranks_equal_micro_batches("uneven", run);
}

TEST(MpiTrainer, DecoderOnlyWithARankWithoutRows) {
  RunSpec run;
  run.arch = "lm";
  run.batch = 4;
  run.steps = 12;  // crosses the end of epoch 0: its last batch has one block, rank 1 none
  expect_ranks_equal_micro_batches("lm", run);
}

// Mixed precision (--precision bf16) keeps the guarantee: its products do not depend on which rows
// share them either (kernels/bf16_gemm.h).
TEST(MpiTrainer, Bf16PrecisionRanksEqualOneProcess) {
  RunSpec run;
  run.precision = "bf16";
  expect_ranks_equal_micro_batches("bf16", run);
  run.arch = "lm";
  run.batch = 4;
  expect_ranks_equal_micro_batches("bf16_lm", run);
}

TEST(MpiTrainer, OverlappedAndAfterBackwardAllReduceAgree) {
  dist::Communicator& world = mpi_world();
  const std::string root = shared_dir("overlap");
  RunSpec run;
  run.recompute = true;
  train(root + "/overlap", world, run);
  run.overlap = false;
  train(root + "/after", world, run);
  run.overlap = true;
  run.bucket_bytes = 1 << 30;  // one bucket
  train(root + "/one_bucket", world, run);
  world.barrier();
  expect_same_checkpoint(root + "/overlap", root + "/after");
  expect_same_checkpoint(root + "/overlap", root + "/one_bucket");
  if (world.rank() == 0) fs::remove_all(root);
  world.barrier();
}

TEST(MpiTrainer, ResumeWithAnotherNumberOfRanks) {
  dist::Communicator& world = mpi_world();
  const std::string root = shared_dir("resume");
  RunSpec run;
  run.steps = 8;
  train(root + "/full", world, run);
  run.steps = 4;
  train(root + "/split", world, run);
  world.barrier();
  if (world.rank() == 0) {  // the rest in one process with micro-batches of the ranks' share
    RunSpec rest = run;
    rest.steps = 8;
    rest.resume = true;
    rest.micro = (run.batch + world.size() - 1) / world.size();
    train(root + "/split", dist::single_process(), rest);
    expect_same_checkpoint(root + "/full", root + "/split");
    fs::remove_all(root);
  }
  world.barrier();
}

TEST(MpiCommunicator, CollectivesAndAFailureOnOneRankStopsAll) {
  dist::Communicator& w = mpi_world();
  const int P = w.size(), r = w.rank();
  std::vector<float> f = {1.5f * static_cast<float>(r), 1.f};
  w.allreduce_sum(f.data(), 2);
  EXPECT_EQ(f[1], static_cast<float>(P));
  double d = r + 0.25;
  w.allreduce_sum(&d, 1);
  EXPECT_DOUBLE_EQ(d, P * (P - 1) / 2.0 + 0.25 * P);
  int64_t m = 10 * r;
  w.allreduce_max(&m, 1);
  EXPECT_EQ(m, 10 * (P - 1));
  char text[6] = "rank?";
  if (r == 0) text[4] = '0';
  w.broadcast(text, sizeof text, 0);
  EXPECT_STREQ(text, "rank0");
  const std::vector<double> all = w.gather({static_cast<double>(r), 7.0}, "a test");
  ASSERT_EQ(all.size(), 2u * static_cast<size_t>(P));
  for (int i = 0; i < P; ++i) EXPECT_EQ(all[2 * i], i);
  EXPECT_NO_THROW(dist::check_all_ranks(w, ""));
  if (P > 1) {
    try {
      dist::check_all_ranks(w, r == P - 1 ? "data.txt: cannot open" : "");
      ADD_FAILURE() << "no error on rank " << r;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "rank " + std::to_string(P - 1) + ": data.txt: cannot open");
    }
  }
}

// Rank 0 working alone (validation) while the others wait: signs of life keep them waiting past
// the timeout; silence names rank 0 within it.
TEST(MpiCommunicator, ABusyRankIsAwaitedWhileItSignalsAndNamedWhenSilent) {
  dist::Communicator& w = mpi_world();
  if (w.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const double timeout = w.timeout();
  w.set_timeout(0.4);
  double result[2] = {0, 0};
  if (w.rank() == 0) {  // 1.6 s of work, 4x the timeout, with signs of life
    for (int i = 0; i < 32; ++i) {
      ::usleep(50000);
      w.signal_alive();
    }
    result[0] = 1.5;
    result[1] = 2.5;
  }
  EXPECT_NO_THROW(w.broadcast_from_busy(result, sizeof result, 0, "validation at step 3"));
  EXPECT_EQ(result[0], 1.5);
  EXPECT_EQ(result[1], 2.5);

  if (w.rank() == 0) {  // silent for 1.6 s: the others give up after 0.4 s, naming rank 0
    ::usleep(1600000);
    result[0] = 7;
    w.broadcast_from_busy(result, sizeof result, 0, "validation at step 6");
  } else {
    try {
      w.broadcast_from_busy(result, sizeof result, 0, "validation at step 6");
      ADD_FAILURE() << "rank " << w.rank() << " waited past the timeout for a silent rank 0";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "rank " + std::to_string(w.rank()) +
                                           ": validation at step 6: rank 0 sent no sign of life for 0.4 s (it died "
                                           "or hangs)");
    }
    w.set_timeout(0);  // the late result still arrives, and nothing is left over for the next one
    w.broadcast_from_busy(result, sizeof result, 0, "validation at step 6");
    EXPECT_EQ(result[0], 7);
  }
  w.set_timeout(timeout);
  w.barrier();
}

}  // namespace
}  // namespace qkv::train
