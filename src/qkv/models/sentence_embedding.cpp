#include "qkv/models/sentence_embedding.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "qkv/autograd/graph.h"
#include "qkv/core/error.h"

namespace qkv::models {

using nlohmann::json;

std::string sentence_embedding_to_json(const SentenceEmbeddingConfig& c) {
  const json j = {{"pooling", c.pooling}, {"normalize", c.normalize}, {"max_seq_length", c.max_seq_length}};
  return j.dump(2) + "\n";
}

SentenceEmbeddingConfig sentence_embedding_from_json(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(source + ": not valid JSON: " + e.what());
  }
  QKV_CHECK(j.is_object(), source << ": expected a JSON object");
  SentenceEmbeddingConfig c;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    if (key == "pooling") {
      QKV_CHECK(v.is_string(), source << ": field \"pooling\" must be a string");
      c.pooling = v.get<std::string>();
      QKV_CHECK(c.pooling == "mean" || c.pooling == "cls" || c.pooling == "max" || c.pooling == "mean_sqrt_len",
                source << ": field \"pooling\" must be \"mean\", \"cls\", \"max\" or \"mean_sqrt_len\", got \""
                       << c.pooling << "\"");
    } else if (key == "normalize") {
      QKV_CHECK(v.is_boolean(), source << ": field \"normalize\" must be true or false");
      c.normalize = v.get<bool>();
    } else if (key == "max_seq_length") {
      QKV_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= kMaxSeqLength,
                source << ": field \"max_seq_length\" must be an integer in [0, " << kMaxSeqLength << "]");
      c.max_seq_length = v.get<int64_t>();
    } else {
      throw Error(source + ": unknown field \"" + key + "\"");
    }
  }
  return c;
}

SentenceEmbeddingConfig load_sentence_embedding_config(const std::string& dir) {
  const std::string path = dir + "/" + kSentenceEmbeddingFile;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return {};
  std::ifstream in(path, std::ios::binary);
  QKV_CHECK(in, path << ": cannot open for reading");
  std::stringstream ss;
  ss << in.rdbuf();
  return sentence_embedding_from_json(ss.str(), path);
}

std::string describe(const SentenceEmbeddingConfig& c) {
  std::string s = c.pooling + " pooling";
  s += c.normalize ? ", normalised" : ", not normalised";
  if (c.max_seq_length > 0) s += ", at most " + std::to_string(c.max_seq_length) + " tokens";
  return s;
}

namespace {
// One sentence's vector from its T real tokens' hidden states h (T, D), into out (D).
// The mode is compared once: compared per element, the string test took 0.3-0.4% of an embedding run.
void pool_one(const float* h, int64_t T, int64_t D, const std::string& pooling, float* out) {
  const bool max_pool = pooling == "max";
  std::vector<double> acc(static_cast<size_t>(D), max_pool ? -std::numeric_limits<double>::infinity() : 0.0);
  const int64_t rows = pooling == "cls" ? 1 : T;
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t d = 0; d < D; ++d) {
      const double v = h[t * D + d];
      double& a = acc[static_cast<size_t>(d)];
      a = max_pool ? std::max(a, v) : a + v;
    }
  double divisor = 1;
  if (pooling == "mean") divisor = static_cast<double>(T);
  if (pooling == "mean_sqrt_len") divisor = std::sqrt(static_cast<double>(T));
  for (int64_t d = 0; d < D; ++d) out[d] = static_cast<float>(acc[static_cast<size_t>(d)] / divisor);
}

// x / max(||x||, 1e-12), as torch.nn.functional.normalize.
void normalize_one(float* x, int64_t D) {
  double sq = 0;
  for (int64_t d = 0; d < D; ++d) sq += static_cast<double>(x[d]) * x[d];
  const double norm = std::max(std::sqrt(sq), 1e-12);
  for (int64_t d = 0; d < D; ++d) x[d] = static_cast<float>(x[d] / norm);
}
}  // namespace

Tensor sentence_embeddings(const EncoderModel& model, const std::vector<std::vector<int32_t>>& sentences,
                           const SentenceEmbeddingConfig& config) {
  QKV_CHECK(!sentences.empty(), "sentence_embeddings: no sentences");
  const int64_t N = static_cast<int64_t>(sentences.size()), D = model.config().d_model;
  int64_t T = 1;
  for (const auto& s : sentences) {
    QKV_CHECK(!s.empty(), "sentence_embeddings: an empty sentence (it needs at least [CLS] and [SEP])");
    T = std::max<int64_t>(T, static_cast<int64_t>(s.size()));
  }
  const int32_t filler = std::max<int32_t>(model.config().pad_id, 0);
  EncoderInput in{Tensor::empty(Dims{N, T}, DType::I32), Tensor::zeros(Dims{N, T}, DType::I32), Tensor()};
  for (int64_t n = 0; n < N; ++n) {
    const auto& s = sentences[static_cast<size_t>(n)];
    for (int64_t t = 0; t < T; ++t) {
      const bool real = t < static_cast<int64_t>(s.size());
      in.ids.i32()[n * T + t] = real ? s[static_cast<size_t>(t)] : filler;
      in.key_keep.i32()[n * T + t] = real ? 1 : 0;
    }
  }
  const NoGradGuard no_grad;
  const Device on = model.device();  // the ids go where the weights are; the states come back
  in.ids = in.ids.to(on);
  in.key_keep = in.key_keep.to(on);
  const Tensor hidden = model.encode(in).value().contiguous().to(Device::cpu());  // (N, T, D)
  Tensor out = Tensor::empty(Dims{N, D});
  for (int64_t n = 0; n < N; ++n) {
    const int64_t len = static_cast<int64_t>(sentences[static_cast<size_t>(n)].size());
    pool_one(hidden.f32() + n * T * D, len, D, config.pooling, out.f32() + n * D);
    if (config.normalize) normalize_one(out.f32() + n * D, D);
  }
  return out;
}

Tensor embed_sentences(const EncoderModel& model, const std::vector<std::vector<int32_t>>& sentences,
                       const SentenceEmbeddingConfig& config, int64_t batch_size,
                       const std::function<void(int64_t)>& on_batch) {
  QKV_CHECK(batch_size >= 1, "embed_sentences: batch_size must be at least 1, got " << batch_size);
  const int64_t N = static_cast<int64_t>(sentences.size()), D = model.config().d_model;
  Tensor out = Tensor::empty(Dims{N, D});
  std::vector<int64_t> order(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) order[static_cast<size_t>(i)] = i;
  // Longest first: the batch that needs the most memory runs first, and equal lengths stay in input order.
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return sentences[static_cast<size_t>(a)].size() > sentences[static_cast<size_t>(b)].size();
  });
  for (int64_t begin = 0; begin < N; begin += batch_size) {
    const int64_t end = std::min(N, begin + batch_size);
    std::vector<std::vector<int32_t>> batch;
    for (int64_t i = begin; i < end; ++i) batch.push_back(sentences[static_cast<size_t>(order[static_cast<size_t>(i)])]);
    const Tensor e = sentence_embeddings(model, batch, config);
    for (int64_t i = begin; i < end; ++i)
      std::copy(e.f32() + (i - begin) * D, e.f32() + (i - begin + 1) * D, out.f32() + order[static_cast<size_t>(i)] * D);
    if (on_batch) on_batch(end);
  }
  return out;
}

}  // namespace qkv::models
