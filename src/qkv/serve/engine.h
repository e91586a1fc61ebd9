// The engine of `qkv serve`: each loaded checkpoint is a ModelSlot with its own queue and one
// worker thread that runs the library's API (api::Translator, api::Generator, api::Encoder). The
// callers (HTTP threads) parse and tokenise, queue a job and wait for its answer; the worker takes
// the jobs that arrived together and can share a batch (the same route and options), up to
// max_batch_tokens tokens, waiting for more until none has come for batch_wait (at most 4 x
// batch_wait), and runs them as one call.
//
// A decoder-only model's worker batches continuously instead (decoding::ContinuousGeneration):
// the sequences of new completion requests join the running batch at its next step and leave it
// when they end, streamed or not, greedy or sampled, whatever their options (token rules
// included). A beam search request runs alone between two steps, its prompts searched together.
//
// An answer never depends on what else was in its batch: translations, embeddings and
// classifications of a sentence are the same in any batch (the CLI's batching gives the same bits),
// greedy completions likewise, and a sampled completion's rows draw from the request's seed (row i
// of a request keyed by i), so the same request gives the same text under any load. No printing, no
// signals: the CLI owns those.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "qkv/core/device.h"
#include "qkv/nn/compute_type.h"
#include "qkv/serve/metrics.h"
#include "qkv/serve/protocol.h"

namespace qkv::api {
class Translator;
class Generator;
class Encoder;
}  // namespace qkv::api

namespace qkv::decoding {
class ContinuousGeneration;
struct SequenceEvent;
}  // namespace qkv::decoding

namespace qkv::serve {

struct ServeOptions {
  int64_t max_queue = 64;                              // jobs waiting per model; past it 503 + Retry-After
  int64_t max_batch_tokens = 4096;                     // input tokens of one batch (1: no batching across requests)
  std::chrono::microseconds batch_wait{10000};         // a batch waits until no job has come for this long
  int64_t max_input_tokens = 0;                        // tokens of one input at most (413); 0: the model's context
  std::chrono::milliseconds request_timeout{120000};   // a job not answered by then: 504
  int64_t batch_size = 32;                             // sentences decoded together inside a call
  int64_t max_concurrent_sequences = 16;               // completion rows generated together (continuous batching)
  nn::ComputeType compute_type = nn::ComputeType::Float32;
  Device device = Device::cpu();
};

enum class Family { EncoderDecoder, DecoderOnly, EncoderOnly };
const char* family_name(Family f);

class ModelSlot {
 public:
  // Loads DIR (any family, with its tokenizer: the server takes text) and starts its worker.
  ModelSlot(std::string name, const std::string& dir, const ServeOptions& options, Metrics& metrics);
  ~ModelSlot();
  ModelSlot(const ModelSlot&) = delete;
  ModelSlot& operator=(const ModelSlot&) = delete;

  const std::string& name() const { return name_; }
  Family family() const { return family_; }
  bool has_labels() const;
  int64_t queue_length() const;
  // Completion rows being generated (decoder-only models; 0 for the others).
  int64_t running_sequences() const { return running_sequences_.load(); }

  // Each blocks its caller until the answer (a JSON body) or an HttpError: 400 for an input the
  // model cannot take (naming it), 413 past max_input_tokens, 503 when the queue is full, 504 past
  // the request timeout.
  std::string complete(const CompletionRequest& r);
  // A streamed completion: queued now (or refused with an HttpError, while a status can still be
  // sent); the returned stream(write) then hands write() each server-sent event in order
  // ("data: ...\n\n", the last "data: [DONE]\n\n"). A false return from write (the client went
  // away) stops the generation at its next token.
  using Write = std::function<bool(const std::string&)>;
  std::function<void(const Write&)> start_streaming(const CompletionRequest& r);
  std::string embed(const EmbeddingRequest& r);
  std::string translate(const TranslationRequest& r);
  std::string classify(const ClassificationRequest& r);
  // Teacher-forced log-probabilities: a decoder-only model's of each text's tokens after BOS (no EOS
  // added: the text may go on), an encoder-decoder model's of each target and its EOS given the
  // source, as `qkv score --per-line` computes them.
  std::string score(const ScoreRequest& r);

  // Refuses new jobs (503) and lets the worker finish the queue and the completions it generates;
  // returns when it has, or after `drain` (then false: the jobs still queued, and the completions
  // still being generated, get 503).
  bool stop(std::chrono::milliseconds drain);

 private:
  enum class JobKind { Complete, Stream, Embed, Translate, Classify, Score };
  struct Job;
  // A job of `kind` for a request that needs a model of `family` (else a 400 naming the route it
  // takes), its texts tokenised.
  std::shared_ptr<Job> new_job(Family family, JobKind kind, const std::vector<std::string>& texts, const char* field,
                               bool truncate = false) const;
  std::shared_ptr<Job> submit(std::shared_ptr<Job> job);
  std::string wait(const std::shared_ptr<Job>& job);
  void worker_loop();
  std::vector<std::shared_ptr<Job>> next_batch();
  void wait_for_batch_mates(std::unique_lock<std::mutex>& lock, const Job& first);
  void run(const std::vector<std::shared_ptr<Job>>& batch);
  // Each answers the batch's jobs and returns the tokens written.
  void run_encoder(const std::vector<std::shared_ptr<Job>>& batch);
  int64_t run_translation(const std::vector<std::shared_ptr<Job>>& batch);
  void run_score(const std::vector<std::shared_ptr<Job>>& batch);
  void fail(const std::vector<std::shared_ptr<Job>>& batch, const HttpError& e);

  // The decoder-only worker (serve/completions.cpp): completions by continuous batching, scores
  // between its steps.
  struct Row;
  using Rows = std::map<uint64_t, Row>;  // by sequence id
  void generation_loop();
  // The queued jobs to start now: every score, and completions while the batch has room. Waits for
  // work while nothing runs; false once stopping with nothing left.
  // Beam search requests go to `beams`: they run whole, outside the continuous batch.
  bool take_jobs(bool generating, size_t rows_started, std::vector<std::shared_ptr<Job>>& completions,
                 std::vector<std::shared_ptr<Job>>& scores, std::vector<std::shared_ptr<Job>>& beams);
  void run_beam_completion(const std::shared_ptr<Job>& job);
  void start_completion(decoding::ContinuousGeneration& gen, Rows& rows, const std::shared_ptr<Job>& job);
  void on_event(decoding::ContinuousGeneration& gen, Rows& rows, const decoding::SequenceEvent& e);
  void send_ready_text(Row& row, bool final);
  void finish_row(Row& row);
  void drop_cancelled(decoding::ContinuousGeneration& gen, Rows& rows);
  void fail_job(decoding::ContinuousGeneration& gen, Rows& rows, std::shared_ptr<Job> job, const HttpError& e);
  void fail_rows(Rows& rows, const HttpError& e);
  // Tokens one input may have: --max-input-tokens, at most the model's context.
  int64_t input_limit() const;
  // The 413 of `where` (in `field`), `tokens` long where `allowed` may be.
  HttpError too_long(const std::string& where, size_t tokens, int64_t allowed, const char* field) const;
  // Ids of each text; past the context (or --max-input-tokens): cut when `truncate`, else a 413.
  std::vector<std::vector<int32_t>> tokenize(const std::vector<std::string>& texts, const char* field,
                                             bool truncate = false) const;

  std::string name_;
  Family family_;
  ServeOptions options_;
  Metrics& metrics_;
  std::unique_ptr<api::Translator> translator_;
  std::unique_ptr<api::Generator> generator_;
  std::unique_ptr<api::Encoder> encoder_;
  int64_t context_ = 0;  // max_seq_length

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  bool abandon_ = false;      // past the drain timeout: in-flight generations end with 503
  bool worker_done_ = false;  // the worker has returned
  std::atomic<int64_t> running_sequences_{0};
  std::thread worker_;
};

}  // namespace qkv::serve
