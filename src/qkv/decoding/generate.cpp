#include "qkv/decoding/generate.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "qkv/autograd/graph.h"
#include "qkv/core/buffer_pool.h"
#include "qkv/core/error.h"
#include "qkv/decoding/greedy.h"
#include "qkv/decoding/search_steps.h"

namespace qkv::decoding {

FittedPrompt fit_prompt(const std::vector<int32_t>& prompt, int64_t max_seq_length, const GenerateOptions& o) {
  QKV_CHECK(!prompt.empty(), "generate: an empty prompt (start it with the BOS id)");
  QKV_CHECK(max_seq_length >= 2, "generate: a context of " << max_seq_length << " position(s) leaves no room to generate");
  FittedPrompt f;
  const int64_t length = static_cast<int64_t>(prompt.size());
  if (o.long_prompt == LongPrompt::TruncateLeft && length + o.max_new_tokens > max_seq_length) {
    const int64_t keep = std::min(length, std::max<int64_t>(1, max_seq_length - o.max_new_tokens));
    f.tokens.assign(prompt.end() - keep, prompt.end());
    f.truncated = keep < length;
  } else {
    QKV_CHECK(length < max_seq_length, "a prompt of " << length << " tokens leaves no room for a new token in the model's context (max_seq_length "
                                                      << max_seq_length << ")");
    f.tokens = prompt;
  }
  f.new_tokens = std::min(o.max_new_tokens, max_seq_length - static_cast<int64_t>(f.tokens.size()));
  return f;
}

void validate_generate_options(const GenerateOptions& o, int64_t vocab_size) {
  QKV_CHECK(o.max_new_tokens >= 0, "--max-new-tokens: must be >= 0, got " << o.max_new_tokens);
  QKV_CHECK(o.min_new_tokens >= 0, "--min-new-tokens: must be >= 0 (0 = off), got " << o.min_new_tokens);
  validate_token_constraints(o.constraints);
  if (o.sample) validate_sampling_options(o.sampling);
  const int64_t max_beam = std::min<int64_t>(kMaxBeamSize, vocab_size);
  QKV_CHECK(o.beam_size >= 1 && o.beam_size <= max_beam,
            "--beam-size: must be in [1, " << max_beam << "] (at most " << kMaxBeamSize << " and the vocabulary size "
                                           << vocab_size << "), got " << o.beam_size);
  QKV_CHECK(o.num_hypotheses >= 1 && o.num_hypotheses <= o.beam_size,
            "--num-hypotheses: must be in [1, --beam-size " << o.beam_size << "], got " << o.num_hypotheses);
  QKV_CHECK(std::isfinite(o.length_penalty) && o.length_penalty >= 0.f && o.length_penalty <= kMaxLengthPenalty,
            "--length-penalty: must be in [0, " << kMaxLengthPenalty << "], got " << o.length_penalty);
  if (o.beam_size == 1 && o.num_hypotheses == 1) return;
  QKV_CHECK(!o.sample, "--do-sample draws one continuation a prompt: it does not go with --beam-size "
                           << o.beam_size << " (beam search)");
  QKV_CHECK(o.stop_at_eos, "--ignore-eos applies to greedy and sampled generation, not to beam search (--beam-size "
                               << o.beam_size << ")");
}

namespace {

// The token rules of a causal LM's generation (constraints.h): nothing is banned for good (EOS
// ends a row; a causal LM has no decoder start).
StepRules step_rules(const models::CausalLM& model, const GenerateOptions& o) {
  StepRules r;
  r.constraints = o.constraints;
  r.eos_id = static_cast<int32_t>(model.config().eos_id);
  r.min_new_tokens = o.stop_at_eos ? o.min_new_tokens : 0;
  return r;
}

// A prompt's self-attention weights as they are produced: per layer (H, capacity, capacity), row q
// = the q-th token read, filled up to `read` rows.
struct AttentionRows {
  std::vector<Tensor> layers;
  int64_t read = 0;
};

// Copies query rows [first_query, first_query + rows) of state row `i` (keys from its first real
// position `pad`) out of one call's weights, per layer (N, H, rows, keys), into `acc`.
void take_rows(const std::vector<Tensor>& weights, int64_t i, int64_t pad, int64_t first_query, int64_t rows,
               AttentionRows& acc) {
  for (size_t l = 0; l < weights.size(); ++l) {
    const Tensor& w = weights[l];
    const int64_t H = w.size(1), Q = w.size(2), K = w.size(3), cap = acc.layers[l].size(1);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t q = acc.read + r;  // this prompt's query index
        const float* from = w.f32() + ((i * H + h) * Q + first_query + r) * K + pad;
        std::copy_n(from, q + 1, acc.layers[l].f32() + (h * cap + q) * cap);
      }
  }
  acc.read += rows;
}

// A causal LM as the searches' decoder (beam.h, greedy.h): the prompts are read at once (prefill),
// then one token a row per step through the key/value cache. With `attention` (greedy and sampled
// generation) each row's self-attention weights are kept as they are produced, in
// (*attention)[prompt_of_row[i]] for row i; rows move with reorder.
class CausalSteps : public DecoderSteps {
 public:
  CausalSteps(const models::CausalLM& model, std::vector<std::vector<int32_t>> rows, int64_t new_tokens,
              nn::KVCacheStorage* kv_storage, std::vector<AttentionRows>* attention = nullptr,
              std::vector<size_t> prompt_of_row = {})
      : model_(model),
        rows_(std::move(rows)),
        new_tokens_(new_tokens),
        kv_storage_(kv_storage),
        attention_(attention),
        prompt_of_row_(std::move(prompt_of_row)) {}

  Tensor first_logits() override {
    Tensor logits = weights_on_host(model_.prefill(rows_, new_tokens_, state_, weights_out(), kv_storage_));
    if (attention_) {
      const int64_t longest = state_.length, H = model_.config().num_heads;
      for (size_t i = 0; i < rows_.size(); ++i) {
        AttentionRows& acc = (*attention_)[prompt_of_row_[i]];
        const int64_t P = static_cast<int64_t>(rows_[i].size()), cap = P + new_tokens_;
        for (size_t l = 0; l < weights_.size(); ++l) acc.layers.push_back(Tensor::zeros(Dims{H, cap, cap}));
        take_rows(weights_, static_cast<int64_t>(i), longest - P, longest - P, P, acc);
      }
    }
    return logits;
  }

  Tensor next_logits(const std::vector<int32_t>& tokens) override {
    const auto N = static_cast<int64_t>(tokens.size());
    Tensor logits = weights_on_host(model_.step(Tensor::from_ids(Dims{N}, tokens), state_, weights_out()));
    if (attention_)
      for (size_t i = 0; i < tokens.size(); ++i)
        take_rows(weights_, static_cast<int64_t>(i), state_.padding[i], 0, 1, (*attention_)[prompt_of_row_[i]]);
    return logits;
  }

  void reorder(const std::vector<int64_t>& rows) override {
    model_.reorder(state_, rows);
    if (!attention_) return;
    std::vector<size_t> moved;
    for (int64_t r : rows) moved.push_back(prompt_of_row_[static_cast<size_t>(r)]);
    prompt_of_row_ = std::move(moved);
  }

 private:
  std::vector<Tensor>* weights_out() { return attention_ ? &weights_ : nullptr; }
  // The attention weights come back to the host (from a GPU); the logits stay where the model made
  // them, and the search brings back what it needs (score_step).
  Tensor weights_on_host(const Var& logits) {
    for (Tensor& w : weights_) w = w.to(Device::cpu());
    return logits.value().contiguous();
  }

  const models::CausalLM& model_;
  std::vector<std::vector<int32_t>> rows_;
  int64_t new_tokens_;
  nn::KVCacheStorage* kv_storage_;
  std::vector<AttentionRows>* attention_;
  std::vector<size_t> prompt_of_row_;
  std::vector<Tensor> weights_;  // the last call's, per layer (N, H, queries, keys)
  models::GenerationState state_;
};

// Greedy or sampled generation (greedy.h) of one batch whose rows all have the same budget
// `new_tokens` (so the padded prompt plus the budget fits the context). `rows` index the caller's
// prompts; results go to out[rows[i]].
void generate_batch(const models::CausalLM& model, const std::vector<FittedPrompt>& fitted, const std::vector<size_t>& rows,
                    int64_t new_tokens, const std::vector<uint64_t>& keys, const GenerateOptions& o,
                    const TokenCallback& on_token, std::vector<std::vector<int32_t>>& out,
                    std::vector<AttentionRows>* attention) {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<uint64_t> row_keys;
  for (size_t r : rows) {
    prompts.push_back(fitted[r].tokens);
    row_keys.push_back(keys[r]);
  }
  GreedySettings settings;
  settings.rules = step_rules(model, o);
  settings.at_limit = BeamLimit::Cut;  // the last new token is never fed back
  settings.stop_at_eos = o.stop_at_eos;
  settings.sample = o.sample;
  settings.sampling = o.sampling;
  settings.seed = o.seed;
  settings.log_probs = false;
  const std::vector<int64_t> limits(rows.size(), new_tokens);
  CausalSteps decoder(model, prompts, new_tokens, o.kv_storage.get(), attention, rows);
  TokenChosen heard;
  if (on_token) heard = [&](size_t b, int32_t token) { on_token(rows[b], token); };
  std::vector<FoundHypothesis> found = greedy_search_steps(decoder, prompts, limits, row_keys, settings, heard);
  for (size_t b = 0; b < rows.size(); ++b) out[rows[b]] = std::move(found[b].hypothesis.tokens);
}

}  // namespace

namespace {

// Every prompt checked and fitted to the context (fit_prompt).
std::vector<FittedPrompt> fit_prompts(const models::CausalLM& model, const std::vector<std::vector<int32_t>>& prompts,
                                      const GenerateOptions& o) {
  const int64_t V = model.output_vocab_size();
  std::vector<FittedPrompt> fitted;
  for (size_t i = 0; i < prompts.size(); ++i) {
    QKV_CHECK(!prompts[i].empty(), "generate: prompt " << i << " is empty (start it with the BOS id)");
    for (int32_t id : prompts[i])
      QKV_CHECK(id >= 0 && id < V, "generate: prompt " << i << ": token " << id << " is not in the vocabulary [0, " << V << ")");
    try {
      fitted.push_back(fit_prompt(prompts[i], model.config().max_seq_length, o));
    } catch (const Error& e) {
      throw Error("generate: prompt " + std::to_string(i) + ": " + e.what());
    }
  }
  return fitted;
}

// Rows of equal budget share a batch: all prompts that fit with max_new_tokens, and prompts cut
// short by the context grouped by their (equal) length; the largest budget first.
std::map<int64_t, std::vector<size_t>, std::greater<int64_t>> by_budget(const std::vector<FittedPrompt>& fitted) {
  std::map<int64_t, std::vector<size_t>, std::greater<int64_t>> groups;
  for (size_t i = 0; i < fitted.size(); ++i)
    if (fitted[i].new_tokens > 0) groups[fitted[i].new_tokens].push_back(i);
  return groups;
}

// Beam search of the prompts `group` (of one budget), each read beam_size times; results to out.
void beam_batch(const models::CausalLM& model, const std::vector<FittedPrompt>& fitted, const std::vector<size_t>& group,
                int64_t new_tokens, const GenerateOptions& o, std::vector<std::vector<Hypothesis>>& out) {
  std::vector<std::vector<int32_t>> contexts, rows;
  for (size_t i : group) {
    contexts.push_back(fitted[i].tokens);
    for (int k = 0; k < o.beam_size; ++k) rows.push_back(fitted[i].tokens);
  }
  CausalSteps decoder(model, std::move(rows), new_tokens, o.kv_storage.get());
  // As transformers' generate(num_beams=K, early_stopping=True) ends and keeps hypotheses.
  const BeamSettings settings{o.beam_size, o.num_hypotheses, o.length_penalty, BeamLimit::Cut, true, step_rules(model, o)};
  const std::vector<int64_t> limits(group.size(), new_tokens);
  std::vector<std::vector<FoundHypothesis>> found = beam_search_steps(decoder, contexts, limits, settings);
  for (size_t j = 0; j < group.size(); ++j)
    for (FoundHypothesis& f : found[j]) out[group[j]].push_back(std::move(f.hypothesis));
}

}  // namespace

std::vector<std::vector<Hypothesis>> generate_hypotheses(const models::CausalLM& model,
                                                         const std::vector<std::vector<int32_t>>& prompts,
                                                         const GenerateOptions& o) {
  validate_generate_options(o, model.output_vocab_size());
  const std::vector<FittedPrompt> fitted = fit_prompts(model, prompts, o);
  std::vector<std::vector<Hypothesis>> out(prompts.size());
  NoGradGuard no_grad;
  const ScopedCacheLimit step_buffers(
      step_buffers_kept(static_cast<int64_t>(prompts.size()) * o.beam_size, model.output_vocab_size()));
  GenerateOptions shared = o;  // batches of different budgets share the key/value storage
  if (!shared.kv_storage) shared.kv_storage = std::make_shared<nn::KVCacheStorage>();
  for (const auto& [budget, group] : by_budget(fitted)) beam_batch(model, fitted, group, budget, shared, out);
  return out;
}

std::vector<std::vector<int32_t>> generate(const models::CausalLM& model, const std::vector<std::vector<int32_t>>& prompts,
                                           const std::vector<uint64_t>& line_keys, const GenerateOptions& o,
                                           const TokenCallback& on_token, std::vector<AttentionWeights>* attention) {
  validate_generate_options(o, model.output_vocab_size());
  QKV_CHECK(line_keys.empty() || line_keys.size() == prompts.size(),
            "generate: " << line_keys.size() << " line keys for " << prompts.size() << " prompts");
  if (o.beam_size > 1 || o.num_hypotheses > 1) {
    QKV_CHECK(!attention, "generate: attention weights are kept for greedy and sampled generation, not for beam search");
    std::vector<std::vector<int32_t>> best(prompts.size());
    std::vector<std::vector<Hypothesis>> found = generate_hypotheses(model, prompts, o);
    for (size_t i = 0; i < found.size(); ++i) {
      if (!found[i].empty()) best[i] = std::move(found[i][0].tokens);
      if (on_token)
        for (int32_t token : best[i]) on_token(i, token);
    }
    return best;
  }
  const std::vector<uint64_t> keys = keys_or_indices(line_keys, prompts.size());
  const std::vector<FittedPrompt> fitted = fit_prompts(model, prompts, o);
  std::vector<std::vector<int32_t>> out(prompts.size());
  std::vector<AttentionRows> rows_read(attention ? prompts.size() : 0);
  NoGradGuard no_grad;
  const ScopedCacheLimit step_buffers(step_buffers_kept(static_cast<int64_t>(prompts.size()), model.output_vocab_size()));
  // Batches of different budgets share the key/value storage.
  GenerateOptions shared = o;
  if (!shared.kv_storage) shared.kv_storage = std::make_shared<nn::KVCacheStorage>();
  for (const auto& [budget, rows] : by_budget(fitted))
    generate_batch(model, fitted, rows, budget, keys, shared, on_token, out, attention ? &rows_read : nullptr);
  if (attention) {
    attention->assign(prompts.size(), AttentionWeights{});
    for (size_t i = 0; i < prompts.size(); ++i) {
      const AttentionRows& acc = rows_read[i];
      for (const Tensor& w : acc.layers)  // (H, cap, cap) -> (H, read, read)
        (*attention)[i].decoder_self.push_back(w.narrow(1, 0, acc.read).narrow(2, 0, acc.read).contiguous());
    }
  }
  return out;
}

}  // namespace qkv::decoding
