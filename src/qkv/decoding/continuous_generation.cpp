#include "qkv/decoding/continuous_generation.h"

#include <algorithm>
#include <iterator>

#include "qkv/autograd/graph.h"
#include "qkv/core/buffer_pool.h"
#include "qkv/core/error.h"
#include "qkv/decoding/search_steps.h"

namespace qkv::decoding {

struct ContinuousGeneration::Sequence {
  uint64_t id = 0;
  FittedPrompt prompt;
  SequenceOptions options;
  int64_t produced = 0;    // new tokens so far
  int32_t last_token = -1;  // the newest, fed at the next step
  std::vector<int32_t> generated;  // the new tokens (the rules' history; its size is their step)
  StepRules rules;
  bool cancelled = false;
  int64_t budget() const { return prompt.new_tokens; }
  // What a prefill reads: the prompt, and after a preemption the tokens made since (the newest
  // included: the logits of the position after it choose the next).
  size_t context_length() const { return prompt.tokens.size() + generated.size(); }
  std::vector<int32_t> context() const {
    std::vector<int32_t> tokens = prompt.tokens;
    tokens.insert(tokens.end(), generated.begin(), generated.end());
    return tokens;
  }
};

ContinuousGeneration::ContinuousGeneration(const models::CausalLM& model, int64_t max_sequences,
                                           int64_t max_prefill_tokens)
    : model_(model), max_sequences_(std::max<int64_t>(1, max_sequences)),
      max_prefill_tokens_(std::max<int64_t>(1, max_prefill_tokens)),
      row_limit_(static_cast<size_t>(max_sequences_)) {}

ContinuousGeneration::~ContinuousGeneration() = default;

size_t ContinuousGeneration::running() const { return rows_.size(); }
size_t ContinuousGeneration::waiting() const { return waiting_.size(); }
int64_t ContinuousGeneration::cache_length() const { return rows_.empty() ? 0 : state_.length; }

uint64_t ContinuousGeneration::add(const std::vector<int32_t>& prompt, const SequenceOptions& o) {
  QKV_CHECK(o.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0, got " << o.max_new_tokens);
  if (o.sample) validate_sampling_options(o.sampling);
  QKV_CHECK(o.min_new_tokens >= 0, "generate: min_new_tokens must be >= 0, got " << o.min_new_tokens);
  validate_token_constraints(o.constraints);
  QKV_CHECK(!prompt.empty(), "generate: an empty prompt (start it with the BOS id)");
  const int64_t V = model_.output_vocab_size();
  for (int32_t id : prompt)
    QKV_CHECK(id >= 0 && id < V, "generate: token " << id << " is not in the vocabulary [0, " << V << ")");
  GenerateOptions fitting;
  fitting.max_new_tokens = o.max_new_tokens;
  fitting.long_prompt = o.long_prompt;
  auto s = std::make_unique<Sequence>();
  s->id = next_id_++;
  s->prompt = fit_prompt(prompt, model_.config().max_seq_length, fitting);
  s->options = o;
  // generate's rules for a causal LM: nothing banned for good; min_new_tokens only while EOS ends a row.
  s->rules.constraints = o.constraints;
  s->rules.eos_id = static_cast<int32_t>(model_.config().eos_id);
  s->rules.min_new_tokens = o.stop_at_eos ? o.min_new_tokens : 0;
  waiting_.push_back(std::move(s));
  return waiting_.back()->id;
}

void ContinuousGeneration::cancel(uint64_t id) {
  for (auto* list : {&waiting_, &rows_})
    for (auto& s : *list)
      if (s->id == id) s->cancelled = true;
}

void ContinuousGeneration::clear() {
  waiting_.clear();
  rows_.clear();
  state_ = models::GenerationState{};
  logits_ = Tensor();
}

// The waiting sequences that join at this step, first come first: while the batch has room (under
// the row limit) and the prompts read stay within max_prefill_tokens. Cancelled ones leave; ones
// without a token to make end here (their event goes to `events`).
std::vector<std::unique_ptr<ContinuousGeneration::Sequence>> ContinuousGeneration::admit(
    std::vector<SequenceEvent>& events) {
  std::vector<std::unique_ptr<Sequence>> joined;
  int64_t tokens = 0;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    Sequence& s = **it;
    const int64_t length = static_cast<int64_t>(s.context_length());
    if (s.cancelled || s.budget() == 0) {
      if (!s.cancelled) events.push_back({s.id, -1, SequenceEnd::Length, {}});
      it = waiting_.erase(it);
      continue;
    }
    if (rows_.size() + joined.size() >= row_limit_) break;
    if (!joined.empty() && tokens + length > max_prefill_tokens_) break;
    tokens += length;
    joined.push_back(std::move(*it));
    it = waiting_.erase(it);
  }
  return joined;
}

// Row i of `logits` is rows[i]'s: its token (greedy or the keyed draw, as generate chooses), its
// event and whether it goes on (`keep`). Where every row takes its highest logit under rules that
// read no history, logits on a GPU stay there and only each row's best candidates come back.
void ContinuousGeneration::choose_tokens(const Tensor& logits, std::vector<std::unique_ptr<Sequence>>& rows,
                                         std::vector<bool>& keep, std::vector<SequenceEvent>& events) const {
  if (rows.empty()) return;
  const int64_t V = model_.output_vocab_size();
  const int32_t eos = model_.config().eos_id;
  bool from_top = logits.device().is_cuda();
  int64_t width = 1;
  for (const auto& s : rows) {
    if (s->cancelled) continue;
    from_top = from_top && !s->options.sample && top_suffices(s->rules, 1);
    width = std::max(width, candidates_needed(s->rules, 1));
  }
  const StepCandidates top = from_top ? step_candidates(logits, width, eos, false) : StepCandidates{};
  const Tensor host = from_top ? Tensor() : logits.contiguous().to(Device::cpu());
  for (size_t i = 0; i < rows.size(); ++i) {
    Sequence& s = *rows[i];
    if (s.cancelled) {
      keep.push_back(false);
      continue;
    }
    const SequenceOptions& o = s.options;
    int32_t token = 0;  // argmax_token's answer where every logit is -inf
    if (from_top) {
      TopTokens best;
      float eos_score = 0.f;
      const RowView view{{s.prompt.tokens, s.generated}, false};
      top_from_candidates(top, static_cast<int64_t>(i), s.rules, view, 1, best, eos_score);
      if (!best.token.empty()) token = best.token[0];
    } else {
      const float* z = host.f32() + static_cast<int64_t>(i) * V;
      std::vector<float> ruled;  // the rules change a copy, as generate's do
      if (s.rules.active(s.produced)) {
        ruled.assign(z, z + V);
        apply_step_rules(ruled.data(), V, {s.prompt.tokens, s.generated}, s.rules);
        z = ruled.data();
      }
      token = o.sample ? sample_token(z, V, o.sampling, o.seed, o.key, static_cast<uint64_t>(s.produced))
                       : argmax_token(z, V);
    }
    if (o.stop_at_eos && token == eos) {
      events.push_back({s.id, -1, SequenceEnd::Eos, {}});
      keep.push_back(false);
      continue;
    }
    ++s.produced;
    s.last_token = token;
    s.generated.push_back(token);
    const bool more = s.produced < s.budget();
    events.push_back({s.id, token, more ? SequenceEnd::None : SequenceEnd::Length, {}});
    keep.push_back(more);
  }
}

namespace {
// The rows of [first, first + count) whose `keep` is set, in an order that moves few of them: the
// kept rows stay in place and the last ones fill the holes the others left (one row copied per
// row dropped, not every row after it).
std::vector<int64_t> kept_rows(const std::vector<bool>& keep, size_t first, size_t count) {
  std::vector<int64_t> rows, holes, movers;
  size_t kept = 0;
  for (size_t i = 0; i < count; ++i) kept += keep[first + i] ? 1 : 0;
  for (size_t i = 0; i < count; ++i) {
    if (i < kept) {
      rows.push_back(static_cast<int64_t>(i));
      if (!keep[first + i]) holes.push_back(static_cast<int64_t>(i));
    } else if (keep[first + i]) {
      movers.push_back(static_cast<int64_t>(i));
    }
  }
  for (size_t h = 0; h < holes.size(); ++h) rows[static_cast<size_t>(holes[h])] = movers[h];
  return rows;
}

// Drops the rows of `state` (and `seqs`) that are not in `rows`.
template <class Seqs>
void keep_only(const models::CausalLM& model, models::GenerationState& state, Seqs& seqs,
               const std::vector<int64_t>& rows) {
  if (rows.size() == seqs.size()) return;
  Seqs kept;
  for (int64_t r : rows) kept.push_back(std::move(seqs[static_cast<size_t>(r)]));
  seqs = std::move(kept);
  if (rows.empty())
    state = models::GenerationState{};
  else
    model.keep_rows(state, rows);
}
}  // namespace

// The rows that go on, the joining ones after the running ones, in one state; then one position
// further with the tokens they were fed. Joining rows go into the running state's reserved rows
// when they fit there (nothing else moves); else the state is made again, compacted, with room for
// the rows that may run together now and a context's more positions.
void ContinuousGeneration::advance(models::GenerationState joining, std::vector<std::unique_ptr<Sequence>>& joined,
                                   const std::vector<bool>& keep) {
  const size_t running = rows_.size();
  keep_only(model_, state_, rows_, kept_rows(keep, 0, running));
  keep_only(model_, joining, joined, kept_rows(keep, running, joined.size()));
  if (!joined.empty()) {
    // A row that chose its p-th token feeds budget - p tokens from now on (this one included; the
    // last token is never fed): the columns it needs after the longest row's.
    const auto most_needed = [](const std::vector<std::unique_ptr<Sequence>>& seqs) {
      int64_t n = 0;
      for (const auto& s : seqs) n = std::max(n, s->budget() - s->produced);
      return n;
    };
    if (rows_.empty() || !model_.append(state_, joining, most_needed(joined))) {
      // Room for later sequences to append into: the whole context on the host, where unwritten
      // pages take no memory; on a GPU, where cudaMalloc commits every byte, or under a memory
      // limit, which counts them, as many columns again as these sequences need (a later one that
      // needs more makes the state anew, holding the old and the new caches for a moment). Rows for
      // as many sequences as may run together now.
      const int64_t needed = std::max(most_needed(rows_), most_needed(joined));
      const bool committed = model_.device().is_cuda() || BufferPool::memory_limit(model_.device()) > 0;
      const int64_t reserve_positions =
          committed ? std::min(model_.config().max_seq_length, needed) : model_.config().max_seq_length;
      state_ = model_.join(std::move(state_), std::move(joining), needed, static_cast<int64_t>(row_limit_),
                           reserve_positions);
      ++rebuilds_;
    } else {
      ++appends_;
    }
    for (auto& s : joined) rows_.push_back(std::move(s));
  }
  if (rows_.empty()) {
    state_ = models::GenerationState{};
    logits_ = Tensor();
    return;
  }
  std::vector<int32_t> fed;
  for (const auto& s : rows_) fed.push_back(s->last_token);
  const int64_t n = static_cast<int64_t>(fed.size());
  logits_ = model_.step(Tensor::from_ids(Dims{n}, fed), state_).value();
}

Tensor ContinuousGeneration::prefill(const std::vector<std::unique_ptr<Sequence>>& joined,
                                     models::GenerationState& joining) const {
  std::vector<std::vector<int32_t>> contexts;
  for (const auto& s : joined) contexts.push_back(s->context());
  // Sized for the prompts alone: join() makes the columns the new tokens need.
  return model_.prefill(contexts, 0, joining).value();
}

void ContinuousGeneration::wait_again(std::vector<std::unique_ptr<Sequence>> failed, size_t batch_rows,
                                      const OutOfMemoryError& e, std::vector<SequenceEvent>& events) {
  if (batch_rows <= 1) {  // alone in the batch: no other row's memory can make room for it
    for (const auto& s : failed) events.push_back({s->id, -1, SequenceEnd::OutOfMemory, e.what()});
    return;
  }
  row_limit_ = std::max<size_t>(1, batch_rows / 2);
  waiting_.insert(waiting_.begin(), std::make_move_iterator(failed.begin()), std::make_move_iterator(failed.end()));
}

// The batch's state may be half made (a join or a step failed part-way): it is dropped, and the
// sequences that were going on (`going_on`, in row order) wait again, owned wherever advance left
// them (rows_ or joined).
void ContinuousGeneration::preempt(std::vector<std::unique_ptr<Sequence>>& joined, const std::vector<Sequence*>& going_on,
                                   const OutOfMemoryError& e, std::vector<SequenceEvent>& events) {
  ++preemptions_;
  std::vector<std::unique_ptr<Sequence>> owned;
  for (auto* list : {&rows_, &joined})
    for (auto& s : *list)
      if (s) owned.push_back(std::move(s));
  rows_.clear();
  joined.clear();
  state_ = models::GenerationState{};
  logits_ = Tensor();
  std::vector<std::unique_ptr<Sequence>> failed;
  for (Sequence* p : going_on)
    for (auto& s : owned)
      if (s.get() == p) {
        failed.push_back(std::move(s));
        break;
      }
  wait_again(std::move(failed), going_on.size(), e, events);
}

std::vector<SequenceEvent> ContinuousGeneration::step() {
  std::vector<SequenceEvent> events;
  NoGradGuard no_grad;
  const ScopedCacheLimit step_buffers(step_buffers_kept(max_sequences_, model_.output_vocab_size()));
  try {
    std::vector<std::unique_ptr<Sequence>> joined = admit(events);
    models::GenerationState joining;
    Tensor joined_logits;
    if (!joined.empty()) {
      try {
        joined_logits = prefill(joined, joining);
      } catch (const OutOfMemoryError& e) {  // the running rows are untouched: they go on
        joining = models::GenerationState{};
        const size_t batch_rows = rows_.size() + joined.size();
        wait_again(std::move(joined), batch_rows, e, events);
        joined.clear();
      }
    }
    std::vector<bool> keep;
    choose_tokens(logits_, rows_, keep, events);
    choose_tokens(joined_logits, joined, keep, events);
    std::vector<Sequence*> going_on;
    for (size_t i = 0; i < rows_.size() + joined.size(); ++i)
      if (keep[i]) going_on.push_back(i < rows_.size() ? rows_[i].get() : joined[i - rows_.size()].get());
    try {
      advance(std::move(joining), joined, keep);
    } catch (const OutOfMemoryError& e) {
      preempt(joined, going_on, e, events);
    }
  } catch (...) {
    clear();
    throw;
  }
  // A sequence that ended gave its memory back: one more row may run together.
  for (const auto& e : events)
    if (e.end == SequenceEnd::Eos || e.end == SequenceEnd::Length)
      row_limit_ = std::min(row_limit_ + 1, static_cast<size_t>(max_sequences_));
  return events;
}

}  // namespace qkv::decoding
