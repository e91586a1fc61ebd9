// Training under a memory budget (train/memory_budget.h): the estimate grows with every dimension,
// the planner picks the most rows that fit and evens the chunks, --max-memory's sizes parse or are
// refused naming the flag, and a run chunked by the budget resumes bit for bit (the budget is saved
// in train_state.json; files without it never chunk on their own).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "qkv/models/checkpoint.h"
#include "qkv/models/transformer.h"
#include "qkv/train/memory_budget.h"
#include "qkv/train/objective.h"
#include "qkv/train/trainer.h"
#include "file_bytes.h"
#include "tiny_translation.h"

namespace qkv::train {
namespace {
namespace fs = std::filesystem;

models::TransformerConfig family(const std::string& architecture) {
  models::TransformerConfig c = architecture == models::kDecoderOnly   ? models::decoder_only_defaults()
                                : architecture == models::kEncoderOnly ? models::encoder_only_defaults()
                                                                       : models::TransformerConfig{};
  return c;
}

StepShape shape_of(const models::TransformerConfig& c, int64_t rows, int64_t len) {
  const int64_t src = c.encoder_decoder() ? len : 0;
  const int64_t outputs = c.encoder_only() ? rows * len * 15 / 100 : rows * len;
  return {rows, src, len, outputs, c.tgt_vocab_size};
}

constexpr int64_t kParams = 50'000'000;

TEST(MemoryBudget, EstimateGrowsWithRowsLengthAndSize) {
  for (const char* arch : {models::kEncoderDecoder, models::kDecoderOnly, models::kEncoderOnly}) {
    const models::TransformerConfig c = family(arch);
    const StepShape s = shape_of(c, 64, 100);
    int64_t last = 0;
    for (int64_t rows = 1; rows < 64; ++rows) {  // chunks (the whole batch has no accumulation buffer)
      const int64_t now = estimate_step_memory(c, kParams, false, s, rows).total();
      EXPECT_GT(now, last) << arch << " rows " << rows;
      last = now;
    }
    // Chunking keeps one more copy of the gradients: the whole batch has no accumulation buffer.
    EXPECT_EQ(estimate_step_memory(c, kParams, false, s, 64).state_bytes, kParams * 16) << arch;
    EXPECT_EQ(estimate_step_memory(c, kParams, false, s, 32).state_bytes, kParams * 20) << arch;
    const int64_t whole = estimate_step_memory(c, kParams, false, s, 64).total();
    EXPECT_GT(estimate_step_memory(c, kParams, false, shape_of(c, 64, 120), 64).total(), whole) << arch;
    models::TransformerConfig wider = c;
    wider.d_ff *= 2;
    EXPECT_GT(estimate_step_memory(wider, kParams, false, s, 64).total(), whole) << arch;
    EXPECT_LT(estimate_step_memory(c, kParams, true, s, 64).total(), whole) << arch << ": --recompute-ffn saves";
  }
}

TEST(MemoryBudget, SeedConfigurationEstimate) {
  // Seed 000's 64 x 100 batch, 6 layers: measured peak RSS 3.60 GB whole, 2.22 GB in chunks of 32.
  const models::TransformerConfig c;
  const StepShape s{64, 100, 99, 64 * 99, 5000};
  const models::Transformer model(c, 0);
  int64_t params = 0;
  for (const Var& p : model.parameters()) params += p.value().numel();
  EXPECT_NEAR(estimate_step_memory(c, params, false, s, 64).total() / 1e9, 3.60, 0.55);
  EXPECT_NEAR(estimate_step_memory(c, params, false, s, 32).total() / 1e9, 2.22, 0.35);
  // The default budget halves the batch.
  const MicroBatchPlan plan = plan_micro_batches(c, params, false, s, kAutoMemory);
  EXPECT_EQ(plan.rows, 32);
  EXPECT_EQ(plan.chunks, 2);
  // On a GPU, auto is 80% of the device: an 80 GB H100 runs the batch whole, a 2 GiB one in chunks.
  constexpr int64_t kGiB = int64_t{1} << 30;
  EXPECT_EQ(max_memory_on_gpu(kAutoMemory, 80 * kGiB), static_cast<int64_t>(0.8 * 80 * kGiB));
  EXPECT_EQ(max_memory_on_gpu(int64_t{3} << 30, 80 * kGiB), int64_t{3} << 30) << "a size given is kept";
  EXPECT_EQ(max_memory_on_gpu(0, 80 * kGiB), 0) << "no limit is kept";
  EXPECT_EQ(plan_micro_batches(c, params, false, s, max_memory_on_gpu(kAutoMemory, 80 * kGiB)).rows, 0);
  EXPECT_GT(plan_micro_batches(c, params, false, s, max_memory_on_gpu(kAutoMemory, 2 * kGiB)).chunks, 1);
  // Ranks of a data-parallel run that share a GPU split its auto budget; a size given stays whole.
  EXPECT_EQ(max_memory_on_gpu(kAutoMemory, 80 * kGiB, 4), static_cast<int64_t>(0.8 * 80 * kGiB / 4));
  EXPECT_EQ(max_memory_on_gpu(int64_t{3} << 30, 80 * kGiB, 4), int64_t{3} << 30);
}

// Which ranks share a GPU: same host and same device index; a CPU rank shares nothing.
TEST(MemoryBudget, RanksOnTheSameGpuAreThoseOfItsHostAndIndex) {
  const std::vector<RankPlacement> p = {{1, 0}, {1, 0}, {1, 1}, {2, 0}, {1, -1}, {1, -1}};
  EXPECT_EQ(ranks_on_same_gpu(p, 0), 2);
  EXPECT_EQ(ranks_on_same_gpu(p, 1), 2);
  EXPECT_EQ(ranks_on_same_gpu(p, 2), 1) << "another GPU of the host";
  EXPECT_EQ(ranks_on_same_gpu(p, 3), 1) << "GPU 0 of another host";
  EXPECT_EQ(ranks_on_same_gpu(p, 4), 1) << "on the CPU";
}

TEST(MemoryBudget, PlannerPicksTheMostRowsThatFitInEvenChunks) {
  const models::TransformerConfig c;
  const StepShape s{64, 100, 99, 64 * 99, 5000};
  for (int64_t fit : {1, 5, 21, 31, 32, 33, 50}) {
    const int64_t budget = estimate_step_memory(c, kParams, false, s, fit).total();
    const MicroBatchPlan p = plan_micro_batches(c, kParams, false, s, budget);
    EXPECT_EQ(p.largest_fitting, fit);
    EXPECT_GT(estimate_step_memory(c, kParams, false, s, fit + 1).total(), budget);
    EXPECT_TRUE(p.fits);
    EXPECT_EQ(p.chunks, (64 + fit - 1) / fit) << fit;
    EXPECT_LE(p.rows, fit);
    EXPECT_GE(p.rows * p.chunks, 64);
    EXPECT_LT((p.rows - 1) * p.chunks, 64) << fit << ": chunks as even as their count allows";
    EXPECT_LE(p.estimate.total(), budget);
  }
  EXPECT_EQ(plan_micro_batches(c, kParams, false, s, 31 * 1024 * 1024).rows, 1);  // none fits: one row at a time
  EXPECT_FALSE(plan_micro_batches(c, kParams, false, s, 31 * 1024 * 1024).fits);
  EXPECT_EQ(plan_micro_batches(c, kParams, false, s, 0).rows, 0);             // no limit
  EXPECT_EQ(plan_micro_batches(c, kParams, false, s, int64_t{1} << 40).rows, 0);  // fits whole
}

TEST(MemoryBudget, SizesParseAndNonsenseNamesTheFlag) {
  EXPECT_EQ(parse_memory_size("2G"), int64_t{2} << 30);
  EXPECT_EQ(parse_memory_size("1500M"), int64_t{1500} << 20);
  EXPECT_EQ(parse_memory_size("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(parse_memory_size("3.5GB"), int64_t{7} << 29);
  EXPECT_EQ(parse_memory_size("1t"), int64_t{1} << 40);
  EXPECT_EQ(parse_memory_size("1073741824"), int64_t{1} << 30);
  EXPECT_EQ(parse_memory_size("0"), 0);
  EXPECT_EQ(parse_memory_size("auto"), kAutoMemory);
  for (const char* bad : {"", "2X", "lots", "-1G", "nan", "inf", "2GG", "12", "1e30T"}) {
    try {
      parse_memory_size(bad);
      ADD_FAILURE() << "'" << bad << "' accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("--max-memory: '" + std::string(bad) + "'", 0), 0u) << e.what();
    }
  }
  EXPECT_EQ(format_memory_size(int64_t{2} << 30), "2.0G");
  EXPECT_EQ(format_memory_size(kAutoMemory), "auto");
}

std::string budget_dir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "/qkv_budget_" + std::to_string(::getpid()) + "_" + name;
  fs::remove_all(d);
  return d;
}

using test_support::file_bytes;

// The budget under which the copy task's 6-row batches fit `rows` rows at a time.
int64_t budget_for_rows(int64_t rows) {
  const models::Transformer model(tiny_translation_config(), 5);
  int64_t params = 0;
  for (const Var& p : model.parameters()) params += p.value().numel();
  SyntheticData data("copy", 6, 6, 20, 9);
  const StepShape s = teacher_forcing().step_shape(model, data.next());
  EXPECT_EQ(s.rows, 6);
  return estimate_step_memory(tiny_translation_config(), params, false, s, rows).total();
}

// The copy task to `steps` in `dir`, from scratch with `hyper` or resuming with the saved settings
// (as `qkv train --resume` does without flags). Collects on_info messages.
void train_copy(const std::string& dir, int64_t steps, const Hyper* hyper, std::vector<std::string>* info) {
  const bool resume = hyper == nullptr;
  std::unique_ptr<models::Transformer> model =
      resume ? models::load_seq2seq(dir) : std::make_unique<models::Transformer>(tiny_translation_config(), 5);
  SyntheticData data("copy", 6, 6, 20, 9);
  const std::optional<TrainState> saved =
      resume ? std::optional<TrainState>(read_train_state(dir + "/train_state.json")) : std::nullopt;
  TrainerOptions o;
  o.hyper = resume ? saved->hyper : *hyper;
  o.last_dir = dir;
  o.max_steps = steps;
  Trainer trainer(*model, data, o);
  if (resume) trainer.resume(dir, *saved);
  TrainerEvents events;
  events.on_info = [info](const std::string& m) { info->push_back(m); };
  trainer.run(events);
}

TEST(MemoryBudget, AutomaticMicroBatchesResumeBitForBit) {
  const std::string full = budget_dir("full"), split = budget_dir("split"), manual = budget_dir("manual");
  Hyper h;
  h.schedule = {"constant", 1e-3, 1, 16};
  h.max_memory = budget_for_rows(2);  // the 6-row batches run as 3 chunks of 2
  std::vector<std::string> info;
  train_copy(full, 8, &h, &info);
  ASSERT_EQ(info.size(), 1u);
  EXPECT_NE(info[0].find("micro-batches of 2 rows (3 chunks of the 6-row batch at step 1)"), std::string::npos) << info[0];
  info.clear();
  train_copy(split, 3, &h, &info);
  EXPECT_EQ(nlohmann::json::parse(file_bytes(split + "/train_state.json"))["hyper"]["max_memory"], h.max_memory);
  train_copy(split, 8, nullptr, &info);  // the saved budget, so the same chunks
  EXPECT_EQ(file_bytes(full + "/model.safetensors"), file_bytes(split + "/model.safetensors"));
  EXPECT_EQ(file_bytes(full + "/optimizer.safetensors"), file_bytes(split + "/optimizer.safetensors"));
  // The chunks are --micro-batch 2's exactly.
  Hyper m = h;
  m.max_memory = 0;
  m.micro_batch = 2;
  train_copy(manual, 8, &m, &info);
  EXPECT_EQ(file_bytes(full + "/model.safetensors"), file_bytes(manual + "/model.safetensors"));
  for (const std::string& d : {full, split, manual}) fs::remove_all(d);
}

TEST(MemoryBudget, StatesWithoutABudgetNeverChunk) {
  const std::string dir = budget_dir("old");
  fs::create_directories(dir);
  TrainState s;
  s.kind = "synthetic";
  nlohmann::json j = nlohmann::json::parse(train_state_to_json(s));
  EXPECT_EQ(j["hyper"]["max_memory"], kAutoMemory);
  j["hyper"].erase("max_memory");  // as written before --max-memory existed
  std::ofstream(dir + "/state.json") << j.dump();
  EXPECT_EQ(read_train_state(dir + "/state.json").hyper.max_memory, 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qkv::train
