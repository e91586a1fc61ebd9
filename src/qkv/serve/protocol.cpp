#include "qkv/serve/protocol.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "qkv/core/error.h"

namespace qkv::serve {

using nlohmann::json;

// Every answer is written with invalid UTF-8 replaced by U+FFFD (json::error_handler_t::replace):
// a parse error quotes the client's bytes, and text cut by max_tokens can end inside a character.

std::string TokenRules::key() const {
  std::ostringstream os;
  os.precision(std::numeric_limits<double>::max_digits10);  // different values, different keys
  os << repetition_penalty << "/" << no_repeat_ngram_size << "/" << min_tokens;
  return os.str();
}

HttpError http_error_of(const std::exception& e) {
  if (const auto* h = dynamic_cast<const HttpError*>(&e)) return *h;
  if (dynamic_cast<const OutOfMemoryError*>(&e)) {  // not the request's fault: it may fit later
    HttpError busy(503, "server_error", e.what(), "", "out_of_memory");
    busy.retry_after = 1;
    return busy;
  }
  if (dynamic_cast<const DeviceError*>(&e)) return HttpError(500, "server_error", e.what(), "", "device_error");
  if (dynamic_cast<const Error*>(&e)) return HttpError(400, "invalid_request_error", e.what());
  return HttpError(500, "server_error", e.what());
}

HttpError bad_field(const std::string& field, const std::string& message) {
  return HttpError(400, "invalid_request_error", message, field, "invalid_value");
}

std::string error_body(const HttpError& e) {
  json err = {{"message", e.what()}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return json{{"error", err}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

json parse_object(const std::string& body) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    throw HttpError(400, "invalid_request_error", std::string("the body is not valid JSON: ") + e.what(), "",
                    "invalid_json");
  }
  if (!j.is_object()) throw HttpError(400, "invalid_request_error", "the body must be a JSON object", "", "invalid_json");
  return j;
}

// The field's value, or null when it is absent or JSON null (OpenAI's clients send null for unset).
const json* find(const json& j, const char* name) {
  const auto it = j.find(name);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::string required_string(const json& j, const char* name) {
  const json* v = find(j, name);
  if (!v) throw bad_field(name, std::string("'") + name + "' is required");
  if (!v->is_string()) throw bad_field(name, std::string("'") + name + "' must be a string");
  return v->get<std::string>();
}

// A string or a non-empty list of strings, within the limits (413 past them).
std::vector<std::string> texts(const json& j, const char* name, const RequestLimits& limits) {
  const json* v = find(j, name);
  if (!v) throw bad_field(name, std::string("'") + name + "' is required");
  std::vector<std::string> out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->empty()) throw bad_field(name, std::string("'") + name + "' is an empty list");
    if (static_cast<int64_t>(v->size()) > limits.max_inputs)
      throw HttpError(413, "invalid_request_error",
                      std::string("'") + name + "' has " + std::to_string(v->size()) + " entries; at most " +
                          std::to_string(limits.max_inputs) + " in one request",
                      name, "too_many_inputs");
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string())
        throw bad_field(name, std::string("'") + name + "[" + std::to_string(i) +
                                  "]' must be a string (token ids are not taken)");
      out.push_back((*v)[i].get<std::string>());
    }
  } else {
    throw bad_field(name, std::string("'") + name + "' must be a string or a list of strings");
  }
  for (size_t i = 0; i < out.size(); ++i)
    if (static_cast<int64_t>(out[i].size()) > limits.max_input_bytes)
      throw HttpError(413, "invalid_request_error",
                      std::string("'") + name + "' entry " + std::to_string(i) + " has " +
                          std::to_string(out[i].size()) + " bytes; at most " +
                          std::to_string(limits.max_input_bytes),
                      name, "input_too_long");
  return out;
}

// An integer in [lo, hi] (a number with an integral value, 16.0, is taken as that integer).
int64_t integer(const json& j, const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const json* v = find(j, name);
  if (!v) return fallback;
  int64_t x = 0;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      x = std::numeric_limits<int64_t>::max();
    else
      x = v->get<int64_t>();
  } else if (v->is_number_float()) {
    const double d = v->get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9e15)
      throw bad_field(name, std::string("'") + name + "' must be an integer");
    x = static_cast<int64_t>(d);
  } else {
    throw bad_field(name, std::string("'") + name + "' must be an integer");
  }
  if (x < lo || x > hi)
    throw bad_field(name, std::string("'") + name + "' is " + std::to_string(x) + "; it must be in [" +
                              std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

double number(const json& j, const char* name, double fallback, double lo, double hi, bool lo_open = false) {
  const json* v = find(j, name);
  if (!v) return fallback;
  if (!v->is_number()) throw bad_field(name, std::string("'") + name + "' must be a number");
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo)) {
    std::ostringstream os;
    os << "'" << name << "' is " << x << "; it must be in " << (lo_open ? "(" : "[") << lo << ", " << hi << "]";
    throw bad_field(name, os.str());
  }
  return x;
}

bool boolean(const json& j, const char* name, bool fallback) {
  const json* v = find(j, name);
  if (!v) return fallback;
  if (!v->is_boolean()) throw bad_field(name, std::string("'") + name + "' must be true or false");
  return v->get<bool>();
}

// repetition_penalty, no_repeat_ngram_size and min_tokens, each in the range the library takes
// (decoding/constraints.h), at most `max_tokens` new tokens required.
TokenRules token_rules(const json& j, int64_t max_tokens) {
  TokenRules r;
  r.repetition_penalty = number(j, "repetition_penalty", r.repetition_penalty, 0.0, 1000.0, true);
  r.no_repeat_ngram_size = integer(j, "no_repeat_ngram_size", r.no_repeat_ngram_size, 0, 1 << 20);
  r.min_tokens = integer(j, "min_tokens", r.min_tokens, 0, 1 << 20);
  if (r.min_tokens > max_tokens)
    throw bad_field("min_tokens", "'min_tokens' is " + std::to_string(r.min_tokens) + "; at most max_tokens (" +
                                      std::to_string(max_tokens) + ")");
  return r;
}

// beam_size and length_penalty of a completion, checked against the fields beam search does not
// go with (vLLM's rule: beam search is not sampled, so temperature must be 0).
void completion_beam(const json& j, CompletionRequest& r) {
  r.beam_size = static_cast<int>(integer(j, "beam_size", r.beam_size, 1, 64));
  r.length_penalty = number(j, "length_penalty", r.length_penalty, 0.0, 10.0);
  if (!r.beam_search()) return;
  const std::string beam = "with beam_size " + std::to_string(r.beam_size) + " (beam search)";
  if (!r.greedy()) throw bad_field("temperature", "'temperature' must be 0 " + beam + ": beam search does not sample");
  if (r.n > r.beam_size)
    throw bad_field("n", "'n' is " + std::to_string(r.n) + "; at most beam_size (" + std::to_string(r.beam_size) + ")");
  if (r.stream) throw bad_field("stream", "'stream' does not go " + beam + ": its best is known at its end");
  if (r.ignore_eos) throw bad_field("ignore_eos", "'ignore_eos' does not go " + beam);
}

// The fields of every route that takes texts to read: "model" and "input".
template <class Request>
Request inputs_request(const json& j, const RequestLimits& limits) {
  Request r;
  r.model = required_string(j, "model");
  r.inputs = texts(j, "input", limits);
  return r;
}

// Features of OpenAI's API that qkv does not have: refused by name when asked for.
void refuse_unsupported(const json& j) {
  const auto refuse = [](const char* name, const char* what) {
    throw bad_field(name, std::string("'") + name + "' is not supported by qkv serve (" + what + ")");
  };
  if (const json* v = find(j, "echo"); v && !(v->is_boolean() && !v->get<bool>())) refuse("echo", "the prompt is not repeated");
  if (const json* v = find(j, "logprobs"); v && !(v->is_number() && v->get<double>() == 0))
    refuse("logprobs", "use POST /v1/score for log-probabilities");
  if (const json* v = find(j, "best_of"); v && !(v->is_number() && v->get<double>() == 1)) refuse("best_of", "use n");
  if (const json* v = find(j, "suffix"); v && !(v->is_string() && v->get<std::string>().empty()))
    refuse("suffix", "no insertion");
  for (const char* name : {"presence_penalty", "frequency_penalty"})
    if (const json* v = find(j, name); v && !(v->is_number() && v->get<double>() == 0)) refuse(name, "no penalties");
  if (const json* v = find(j, "logit_bias"); v && !(v->is_object() && v->empty())) refuse("logit_bias", "no biases");
}

}  // namespace

CompletionRequest parse_completion(const std::string& body, const RequestLimits& limits) {
  const json j = parse_object(body);
  refuse_unsupported(j);
  CompletionRequest r;
  r.model = required_string(j, "model");
  r.prompts = texts(j, "prompt", limits);
  r.max_tokens = integer(j, "max_tokens", r.max_tokens, 0, 1 << 20);
  r.temperature = number(j, "temperature", r.temperature, 0.0, 100.0);
  r.top_p = number(j, "top_p", r.top_p, 0.0, 1.0, true);
  r.top_k = integer(j, "top_k", r.top_k, 0, 1 << 24);
  r.seed = static_cast<uint64_t>(integer(j, "seed", 0, 0, std::numeric_limits<int64_t>::max()));
  r.n = integer(j, "n", r.n, 1, 16);
  r.stream = boolean(j, "stream", false);
  r.ignore_eos = boolean(j, "ignore_eos", false);
  if (const json* v = find(j, "stop")) {
    if (v->is_string()) {
      r.stop.push_back(v->get<std::string>());
    } else if (v->is_array() && v->size() <= 4) {
      for (const json& s : *v) {
        if (!s.is_string()) throw bad_field("stop", "'stop' must be a string or a list of at most 4 strings");
        r.stop.push_back(s.get<std::string>());
      }
    } else {
      throw bad_field("stop", "'stop' must be a string or a list of at most 4 strings");
    }
    for (const std::string& s : r.stop)
      if (s.empty()) throw bad_field("stop", "'stop' strings must not be empty");
  }
  if (static_cast<int64_t>(r.prompts.size()) * r.n > limits.max_inputs)
    throw HttpError(413, "invalid_request_error",
                    std::to_string(r.prompts.size()) + " prompts x n = " + std::to_string(r.n) + " completions; at most " +
                        std::to_string(limits.max_inputs) + " in one request",
                    "n", "too_many_inputs");
  if (r.stream && r.prompts.size() * static_cast<size_t>(r.n) != 1)
    throw bad_field("stream", "'stream' takes one prompt and n = 1");
  r.rules = token_rules(j, r.max_tokens);
  completion_beam(j, r);
  return r;
}

EmbeddingRequest parse_embedding(const std::string& body, const RequestLimits& limits) {
  const json j = parse_object(body);
  auto r = inputs_request<EmbeddingRequest>(j, limits);
  if (const json* v = find(j, "encoding_format")) {
    if (!v->is_string() || (v->get<std::string>() != "float" && v->get<std::string>() != "base64"))
      throw bad_field("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
    r.base64 = v->get<std::string>() == "base64";
  }
  if (find(j, "dimensions")) throw bad_field("dimensions", "'dimensions' is not supported: the model's width is given");
  r.truncate = boolean(j, "truncate", false);
  return r;
}

TranslationRequest parse_translation(const std::string& body, const RequestLimits& limits) {
  const json j = parse_object(body);
  auto r = inputs_request<TranslationRequest>(j, limits);
  r.beam_size = static_cast<int>(integer(j, "beam_size", r.beam_size, 1, 64));
  // num_hypotheses: the naming scheme's word (docs/cli.md, CTranslate2's); n_best: the same, as it
  // was first spelled here.
  if (find(j, "num_hypotheses") && find(j, "n_best"))
    throw bad_field("num_hypotheses", "give 'num_hypotheses' or its older name 'n_best', not both");
  r.old_n_best_name = find(j, "n_best") != nullptr;
  const char* hypotheses = r.old_n_best_name ? "n_best" : "num_hypotheses";
  r.num_hypotheses = static_cast<int>(integer(j, hypotheses, r.num_hypotheses, 1, 64));
  if (r.num_hypotheses > r.beam_size)
    throw bad_field(hypotheses, std::string("'") + hypotheses + "' is " + std::to_string(r.num_hypotheses) +
                                    "; at most beam_size (" + std::to_string(r.beam_size) + ")");
  r.length_penalty = number(j, "length_penalty", r.length_penalty, 0.0, 10.0);
  if (find(j, "max_length")) r.max_length = integer(j, "max_length", 0, 1, 1 << 20);
  r.truncate = boolean(j, "truncate", false);
  r.rules = token_rules(j, r.max_length.value_or(1 << 20));
  return r;
}

ClassificationRequest parse_classification(const std::string& body, const RequestLimits& limits) {
  const json j = parse_object(body);
  auto r = inputs_request<ClassificationRequest>(j, limits);
  r.top_k = integer(j, "top_k", r.top_k, 1, 1 << 20);
  r.truncate = boolean(j, "truncate", false);
  return r;
}

ScoreRequest parse_score(const std::string& body, const RequestLimits& limits) {
  const json j = parse_object(body);
  auto r = inputs_request<ScoreRequest>(j, limits);
  if (find(j, "source")) {
    r.sources = texts(j, "source", limits);
    if (r.sources.size() != r.inputs.size())
      throw bad_field("source", "'source' has " + std::to_string(r.sources.size()) + " texts but 'input' has " +
                                    std::to_string(r.inputs.size()) + "; one source per input");
  }
  return r;
}

namespace {
json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}
}  // namespace

std::string completion_body(const std::string& id, int64_t created, const std::string& model,
                            const std::vector<CompletionChoice>& choices, const Usage& usage) {
  json cs = json::array();
  for (size_t i = 0; i < choices.size(); ++i)
    cs.push_back({{"text", choices[i].text}, {"index", i}, {"logprobs", nullptr},
                  {"finish_reason", choices[i].finish_reason}});
  return json{{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model}, {"choices", cs},
              {"usage", usage_json(usage)}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string completion_chunk(const std::string& id, int64_t created, const std::string& model, int64_t index,
                             const std::string& text, const std::string& finish_reason) {
  json choice = {{"text", text}, {"index", index}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  if (!finish_reason.empty()) choice["finish_reason"] = finish_reason;
  const json chunk = {{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model},
                      {"choices", json::array({choice})}};
  return "data: " + chunk.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

namespace {
// RFC 4648 base64 of the floats' bytes (little-endian on the machines qkv runs on).
std::string base64_of(const std::vector<float>& values) {
  static const char* const kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
  const size_t n = values.size() * sizeof(float);
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t chunk = (uint32_t{bytes[i]} << 16) | (i + 1 < n ? uint32_t{bytes[i + 1]} << 8 : 0u) |
                           (i + 2 < n ? uint32_t{bytes[i + 2]} : 0u);
    out += kAlphabet[(chunk >> 18) & 63];
    out += kAlphabet[(chunk >> 12) & 63];
    out += i + 1 < n ? kAlphabet[(chunk >> 6) & 63] : '=';
    out += i + 2 < n ? kAlphabet[chunk & 63] : '=';
  }
  return out;
}
}  // namespace

std::string embedding_body(const std::string& model, const std::vector<std::vector<float>>& embeddings,
                           int64_t prompt_tokens, bool base64) {
  json data = json::array();
  for (size_t i = 0; i < embeddings.size(); ++i)
    data.push_back({{"object", "embedding"}, {"index", i},
                    {"embedding", base64 ? json(base64_of(embeddings[i])) : json(embeddings[i])}});
  return json{{"object", "list"}, {"data", data}, {"model", model},
              {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string translation_body(const std::string& model,
                             const std::vector<std::vector<TranslationHypothesis>>& hypotheses, bool old_n_best_name,
                             const Usage& usage) {
  json data = json::array();
  for (size_t i = 0; i < hypotheses.size(); ++i) {
    const auto& hs = hypotheses[i];
    json item = {{"index", i}, {"translation", hs.empty() ? "" : hs[0].text}};
    item["score"] = hs.empty() ? json(nullptr) : json(hs[0].score);
    json all = json::array();
    for (const TranslationHypothesis& h : hs)
      all.push_back({{"translation", h.text}, {"score", h.score}, {"log_prob", h.log_prob}});
    if (old_n_best_name && hs.size() > 1) item["n_best"] = all;  // the old shape, for one release
    item["hypotheses"] = std::move(all);
    data.push_back(item);
  }
  return json{{"object", "list"}, {"model", model}, {"data", data}, {"usage", usage_json(usage)}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string score_body(const std::string& model, const std::vector<TextScore>& scores, const Usage& usage) {
  json data = json::array();
  for (size_t i = 0; i < scores.size(); ++i)
    data.push_back({{"object", "score"}, {"index", i}, {"log_prob", scores[i].log_prob}, {"tokens", scores[i].tokens}});
  return json{{"object", "list"}, {"model", model}, {"data", data}, {"usage", usage_json(usage)}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string classification_body(const std::string& model, const std::vector<std::vector<LabelProbability>>& top,
                                int64_t prompt_tokens) {
  json data = json::array();
  for (size_t i = 0; i < top.size(); ++i) {
    json labels = json::array();
    for (const LabelProbability& l : top[i]) labels.push_back({{"label", l.label}, {"probability", l.probability}});
    data.push_back({{"index", i}, {"label", top[i].empty() ? "" : top[i][0].label}, {"labels", labels}});
  }
  return json{{"object", "list"}, {"model", model}, {"data", data},
              {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

size_t sendable_prefix(const std::string& text, size_t hold) {
  size_t n = text.size() > hold ? text.size() - hold : 0;
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;  // inside a character
  return n;
}

size_t stop_position(const std::string& text, const std::vector<std::string>& stop) {
  size_t best = std::string::npos;
  for (const std::string& s : stop) best = std::min(best, text.find(s));
  return best;
}

}  // namespace qkv::serve
