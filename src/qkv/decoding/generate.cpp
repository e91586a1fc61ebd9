#include "qkv/decoding/generate.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "qkv/autograd/graph.h"
#include "qkv/core/buffer_pool.h"
#include "qkv/core/error.h"
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

// The next token of one row from its logits `z`: the rules applied to a copy when they change
// anything, then the argmax or a draw.
int32_t next_token(const float* z, int64_t V, const RowHistory& history, const StepRules& rules, const GenerateOptions& o,
                   uint64_t key) {
  const auto step = static_cast<uint64_t>(history.generated.size());
  std::vector<float> ruled;
  if (rules.active(static_cast<int64_t>(step))) {
    ruled.assign(z, z + V);
    apply_step_rules(ruled.data(), V, history, rules);
    z = ruled.data();
  }
  return o.sample ? sample_token(z, V, o.sampling, o.seed, key, step) : argmax_token(z, V);
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

// One batch whose rows all have the same budget `new_tokens` (so the padded prompt plus the budget
// fits the context). `rows` index the caller's prompts; results go to out[rows[i]].
void generate_batch(const models::CausalLM& model, const std::vector<FittedPrompt>& fitted, const std::vector<size_t>& rows,
                    int64_t new_tokens, const std::vector<uint64_t>& keys, const GenerateOptions& o,
                    const TokenCallback& on_token, std::vector<std::vector<int32_t>>& out,
                    std::vector<AttentionRows>* attention) {
  const int64_t V = model.output_vocab_size();
  const int32_t eos = model.config().eos_id;
  const StepRules rules = step_rules(model, o);
  std::vector<std::vector<int32_t>> prompts;
  for (size_t r : rows) prompts.push_back(fitted[r].tokens);
  models::GenerationState state;
  std::vector<Tensor> weights;
  std::vector<Tensor>* weights_out = attention ? &weights : nullptr;
  // The last new token is never fed back, so new_tokens - 1 steps follow the prefill.
  // The scores and attention weights come back to the host (from a GPU), where tokens are chosen.
  const auto to_host = [&](const Var& v) {
    for (Tensor& w : weights) w = w.to(Device::cpu());
    return v.value().contiguous().to(Device::cpu());
  };
  Tensor logits = to_host(model.prefill(prompts, new_tokens, state, weights_out, o.kv_storage.get()));  // (N, V)
  std::vector<size_t> active = rows;  // state row i is the caller's prompt active[i]
  if (attention) {
    const int64_t longest = state.length, H = model.config().num_heads;
    for (size_t i = 0; i < rows.size(); ++i) {
      AttentionRows& acc = (*attention)[rows[i]];
      const int64_t P = static_cast<int64_t>(prompts[i].size()), cap = P + new_tokens;
      for (size_t l = 0; l < weights.size(); ++l) acc.layers.push_back(Tensor::zeros(Dims{H, cap, cap}));
      take_rows(weights, static_cast<int64_t>(i), longest - P, longest - P, P, acc);
    }
  }
  for (int64_t step = 0;; ++step) {
    std::vector<int64_t> keep;
    std::vector<int32_t> fed;
    for (size_t i = 0; i < active.size(); ++i) {
      const size_t row = active[i];
      const float* z = logits.f32() + static_cast<int64_t>(i) * V;
      const int32_t token = next_token(z, V, {fitted[row].tokens, out[row]}, rules, o, keys[row]);
      if (o.stop_at_eos && token == eos) continue;
      out[row].push_back(token);
      if (on_token) on_token(row, token);
      if (static_cast<int64_t>(out[row].size()) < new_tokens) {
        keep.push_back(static_cast<int64_t>(i));
        fed.push_back(token);
      }
    }
    if (keep.empty()) return;
    if (keep.size() < active.size()) {
      model.reorder(state, keep);
      std::vector<size_t> still;
      for (int64_t i : keep) still.push_back(active[static_cast<size_t>(i)]);
      active = std::move(still);
    }
    logits = to_host(model.step(Tensor::from_ids(Dims{static_cast<int64_t>(fed.size())}, fed), state, weights_out));
    if (attention)
      for (size_t i = 0; i < active.size(); ++i)
        take_rows(weights, static_cast<int64_t>(i), state.padding[i], 0, 1, (*attention)[active[i]]);
  }
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

// A causal LM as beam search's decoder (beam.h): the prompts are read at once (prefill), then one
// token a row per step through the key/value cache.
class CausalSteps : public DecoderSteps {
 public:
  CausalSteps(const models::CausalLM& model, std::vector<std::vector<int32_t>> rows, int64_t new_tokens,
              nn::KVCacheStorage* kv_storage)
      : model_(model), rows_(std::move(rows)), new_tokens_(new_tokens), kv_storage_(kv_storage) {}
  Tensor first_logits() override {
    return on_host(model_.prefill(rows_, new_tokens_, state_, nullptr, kv_storage_));
  }
  Tensor next_logits(const std::vector<int32_t>& tokens) override {
    return on_host(model_.step(Tensor::from_ids(Dims{static_cast<int64_t>(tokens.size())}, tokens), state_));
  }
  void reorder(const std::vector<int64_t>& rows) override { model_.reorder(state_, rows); }

 private:
  static Tensor on_host(const Var& logits) { return logits.value().contiguous().to(Device::cpu()); }
  const models::CausalLM& model_;
  std::vector<std::vector<int32_t>> rows_;
  int64_t new_tokens_;
  nn::KVCacheStorage* kv_storage_;
  models::GenerationState state_;
};

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
  const ScopedCacheLimit step_buffers(kStepBuffersKept);
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
  std::vector<uint64_t> keys = line_keys;
  if (keys.empty())
    for (size_t i = 0; i < prompts.size(); ++i) keys.push_back(i);
  const std::vector<FittedPrompt> fitted = fit_prompts(model, prompts, o);
  std::vector<std::vector<int32_t>> out(prompts.size());
  std::vector<AttentionRows> rows_read(attention ? prompts.size() : 0);
  NoGradGuard no_grad;
  const ScopedCacheLimit step_buffers(kStepBuffersKept);
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
