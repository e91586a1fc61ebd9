// A request as the engine's worker sees it (ModelSlot::Job), shared by the engine (serve/engine.cpp)
// and the decoder-only worker (serve/completions.cpp). Internal to serve/.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "qkv/serve/engine.h"
#include "qkv/serve/protocol.h"

namespace qkv::serve {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

inline int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

inline std::string completion_id() {
  static std::atomic<uint64_t> next{1};
  return "cmpl-" + std::to_string(unix_time()) + "-" + std::to_string(next++);
}

// "stop" for an EOS or a stop string (fewer tokens than allowed, or stopped), else "length".
inline std::string finish_reason(bool stopped, size_t produced, int64_t allowed) {
  return stopped || static_cast<int64_t>(produced) < allowed ? "stop" : "length";
}

struct ModelSlot::Job {
  JobKind kind = JobKind::Complete;
  std::string batch_key;  // jobs with one key can share a batch; "" runs alone
  std::vector<std::vector<int32_t>> inputs;
  std::vector<std::vector<int32_t>> sources;  // a score's sources (encoder-decoder models)
  int64_t tokens = 0;
  CompletionRequest completion;
  TranslationRequest translation;
  ClassificationRequest classification;
  bool base64 = false;  // embeddings as base64
  std::string model;
  std::promise<std::string> answer;
  std::atomic<bool> cancelled{false};
  Clock::time_point arrived = Clock::now();
  // A streamed completion's server-sent events, from the worker to the waiting HTTP thread.
  std::mutex chunk_mutex;
  std::condition_variable chunk_ready;
  std::deque<std::string> chunks;
  bool finished = false;
  // A completion as the worker makes it: choice c of prompt p at p * n + c, and the rows still
  // being generated.
  std::string id;
  int64_t created = 0;
  std::vector<CompletionChoice> choices;
  size_t rows_left = 0;
  int64_t tokens_out = 0;
  size_t rows() const { return inputs.size() * static_cast<size_t>(completion.n); }
};

// Hands a streamed completion's next server-sent event to its waiting HTTP thread. (A template:
// ModelSlot::Job is private to the slot.)
template <class Job>
void push_chunk(Job& job, std::string chunk, bool last) {
  std::lock_guard<std::mutex> lock(job.chunk_mutex);
  job.chunks.push_back(std::move(chunk));
  if (last) job.finished = true;
  job.chunk_ready.notify_all();
}

}  // namespace qkv::serve
