// The worker of a decoder-only model: completions by continuous batching
// (decoding::ContinuousGeneration), scores between its steps. Each completion request becomes one
// row per prompt and choice; the rows of new requests join the running batch at its next step and
// leave it at EOS, at their token budget, at a stop string, or when their client goes away (a
// stream hung up, a request past its timeout), each freeing its place at once. Out of memory (a
// GPU's, --max-memory's) preempts the batch and resumes it with fewer rows; only a request whose row
// does not fit alone fails (503 out_of_memory), the others go on.
#include <algorithm>
#include <set>

#include "qkv/api/generator.h"
#include "qkv/core/error.h"
#include "qkv/decoding/continuous_generation.h"
#include "qkv/serve/engine.h"
#include "qkv/serve/job.h"

namespace qkv::serve {

struct ModelSlot::Row {
  std::shared_ptr<Job> job;
  size_t choice = 0;  // prompt p's choice c: p * n + c
  std::vector<int32_t> tokens;
  // The text so far, where it is needed: to find a stop string, or to stream it.
  std::unique_ptr<api::TextStream> stream;
  std::string text;
  size_t sent = 0;  // bytes of `text` sent (a streamed row)
  bool stopped = false;  // by a stop string
  int64_t allowed = 0;   // new tokens the context leaves ("length" against "stop")
};

namespace {
// Cuts `text` before its earliest stop string; whether there was one.
bool cut_at_stop(std::string& text, const std::vector<std::string>& stop) {
  const size_t cut = stop_position(text, stop);
  if (cut == std::string::npos) return false;
  text.resize(cut);
  return true;
}
}  // namespace

void ModelSlot::generation_loop() {
  decoding::ContinuousGeneration gen(generator_->model(), options_.max_concurrent_sequences,
                                     options_.max_batch_tokens);
  Rows rows;
  for (;;) {
    std::vector<std::shared_ptr<Job>> completions, scores, beams;
    running_sequences_ = static_cast<int64_t>(rows.size());
    if (!take_jobs(!rows.empty(), rows.size(), completions, scores, beams)) break;
    if (!scores.empty()) run(scores);
    for (const auto& job : beams) run_beam_completion(job);
    for (const auto& job : completions) start_completion(gen, rows, job);
    drop_cancelled(gen, rows);
    if (gen.empty()) continue;
    std::vector<decoding::SequenceEvent> events;
    const int64_t preempted = gen.preemptions();
    try {
      events = gen.step();  // out of memory is handled inside: preemption, or one request's failure
    } catch (const std::exception& e) {
      fail_rows(rows, http_error_of(e));  // the generation left no sequence
      continue;
    }
    if (gen.preemptions() > preempted) metrics_.preemptions(name_, gen.preemptions() - preempted);
    std::set<const Job*> jobs;
    for (const auto& e : events)
      if (auto it = rows.find(e.id); it != rows.end()) jobs.insert(it->second.job.get());
    metrics_.batch(name_, static_cast<int64_t>(jobs.size()), static_cast<int64_t>(events.size()));
    for (const auto& e : events) on_event(gen, rows, e);
  }
  fail_rows(rows, HttpError(503, "server_error", "the server is shutting down", "", "shutting_down"));
  running_sequences_ = 0;
}

bool ModelSlot::take_jobs(bool generating, size_t rows_started, std::vector<std::shared_ptr<Job>>& completions,
                          std::vector<std::shared_ptr<Job>>& scores, std::vector<std::shared_ptr<Job>>& beams) {
  // --max-batch-tokens 1 turns batching off: one completion request at a time.
  const bool batching = options_.max_batch_tokens > 1;
  const size_t most = static_cast<size_t>(std::max<int64_t>(1, options_.max_concurrent_sequences));
  std::unique_lock<std::mutex> lock(mutex_);
  if (abandon_) return false;
  if (!generating) {
    wake_.wait(lock, [&] { return !queue_.empty() || stopping_; });
    if (queue_.empty()) return false;  // stopping, and nothing is left
    // The first batch forms from what arrives within batch_wait of the first request (later ones join
    // the running batch at its next step, so no wait for quiet is needed here).
    const auto queued_rows = [&] {
      size_t n = 0;
      for (const auto& j : queue_) n += j->kind == JobKind::Score || j->completion.beam_search() ? 0 : j->rows();
      return n;
    };
    if (batching) wake_.wait_until(lock, Clock::now() + options_.batch_wait, [&] { return stopping_ || queued_rows() >= most; });
  }
  size_t rows = rows_started;
  bool full = false;  // completions keep their order: one that waits holds back those behind it
  for (auto it = queue_.begin(); it != queue_.end();) {
    const std::shared_ptr<Job>& job = *it;
    if (job->cancelled) {  // its caller answered 504 already
      it = queue_.erase(it);
      continue;
    }
    if (job->kind == JobKind::Score || job->completion.beam_search()) {
      (job->kind == JobKind::Score ? scores : beams).push_back(job);
      it = queue_.erase(it);
      continue;
    }
    full = full || (rows > 0 && (!batching || rows + job->rows() > most));
    if (full) {
      ++it;
      continue;
    }
    rows += job->rows();
    completions.push_back(job);
    it = queue_.erase(it);
  }
  return true;
}

void ModelSlot::start_completion(decoding::ContinuousGeneration& gen, Rows& rows, const std::shared_ptr<Job>& job) {
  const CompletionRequest& r = job->completion;
  job->id = completion_id();
  job->created = unix_time();
  job->choices.assign(job->rows(), CompletionChoice{});
  job->rows_left = job->rows();
  decoding::SequenceOptions o;
  o.max_new_tokens = r.max_tokens;
  o.sample = !r.greedy();
  o.sampling = {r.greedy() ? 1.0 : r.temperature, r.top_k, r.top_p};
  o.seed = r.seed;
  o.stop_at_eos = !r.ignore_eos;
  o.min_new_tokens = r.rules.min_tokens;
  o.constraints = r.rules.constraints();
  decoding::GenerateOptions fitting;
  fitting.max_new_tokens = r.max_tokens;
  const bool needs_text = job->kind == JobKind::Stream || !r.stop.empty();
  std::vector<uint64_t> added;
  try {
    for (size_t p = 0; p < job->inputs.size(); ++p)
      for (int64_t c = 0; c < r.n; ++c) {
        const size_t choice = p * static_cast<size_t>(r.n) + static_cast<size_t>(c);
        o.key = choice;  // a request's rows draw as `qkv generate`'s lines 0, 1, ...
        const uint64_t id = gen.add(job->inputs[p], o);
        added.push_back(id);
        Row& row = rows[id];
        row.job = job;
        row.choice = choice;
        row.allowed = decoding::fit_prompt(job->inputs[p], context_, fitting).new_tokens;
        if (needs_text) row.stream = std::make_unique<api::TextStream>(*generator_->tokenizer());
      }
  } catch (const std::exception& e) {
    for (uint64_t id : added) {
      gen.cancel(id);
      rows.erase(id);
    }
    fail({job}, http_error_of(e));
  }
}

// A beam search request runs alone, between two steps of the others (its rows are searched
// together, not one token at a time): api::Generator's beam search, as `qkv generate --beam-size K
// --num-hypotheses n` runs it; choice c of prompt p is its c-th best, cut at a stop string.
void ModelSlot::run_beam_completion(const std::shared_ptr<Job>& job) {
  const CompletionRequest& r = job->completion;
  api::GenerationOptions o;
  o.batch_size = options_.batch_size;
  o.decode.max_new_tokens = r.max_tokens;
  o.decode.beam_size = r.beam_size;
  o.decode.num_hypotheses = static_cast<int>(r.n);
  o.decode.length_penalty = static_cast<float>(r.length_penalty);
  o.decode.min_new_tokens = r.rules.min_tokens;
  o.decode.constraints = r.rules.constraints();
  try {
    decoding::validate_generate_options(o.decode, generator_->vocab_size());
    const auto results = generator_->generate_hypotheses_ids(job->inputs, o);
    std::vector<CompletionChoice> choices;
    int64_t tokens_out = 0;
    for (const auto& hypotheses : results)
      for (size_t c = 0; c < static_cast<size_t>(r.n); ++c) {
        if (c >= hypotheses.size()) {  // the context left no room for a new token
          choices.push_back({"", "length"});
          continue;
        }
        const decoding::Hypothesis& h = hypotheses[c];
        std::string text = generator_->decode(h.tokens);
        const bool stopped = cut_at_stop(text, r.stop);
        choices.push_back({text, stopped || h.finished ? "stop" : "length"});
        tokens_out += static_cast<int64_t>(h.tokens.size());
      }
    metrics_.batch(name_, 1, static_cast<int64_t>(job->inputs.size()));
    metrics_.tokens(name_, job->tokens, tokens_out);
    job->answer.set_value(completion_body(completion_id(), unix_time(), job->model, choices, {job->tokens, tokens_out}));
  } catch (const std::exception& e) {
    fail({job}, http_error_of(e));
  }
}

void ModelSlot::on_event(decoding::ContinuousGeneration& gen, Rows& rows, const decoding::SequenceEvent& e) {
  const auto it = rows.find(e.id);
  if (it == rows.end()) return;
  Row& row = it->second;
  if (e.end == decoding::SequenceEnd::OutOfMemory) {  // alone it did not fit: its request fails (503)
    fail_job(gen, rows, row.job, http_error_of(OutOfMemoryError(e.error)));
    return;
  }
  if (e.token >= 0) {
    row.tokens.push_back(e.token);
    if (row.stream) {
      row.text += row.stream->push(e.token);
      row.stopped = cut_at_stop(row.text, row.job->completion.stop);
      if (row.job->kind == JobKind::Stream) send_ready_text(row, false);
    }
  }
  if (!row.stopped && e.end == decoding::SequenceEnd::None) return;
  if (e.end == decoding::SequenceEnd::None) gen.cancel(e.id);  // a stop string ends it here
  finish_row(row);
  rows.erase(it);
}

// A streamed row's text as it is made, except the last bytes that could begin a stop string (all of
// it when `final` or stopped).
void ModelSlot::send_ready_text(Row& row, bool final) {
  Job& j = *row.job;
  size_t hold = 0;
  for (const std::string& s : j.completion.stop) hold = std::max(hold, s.size() - 1);
  const size_t ready = row.stopped || final ? row.text.size() : sendable_prefix(row.text, hold);
  if (ready > row.sent) {
    push_chunk(j, completion_chunk(j.id, j.created, j.model, 0, row.text.substr(row.sent, ready - row.sent), ""),
               false);
    row.sent = ready;
  }
}

void ModelSlot::finish_row(Row& row) {
  Job& j = *row.job;
  const CompletionRequest& r = j.completion;
  if (j.kind == JobKind::Stream) {
    if (!row.stopped) {
      row.text += row.stream->finish();
      row.stopped = cut_at_stop(row.text, r.stop);
    }
    send_ready_text(row, true);
    push_chunk(j, completion_chunk(j.id, j.created, j.model, 0, "", finish_reason(row.stopped, row.tokens.size(), row.allowed)),
               false);
    push_chunk(j, "data: [DONE]\n\n", true);
  } else {
    // The whole text decoded at once, as `qkv generate` decodes it, then cut at a stop string.
    std::string text = generator_->decode(row.tokens);
    const bool stopped = cut_at_stop(text, r.stop);
    j.choices[row.choice] = {text, finish_reason(stopped, row.tokens.size(), row.allowed)};
  }
  j.tokens_out += static_cast<int64_t>(row.tokens.size());
  if (--j.rows_left > 0) return;
  metrics_.tokens(name_, j.tokens, j.tokens_out);
  if (j.kind != JobKind::Stream)
    j.answer.set_value(completion_body(j.id, j.created, j.model, j.choices, {j.tokens, j.tokens_out}));
}

// Rows whose client went away (a stream that hung up, a request answered 504) leave the batch now.
void ModelSlot::drop_cancelled(decoding::ContinuousGeneration& gen, Rows& rows) {
  for (auto it = rows.begin(); it != rows.end();) {
    Job& j = *it->second.job;
    if (!j.cancelled) {
      ++it;
      continue;
    }
    gen.cancel(it->first);
    if (j.kind == JobKind::Stream) push_chunk(j, "data: [DONE]\n\n", true);
    it = rows.erase(it);
  }
}

// One request's rows leave the batch, the others go on; the request gets `e`.
void ModelSlot::fail_job(decoding::ContinuousGeneration& gen, Rows& rows, std::shared_ptr<Job> job, const HttpError& e) {
  for (auto it = rows.begin(); it != rows.end();) {
    if (it->second.job != job) {
      ++it;
      continue;
    }
    gen.cancel(it->first);
    it = rows.erase(it);
  }
  fail({job}, e);
}

void ModelSlot::fail_rows(Rows& rows, const HttpError& e) {
  std::vector<std::shared_ptr<Job>> jobs;
  for (const auto& [id, row] : rows)
    if (std::find(jobs.begin(), jobs.end(), row.job) == jobs.end()) jobs.push_back(row.job);
  fail(jobs, e);
  rows.clear();
}

}  // namespace qkv::serve
