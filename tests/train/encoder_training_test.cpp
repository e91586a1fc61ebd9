// Encoder-only training through the one Trainer: BERT's masking (statistics, specials, keys), the
// packing of text into [CLS] ... [SEP] blocks, the masked-LM loss on gathered rows (equal to the
// loss over full logits), micro-batching, a masked LM and a classifier that learn, exact resume of
// both objectives, and the labelled-file reader's errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "qkv/models/checkpoint.h"
#include "qkv/models/encoder_model.h"
#include "qkv/train/encoder_data.h"
#include "qkv/train/encoder_eval.h"
#include "qkv/train/encoder_trainer.h"
#include "qkv/train/step.h"
#include "qkv/train/trainer.h"
#include "file_bytes.h"

namespace qkv::train {
namespace {
namespace fs = std::filesystem;

constexpr int32_t kPad = 0, kCls = 4, kSep = 5, kMask = 6, kVocab = 40;

models::TransformerConfig tiny_encoder(std::vector<std::string> labels = {}) {
  models::TransformerConfig c = models::encoder_only_defaults();
  c.src_vocab_size = c.tgt_vocab_size = kVocab;
  c.d_model = 16;
  c.num_heads = 2;
  c.num_layers = 2;
  c.d_ff = 32;
  c.max_seq_length = 16;
  c.dropout = 0.1f;  // on: resume must restore the RNG
  c.pad_id = kPad;
  c.cls_id = kCls;
  c.sep_id = kSep;
  c.mask_id = kMask;
  c.labels = std::move(labels);
  c.mlm_head = c.labels.empty();
  return c;
}

Masker tiny_masker(int64_t vocab = kVocab) {
  MaskingOptions m;
  m.mask_id = kMask;
  m.vocab_size = vocab;
  m.specials = {kPad, 1, 2, 3, kCls, kSep};
  return Masker(m);
}

using test_support::file_bytes;

TEST(Masking, FifteenPercentChosenThenEightyTenTen) {
  const Masker masker = tiny_masker(1000);
  int64_t candidates = 0, chosen = 0, masked = 0, replaced = 0, kept = 0;
  for (uint64_t seq = 0; seq < 3000; ++seq) {
    std::vector<int32_t> ids{kCls};
    for (int i = 0; i < 60; ++i) ids.push_back(static_cast<int32_t>(7 + (seq * 131 + i * 17) % 993));
    ids.push_back(kSep);
    ids.push_back(kPad);
    const MaskedSequence m = masker.mask(ids, 42, 0, seq);
    candidates += 60;
    EXPECT_EQ(m.labels[0], -1);  // [CLS], [SEP] and padding are never chosen
    EXPECT_EQ(m.labels[61], -1);
    EXPECT_EQ(m.labels[62], -1);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (m.labels[i] == -1) {
        EXPECT_EQ(m.ids[i], ids[i]);
        continue;
      }
      EXPECT_EQ(m.labels[i], ids[i]);
      ++chosen;
      if (m.ids[i] == kMask) ++masked;
      else if (m.ids[i] == ids[i]) ++kept;
      else ++replaced;
      EXPECT_FALSE(masker.special(m.ids[i]) && m.ids[i] != kMask) << "a random replacement must not be special";
    }
  }
  EXPECT_EQ(chosen, 3000 * 9);  // round(0.15 * 60) per sequence
  EXPECT_NEAR(static_cast<double>(chosen) / candidates, 0.15, 1e-9);
  EXPECT_NEAR(static_cast<double>(masked) / chosen, 0.8, 0.01);
  EXPECT_NEAR(static_cast<double>(replaced) / chosen, 0.1, 0.01);
  EXPECT_NEAR(static_cast<double>(kept) / chosen, 0.1, 0.01);
}

TEST(Masking, IsAPureFunctionOfSeedAndKeys) {
  const Masker masker = tiny_masker();
  std::vector<int32_t> ids{kCls};
  for (int i = 0; i < 14; ++i) ids.push_back(7 + i);
  ids.push_back(kSep);
  const MaskedSequence a = masker.mask(ids, 1, 2, 3), b = masker.mask(ids, 1, 2, 3);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.labels, b.labels);
  int differ = 0;
  for (uint64_t k = 0; k < 20; ++k) differ += masker.mask(ids, 1, 2, 4 + k).labels != a.labels;
  for (uint64_t s = 0; s < 20; ++s) differ += masker.mask(ids, 2 + s, 2, 3).labels != a.labels;
  EXPECT_GT(differ, 30);
  // A sequence of specials has nothing to choose; one candidate is always chosen.
  EXPECT_EQ(masker.mask({kCls, kSep}, 1, 0, 0).labels, (std::vector<int32_t>{-1, -1}));
  EXPECT_EQ(masker.mask({kCls, 9, kSep}, 1, 0, 0).labels, (std::vector<int32_t>{-1, 9, -1}));
  MaskingOptions bad;
  bad.vocab_size = 10;
  EXPECT_THROW(Masker{bad}, Error);  // no mask_id
}

TEST(MlmData, LinesArePackedIntoClsSepBlocksWithoutPadding) {
  const std::vector<data::IdLine> lines{{7, 8, 9}, {10}, {11, 12}};
  // stream 7 8 9 SEP 10 SEP 11 12 SEP; chunks of 3
  const std::vector<data::IdLine> blocks = mlm_blocks(lines, 5, kCls, kSep, false);
  ASSERT_EQ(blocks.size(), 3u);
  EXPECT_EQ(blocks[0], (data::IdLine{kCls, 7, 8, 9, kSep}));
  EXPECT_EQ(blocks[1], (data::IdLine{kCls, kSep, 10, kSep, kSep}));
  EXPECT_EQ(blocks[2], (data::IdLine{kCls, 11, 12, kSep, kSep}));
  EXPECT_EQ(mlm_blocks({{7, 8, 9, 10}}, 5, kCls, kSep, false).size(), 1u);  // tail [10 SEP] dropped
  EXPECT_EQ(mlm_blocks({{7, 8, 9, 10}}, 5, kCls, kSep, true).back(), (data::IdLine{kCls, 10, kSep, kSep}));
  EXPECT_THROW(mlm_blocks(lines, 2, kCls, kSep, false), Error);
}

std::vector<data::IdLine> periodic_lines(int n) {
  std::vector<data::IdLine> lines;
  for (int i = 0; i < n; ++i) lines.push_back({7, 8, 9, 10, 11, 12, static_cast<int32_t>(13 + i % 3)});
  return lines;
}

// The loss over gathered rows equals the loss over every position's logits with unchosen labels
// ignored, and so do the gradients (the gather's backward scatters into the hidden states).
TEST(MaskedLmLoss, GatheredRowsGiveTheFullLogitsLossAndGradients) {
  models::TransformerConfig c = tiny_encoder();
  c.dropout = c.attention_dropout = 0.f;
  models::EncoderModel model(c, 3);
  MaskedLmData data(mlm_blocks(periodic_lines(20), 12, kCls, kSep, false), tiny_masker(), 4, 5);
  const data::Batch b = data.next();
  model.zero_grad();
  const float gathered = forward_backward(model, masked_lm(), b).loss;
  const std::vector<float> g1 = model.token_embedding.weight.grad().to_vector();
  model.zero_grad();
  float full = 0;
  {
    Graph graph;
    const GraphScope scope(graph);
    const Var logits = model.mlm_logits(model.encode({b.tgt, Tensor(), Tensor()}));
    const Var loss = fn::cross_entropy(fn::reshape(logits, Dims{-1, kVocab}), b.labels.reshape(Dims{-1}), -1);
    full = loss.value().item();
    graph.backward(loss, Tensor::full(loss.shape(), 1.f));
  }
  const std::vector<float> g2 = model.token_embedding.weight.grad().to_vector();
  EXPECT_NEAR(gathered, full, 1e-5);
  ASSERT_EQ(g1.size(), g2.size());
  for (size_t i = 0; i < g1.size(); ++i) EXPECT_NEAR(g1[i], g2[i], 1e-5) << i;
}

TEST(MaskedLmLoss, MicroBatchesGiveTheWholeBatchLoss) {
  models::TransformerConfig c = tiny_encoder({"a", "b"});
  c.dropout = c.attention_dropout = 0.f;
  c.mlm_head = true;
  models::EncoderModel model(c, 3);
  MaskedLmData mlm(mlm_blocks(periodic_lines(20), 12, kCls, kSep, false), tiny_masker(), 5, 5);
  const data::Batch b = mlm.next();
  EXPECT_NEAR(forward_backward(model, masked_lm(), b).loss, forward_backward(model, masked_lm(), b, 0.f, 2).loss, 1e-5);
  ClassificationData cls({{kCls, 7, kSep}, {kCls, 8, 9, 10, kSep}, {kCls, 11, kSep}}, {0, 1, 1}, kPad, 3, 1);
  const data::Batch cb = cls.next();
  EXPECT_EQ(cb.tgt.size(1), 5);  // padded to the longest
  EXPECT_NEAR(forward_backward(model, classification(), cb).loss,
              forward_backward(model, classification(), cb, 0.f, 2).loss, 1e-5);
}

TEST(MaskedLmTraining, LossFallsOnARepeatingText) {
  models::TransformerConfig c = tiny_encoder();
  c.dropout = c.attention_dropout = 0.f;
  models::EncoderModel model(c, 1);
  const std::vector<data::IdLine> blocks = mlm_blocks(periodic_lines(40), 12, kCls, kSep, false);
  const Masker masker = tiny_masker();
  std::vector<MaskedSequence> dev;
  for (size_t i = 0; i < blocks.size(); ++i) dev.push_back(masker.mask(blocks[i], 99, 0, i));
  const MaskedLmScore before = masked_lm_score(model, dev, 8);
  MaskedLmData data(blocks, masker, 8, 1);
  TrainerOptions o;
  o.hyper = default_mlm_hyper();
  o.hyper.schedule = {"constant", 3e-3, 1, 16};
  o.max_steps = 1000;  // about 1 s; one position of each 12-token block is chosen
  Trainer(model, data, o).run();
  const MaskedLmScore after = masked_lm_score(model, dev, 8);
  EXPECT_NEAR(before.loss, std::log(static_cast<double>(kVocab)), 0.5);  // BERT's initialisation: near uniform
  EXPECT_LT(after.loss, 0.5 * before.loss);
  EXPECT_GT(after.accuracy, 0.5) << before.loss << " -> " << after.loss;
  EXPECT_GT(before.positions, 0);
}

// Three labels, each marked by one token of its own range among shared filler; label and length
// are drawn independently, so the length says nothing about the label.
void synthetic_sentences(int n, uint64_t seed, std::vector<data::IdLine>& rows, std::vector<int32_t>& labels) {
  std::mt19937_64 rng(seed);
  for (int i = 0; i < n; ++i) {
    const auto label = static_cast<int32_t>(rng() % 3);
    const int len = 3 + static_cast<int>(rng() % 6), marker = static_cast<int>(rng() % static_cast<uint64_t>(len));
    data::IdLine r{kCls};
    for (int j = 0; j < len; ++j)
      r.push_back(static_cast<int32_t>(j == marker ? 7 + label * 4 + rng() % 4 : 20 + rng() % 15));
    r.push_back(kSep);
    rows.push_back(r);
    labels.push_back(label);
  }
}

TEST(ClassificationTraining, LearnsASyntheticTaskFarAboveChance) {
  models::TransformerConfig c = tiny_encoder({"x", "y", "z"});
  c.dropout = c.attention_dropout = 0.f;
  models::EncoderModel model(c, 2);
  std::vector<data::IdLine> rows, dev_rows;
  std::vector<int32_t> labels, dev_labels;
  synthetic_sentences(200, 0, rows, labels);
  synthetic_sentences(90, 1, dev_rows, dev_labels);
  ClassificationData data(rows, labels, kPad, 16, 3);
  TrainerOptions o;
  o.hyper = default_classify_hyper();
  o.hyper.schedule = {"constant", 3e-3, 1, 16};
  o.max_steps = 200;
  Trainer(model, data, o).run();
  model.eval();
  const ClassificationScore s = classification_score(class_probabilities(model, dev_rows, 7), dev_labels);
  EXPECT_GT(s.accuracy, 0.9) << "chance is 1/3";
  EXPECT_GT(s.macro_f1, 0.9);
}

TEST(ClassificationScore, AccuracyAndMacroF1) {
  // gold 0 0 1 2, predicted 0 1 1 1: accuracy 2/4; F1: label 0 2/3, label 1 2*1/(3+1) = 1/2, label 2 0.
  const Tensor p = Tensor::from_vector(Dims{4, 3}, {0.8f, 0.1f, 0.1f, 0.2f, 0.7f, 0.1f, 0.1f, 0.8f, 0.1f, 0.3f, 0.4f, 0.3f});
  const ClassificationScore s = classification_score(p, {0, 0, 1, 2});
  EXPECT_DOUBLE_EQ(s.accuracy, 0.5);
  EXPECT_NEAR(s.macro_f1, (2.0 / 3 + 0.5 + 0) / 3, 1e-12);
  // Rows gold, columns predicted: what metrics.jsonl logs and `qkv plot` draws with these F1s.
  EXPECT_EQ(s.confusion, (std::vector<std::vector<int64_t>>{{1, 1, 0}, {0, 1, 0}, {0, 1, 0}}));
}

TrainResult train_encoder(const std::string& dir, bool classify, int64_t steps, bool resume) {
  std::unique_ptr<models::EncoderModel> model =
      resume ? models::load_encoder(dir)
             : std::make_unique<models::EncoderModel>(tiny_encoder(classify ? std::vector<std::string>{"x", "y", "z"}
                                                                            : std::vector<std::string>{}),
                                                      11);
  std::vector<data::IdLine> rows;
  std::vector<int32_t> labels;
  synthetic_sentences(30, 0, rows, labels);
  std::unique_ptr<TrainingData> data;
  if (classify) data = std::make_unique<ClassificationData>(rows, labels, kPad, 4, 3);
  else data = std::make_unique<MaskedLmData>(mlm_blocks(rows, 10, kCls, kSep, false), tiny_masker(), 4, 3);
  TrainerOptions o;
  o.hyper = classify ? default_classify_hyper() : default_mlm_hyper();
  o.hyper.schedule = {"inverse_sqrt", 3e-3, 2, 16};
  o.hyper.micro_batch = 3;  // accumulation weighted by label counts, resumed too
  o.last_dir = dir;
  o.max_steps = steps;
  Trainer trainer(*model, *data, o);
  if (resume) trainer.resume(dir, read_train_state(dir + "/train_state.json"));
  return trainer.run();
}

TEST(EncoderTraining, ResumedRunsAreByteIdenticalToUninterruptedOnes) {
  for (const bool classify : {false, true}) {
    const std::string root = ::testing::TempDir() + "/qkv_enc_" + std::to_string(::getpid()) + (classify ? "c" : "m");
    fs::remove_all(root);
    train_encoder(root + "/full", classify, 13, false);  // more than one epoch of either data
    train_encoder(root + "/split", classify, 5, false);
    EXPECT_EQ(train_encoder(root + "/split", classify, 13, true).step, 13);
    EXPECT_EQ(file_bytes(root + "/full/model.safetensors"), file_bytes(root + "/split/model.safetensors")) << classify;
    EXPECT_EQ(file_bytes(root + "/full/optimizer.safetensors"), file_bytes(root + "/split/optimizer.safetensors"));
    EXPECT_EQ(read_train_state(root + "/split/train_state.json").kind, classify ? "classification" : "masked-lm");
    fs::remove_all(root);
  }
}

TEST(LabelledFiles, BadLinesAndUnseenLabelsNameFileAndLine) {
  const std::string dir = ::testing::TempDir() + "/qkv_labelled_" + std::to_string(::getpid());
  fs::create_directories(dir);
  std::ofstream(dir + "/ok.tsv") << "b\tone two\n\na\tthree\tfour\nb\t\n";
  const std::vector<LabelledLine> ok = read_labelled(dir + "/ok.tsv");
  ASSERT_EQ(ok.size(), 3u);
  EXPECT_EQ(ok[1].text, "three\tfour");
  EXPECT_EQ(ok[1].line, 3);
  EXPECT_EQ(collect_labels(ok), (std::vector<std::string>{"a", "b"}));
  const auto message = [](const auto& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::ofstream(dir + "/notab.tsv") << "a\tx\nno tab here\n";
  EXPECT_NE(message([&] { read_labelled(dir + "/notab.tsv"); }).find("notab.tsv:2: no TAB"), std::string::npos);
  std::ofstream(dir + "/empty.tsv") << "a\tx\n\tx\n";
  EXPECT_NE(message([&] { read_labelled(dir + "/empty.tsv"); }).find("empty.tsv:2: empty label"), std::string::npos);
  std::ofstream(dir + "/unseen.tsv") << "a\tx\nc\ty\n";
  const std::string unseen = message([&] { label_indices(read_labelled(dir + "/unseen.tsv"), {"a", "b"}, "unseen.tsv"); });
  EXPECT_NE(unseen.find("unseen.tsv:2: label 'c' is not one of"), std::string::npos) << unseen;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qkv::train
