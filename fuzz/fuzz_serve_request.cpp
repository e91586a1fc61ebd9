// Fuzz target: the request bodies of `qkv serve` (qkv/serve/protocol.h).
// Input: one byte choosing the route (completions, embeddings, translations, classifications),
// then the body. Contract: a body is either accepted (and then every field is inside its range)
// or refused with an HttpError of status 400 or 413 whose error body is valid JSON in OpenAI's
// shape; nothing else escapes.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_util.h"
#include "qkv/serve/protocol.h"

namespace {

using namespace qkv::serve;

void check_texts(const std::vector<std::string>& texts, const RequestLimits& limits) {
  QKV_FUZZ_REQUIRE(!texts.empty() && static_cast<int64_t>(texts.size()) <= limits.max_inputs);
  for (const std::string& t : texts) QKV_FUZZ_REQUIRE(static_cast<int64_t>(t.size()) <= limits.max_input_bytes);
}

void parse(uint8_t route, const std::string& body) {
  RequestLimits limits;
  limits.max_inputs = 8;
  limits.max_input_bytes = 256;
  switch (route % 4) {
    case 0: {
      const CompletionRequest r = parse_completion(body, limits);
      check_texts(r.prompts, limits);
      QKV_FUZZ_REQUIRE(r.max_tokens >= 0 && r.temperature >= 0 && r.top_p > 0 && r.top_p <= 1 && r.top_k >= 0);
      QKV_FUZZ_REQUIRE(r.n >= 1 && static_cast<int64_t>(r.prompts.size()) * r.n <= limits.max_inputs);
      QKV_FUZZ_REQUIRE(!r.stream || (r.prompts.size() == 1 && r.n == 1));
      for (const std::string& s : r.stop) QKV_FUZZ_REQUIRE(!s.empty());
      break;
    }
    case 1:
      check_texts(parse_embedding(body, limits).inputs, limits);
      break;
    case 2: {
      const TranslationRequest r = parse_translation(body, limits);
      check_texts(r.inputs, limits);
      QKV_FUZZ_REQUIRE(r.beam_size >= 1 && r.num_hypotheses >= 1 && r.num_hypotheses <= r.beam_size && r.length_penalty >= 0);
      QKV_FUZZ_REQUIRE(!r.max_length || *r.max_length >= 1);
      break;
    }
    default: {
      const ClassificationRequest r = parse_classification(body, limits);
      check_texts(r.inputs, limits);
      QKV_FUZZ_REQUIRE(r.top_k >= 1);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    parse(data[0], body);
  } catch (const HttpError& e) {
    QKV_FUZZ_REQUIRE(e.status == 400 || e.status == 413);
    QKV_FUZZ_REQUIRE(e.what()[0] != '\0');
    const nlohmann::json err = nlohmann::json::parse(error_body(e));  // valid JSON, or parse throws: a finding
    QKV_FUZZ_REQUIRE(err.contains("error") && err["error"].contains("message") && err["error"].contains("type"));
  }
  return 0;
}
