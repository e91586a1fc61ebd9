// Continuous batching for a decoder-only model (what `qkv serve` runs its completions on): sequences
// join a running batch at any step and leave it when they end, each with its own options.
//
// Each step() first reads the prompts of the sequences that wait (as many as there is room for, in
// one prefill, left-padded to the longest of them) and joins them to the running batch, then
// chooses one token for every running sequence and runs the model one position further. A sequence
// leaves at EOS, at its token budget or when cancelled; rows that leave cost nothing afterwards.
//
// One key/value state holds the running rows, right-aligned (they all end at one column, each left-
// padded as far as it needs). Joining rows are copied into its reserved rows (CausalLM::append:
// nothing else moves) when their prompts are no longer than its columns and their budgets fit its
// capacity; otherwise the state is made again (CausalLM::join), compacted to the longest row, with
// room for max_sequences rows (fewer after out of memory, below) and a context's more positions.
// Rows that leave are replaced by the last ones (one row copied each). So a join costs the joining
// rows' keys, and the state's width stays within three contexts however long it runs.
//
// A sequence's tokens are those decoding::generate gives its prompt with the same options: the same
// prompt fitting (fit_prompt), greedy or the draw keyed by (seed, key, index of the new token), the
// same EOS rule, the same token rules. What else runs beside it changes only the left padding it is read with (as
// generate's own batches do), never its random stream.
//
// Out of memory (a GPU's, or a --max-memory limit's) fails no sequence that can still run. Prompts
// that fail to prefill wait again; a failure after the tokens were chosen preempts the batch: its
// key/value state is dropped and every running sequence waits again, to be prefilled anew from its
// prompt and the tokens it has made (its tokens chosen as before, its draws keyed as before). Then
// at most half the rows that failed run together, one more each time a sequence ends, back to
// max_sequences. Only a sequence that fails with nothing else in the batch ends, with an
// OutOfMemory event carrying the error's message; the others go on.
//
// Not thread-safe: one caller (the server's worker for one model) drives it. Runs under
// NoGradGuard; the model should be in eval mode.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qkv/decoding/generate.h"
#include "qkv/models/causal_lm.h"

namespace qkv {
class OutOfMemoryError;
}

namespace qkv::decoding {

struct SequenceOptions {
  int64_t max_new_tokens = 64;  // capped by the context as generate caps it
  bool sample = false;          // false: greedy
  SamplingOptions sampling;     // with sample
  uint64_t seed = 0;            // with sample: the random stream's key
  uint64_t key = 0;             // with sample: the line key (generate's line_keys)
  bool stop_at_eos = true;
  LongPrompt long_prompt = LongPrompt::Refuse;
  // The token rules, as generate applies them to greedy and sampled rows (constraints.h).
  int64_t min_new_tokens = 0;
  TokenConstraints constraints;
};

enum class SequenceEnd { None, Eos, Length, OutOfMemory };

// What one step did to one sequence: a new token, an end, or both (the token that used up its
// budget). A sequence that ends at EOS has no token (-1) in its last event; one that ran out of
// memory alone (see above) has none either, and the error's message.
struct SequenceEvent {
  uint64_t id = 0;
  int32_t token = -1;
  SequenceEnd end = SequenceEnd::None;
  std::string error;  // with SequenceEnd::OutOfMemory
};

class ContinuousGeneration {
 public:
  // max_sequences: sequences decoded together at most (more wait); max_prefill_tokens: prompt
  // tokens one step reads at most (the first waiting prompt is always read when there is room).
  ContinuousGeneration(const models::CausalLM& model, int64_t max_sequences, int64_t max_prefill_tokens);
  ~ContinuousGeneration();
  ContinuousGeneration(const ContinuousGeneration&) = delete;
  ContinuousGeneration& operator=(const ContinuousGeneration&) = delete;

  // Queues a sequence, returns its id (ids count up from 1). Checks the prompt (non-empty, ids in
  // the vocabulary, fitted to the context: a qkv::Error as generate's) and the sampling options.
  // A prompt that leaves no new token to make ends, with an event, at the next step.
  uint64_t add(const std::vector<int32_t>& prompt, const SequenceOptions& options);
  // Drops a waiting or running sequence before the next step; it gets no more events. Unknown or
  // ended ids are ignored.
  void cancel(uint64_t id);
  // One step as described above; the events of every sequence that got a token or ended. Without
  // sequences: nothing. Out of memory is handled as described above; any other exception leaves no
  // sequence: the caller fails them all.
  std::vector<SequenceEvent> step();

  bool empty() const { return running() == 0 && waiting() == 0; }
  size_t running() const;
  size_t waiting() const;
  // The positions the running rows' keys take (padding included): the cache's width.
  int64_t cache_length() const;
  // How joining sequences got into the running batch: into its reserved rows in place, or by making
  // the state again (the running rows copied, compacted).
  int64_t appends() const { return appends_; }
  int64_t rebuilds() const { return rebuilds_; }
  // Times the running batch was preempted (out of memory after its tokens were chosen).
  int64_t preemptions() const { return preemptions_; }

 private:
  struct Sequence;
  std::vector<std::unique_ptr<Sequence>> admit(std::vector<SequenceEvent>& events);
  void choose_tokens(const Tensor& logits, std::vector<std::unique_ptr<Sequence>>& rows, std::vector<bool>& keep,
                     std::vector<SequenceEvent>& events) const;
  Tensor prefill(const std::vector<std::unique_ptr<Sequence>>& joined, models::GenerationState& joining) const;
  void advance(models::GenerationState joining, std::vector<std::unique_ptr<Sequence>>& joined,
               const std::vector<bool>& keep);
  // Out of memory: the sequences `failed` (in their order) wait again at the front of the queue and
  // fewer rows run together; or, alone in the batch, the one ends with an OutOfMemory event.
  void wait_again(std::vector<std::unique_ptr<Sequence>> failed, size_t batch_rows, const OutOfMemoryError& e,
                  std::vector<SequenceEvent>& events);
  void preempt(std::vector<std::unique_ptr<Sequence>>& joined, const std::vector<Sequence*>& going_on,
               const OutOfMemoryError& e, std::vector<SequenceEvent>& events);
  void clear();

  const models::CausalLM& model_;
  int64_t max_sequences_, max_prefill_tokens_;
  uint64_t next_id_ = 1;
  int64_t appends_ = 0, rebuilds_ = 0, preemptions_ = 0;
  size_t row_limit_;  // rows that may run together now: max_sequences_, less after out of memory
  std::vector<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> rows_;  // row i of state_
  models::GenerationState state_;
  Tensor logits_;  // (rows, V) on the model's device: each running row's next-token scores
};

}  // namespace qkv::decoding
