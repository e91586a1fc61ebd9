// Whole models train on a GPU as on the CPU: each family (seed 000's encoder-decoder, a GPT, a BERT
// with its masked-LM head, an encoder-decoder in T5's layout) built from one seed on both devices, trained 10 Adam steps with dropout
// and label smoothing on the same batch. The dropout masks are the CPU's bit for bit, so the losses
// of every step agree within 1e-4 (relative), and the first step's gradients within 1e-4 of each
// parameter's largest gradient. Then inference: translations (greedy and beam), generations and
// sentence embeddings of a trained model on the GPU are the CPU's, and a checkpoint written from
// the GPU is the CPU's file; int8 inference on the GPU is the CPU's int8.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <tuple>

#include "model/t5_layout_config.h"
#include "qkv/core/cuda_runtime.h"
#include "qkv/data/synthetic.h"
#include "qkv/decoding/continuous_generation.h"
#include "qkv/decoding/generate.h"
#include "qkv/decoding/search.h"
#include "qkv/models/causal_lm.h"
#include "qkv/models/checkpoint.h"
#include "qkv/models/encoder_model.h"
#include "qkv/models/sentence_embedding.h"
#include "qkv/models/transformer.h"
#include "qkv/nn/attention.h"
#include "qkv/nn/compute_type.h"
#include "qkv/ops/precision.h"
#include "qkv/train/adam.h"
#include "qkv/train/encoder_eval.h"
#include "qkv/train/objective.h"
#include "qkv/train/step.h"

namespace qkv {
namespace {

const Device kGpu = Device::cuda(0);

models::TransformerConfig sized(models::TransformerConfig c, int64_t vocab) {
  c.src_vocab_size = c.tgt_vocab_size = vocab;
  c.d_model = 32;
  c.num_heads = 4;
  c.num_layers = 2;
  c.d_ff = 64;
  c.max_seq_length = 24;
  c.dropout = 0.1f;
  return c;
}

struct Family {
  std::string name;
  models::TransformerConfig config;
  const train::Objective* objective;
  data::Batch batch;
};

data::Batch masked_lm_batch(int64_t B, int64_t T, int32_t vocab) {
  std::mt19937 gen(5);
  std::vector<int32_t> ids(static_cast<size_t>(B * T)), labels(ids.size(), -1);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = 7 + static_cast<int32_t>(gen() % static_cast<uint32_t>(vocab - 7));
    if (gen() % 5 == 0) labels[i] = ids[i];
  }
  data::Batch b;
  b.tgt = Tensor::from_ids(Dims{B, T}, ids);
  b.labels = Tensor::from_ids(Dims{B, T}, labels);
  return b;
}

data::Batch pairs_batch(const Tensor& src, const Tensor& tgt) {
  data::Batch b;
  b.src = src;
  b.tgt = tgt;
  return b;
}

std::vector<Family> families() {
  std::vector<Family> out;
  const data::SyntheticBatch copy = data::synthetic_batch("copy", 6, 12, 30, 3, 0);
  out.push_back({"seed000", sized(models::TransformerConfig{}, 30), &train::teacher_forcing(),
                 pairs_batch(copy.src, copy.tgt)});
  models::TransformerConfig gpt = sized(models::decoder_only_defaults(), 30);
  gpt.bos_id = gpt.eos_id = 1;
  out.push_back({"gpt", gpt, &train::teacher_forcing(), pairs_batch(Tensor(), copy.tgt)});
  models::TransformerConfig bert = sized(models::encoder_only_defaults(), 40);
  bert.pad_id = 0;
  bert.cls_id = 4;
  bert.sep_id = 5;
  bert.mask_id = 6;
  bert.mlm_head = true;
  out.push_back({"bert", bert, &train::masked_lm(), masked_lm_batch(5, 14, 40)});
  out.push_back({"t5", testing::with_t5_layout(sized(models::TransformerConfig{}, 30), 12), &train::teacher_forcing(),
                 pairs_batch(copy.src, copy.tgt)});
  return out;
}

// max |a - b| <= tol * max |a| over a parameter's gradient; noise-sized gradients (a key bias's,
// which softmax ignores) are skipped, as the CPU's own agreement tests do.
void expect_gradients_close(const models::Model& cpu, const models::Model& gpu, const std::string& what) {
  const auto a = cpu.named_parameters(), b = gpu.named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].second.grad().defined()) continue;
    ASSERT_EQ(b[i].second.value().device(), kGpu) << a[i].first;
    const std::vector<float> ga = a[i].second.grad().to_vector(), gb = b[i].second.grad().to_vector();
    double scale = 0, diff = 0;
    for (size_t j = 0; j < ga.size(); ++j) {
      scale = std::max(scale, static_cast<double>(std::fabs(ga[j])));
      diff = std::max(diff, static_cast<double>(std::fabs(ga[j] - gb[j])));
    }
    if (scale < 1e-6) continue;
    EXPECT_LE(diff, 1e-4 * scale) << what << ": gradient of " << a[i].first;
  }
}

TEST(ModelsOnGpu, EveryFamilyTrainsAsOnTheCpu) {
  ASSERT_GT(cuda::device_count(), 0) << "this suite needs a CUDA GPU";
  for (const Family& f : families()) {
    const auto cpu = models::make_model(f.config, 7), gpu = models::make_model(f.config, 7);
    gpu->to(kGpu);
    ASSERT_EQ(gpu->device(), kGpu) << f.name;
    cpu->train();
    gpu->train();
    train::AdamOptions options;
    options.lr = 1e-3;
    train::Adam opt_cpu(cpu->named_parameters(), options), opt_gpu(gpu->named_parameters(), options);
    for (int step = 0; step < 10; ++step) {
      opt_cpu.zero_grad();
      opt_gpu.zero_grad();
      const float loss_cpu = train::forward_backward(*cpu, *f.objective, f.batch, 0.1f).loss;
      const float loss_gpu = train::forward_backward(*gpu, *f.objective, f.batch, 0.1f).loss;
      EXPECT_NEAR(loss_gpu, loss_cpu, 1e-4 * std::fabs(loss_cpu)) << f.name << " step " << step;
      if (step == 0) expect_gradients_close(*cpu, *gpu, f.name);
      opt_cpu.step();
      opt_gpu.step();
    }
    // Back on the host, the trained GPU model is an ordinary CPU model.
    gpu->to(Device::cpu());
    EXPECT_EQ(gpu->device(), Device::cpu()) << f.name;
  }
}

// Masked-LM validation (the Trainer's dev loss and accuracy for `--objective mlm`) of a model on the
// GPU gives the CPU's figures: its logits and losses come back to the host to be counted (they were
// read there in place, from GPU memory, until 2026-11-30).
TEST(ModelsOnGpu, MaskedLmValidationIsTheCpus) {
  const Family bert = families()[2];
  ASSERT_EQ(bert.name, "bert");
  const auto cpu = models::make_model(bert.config, 7), gpu = models::make_model(bert.config, 7);
  gpu->to(kGpu);
  cpu->eval();
  gpu->eval();
  std::mt19937 gen(9);
  std::vector<train::MaskedSequence> dev(11);
  for (train::MaskedSequence& s : dev)
    for (int i = 0; i < 14; ++i) {
      const auto id = static_cast<int32_t>(7 + gen() % 33);
      const bool chosen = gen() % 4 == 0;
      s.ids.push_back(chosen ? bert.config.mask_id : id);
      s.labels.push_back(chosen ? id : -1);
    }
  const train::MaskedLmScore a = train::masked_lm_score(*cpu, dev, 4), b = train::masked_lm_score(*gpu, dev, 4);
  ASSERT_GT(a.positions, 0);
  EXPECT_EQ(b.positions, a.positions);
  EXPECT_NEAR(b.loss, a.loss, 1e-4 * a.loss);
  // An argmax may flip on a near tie between the devices' roundings: one position at most.
  EXPECT_NEAR(b.accuracy, a.accuracy, 1.0 / static_cast<double>(a.positions) + 1e-12);
}

// Mixed precision (--precision bf16) on the GPU: the products' operands rounded to bf16 as on the
// CPU, the sums in float32 in cuBLAS's order; attention runs on the tensor cores in bf16 there (its
// probabilities and dS rounded too), in float32 on the CPU. An activation a float32 rounding apart on
// the two devices can round to neighbouring bf16 values, and attention's roundings differ, so the
// losses agree within 2e-3 (relative) rather than float32's 1e-4 (an H200 run: 1.5e-5 at worst).
TEST(ModelsOnGpu, Bf16PrecisionTrainsAsOnTheCpu) {
  ASSERT_GT(cuda::device_count(), 0) << "this suite needs a CUDA GPU";
  const Family f = families()[1];
  const ops::ProductPrecisionScope bf16(ops::Precision::BF16);
  const auto cpu = models::make_model(f.config, 7), gpu = models::make_model(f.config, 7);
  gpu->to(kGpu);
  cpu->train();
  gpu->train();
  train::AdamOptions options;
  options.lr = 1e-3;
  train::Adam opt_cpu(cpu->named_parameters(), options), opt_gpu(gpu->named_parameters(), options);
  for (int step = 0; step < 5; ++step) {
    opt_cpu.zero_grad();
    opt_gpu.zero_grad();
    const float loss_cpu = train::forward_backward(*cpu, *f.objective, f.batch, 0.1f).loss;
    const float loss_gpu = train::forward_backward(*gpu, *f.objective, f.batch, 0.1f).loss;
    EXPECT_NEAR(loss_gpu, loss_cpu, 2e-3 * std::fabs(loss_cpu)) << "bf16 step " << step;
    std::printf("bf16 precision, step %d: loss cpu %.6f gpu %.6f (relative %.2e)\n", step, loss_cpu, loss_gpu,
                std::fabs(loss_gpu - loss_cpu) / std::fabs(loss_cpu));
    opt_cpu.step();
    opt_gpu.step();
  }
}

// A model of each family trained a few steps on the CPU (so that its outputs are not uniform), and
// its copy on the GPU.
template <class M>
std::pair<std::unique_ptr<M>, std::unique_ptr<M>> trained_pair(const Family& f) {
  auto cpu = std::make_unique<M>(f.config, 11);
  cpu->train();
  train::AdamOptions options;
  options.lr = 3e-3;
  train::Adam opt(cpu->named_parameters(), options);
  for (int step = 0; step < 30; ++step) {
    opt.zero_grad();
    (void)train::forward_backward(*cpu, *f.objective, f.batch, 0.f);
    opt.step();
  }
  cpu->eval();
  auto gpu = std::make_unique<M>(f.config, 11);
  for (size_t i = 0; i < cpu->parameters().size(); ++i)
    gpu->parameters()[i].value().copy_from(cpu->parameters()[i].value());
  gpu->eval();
  gpu->to(kGpu);
  return {std::move(cpu), std::move(gpu)};
}

std::vector<data::IdLine> rows_of(const Tensor& ids, int64_t keep) {
  std::vector<data::IdLine> out;
  const std::vector<int32_t> all = ids.to_ids();
  const int64_t T = ids.size(1);
  for (int64_t b = 0; b < ids.size(0); ++b) out.emplace_back(all.begin() + b * T, all.begin() + b * T + keep);
  return out;
}

// A trained encoder-decoder's translations of its batch's sources, greedy and beam 4, on both
// devices: the same tokens, scores within `rel` (relative).
void expect_translations_agree(const models::Transformer& cpu, const models::Transformer& gpu, const Family& f,
                               const std::string& label, double rel = 1e-4) {
  const std::vector<data::IdLine> sources = rows_of(f.batch.src, 9);
  for (int beam : {1, 4}) {
    decoding::SearchOptions so;
    so.beam_size = beam;
    const auto a = decoding::search_in_batches(cpu, sources, so, 4), b = decoding::search_in_batches(gpu, sources, so, 4);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i][0].tokens, b[i][0].tokens) << label << ", beam " << beam << ", sentence " << i;
      EXPECT_NEAR(a[i][0].score, b[i][0].score, rel * std::fabs(a[i][0].score) + 1e-5) << label << ", beam " << beam;
    }
  }
}

// A trained GPT's greedy continuations of three prompts on both devices: the same tokens.
void expect_generations_agree(const models::CausalLM& cpu, const models::CausalLM& gpu) {
  decoding::GenerateOptions go;
  go.max_new_tokens = 8;
  go.stop_at_eos = false;
  const std::vector<std::vector<int32_t>> prompts = {{1, 5, 6}, {1, 9}, {1, 7, 8, 9, 10}};
  EXPECT_EQ(decoding::generate(cpu, prompts, {}, go), decoding::generate(gpu, prompts, {}, go));
  go.stop_at_eos = true;  // EOS banned for 3 tokens, then ending rows: the rules on a GPU's candidates
  go.min_new_tokens = 3;
  EXPECT_EQ(decoding::generate(cpu, prompts, {}, go), decoding::generate(gpu, prompts, {}, go)) << "EOS rules";
}

TEST(ModelsOnGpu, TranslationsGenerationsAndEmbeddingsAreTheCpus) {
  ASSERT_GT(cuda::device_count(), 0) << "this suite needs a CUDA GPU";
  const std::vector<Family> fs = families();
  for (const Family& f : {fs[0], fs[3]}) {
    const auto [cpu, gpu] = trained_pair<models::Transformer>(f);
    expect_translations_agree(*cpu, *gpu, f, f.name);
  }
  {
    const auto [cpu, gpu] = trained_pair<models::CausalLM>(fs[1]);
    expect_generations_agree(*cpu, *gpu);
  }
  {
    const auto [cpu, gpu] = trained_pair<models::EncoderModel>(fs[2]);
    const std::vector<std::vector<int32_t>> sentences = {{4, 9, 10, 11, 5}, {4, 12, 5}, {4, 20, 21, 22, 23, 24, 5}};
    const std::vector<float> a = models::sentence_embeddings(*cpu, sentences, {}).to_vector();
    const std::vector<float> b = models::sentence_embeddings(*gpu, sentences, {}).to_vector();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5) << "embedding element " << i;
  }
}

// Searches whose rules read a row's history (a repetition penalty, no-repeat n-grams), draws, and
// beams wider than the GPU's candidates (ops::max_top_of_rows) bring whole rows of scores back to
// the host instead of each row's best few: the CPU's tokens on both devices, every hypothesis of an
// n-best list. (A draw compares a uniform number with the model's probabilities, which the two
// devices compute a float32 rounding apart: the seeds here draw far from any boundary.)
TEST(ModelsOnGpu, RulesThatReadHistoryDrawsAndWideBeamsAreTheCpus) {
  ASSERT_GT(cuda::device_count(), 0) << "this suite needs a CUDA GPU";
  const std::vector<Family> fs = families();
  {
    const auto [cpu, gpu] = trained_pair<models::Transformer>(fs[0]);
    const std::vector<data::IdLine> sources = rows_of(fs[0].batch.src, 9);
    std::vector<std::pair<std::string, decoding::SearchOptions>> cases(5);
    cases[0].first = "beam 4, repetition penalty 1.3";
    cases[0].second.constraints.repetition_penalty = 1.3f;
    cases[1].first = "greedy, no repeated 2-grams";
    cases[1].second.beam_size = 1;
    cases[1].second.constraints.no_repeat_ngram_size = 2;
    cases[2].first = "beam 8, 3-best";
    cases[2].second.beam_size = 8;
    cases[2].second.n_best = 3;
    cases[3].first = "a draw, top-k 5";
    cases[3].second.beam_size = 1;
    cases[3].second.do_sample = true;
    cases[3].second.sampling.top_k = 5;
    cases[3].second.seed = 7;
    cases[4].first = "beam 4, minimum length 4";
    cases[4].second.min_length = 4;
    for (const auto& [label, so] : cases) {
      const auto a = decoding::search_in_batches(*cpu, sources, so, 4);
      const auto b = decoding::search_in_batches(*gpu, sources, so, 4);
      ASSERT_EQ(a.size(), b.size()) << label;
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(a[i].size(), b[i].size()) << label << ", sentence " << i;
        for (size_t h = 0; h < a[i].size(); ++h)
          EXPECT_EQ(a[i][h].tokens, b[i][h].tokens) << label << ", sentence " << i << ", hypothesis " << h;
      }
    }
  }
  const auto [cpu, gpu] = trained_pair<models::CausalLM>(fs[1]);
  const std::vector<std::vector<int32_t>> prompts = {{1, 5, 6}, {1, 9}, {1, 7, 8, 9, 10}};
  std::vector<std::pair<std::string, decoding::GenerateOptions>> cases(4);
  for (auto& [label, go] : cases) {
    go.max_new_tokens = 8;
    go.stop_at_eos = false;
  }
  cases[0].first = "repetition penalty 1.3";
  cases[0].second.constraints.repetition_penalty = 1.3f;
  cases[1].first = "no repeated 2-grams";
  cases[1].second.constraints.no_repeat_ngram_size = 2;
  cases[2].first = "a draw, top-p 0.9";
  cases[2].second.sample = true;
  cases[2].second.sampling.top_p = 0.9;
  cases[2].second.seed = 3;
  cases[3].first = "beam 8";
  cases[3].second.beam_size = 8;
  cases[3].second.stop_at_eos = true;  // beam search ends hypotheses at EOS (it refuses --ignore-eos)
  for (const auto& [label, go] : cases)
    EXPECT_EQ(decoding::generate(*cpu, prompts, {11, 12, 13}, go), decoding::generate(*gpu, prompts, {11, 12, 13}, go))
        << label;
}

// Per-line log-probabilities (qkv score, validation losses) and n * log p within rel of the CPU's.
void expect_scores_close(const train::ScoreResult& a, const train::ScoreResult& b, double rel,
                         const std::string& what) {
  ASSERT_EQ(a.line_log_prob.size(), b.line_log_prob.size()) << what;
  EXPECT_EQ(a.tokens, b.tokens) << what;
  for (size_t i = 0; i < a.line_log_prob.size(); ++i)
    EXPECT_NEAR(a.line_log_prob[i], b.line_log_prob[i], rel * std::fabs(a.line_log_prob[i]) + 1e-5)
        << what << ", line " << i;
}

// What `qkv score --device cuda`, `qkv translate --attention` and the bf16 compute types run on a
// GPU: per-line log-probabilities of an encoder-decoder and a GPT within 1e-4 of the CPU's; the
// attention weights a search returns (encoder, decoder and cross, every layer) within 1e-4; and, with
// the products in bf16 (--compute-type bf16 and int8_bf16, cuBLAS's sums in another order than the
// CPU's vdpbf16ps), the scores within 2e-2.
TEST(ModelsOnGpu, ScoresAttentionWeightsAndBf16ComputeTypesAreTheCpus) {
  ASSERT_GT(cuda::device_count(), 0) << "this suite needs a CUDA GPU";
  const std::vector<Family> fs = families();
  {
    const auto [cpu, gpu] = trained_pair<models::Transformer>(fs[0]);
    const std::vector<data::IdLine> src = rows_of(fs[0].batch.src, fs[0].batch.src.size(1));
    const std::vector<data::IdLine> tgt = rows_of(fs[0].batch.tgt, fs[0].batch.tgt.size(1));
    expect_scores_close(train::score(*cpu, src, tgt, 4), train::score(*gpu, src, tgt, 4), 1e-4, "seq2seq score");
    decoding::SearchOptions so;
    so.beam_size = 1;
    so.attention = true;
    const std::vector<data::IdLine> sources = rows_of(fs[0].batch.src, 9);
    const auto a = decoding::search_in_batches(*cpu, sources, so, 4), b = decoding::search_in_batches(*gpu, sources, so, 4);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i][0].tokens, b[i][0].tokens) << "sentence " << i;
      const decoding::AttentionWeights &wa = a[i][0].attention, &wb = b[i][0].attention;
      ASSERT_FALSE(wa.empty()) << "sentence " << i;
      for (const auto& [la, lb, kind] : {std::tuple{&wa.encoder_self, &wb.encoder_self, "encoder"},
                                          std::tuple{&wa.decoder_self, &wb.decoder_self, "decoder"},
                                          std::tuple{&wa.cross, &wb.cross, "cross"}}) {
        ASSERT_EQ(la->size(), lb->size()) << kind;
        for (size_t l = 0; l < la->size(); ++l) {
          ASSERT_EQ((*la)[l].shape(), (*lb)[l].shape()) << kind << " layer " << l;
          const std::vector<float> x = (*la)[l].to_vector(), y = (*lb)[l].to_vector();
          for (size_t j = 0; j < x.size(); ++j)
            ASSERT_NEAR(x[j], y[j], 1e-4) << kind << " attention, layer " << l << ", sentence " << i;
        }
      }
    }
    for (nn::ComputeType type : {nn::ComputeType::BF16, nn::ComputeType::Int8BF16}) {
      cpu->set_compute_type(type);
      gpu->set_compute_type(type);
      expect_scores_close(train::score(*cpu, src, tgt, 4), train::score(*gpu, src, tgt, 4), 2e-2,
                          std::string("seq2seq score in ") + nn::compute_type_name(type));
    }
  }
  const auto [cpu, gpu] = trained_pair<models::CausalLM>(fs[1]);
  const std::vector<data::IdLine> lines = rows_of(fs[1].batch.tgt, fs[1].batch.tgt.size(1));
  expect_scores_close(train::score(*cpu, {}, lines, 4), train::score(*gpu, {}, lines, 4), 1e-4, "GPT score");
  cpu->set_compute_type(nn::ComputeType::BF16);
  gpu->set_compute_type(nn::ComputeType::BF16);
  expect_scores_close(train::score(*cpu, {}, lines, 4), train::score(*gpu, {}, lines, 4), 2e-2, "GPT score in bf16");
}

// int8 inference (--compute-type int8) on the GPU: the products are the CPU's int8 bits
// (OpsOnGpu.Int8WeightsGiveTheCpusBits), the rest of the model the GPU's float32 kernels, so
// translations (greedy and beam) and generations are the CPU's int8 ones, and scores agree closely.
TEST(ModelsOnGpu, Int8InferenceIsTheCpus) {
  ASSERT_GT(cuda::device_count(), 0) << "this suite needs a CUDA GPU";
  const std::vector<Family> fs = families();
  for (const Family& f : {fs[0], fs[3]}) {
    const auto [cpu, gpu] = trained_pair<models::Transformer>(f);
    cpu->set_compute_type(nn::ComputeType::Int8);
    gpu->set_compute_type(nn::ComputeType::Int8);
    // Each int8 product gives the CPU's bits for the same input (OpsOnGpu.Int8WeightsGiveTheCpusBits),
    // but the float32 ops between them sum in another order: an activation a few ulps apart can round
    // to the next of its row's 255 levels, a step of 1/127 of the row's largest. Measured on an H200:
    // scores up to 1e-3 apart (relative), the tokens equal.
    expect_translations_agree(*cpu, *gpu, f, f.name + " int8", 5e-3);
  }
  const auto [cpu, gpu] = trained_pair<models::CausalLM>(fs[1]);
  cpu->set_compute_type(nn::ComputeType::Int8);
  gpu->set_compute_type(nn::ComputeType::Int8);
  expect_generations_agree(*cpu, *gpu);
}

// Continuous batching (the server's completions) on the GPU: sequences that join a running batch at
// different steps (CausalLM::join copies their keys and values on the device) get the CPU's tokens,
// with every other one drawn (whole rows come back) and all greedy (only each row's best does).
TEST(ModelsOnGpu, ContinuousBatchingJoinsSequencesAsOnTheCpu) {
  ASSERT_GT(cuda::device_count(), 0) << "this suite needs a CUDA GPU";
  const auto [cpu, gpu] = trained_pair<models::CausalLM>(families()[1]);
  const std::vector<std::vector<int32_t>> prompts = {{1, 5, 6}, {1, 9}, {1, 7, 8, 9, 10}, {1, 4}, {1, 11, 12}};
  for (const bool draws : {true, false}) {
    const auto run = [&](const models::CausalLM& model) {
      decoding::ContinuousGeneration gen(model, 3, 4096);
      std::map<uint64_t, std::vector<int32_t>> out;
      for (size_t step = 0; step < 64 && (step < prompts.size() || !gen.empty()); ++step) {
        if (step < prompts.size()) {
          decoding::SequenceOptions o;
          o.max_new_tokens = 4 + static_cast<int64_t>(step);
          o.stop_at_eos = !draws;  // greedy rows: EOS ends them, after 2 new tokens
          o.sample = draws && step % 2 == 1;
          o.min_new_tokens = draws ? 0 : 2;
          o.seed = 7;
          o.key = step;
          gen.add(prompts[step], o);
        }
        for (const auto& e : gen.step())
          if (e.token >= 0) out[e.id].push_back(e.token);
      }
      return out;
    };
    const auto a = run(*cpu), b = run(*gpu);
    ASSERT_EQ(a.size(), prompts.size()) << (draws ? "with draws" : "greedy");
    EXPECT_EQ(a, b) << (draws ? "with draws" : "greedy");
  }
}

// A join()ed state's rows move by KVCache::reorder_copying, and CausalLM::append then re-slices the
// storage they had: on the GPU too, reorder_copying must leave k and v in it (a gather into new
// storage left `reserved` stale). reorder_gathering (beam search) may move them. Both give the CPU's
// rows.
TEST(ModelsOnGpu, CacheRowsMoveAsOnTheCpuAndCopyingKeepsTheStorage) {
  const int64_t N = 6, H = 2, capacity = 7, dk = 3, length = 5;
  const std::vector<std::vector<int64_t>> orders = {
      {1, 0, 2, 3, 4, 5}, {5, 0, 1, 2, 3, 4}, {0, 0, 1, 4, 4, 2}, {4, 4, 5}, {3, 2, 1, 0}, {0, 0, 1, 1, 2, 2, 5, 5}};
  for (const auto& rows : orders)
    for (const bool gathering : {false, true}) {
      nn::KVCache cpu = nn::KVCache::with_capacity(N, H, capacity, dk);
      for (int64_t i = 0; i < cpu.k.numel(); ++i) {
        cpu.k.f32()[i] = static_cast<float>(i);
        cpu.v.f32()[i] = static_cast<float>(-i);
      }
      cpu.length = length;
      nn::KVCache on_gpu;
      on_gpu.k = cpu.k.to(kGpu);
      on_gpu.v = cpu.v.to(kGpu);
      on_gpu.length = length;
      const void* k_storage = on_gpu.k.raw_data();
      const void* v_storage = on_gpu.v.raw_data();
      cpu.reorder_copying(rows);
      gathering ? on_gpu.reorder_gathering(rows) : on_gpu.reorder_copying(rows);
      const std::string what = std::string(gathering ? "gathering" : "copying") + ", " + std::to_string(rows.size()) +
                               " rows from " + std::to_string(rows[0]);
      ASSERT_EQ(on_gpu.k.size(0), static_cast<int64_t>(rows.size())) << what;
      EXPECT_EQ(on_gpu.k.narrow(2, 0, length).contiguous().to(Device::cpu()).to_vector(),
                cpu.k.narrow(2, 0, length).contiguous().to_vector()) << what;
      EXPECT_EQ(on_gpu.v.narrow(2, 0, length).contiguous().to(Device::cpu()).to_vector(),
                cpu.v.narrow(2, 0, length).contiguous().to_vector()) << what;
      if (!gathering && static_cast<int64_t>(rows.size()) <= N) {
        EXPECT_EQ(on_gpu.k.raw_data(), k_storage) << what;
        EXPECT_EQ(on_gpu.v.raw_data(), v_storage) << what;
      }
    }
}

TEST(ModelsOnGpu, ACheckpointWrittenFromTheGpuIsTheCpusFile) {
  ASSERT_GT(cuda::device_count(), 0) << "this suite needs a CUDA GPU";
  const Family f = families()[0];
  const auto [cpu, gpu] = trained_pair<models::Transformer>(f);
  const std::string dir = ::testing::TempDir() + "qkv_gpu_checkpoint";
  models::save_model(dir, *gpu);
  const auto loaded = models::load_seq2seq(dir);
  const auto a = cpu->named_parameters(), b = loaded->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].second.value().to_vector(), b[i].second.value().to_vector()) << a[i].first;
}

}  // namespace
}  // namespace qkv
