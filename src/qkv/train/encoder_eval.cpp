#include "qkv/train/encoder_eval.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "qkv/train/encoder_data.h"
#include "qkv/train/objective.h"

namespace qkv::train {

namespace {
int32_t argmax_row(const float* p, int64_t n) { return static_cast<int32_t>(std::max_element(p, p + n) - p); }
}  // namespace

MaskedLmScore masked_lm_score(const models::Model& model, const std::vector<MaskedSequence>& sequences,
                              int64_t batch_size, const std::function<void()>& after_batch) {
  QKV_CHECK(batch_size >= 1, "masked_lm_score: batch size must be positive");
  const NoGradGuard no_grad;
  const int32_t filler = std::max<int32_t>(model.config().pad_id, 0);
  MaskedLmScore s;
  double nll = 0;
  int64_t correct = 0;
  for (size_t begin = 0; begin < sequences.size(); begin += static_cast<size_t>(batch_size)) {
    const size_t end = std::min(sequences.size(), begin + static_cast<size_t>(batch_size));
    std::vector<const data::IdLine*> ids, labels;
    for (size_t i = begin; i < end; ++i) {
      ids.push_back(&sequences[i].ids);
      labels.push_back(&sequences[i].labels);
    }
    const Tensor label_rows = pad_rows(labels, -1);
    bool any = false;
    for (int64_t i = 0; i < label_rows.numel() && !any; ++i) any = label_rows.i32()[i] != -1;
    if (!any) continue;
    const MaskedLogits m = masked_lm_logits(model, pad_rows(ids, filler), label_rows);
    const int64_t N = m.labels.numel();
    {  // argmax before the loss: the cross-entropy may reuse the logits' buffer. On the host: a
       // model on a GPU gives its logits there.
      const Tensor logits = m.logits.value().to(Device::cpu()).contiguous();
      const int64_t V = logits.size(1);
      for (int64_t n = 0; n < N; ++n) correct += argmax_row(logits.f32() + n * V, V) == m.labels.i32()[n];
    }
    Tensor row_loss;
    fn::cross_entropy(m.logits, m.labels.to(model.device()), -1, 0.f, &row_loss);
    row_loss = row_loss.to(Device::cpu());
    for (int64_t n = 0; n < N; ++n) nll += row_loss.f32()[n];
    s.positions += N;
    if (after_batch) after_batch();
  }
  if (s.positions > 0) {
    s.loss = nll / static_cast<double>(s.positions);
    s.accuracy = static_cast<double>(correct) / static_cast<double>(s.positions);
  }
  return s;
}

Tensor class_probabilities(const models::Model& model, const std::vector<data::IdLine>& rows, int64_t batch_size,
                           const std::function<void()>& after_batch) {
  QKV_CHECK(batch_size >= 1, "class_probabilities: batch size must be positive");
  QKV_CHECK(model.config().pad_id >= 0, "classification: the model has no padding id (config.json pad_id)");
  const NoGradGuard no_grad;
  const int64_t N = static_cast<int64_t>(rows.size()), L = static_cast<int64_t>(model.config().labels.size());
  Tensor out = Tensor::empty(Dims{N, L});
  std::vector<int64_t> order(static_cast<size_t>(N));
  std::iota(order.begin(), order.end(), 0);
  // Longest first: similar lengths share a batch (little padding), and the largest batch runs first.
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return rows[static_cast<size_t>(a)].size() > rows[static_cast<size_t>(b)].size();
  });
  for (int64_t begin = 0; begin < N; begin += batch_size) {
    const int64_t end = std::min(N, begin + batch_size);
    std::vector<const data::IdLine*> batch;
    for (int64_t i = begin; i < end; ++i) batch.push_back(&rows[static_cast<size_t>(order[static_cast<size_t>(i)])]);
    const Tensor p = fn::softmax(classification_logits(model, pad_rows(batch, model.config().pad_id)))
                         .value()
                         .contiguous()
                         .to(Device::cpu());
    for (int64_t i = begin; i < end; ++i)
      std::copy(p.f32() + (i - begin) * L, p.f32() + (i - begin + 1) * L, out.f32() + order[static_cast<size_t>(i)] * L);
    if (after_batch) after_batch();
  }
  return out;
}

ClassificationScore classification_score(const Tensor& probabilities, const std::vector<int32_t>& gold) {
  const int64_t N = probabilities.size(0), L = probabilities.size(1);
  QKV_CHECK(N == static_cast<int64_t>(gold.size()) && N > 0,
            "classification_score: " << N << " predictions for " << gold.size() << " gold labels");
  std::vector<int64_t> tp(static_cast<size_t>(L)), predicted(static_cast<size_t>(L)), actual(static_cast<size_t>(L));
  ClassificationScore s;
  s.confusion.assign(static_cast<size_t>(L), std::vector<int64_t>(static_cast<size_t>(L), 0));
  for (int64_t n = 0; n < N; ++n) {
    const float* p = probabilities.f32() + n * L;
    const int32_t g = gold[static_cast<size_t>(n)], y = argmax_row(p, L);
    s.loss -= std::log(std::max(static_cast<double>(p[g]), 1e-30));
    ++predicted[static_cast<size_t>(y)];
    ++actual[static_cast<size_t>(g)];
    tp[static_cast<size_t>(g)] += y == g;
    ++s.confusion[static_cast<size_t>(g)][static_cast<size_t>(y)];
  }
  double f1 = 0, correct = 0;
  int64_t present = 0;
  for (size_t l = 0; l < static_cast<size_t>(L); ++l) {
    correct += static_cast<double>(tp[l]);
    if (predicted[l] + actual[l] == 0) continue;  // a label neither gold nor predicted says nothing
    ++present;
    f1 += 2.0 * static_cast<double>(tp[l]) / static_cast<double>(predicted[l] + actual[l]);
  }
  s.loss /= static_cast<double>(N);
  s.accuracy = correct / static_cast<double>(N);
  s.macro_f1 = f1 / static_cast<double>(present);
  return s;
}

}  // namespace qkv::train
