// Text generation as callers want it (`qkv generate`, the Python module's Generator): a
// decoder-only checkpoint with its tokenizer (spm.model, or an imported tokenizer.json), prompts
// in, continuations out, batched, or streamed piece by piece.
//
// A text prompt starts with the model's bos_id: a document start. `qkv train --arch decoder-only`
// sets bos_id = eos_id, the separator its training stream has before every line, so a prompt is
// read as the start of a line and EOS, the end of the line, stops it. Prompt i draws from the
// random stream keyed by (seed, i): its output does not depend on the batch size, the thread count
// or the other prompts.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "qkv/decoding/generate.h"
#include "qkv/models/causal_lm.h"
#include "qkv/text/tokenizer.h"

namespace qkv::api {

struct GenerationOptions {
  decoding::GenerateOptions decode;  // max_new_tokens, greedy or sampling, seed, long prompts
  int64_t batch_size = 32;           // prompts generated together
};

// Lines done so far and in all, after each batch.
using GenerateProgress = std::function<void(int64_t done, int64_t total)>;

class Generator {
 public:
  // Loads DIR in eval mode with its tokenizer when it has one (without, only the *_ids calls work).
  // compute_type: how inference computes (nn/compute_type.h), set once here for every call.
  // device: where the model runs (a GPU: core/cuda_runtime.h); text in and out stays on the host.
  explicit Generator(const std::string& checkpoint_dir, nn::ComputeType compute_type = nn::ComputeType::Float32,
                 Device device = Device::cpu());
  ~Generator();

  const models::TransformerConfig& config() const;
  const models::CausalLM& model() const { return *model_; }
  models::CausalLM& model() { return *model_; }
  nn::ComputeType compute_type() const { return *model_->compute_type(); }
  Device device() const { return model_->device(); }
  void set_compute_type(nn::ComputeType type) { model_->set_compute_type(type); }
  const text::Tokenizer* tokenizer() const { return tokenizer_.get(); }
  int64_t vocab_size() const;

  // bos_id followed by the text's ids.
  std::vector<int32_t> encode_prompt(const std::string& text) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  // Checks every prompt against the context as options say; errors start with where(i) and end,
  // for a prompt too long to keep, with `truncate_hint` (how the caller turns on truncation).
  // Returns how many prompts would be cut (LongPrompt::TruncateLeft).
  int64_t check_prompts(const std::vector<std::vector<int32_t>>& prompts, const GenerationOptions& options,
                        const std::function<std::string(size_t)>& where, const std::string& truncate_hint) const;

  // The new tokens of each prompt, in input order, batched by length; prompt i keyed by `first_key + i`.
  // `attention`, when given, receives each prompt's self-attention weights (decoding/attention.h:
  // decoder_self, (H, T, T) per layer over the T tokens the model read); null keeps nothing.
  std::vector<std::vector<int32_t>> generate_ids(const std::vector<std::vector<int32_t>>& prompts,
                                                 const GenerationOptions& options,
                                                 const GenerateProgress& progress = {}, uint64_t first_key = 0,
                                                 std::vector<decoding::AttentionWeights>* attention = nullptr) const;
  // Beam search (decoding::generate_hypotheses): each prompt's options.decode.num_hypotheses best
  // continuations, best first, in input order, batched by length.
  std::vector<std::vector<decoding::Hypothesis>> generate_hypotheses_ids(const std::vector<std::vector<int32_t>>& prompts,
                                                                         const GenerationOptions& options,
                                                                         const GenerateProgress& progress = {}) const;
  std::vector<std::string> generate(const std::vector<std::string>& prompts, const GenerationOptions& options,
                                    const GenerateProgress& progress = {}) const;
  // One prompt; `on_token` hears each new token as soon as it is chosen. Returns all of them.
  std::vector<int32_t> generate_streaming(const std::vector<int32_t>& prompt, const GenerationOptions& options,
                                          const std::function<void(int32_t)>& on_token,
                                          decoding::AttentionWeights* attention = nullptr) const;
  // The tokens prompt i was read as: the prompt fitted to the context (cut from the left with
  // LongPrompt::TruncateLeft) followed by its new tokens, the first `length` of them (the
  // attention weights' T): labels for pictures.
  std::vector<int32_t> tokens_read(const std::vector<int32_t>& prompt, const std::vector<int32_t>& new_tokens,
                                   const GenerationOptions& options, int64_t length) const;
  // The tokenizer's token for an id ("▁the", "Ġthe"), or the id as text without a tokenizer.
  std::string piece(int32_t id) const;

 private:
  std::unique_ptr<models::CausalLM> model_;
  std::unique_ptr<text::Tokenizer> tokenizer_;
  std::string dir_;
};

// Text of a growing list of ids, as pieces to append: each push returns what extends the text
// given so far. A trailing U+FFFD (the byte pieces of a character not complete yet) waits for the
// next token; finish() returns what is left.
class TextStream {
 public:
  explicit TextStream(const text::Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  std::string push(int32_t id);
  std::string finish();

 private:
  std::string emit(bool final);
  const text::Tokenizer& tokenizer_;
  std::vector<int32_t> ids_;
  std::string given_;
};

}  // namespace qkv::api
