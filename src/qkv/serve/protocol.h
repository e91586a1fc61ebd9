// The HTTP API of `qkv serve`, without the HTTP: request bodies (JSON) parsed into typed requests
// with every field checked, and answers and errors built as JSON in the shapes of OpenAI's API
// (completions, embeddings) and of qkv's own routes (translations, classifications). The server
// (cli/cmd_serve.cpp) moves bytes; this file decides what they mean, so it is tested and fuzzed
// without sockets (tests/serve/, fuzz/).
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "qkv/decoding/constraints.h"

namespace qkv::serve {

// An answer that is an error: the HTTP status and OpenAI's error object
// {"error": {"message", "type", "param", "code"}}.
class HttpError : public std::runtime_error {
 public:
  HttpError(int status, std::string type, const std::string& message, std::string param = "", std::string code = "")
      : std::runtime_error(message), status(status), type(std::move(type)), param(std::move(param)),
        code(std::move(code)) {}
  int status;
  std::string type;   // invalid_request_error, authentication_error, not_found_error, ...
  std::string param;  // the field at fault, or ""
  std::string code;   // a short machine-readable reason, or ""
  // Seconds a client should wait before retrying (429 / 503), 0 when none.
  int retry_after = 0;
};

// What an exception means to a client: an HttpError as it is, a qkv::OutOfMemoryError 503 (code
// out_of_memory, Retry-After 1), a qkv::DeviceError (a GPU call failed) 500 (code device_error),
// another qkv::Error (bad input the library refused) 400, anything else 500.
HttpError http_error_of(const std::exception& e);
// 400 naming the field.
HttpError bad_field(const std::string& field, const std::string& message);
// The error body of an HttpError.
std::string error_body(const HttpError& e);

// The token rules every search applies (decoding/constraints.h), with transformers' names and
// vLLM's min_tokens: the same fields on /v1/completions and /v1/translations.
struct TokenRules {
  double repetition_penalty = 1.0;   // (0, 1000]; 1 = off
  int64_t no_repeat_ngram_size = 0;  // 0 = off
  int64_t min_tokens = 0;            // EOS is refused before this many new tokens; 0 = off
  // The rules as text, for the batch keys of requests that must share them.
  std::string key() const;
  // repetition_penalty and no_repeat_ngram_size as every search takes them.
  decoding::TokenConstraints constraints() const {
    return {static_cast<float>(repetition_penalty), no_repeat_ngram_size};
  }
};

// POST /v1/completions (decoder-only models).
struct CompletionRequest {
  std::string model;
  std::vector<std::string> prompts;  // "prompt": a string or a list of strings
  int64_t max_tokens = 16;
  double temperature = 1.0;          // 0: greedy
  double top_p = 1.0;
  int64_t top_k = 0;                 // 0: off
  uint64_t seed = 0;                 // the random stream's key (sampling); the same seed, the same text
  std::vector<std::string> stop;     // the text ends before the first of these
  int64_t n = 1;                     // completions per prompt
  bool stream = false;
  bool ignore_eos = false;           // vLLM's and llama.cpp's extension: EOS is a token, not an end (benchmarks)
  TokenRules rules;
  // Beam search (temperature 0 only): the n choices of a prompt are its n best of beam_size beams,
  // ranked by log-prob / length^length_penalty, as `qkv generate --beam-size --num-hypotheses`.
  int beam_size = 1;
  double length_penalty = 1.0;
  bool greedy() const { return temperature == 0.0; }
  bool beam_search() const { return beam_size > 1; }
};

// POST /v1/embeddings (encoder-only models).
struct EmbeddingRequest {
  std::string model;
  std::vector<std::string> inputs;  // "input": a string or a list of strings
  bool truncate = false;            // an input past the context: cut (as `qkv embed` does), else 413
  bool base64 = false;              // "encoding_format": "base64" (the float32 bytes, as OpenAI's client asks)
};

// POST /v1/translations (encoder-decoder models).
struct TranslationRequest {
  std::string model;
  std::vector<std::string> inputs;
  int beam_size = 4;
  int num_hypotheses = 1;
  // The request spelled num_hypotheses 'n_best' (its first name here): the answer repeats the
  // hypotheses under "n_best" too, as it used to, for one release (docs/cli.md, renamed names).
  bool old_n_best_name = false;
  double length_penalty = 1.0;
  std::optional<int64_t> max_length;  // target tokens at most; absent: the model's rule
  bool truncate = false;              // a source past the context: cut (as `qkv translate` does), else 413
  TokenRules rules;                   // min_tokens: target tokens before EOS (`qkv translate --min-length N + 1`)
};

// POST /v1/classifications (encoder-only models with a classification head).
struct ClassificationRequest {
  std::string model;
  std::vector<std::string> inputs;
  int64_t top_k = 1;  // labels returned per input, most probable first
  bool truncate = false;
};

// POST /v1/score (a model with a decoder): the log-probability of each text, teacher forced.
struct ScoreRequest {
  std::string model;
  std::vector<std::string> inputs;   // "input": the texts scored (an encoder-decoder model's targets)
  std::vector<std::string> sources;  // "source": an encoder-decoder model's sources, one per input
};

// Limits the parsers enforce (413 past them).
struct RequestLimits {
  int64_t max_inputs = 256;         // prompts or inputs in one request
  int64_t max_input_bytes = 65536;  // bytes of one prompt or input
};

// Each throws HttpError (400, or 413 past a limit) naming the field; unknown fields are ignored, as
// OpenAI's API does, except features it has and qkv does not (echo, logprobs, best_of, suffix,
// presence and frequency penalties), which are refused by name rather than silently dropped.
CompletionRequest parse_completion(const std::string& body, const RequestLimits& limits = {});
EmbeddingRequest parse_embedding(const std::string& body, const RequestLimits& limits = {});
TranslationRequest parse_translation(const std::string& body, const RequestLimits& limits = {});
ClassificationRequest parse_classification(const std::string& body, const RequestLimits& limits = {});
ScoreRequest parse_score(const std::string& body, const RequestLimits& limits = {});

// Answers.
struct CompletionChoice {
  std::string text;
  std::string finish_reason;  // "stop" (EOS or a stop string) or "length"
};
struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
};
std::string completion_body(const std::string& id, int64_t created, const std::string& model,
                            const std::vector<CompletionChoice>& choices, const Usage& usage);
// One server-sent event of a streamed completion: choice `index` gains `text` (finish_reason set on
// the last one). "data: {...}\n\n".
std::string completion_chunk(const std::string& id, int64_t created, const std::string& model, int64_t index,
                             const std::string& text, const std::string& finish_reason);

// Each embedding a list of numbers, or with base64 the base64 of its little-endian float32 bytes.
std::string embedding_body(const std::string& model, const std::vector<std::vector<float>>& embeddings,
                           int64_t prompt_tokens, bool base64 = false);

struct TranslationHypothesis {
  std::string text;
  double score = 0, log_prob = 0;
};
// Each input's best translation and score, and "hypotheses": all of them, best first, with score
// and log_prob (num_hypotheses of them, 1 included; none for an empty input, whose translation is
// "" and score null). With old_n_best_name and more than one
// hypothesis, the list again under "n_best" (deprecated).
std::string translation_body(const std::string& model,
                             const std::vector<std::vector<TranslationHypothesis>>& hypotheses, bool old_n_best_name,
                             const Usage& usage);

struct LabelProbability {
  std::string label;
  double probability = 0;
};
std::string classification_body(const std::string& model, const std::vector<std::vector<LabelProbability>>& top,
                                int64_t prompt_tokens);

// data[i] = {"object": "score", "index": i, "log_prob": the sum of log p over the text's scored
// tokens, "tokens": how many}.
struct TextScore {
  double log_prob = 0;
  int64_t tokens = 0;
};
std::string score_body(const std::string& model, const std::vector<TextScore>& scores, const Usage& usage);

// How much of a growing text a stream may send now: all but its last `hold` bytes (which could
// begin a stop string), backed up to the start of a UTF-8 character so that no event carries half
// of one.
size_t sendable_prefix(const std::string& text, size_t hold);
// Where `stop` cuts `text`: the position of the earliest stop string, or npos.
size_t stop_position(const std::string& text, const std::vector<std::string>& stop);

}  // namespace qkv::serve
