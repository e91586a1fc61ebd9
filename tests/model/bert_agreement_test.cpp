// qkv's encoder-only model (models/encoder_model.h), imported with `qkv import --from hf`'s loader,
// against transformers' BertForMaskedLM and BertForSequenceClassification (data from
// tests/python/make_bert_refs.py): same weights, same padded batch with token types, dropout 0 ->
// the same hidden states, logits, pooler output, loss, every gradient (named by the HF mapping of
// interop/hf_bert.h), and every parameter after 10 AdamW steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "model/agreement_checks.h"
#include "model/ref_dir.h"
#include "qkv/autograd/graph.h"
#include "qkv/interop/hf_bert.h"
#include "qkv/io/tensor_file.h"
#include "qkv/train/adam.h"

namespace qkv {
namespace {

using testing::max_rel_error;

// Only the real tokens' hidden states are compared: padding query rows are computed by both and
// read by nobody (BERT masks padding keys only).
Tensor real_rows(const Tensor& hidden, const Tensor& mask) {
  Tensor out = hidden.clone();
  const int64_t D = hidden.size(2);
  for (int64_t i = 0; i < mask.numel(); ++i)
    if (!mask.i32()[i]) std::fill(out.f32() + i * D, out.f32() + (i + 1) * D, 0.f);
  return out;
}

constexpr double kBertLr = 1e-3;
constexpr int kBertSteps = 10;

struct Case {
  std::string name;  // hf_bert_mlm or hf_bert_cls
  bool classify;
};

Var loss_of(const models::EncoderModel& model, const models::EncoderInput& in, const Tensor& labels, bool classify) {
  const Var hidden = model.encode(in);
  if (classify) return fn::cross_entropy(model.classify(hidden), labels, -100);
  const Var logits = model.mlm_logits(hidden);
  return fn::cross_entropy(fn::reshape(logits, Dims{-1, model.config().tgt_vocab_size}), labels.reshape(Dims{-1}), -100);
}

float train_step(const models::EncoderModel& model, train::Adam& opt, const models::EncoderInput& in,
                 const Tensor& labels, bool classify, bool step) {
  opt.zero_grad();
  Graph graph;
  const GraphScope scope(graph);
  const Var loss = loss_of(model, in, labels, classify);
  graph.backward(loss, Tensor::full(loss.shape(), 1.f));
  if (step) opt.step();
  return loss.value().item();
}

void expect_agreement(const Case& c) {
  const std::string dir = testing::ref_path(c.name);
  const std::string refs_path = testing::ref_path(c.name + "_refs.safetensors");
  if (dir.empty() || refs_path.empty()) return;
  auto model = interop::load_hf_bert(dir);
  model->train(true);  // dropout 0: deterministic
  io::TensorFile ref = io::load_tensors(refs_path);
  const Tensor mask = ref.take("mask");
  const models::EncoderInput in{ref.take("ids"), mask, ref.take("type_ids")};
  const Tensor labels = ref.take("labels");

  {
    NoGradGuard no_grad;
    const Var hidden = model->encode(in);
    const double h = max_rel_error(real_rows(hidden.value(), mask), real_rows(ref.take("hidden"), mask));
    EXPECT_LE(h, 1e-5) << c.name << ": hidden states";
    const Var logits = c.classify ? model->classify(hidden) : model->mlm_logits(hidden);
    Tensor want = ref.take("logits");
    double l = 0;
    if (c.classify) {
      l = max_rel_error(logits.value(), want);
      const double p = max_rel_error(model->pool(hidden).value(), ref.take("pooled"));
      EXPECT_LE(p, 1e-5) << c.name << ": pooler output";
    } else {
      const Tensor m3 = mask;  // logits of padding positions are not compared either
      l = max_rel_error(real_rows(logits.value(), m3), real_rows(want, m3));
    }
    EXPECT_LE(l, 1e-5) << c.name << ": logits";
    std::printf("%s: hidden states relative error %.3g, logits %.3g\n", c.name.c_str(), h, l);
  }

  train::AdamOptions options;
  options.lr = kBertLr;
  options.beta1 = 0.9;
  options.beta2 = 0.999;
  options.eps = 1e-8;
  options.weight_decay = 0.01;
  options.decoupled_weight_decay = true;  // AdamW: decays the parameters with dim() >= 2
  train::Adam opt(model->named_parameters(), options);
  const float loss = train_step(*model, opt, in, labels, c.classify, false);
  const float ref_loss = ref.take("loss").item();
  EXPECT_LE(std::fabs(loss - ref_loss), 1e-5 * std::fabs(ref_loss)) << c.name << ": loss " << loss << " vs " << ref_loss;
  const auto named = interop::hf_bert_named_parameters(*model);
  double worst = 0;
  std::string worst_name;
  double worst_key_bias = 0;
  const auto ours = [&](const std::string& n) { return testing::grad_by_name(named, n); };
  const auto theirs = [&](const std::string& n) { return ref.take("grad." + n); };
  const int64_t key_rows = in.ids.numel();
  for (const auto& [hf, p] : named) {
    ASSERT_TRUE(p.grad().defined()) << hf;
    if (testing::is_key_bias(hf)) {
      const auto q = testing::expect_key_bias_gradient_is_rounding(hf, ours, key_rows, c.name + " (qkv)");
      const auto t = testing::expect_key_bias_gradient_is_rounding(hf, theirs, key_rows, c.name + " (transformers)");
      worst_key_bias = std::max({worst_key_bias, q.gradient / q.bound, t.gradient / t.bound});
      continue;
    }
    const Tensor want = ref.take("grad." + hf);
    const double err = max_rel_error(p.grad(), want);
    if (err > worst) worst = err, worst_name = hf;
    EXPECT_LE(err, 1e-4) << c.name << ": grad." << hf;
  }
  std::printf("%s: loss %.6f (PyTorch %.6f), worst gradient relative error %.3g (%s)\n", c.name.c_str(), loss,
              ref_loss, worst, worst_name.c_str());
  testing::print_key_bias_margin(c.name, worst_key_bias);

  const Tensor losses = ref.take("losses");
  opt.step();
  for (int step = 1; step < kBertSteps; ++step) {
    const float l = train_step(*model, opt, in, labels, c.classify, true);
    EXPECT_NEAR(l, losses.f32()[step], 1e-5 * std::fabs(losses.f32()[step]) + 1e-6) << c.name << ": step " << step + 1;
  }
  double worst_param = 0;
  std::string worst_param_name;
  for (const auto& [hf, p] : named) {
    // Not the key bias: its gradient is pure rounding noise (checked above against its bound), and
    // Adam divides a gradient by its own running size, so each step moves it by ~lr in a direction
    // the noise picks. Any two correct implementations end up anywhere within 2 * steps * lr of each
    // other: no comparison there could fail.
    if (testing::is_key_bias(hf)) continue;
    const Tensor want = ref.take("after10." + hf);
    const double err = max_rel_error(p.value(), want);
    if (err > worst_param) worst_param = err, worst_param_name = hf;
    EXPECT_LE(err, 1e-4) << c.name << ": after10." << hf;
  }
  std::printf("%s: worst parameter relative error after %d AdamW steps %.3g (%s)\n", c.name.c_str(), kBertSteps,
              worst_param, worst_param_name.c_str());
}

TEST(BertAgreement, MaskedLmHiddenLogitsLossGradientsAndTenAdamWSteps) { expect_agreement({"hf_bert_mlm", false}); }

TEST(BertAgreement, ClassifierPoolerLogitsLossGradientsAndTenAdamWSteps) { expect_agreement({"hf_bert_cls", true}); }

}  // namespace
}  // namespace qkv
