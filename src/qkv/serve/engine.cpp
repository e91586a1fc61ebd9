#include "qkv/serve/engine.h"

#include <algorithm>
#include <future>
#include <limits>
#include <sstream>

#include "qkv/serve/job.h"

#include "qkv/api/encoder.h"
#include "qkv/api/generator.h"
#include "qkv/api/translator.h"
#include "qkv/core/error.h"
#include "qkv/data/encoder_text.h"
#include "qkv/decoding/generate.h"
#include "qkv/models/config.h"
#include "qkv/train/step.h"

namespace qkv::serve {

const char* family_name(Family f) {
  switch (f) {
    case Family::EncoderDecoder: return models::kEncoderDecoder;
    case Family::DecoderOnly: return models::kDecoderOnly;
    default: return models::kEncoderOnly;
  }
}

namespace {
const char* route_for(Family f) {
  switch (f) {
    case Family::EncoderDecoder: return "it translates: POST /v1/translations";
    case Family::DecoderOnly: return "it completes: POST /v1/completions";
    default: return "it embeds and classifies: POST /v1/embeddings, /v1/classifications";
  }
}

HttpError wrong_family(const std::string& model, Family f) {
  return HttpError(400, "invalid_request_error",
                   "model '" + model + "' is " + (f == Family::DecoderOnly ? "a " : "an ") + family_name(f) +
                       " model; " + route_for(f),
                   "model", "wrong_model_family");
}

}  // namespace

ModelSlot::ModelSlot(std::string name, const std::string& dir, const ServeOptions& options, Metrics& metrics)
    : name_(std::move(name)), options_(options), metrics_(metrics) {
  const models::TransformerConfig config = models::load_config(dir + "/config.json");
  context_ = config.max_seq_length;
  if (config.encoder_decoder()) {
    family_ = Family::EncoderDecoder;
    translator_ = std::make_unique<api::Translator>(dir, options.compute_type, options.device);
    QKV_CHECK(translator_->has_tokenizers(), dir << ": no tokenizer (source.spm.model / target.spm.model, or an imported model's): the server takes text");
  } else if (config.decoder_only()) {
    family_ = Family::DecoderOnly;
    generator_ = std::make_unique<api::Generator>(dir, options.compute_type, options.device);
    QKV_CHECK(generator_->tokenizer(), dir << ": no tokenizer (spm.model or tokenizer.json): the server takes text");
  } else {
    family_ = Family::EncoderOnly;
    encoder_ = std::make_unique<api::Encoder>(dir, "serving", options.compute_type, options.device);
    QKV_CHECK(encoder_->tokenizer(), dir << ": no tokenizer: the server takes text");
  }
  worker_ = std::thread([this] { worker_loop(); });
}

ModelSlot::~ModelSlot() { stop(std::chrono::milliseconds(0)); }

bool ModelSlot::has_labels() const { return encoder_ && !encoder_->labels().empty(); }

int64_t ModelSlot::queue_length() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(queue_.size());
}

bool ModelSlot::stop(std::chrono::milliseconds drain) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!worker_.joinable()) return true;
    stopping_ = true;
  }
  wake_.notify_all();
  const auto deadline = Clock::now() + drain;
  bool drained = true;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // The other families' worker returns once the queue is empty (after its last batch); the
      // decoder-only one once its generations have ended too.
      if (worker_done_ || (queue_.empty() && family_ != Family::DecoderOnly)) break;
      if (Clock::now() >= deadline) {
        drained = false;
        fail({queue_.begin(), queue_.end()}, HttpError(503, "server_error", "the server is shutting down", "", "shutting_down"));
        queue_.clear();
        abandon_ = true;
        break;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  wake_.notify_all();
  worker_.join();
  return drained;
}

// ---- the callers' side: tokenise, queue, wait -----------------------------------------------------

int64_t ModelSlot::input_limit() const {
  return options_.max_input_tokens > 0 ? std::min(options_.max_input_tokens, context_) : context_;
}

HttpError ModelSlot::too_long(const std::string& where, size_t tokens, int64_t allowed, const char* field) const {
  return HttpError(413, "invalid_request_error",
                   where + " is " + std::to_string(tokens) + " tokens; at most " + std::to_string(allowed) +
                       (options_.max_input_tokens > 0 ? " (--max-input-tokens)" : " (the model's context)"),
                   field, "input_too_long");
}

std::vector<std::vector<int32_t>> ModelSlot::tokenize(const std::vector<std::string>& texts, const char* field,
                                                      bool truncate) const {
  std::vector<std::vector<int32_t>> out;
  // A prompt leaves room for at least one new token; a source or a sentence may fill the context.
  const int64_t allowed = generator_ ? input_limit() - 1 : input_limit();
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string where = std::string("'") + field + "' entry " + std::to_string(i);
    std::vector<int32_t> ids;
    try {
      if (translator_) {
        api::TranslationOptions o;
        o.truncate = truncate;  // else too long is an error naming the entry
        o.max_source_tokens = allowed;
        ids = translator_->encode_source(texts[i], o, where);
      } else if (generator_) {
        ids = generator_->encode_prompt(texts[i]);
      } else {  // [CLS] ... [SEP]
        ids = data::encoder_ids(*encoder_->tokenizer(), encoder_->model().config(), texts[i],
                                encoder_->pooling().max_seq_length, truncate ? data::TooLong::Truncate : data::TooLong::Error,
                                where);
      }
    } catch (const Error& e) {
      throw HttpError(413, "invalid_request_error", e.what(), field, "input_too_long");
    }
    if (truncate && encoder_ && static_cast<int64_t>(ids.size()) > allowed) {
      const int32_t last = ids.back();  // an encoder's [SEP] still ends the row
      ids.resize(static_cast<size_t>(allowed));
      ids.back() = last;
    }
    if (static_cast<int64_t>(ids.size()) > allowed) throw too_long(where, ids.size(), allowed, field);
    out.push_back(std::move(ids));
  }
  return out;
}

std::shared_ptr<ModelSlot::Job> ModelSlot::submit(std::shared_ptr<Job> job) {
  job->model = name_;
  for (const auto& in : job->inputs) job->tokens += static_cast<int64_t>(in.size());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw HttpError(503, "server_error", "the server is shutting down", "", "shutting_down");
    if (static_cast<int64_t>(queue_.size()) >= options_.max_queue) {
      HttpError e(503, "server_error",
                  "model '" + name_ + "' has " + std::to_string(queue_.size()) +
                      " requests waiting (--max-queue); retry later",
                  "", "queue_full");
      e.retry_after = 1;
      throw e;
    }
    queue_.push_back(job);
  }
  wake_.notify_all();
  return job;
}

std::string ModelSlot::wait(const std::shared_ptr<Job>& job) {
  std::future<std::string> answer = job->answer.get_future();
  if (answer.wait_for(options_.request_timeout) != std::future_status::ready) {
    job->cancelled = true;
    throw HttpError(504, "server_error",
                    "no answer within the request timeout (" + std::to_string(options_.request_timeout.count()) +
                        " ms, --request-timeout)",
                    "", "timeout");
  }
  return answer.get();
}

std::shared_ptr<ModelSlot::Job> ModelSlot::new_job(Family family, JobKind kind, const std::vector<std::string>& texts,
                                                    const char* field, bool truncate) const {
  if (family_ != family) throw wrong_family(name_, family_);
  auto job = std::make_shared<Job>();
  job->kind = kind;
  job->inputs = tokenize(texts, field, truncate);
  return job;
}

std::string ModelSlot::complete(const CompletionRequest& r) {
  if (family_ == Family::DecoderOnly && r.beam_size > generator_->vocab_size())
    throw bad_field("beam_size", "'beam_size' is " + std::to_string(r.beam_size) + "; at most the vocabulary (" +
                                     std::to_string(generator_->vocab_size()) + ")");
  auto job = new_job(Family::DecoderOnly, JobKind::Complete, r.prompts, "prompt");
  job->completion = r;
  return wait(submit(job));
}

std::function<void(const ModelSlot::Write&)> ModelSlot::start_streaming(const CompletionRequest& r) {
  auto job = new_job(Family::DecoderOnly, JobKind::Stream, r.prompts, "prompt");
  job->completion = r;
  submit(job);
  const auto timeout = options_.request_timeout;
  Metrics* metrics = &metrics_;
  const std::string name = name_;
  return [job, timeout, metrics, name](const Write& write) {
    bool first = true;
    for (;;) {
      std::unique_lock<std::mutex> lock(job->chunk_mutex);
      if (!job->chunk_ready.wait_for(lock, timeout, [&] { return !job->chunks.empty() || job->finished; })) {
        job->cancelled = true;
        lock.unlock();
        const HttpError e(504, "server_error", "no progress within the request timeout (--request-timeout)", "",
                          "timeout");
        write("data: " + error_body(e) + "\n\n") && write("data: [DONE]\n\n");
        return;
      }
      if (job->chunks.empty()) return;  // finished
      std::string chunk = std::move(job->chunks.front());
      job->chunks.pop_front();
      lock.unlock();
      if (first) {
        metrics->time_to_first_token(name, seconds_since(job->arrived));
        first = false;
      }
      if (!write(chunk)) {
        job->cancelled = true;  // the worker stops at its next token
        return;
      }
    }
  };
}

std::string ModelSlot::embed(const EmbeddingRequest& r) {
  auto job = new_job(Family::EncoderOnly, JobKind::Embed, r.inputs, "input", r.truncate);
  job->base64 = r.base64;
  job->batch_key = "embed";
  return wait(submit(job));
}

std::string ModelSlot::classify(const ClassificationRequest& r) {
  if (family_ == Family::EncoderOnly && !has_labels())
    throw HttpError(400, "invalid_request_error",
                    "model '" + name_ + "' has no classification head (its config.json has no labels)", "model",
                    "no_classifier");
  auto job = new_job(Family::EncoderOnly, JobKind::Classify, r.inputs, "input", r.truncate);
  job->classification = r;
  job->batch_key = "classify";
  return wait(submit(job));
}

std::string ModelSlot::translate(const TranslationRequest& r) {
  if (family_ == Family::EncoderDecoder && r.beam_size > translator_->config().tgt_vocab_size)
    throw bad_field("beam_size", "'beam_size' is " + std::to_string(r.beam_size) + "; at most the target vocabulary (" +
                                     std::to_string(translator_->config().tgt_vocab_size) + ")");
  auto job = new_job(Family::EncoderDecoder, JobKind::Translate, r.inputs, "input", r.truncate);
  job->translation = r;
  // One batch runs with one set of options: requests share it only when all of theirs are equal.
  std::ostringstream key;
  key.precision(std::numeric_limits<double>::max_digits10);
  key << "translate/" << r.beam_size << "/" << r.num_hypotheses << "/" << r.length_penalty << "/"
      << (r.max_length ? std::to_string(*r.max_length) : "-") << "/" << r.rules.key();
  job->batch_key = key.str();
  return wait(submit(job));
}

std::string ModelSlot::score(const ScoreRequest& r) {
  if (family_ == Family::EncoderOnly)
    throw HttpError(400, "invalid_request_error",
                    "model '" + name_ + "' is an encoder-only model: it has no decoder to score with; " +
                        route_for(family_),
                    "model", "wrong_model_family");
  if (family_ == Family::EncoderDecoder && r.sources.empty())
    throw bad_field("source", "'source' is required: model '" + name_ +
                                  "' is an encoder-decoder model, which scores each input given its source");
  if (family_ == Family::DecoderOnly && !r.sources.empty())
    throw bad_field("source", "'source' is for encoder-decoder models; model '" + name_ + "' is decoder-only");
  auto job = std::make_shared<Job>();
  job->kind = JobKind::Score;
  job->batch_key = "score";
  // The scored positions fit the context: a text's input is its ids but the last.
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    const std::string where = "'input' entry " + std::to_string(i);
    std::vector<int32_t> ids;
    try {
      ids = translator_ ? translator_->encode_target(r.inputs[i]) : generator_->encode_prompt(r.inputs[i]);
    } catch (const Error& e) {
      throw HttpError(400, "invalid_request_error", where + ": " + e.what(), "input");
    }
    if (static_cast<int64_t>(ids.size()) - 1 > input_limit()) throw too_long(where, ids.size() - 1, input_limit(), "input");
    job->inputs.push_back(std::move(ids));
  }
  if (translator_) job->sources = tokenize(r.sources, "source");
  return wait(submit(job));
}

// ---- the worker's side: batch, run, answer --------------------------------------------------------

void ModelSlot::worker_loop() {
  if (family_ == Family::DecoderOnly) {
    generation_loop();
  } else {
    for (;;) {
      const std::vector<std::shared_ptr<Job>> batch = next_batch();
      if (batch.empty()) break;
      run(batch);
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  worker_done_ = true;
}

std::vector<std::shared_ptr<ModelSlot::Job>> ModelSlot::next_batch() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return !queue_.empty() || stopping_; });
    if (queue_.empty()) return {};
    std::shared_ptr<Job> first = queue_.front();
    queue_.pop_front();
    if (first->cancelled) continue;  // its caller answered 504 already
    if (first->batch_key.empty()) return {first};
    if (options_.max_batch_tokens > first->tokens) wait_for_batch_mates(lock, *first);
    std::vector<std::shared_ptr<Job>> batch = {first};
    int64_t tokens = first->tokens;
    for (auto it = queue_.begin(); it != queue_.end();) {
      if ((*it)->batch_key == first->batch_key && !(*it)->cancelled &&
          tokens + (*it)->tokens <= options_.max_batch_tokens) {
        tokens += (*it)->tokens;
        batch.push_back(*it);
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
    return batch;
  }
}

// Others of the same key join the first job until none has come for batch_wait, or max_batch_tokens
// are waiting, or kBatchWaitsAtMost x batch_wait have passed. Clients answered by one batch come
// back spread over several milliseconds: with a window of 5 ms from the first arrival, 32
// closed-loop clients split into two groups that took turns (18 requests a batch on average,
// bench/bench_serve.py, 2 cores); with 10 ms of quiet, every batch held all 32, and each step of a
// small batch costs nearly what a full one does. A lone request waits batch_wait only.
void ModelSlot::wait_for_batch_mates(std::unique_lock<std::mutex>& lock, const Job& first) {
  constexpr int kBatchWaitsAtMost = 4;
  const auto waiting = [&] {  // {jobs, tokens} of first's key in the queue, first included
    std::pair<int64_t, int64_t> n{1, first.tokens};
    for (const auto& j : queue_)
      if (j->batch_key == first.batch_key) ++n.first, n.second += j->tokens;
    return n;
  };
  const auto deadline = Clock::now() + kBatchWaitsAtMost * options_.batch_wait;
  auto seen = waiting();
  while (!stopping_ && seen.second < options_.max_batch_tokens) {
    const auto quiet_until = std::min(deadline, Clock::now() + options_.batch_wait);
    wake_.wait_until(lock, quiet_until, [&] { return stopping_ || waiting().first != seen.first; });
    const auto now = waiting();
    if (now.first == seen.first || Clock::now() >= deadline) break;  // quiet for batch_wait, or the cap
    seen = now;
  }
}

namespace {
// Which inputs of the concatenated batch belong to each job.
template <class JobPtr>
std::vector<std::vector<int32_t>> concatenated(const std::vector<JobPtr>& batch) {
  std::vector<std::vector<int32_t>> all;
  for (const auto& j : batch) all.insert(all.end(), j->inputs.begin(), j->inputs.end());
  return all;
}

}  // namespace

// Every job of a failed batch gets the error: a streamed one as its last events.
void ModelSlot::fail(const std::vector<std::shared_ptr<Job>>& batch, const HttpError& e) {
  for (const auto& j : batch) {
    if (j->kind == JobKind::Stream) {
      push_chunk(*j, "data: " + error_body(e) + "\n\n", false);
      push_chunk(*j, "data: [DONE]\n\n", true);
    } else {
      j->answer.set_exception(std::make_exception_ptr(e));
    }
  }
}

void ModelSlot::run(const std::vector<std::shared_ptr<Job>>& batch) {
  int64_t inputs = 0, tokens_in = 0, tokens_out = 0;
  for (const auto& j : batch) {
    inputs += static_cast<int64_t>(j->inputs.size());
    tokens_in += j->tokens;
  }
  // Counted before any job is answered: a client that has its answer finds its batch in /metrics.
  metrics_.batch(name_, static_cast<int64_t>(batch.size()), inputs);
  // Each job is answered only once the batch's work is done, so a batch that failed can run again.
  const auto work = [&](const std::vector<std::shared_ptr<Job>>& jobs) -> int64_t {
    switch (jobs[0]->kind) {
      case JobKind::Embed:
      case JobKind::Classify: run_encoder(jobs); break;
      case JobKind::Translate: return run_translation(jobs);
      case JobKind::Complete:
      case JobKind::Stream: break;  // generation_loop's, never batched here
      case JobKind::Score: run_score(jobs); break;
    }
    return 0;
  };
  try {
    tokens_out = work(batch);
  } catch (const OutOfMemoryError& e) {
    // Requests merged into one batch may each fit alone: they run one at a time and fail alone
    // (503, out_of_memory), rather than all failing for the largest one.
    if (batch.size() == 1) {
      fail(batch, http_error_of(e));
    } else {
      for (const auto& job : batch) {
        try {
          tokens_out += work({job});
        } catch (const std::exception& alone) {
          fail({job}, http_error_of(alone));
        }
      }
    }
  } catch (const std::exception& e) {
    fail(batch, http_error_of(e));
  }
  metrics_.tokens(name_, tokens_in, tokens_out);
}

void ModelSlot::run_encoder(const std::vector<std::shared_ptr<Job>>& batch) {
  const bool embed = batch[0]->kind == JobKind::Embed;
  const std::vector<std::vector<int32_t>> all = concatenated(batch);
  const Tensor out = embed ? encoder_->embed_ids(all, options_.batch_size) : encoder_->classify_ids(all, options_.batch_size);
  const int64_t width = out.size(1);
  const std::vector<float> values = out.to_vector();
  size_t row = 0;
  for (const auto& j : batch) {
    if (embed) {
      std::vector<std::vector<float>> e;
      for (size_t i = 0; i < j->inputs.size(); ++i, ++row)
        e.emplace_back(values.begin() + static_cast<int64_t>(row) * width,
                       values.begin() + static_cast<int64_t>(row + 1) * width);
      j->answer.set_value(embedding_body(j->model, e, j->tokens, j->base64));
      continue;
    }
    std::vector<std::vector<LabelProbability>> top;
    for (size_t i = 0; i < j->inputs.size(); ++i, ++row) {
      std::vector<LabelProbability> ps;
      for (int64_t c = 0; c < width; ++c) ps.push_back({encoder_->labels()[static_cast<size_t>(c)], values[row * width + c]});
      std::stable_sort(ps.begin(), ps.end(), [](const auto& a, const auto& b) { return a.probability > b.probability; });
      ps.resize(std::min<size_t>(ps.size(), static_cast<size_t>(j->classification.top_k)));
      top.push_back(std::move(ps));
    }
    j->answer.set_value(classification_body(j->model, top, j->tokens));
  }
}

int64_t ModelSlot::run_translation(const std::vector<std::shared_ptr<Job>>& batch) {
  const TranslationRequest& r = batch[0]->translation;
  api::TranslationOptions o;
  o.batch_size = options_.batch_size;
  o.search.beam_size = r.beam_size;
  o.search.n_best = r.num_hypotheses;
  o.search.length_penalty = static_cast<float>(r.length_penalty);
  if (r.max_length) {
    o.search.max_length_ratio = 0;
    o.search.max_length_offset = std::min<int64_t>(*r.max_length, context_ - 1);
  }
  o.search.constraints = r.rules.constraints();
  // transformers' min_length counts the decoder's start token: N new tokens are a length of N + 1.
  o.search.min_length = r.rules.min_tokens > 0 ? r.rules.min_tokens + 1 : 0;
  const auto results = translator_->translate_ids(concatenated(batch), o);
  int64_t tokens_out = 0;
  size_t row = 0;
  for (const auto& j : batch) {
    std::vector<std::vector<TranslationHypothesis>> hs;
    int64_t out_tokens = 0;
    for (size_t i = 0; i < j->inputs.size(); ++i, ++row) {
      std::vector<TranslationHypothesis> h;
      for (const api::Translation& t : results[row]) {
        h.push_back({t.text.empty() && !t.tokens.empty() ? translator_->decode_target(t.tokens) : t.text, t.score,
                     t.log_prob});
        out_tokens += static_cast<int64_t>(t.tokens.size());
      }
      hs.push_back(std::move(h));
    }
    tokens_out += out_tokens;
    j->answer.set_value(translation_body(j->model, hs, j->translation.old_n_best_name, {j->tokens, out_tokens}));
  }
  return tokens_out;
}

void ModelSlot::run_score(const std::vector<std::shared_ptr<Job>>& batch) {
  std::vector<std::vector<int32_t>> sources;
  for (const auto& j : batch) sources.insert(sources.end(), j->sources.begin(), j->sources.end());
  const models::Model& model = translator_ ? static_cast<const models::Model&>(translator_->model())
                                           : static_cast<const models::Model&>(generator_->model());
  const train::ScoreResult r = train::score(model, sources, concatenated(batch), options_.batch_size);
  size_t row = 0;
  for (const auto& j : batch) {
    std::vector<TextScore> scores;
    int64_t scored = 0;
    for (const auto& ids : j->inputs) {
      scores.push_back({r.line_log_prob[row++], static_cast<int64_t>(ids.size()) - 1});
      scored += scores.back().tokens;
    }
    int64_t source_tokens = 0;
    for (const auto& s : j->sources) source_tokens += static_cast<int64_t>(s.size());
    j->answer.set_value(score_body(j->model, scores, {source_tokens + scored, 0}));
  }
}

}  // namespace qkv::serve
