#include "qkv/api/generator.h"

#include <algorithm>
#include <functional>

#include "qkv/models/checkpoint.h"

namespace qkv::api {

Generator::Generator(const std::string& checkpoint_dir, nn::ComputeType compute_type, Device device)
    : dir_(checkpoint_dir) {
  models::check_checkpoint_dir(checkpoint_dir);
  model_ = models::load_causal_lm(checkpoint_dir);
  model_->eval();
  model_->to(device);
  model_->set_compute_type(compute_type);
  const std::string path = models::lm_tokenizer_path(checkpoint_dir);
  if (!path.empty()) {
    tokenizer_ = text::load_tokenizer(path);
    // An imported model's vocabulary may be padded beyond its tokenizer's; ours are equal.
    QKV_CHECK(tokenizer_->vocab_size() <= vocab_size(), path << " has " << tokenizer_->vocab_size()
                                                             << " tokens but the model's vocabulary is " << vocab_size());
  }
}

Generator::~Generator() = default;

const models::TransformerConfig& Generator::config() const { return model_->config(); }
int64_t Generator::vocab_size() const { return model_->output_vocab_size(); }

std::vector<int32_t> Generator::encode_prompt(const std::string& text) const {
  QKV_CHECK(tokenizer_, dir_ << ": no " << models::kLmSpmFile << " or " << models::kLmBpeFile
                             << " for text prompts; give token ids instead");
  const int32_t bos = static_cast<int32_t>(config().bos_id);
  QKV_CHECK(bos >= 0 && bos < vocab_size(), dir_ << ": the model has no BOS id (" << bos << ") to start a prompt with");
  std::vector<int32_t> ids{bos};
  const std::vector<int32_t> text_ids = tokenizer_->encode(text);
  ids.insert(ids.end(), text_ids.begin(), text_ids.end());
  return ids;
}

std::string Generator::decode(const std::vector<int32_t>& ids) const {
  QKV_CHECK(tokenizer_, dir_ << ": no tokenizer to decode with");
  return tokenizer_->decode(ids);
}

int64_t Generator::check_prompts(const std::vector<std::vector<int32_t>>& prompts, const GenerationOptions& options,
                                 const std::function<std::string(size_t)>& where,
                                 const std::string& truncate_hint) const {
  int64_t truncated = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    try {
      QKV_CHECK(!prompts[i].empty(), "an empty prompt (start it with the BOS id " << config().bos_id << ")");
      truncated += decoding::fit_prompt(prompts[i], config().max_seq_length, options.decode).truncated;
    } catch (const Error& e) {
      const bool refused = options.decode.long_prompt == decoding::LongPrompt::Refuse && !prompts[i].empty();
      throw Error(where(i) + ": " + e.what() + (refused ? "; " + truncate_hint : ""));
    }
  }
  return truncated;
}

namespace {
// Calls run(indices, decode) on batches of prompts of similar length (less padding), `batch_size`
// at a time, then progress. Several batches share one key/value storage.
void in_batches(const std::vector<std::vector<int32_t>>& prompts, const GenerationOptions& options,
                const GenerateProgress& progress,
                const std::function<void(const std::vector<size_t>&, const decoding::GenerateOptions&)>& run) {
  QKV_CHECK(options.batch_size >= 1, "batch_size must be at least 1, got " << options.batch_size);
  std::vector<size_t> order(prompts.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return prompts[a].size() < prompts[b].size(); });
  const auto batch_size = static_cast<size_t>(options.batch_size);
  decoding::GenerateOptions decode = options.decode;
  if (order.size() > batch_size && !decode.kv_storage) decode.kv_storage = std::make_shared<nn::KVCacheStorage>();
  for (size_t begin = 0; begin < order.size(); begin += batch_size) {
    const size_t end = std::min(order.size(), begin + batch_size);
    run(std::vector<size_t>(order.begin() + static_cast<std::ptrdiff_t>(begin), order.begin() + static_cast<std::ptrdiff_t>(end)),
        decode);
    if (progress) progress(static_cast<int64_t>(end), static_cast<int64_t>(order.size()));
  }
}

std::vector<std::vector<int32_t>> prompts_of(const std::vector<std::vector<int32_t>>& prompts, const std::vector<size_t>& indices) {
  std::vector<std::vector<int32_t>> batch;
  for (size_t i : indices) batch.push_back(prompts[i]);
  return batch;
}
}  // namespace

std::vector<std::vector<int32_t>> Generator::generate_ids(const std::vector<std::vector<int32_t>>& prompts,
                                                          const GenerationOptions& options,
                                                          const GenerateProgress& progress, uint64_t first_key,
                                                          std::vector<decoding::AttentionWeights>* attention) const {
  std::vector<std::vector<int32_t>> results(prompts.size());
  if (attention) attention->assign(prompts.size(), decoding::AttentionWeights{});
  // Each prompt keeps its own random stream, keyed by its index.
  in_batches(prompts, options, progress, [&](const std::vector<size_t>& indices, const decoding::GenerateOptions& decode) {
    std::vector<uint64_t> keys;
    for (size_t i : indices) keys.push_back(first_key + i);
    std::vector<decoding::AttentionWeights> weights;
    auto out = decoding::generate(*model_, prompts_of(prompts, indices), keys, decode, {}, attention ? &weights : nullptr);
    for (size_t j = 0; j < indices.size(); ++j) {
      results[indices[j]] = std::move(out[j]);
      if (attention) (*attention)[indices[j]] = std::move(weights[j]);
    }
  });
  return results;
}

std::vector<std::vector<decoding::Hypothesis>> Generator::generate_hypotheses_ids(
    const std::vector<std::vector<int32_t>>& prompts, const GenerationOptions& options,
    const GenerateProgress& progress) const {
  std::vector<std::vector<decoding::Hypothesis>> results(prompts.size());
  in_batches(prompts, options, progress, [&](const std::vector<size_t>& indices, const decoding::GenerateOptions& decode) {
    auto out = decoding::generate_hypotheses(*model_, prompts_of(prompts, indices), decode);
    for (size_t j = 0; j < indices.size(); ++j) results[indices[j]] = std::move(out[j]);
  });
  return results;
}

std::vector<std::string> Generator::generate(const std::vector<std::string>& prompts, const GenerationOptions& options,
                                             const GenerateProgress& progress) const {
  std::vector<std::vector<int32_t>> ids;
  ids.reserve(prompts.size());
  for (const std::string& p : prompts) ids.push_back(encode_prompt(p));
  check_prompts(ids, options, [](size_t i) { return "prompt " + std::to_string(i + 1); },
                "truncating the prompt from the left keeps its last tokens");
  std::vector<std::string> texts;
  for (const auto& out : generate_ids(ids, options, progress)) texts.push_back(tokenizer_->decode(out));
  return texts;
}

std::vector<int32_t> Generator::generate_streaming(const std::vector<int32_t>& prompt, const GenerationOptions& options,
                                                   const std::function<void(int32_t)>& on_token,
                                                   decoding::AttentionWeights* attention) const {
  std::vector<decoding::AttentionWeights> weights;
  auto out = decoding::generate(*model_, {prompt}, {0}, options.decode, [&](size_t, int32_t token) { on_token(token); },
                                attention ? &weights : nullptr);
  if (attention) *attention = std::move(weights[0]);
  return std::move(out[0]);
}

std::vector<int32_t> Generator::tokens_read(const std::vector<int32_t>& prompt, const std::vector<int32_t>& new_tokens,
                                            const GenerationOptions& options, int64_t length) const {
  std::vector<int32_t> read = decoding::fit_prompt(prompt, config().max_seq_length, options.decode).tokens;
  read.insert(read.end(), new_tokens.begin(), new_tokens.end());
  read.resize(static_cast<size_t>(std::clamp<int64_t>(length, 0, static_cast<int64_t>(read.size()))));
  return read;
}

std::string Generator::piece(int32_t id) const {
  return tokenizer_ && id >= 0 && id < tokenizer_->vocab_size() ? tokenizer_->id_to_token(id) : std::to_string(id);
}

std::string TextStream::push(int32_t id) {
  ids_.push_back(id);
  return emit(false);
}

std::string TextStream::finish() { return emit(true); }

std::string TextStream::emit(bool final) {
  std::string text = tokenizer_.decode(ids_);
  static const std::string kReplacement = "\xEF\xBF\xBD";
  while (!final && text.size() >= kReplacement.size() &&
         text.compare(text.size() - kReplacement.size(), kReplacement.size(), kReplacement) == 0)
    text.resize(text.size() - kReplacement.size());
  if (text.size() <= given_.size() || text.compare(0, given_.size(), given_) != 0) return "";
  std::string piece = text.substr(given_.size());
  given_ = std::move(text);
  return piece;
}

}  // namespace qkv::api
