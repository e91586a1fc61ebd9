// The request bodies of `qkv serve` (serve/protocol.h): every field read with its default, every bad
// value refused with the status and the field named, and the answers in OpenAI's shapes.
#include "qkv/serve/protocol.h"

#include "qkv/core/error.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace qkv::serve {
namespace {

using nlohmann::json;

TEST(ServeProtocol, ACompletionReadsEveryFieldAndItsDefaults) {
  const CompletionRequest d = parse_completion(R"({"model": "lm", "prompt": "the light"})");
  EXPECT_EQ(d.model, "lm");
  EXPECT_EQ(d.prompts, std::vector<std::string>{"the light"});
  EXPECT_EQ(d.max_tokens, 16);
  EXPECT_EQ(d.temperature, 1.0);
  EXPECT_EQ(d.n, 1);
  EXPECT_FALSE(d.stream);
  EXPECT_FALSE(d.ignore_eos);
  EXPECT_FALSE(d.greedy());
  const CompletionRequest r = parse_completion(
      R"({"model": "lm", "prompt": ["a", "b"], "max_tokens": 8.0, "temperature": 0, "top_p": 0.5, "top_k": 7,
          "seed": 42, "stop": ["x", "yz"], "n": 3, "user": "ignored", "echo": false, "logprobs": null,
          "ignore_eos": true})");
  EXPECT_EQ(r.prompts, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.max_tokens, 8);
  EXPECT_TRUE(r.greedy());
  EXPECT_EQ(r.top_p, 0.5);
  EXPECT_EQ(r.top_k, 7);
  EXPECT_EQ(r.seed, 42u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x", "yz"}));
  EXPECT_EQ(r.n, 3);
  EXPECT_TRUE(r.ignore_eos);
}

// Each bad body: its status and the field the error names.
TEST(ServeProtocol, BadFieldsAreRefusedByName) {
  struct Case {
    const char* body;
    int status;
    const char* param;
  };
  const Case cases[] = {
      {R"({"prompt": "x"})", 400, "model"},
      {R"({"model": 3, "prompt": "x"})", 400, "model"},
      {R"({"model": "lm"})", 400, "prompt"},
      {R"({"model": "lm", "prompt": []})", 400, "prompt"},
      {R"({"model": "lm", "prompt": [1, 2]})", 400, "prompt"},
      {R"({"model": "lm", "prompt": "x", "max_tokens": -1})", 400, "max_tokens"},
      {R"({"model": "lm", "prompt": "x", "max_tokens": 2.5})", 400, "max_tokens"},
      {R"({"model": "lm", "prompt": "x", "ignore_eos": "yes"})", 400, "ignore_eos"},
      {R"({"model": "lm", "prompt": "x", "max_tokens": "8"})", 400, "max_tokens"},
      {R"({"model": "lm", "prompt": "x", "temperature": -0.1})", 400, "temperature"},
      {R"({"model": "lm", "prompt": "x", "top_p": 0})", 400, "top_p"},
      {R"({"model": "lm", "prompt": "x", "n": 0})", 400, "n"},
      {R"({"model": "lm", "prompt": "x", "stop": ["a", "b", "c", "d", "e"]})", 400, "stop"},
      {R"({"model": "lm", "prompt": "x", "stop": ""})", 400, "stop"},
      {R"({"model": "lm", "prompt": "x", "stream": "yes"})", 400, "stream"},
      {R"({"model": "lm", "prompt": ["x", "y"], "stream": true})", 400, "stream"},
      {R"({"model": "lm", "prompt": "x", "echo": true})", 400, "echo"},
      {R"({"model": "lm", "prompt": "x", "logprobs": 5})", 400, "logprobs"},
      {R"({"model": "lm", "prompt": "x", "best_of": 3})", 400, "best_of"},
      {R"({"model": "lm", "prompt": "x", "presence_penalty": 0.5})", 400, "presence_penalty"},
      {R"({"model": "lm", "n": 16, "prompt": ["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})",
       413, "n"},  // 17 x 16 completions, past the 256 of one request
  };
  for (const Case& c : cases) {
    try {
      (void)parse_completion(c.body);
      ADD_FAILURE() << "accepted: " << c.body;
    } catch (const HttpError& e) {
      EXPECT_EQ(e.status, c.status) << c.body;
      EXPECT_EQ(e.param, c.param) << c.body << ": " << e.what();
      EXPECT_EQ(e.type, "invalid_request_error") << c.body;
    }
  }
}

// The token rules (transformers' names, vLLM's min_tokens) and a completion's beam search.
TEST(ServeProtocol, TokenRulesAndBeamSearchAreReadOnBothRoutes) {
  const CompletionRequest d = parse_completion(R"({"model": "lm", "prompt": "x"})");
  EXPECT_EQ(d.rules.repetition_penalty, 1.0);
  EXPECT_EQ(d.rules.no_repeat_ngram_size, 0);
  EXPECT_EQ(d.rules.min_tokens, 0);
  EXPECT_FALSE(d.beam_search());
  const CompletionRequest c = parse_completion(
      R"({"model": "lm", "prompt": "x", "repetition_penalty": 1.3, "no_repeat_ngram_size": 2, "min_tokens": 5,
          "beam_size": 4, "length_penalty": 0.7, "n": 3, "temperature": 0})");
  EXPECT_EQ(c.rules.repetition_penalty, 1.3);
  EXPECT_EQ(c.rules.no_repeat_ngram_size, 2);
  EXPECT_EQ(c.rules.min_tokens, 5);
  EXPECT_TRUE(c.beam_search());
  EXPECT_EQ(c.beam_size, 4);
  EXPECT_EQ(c.length_penalty, 0.7);
  const TranslationRequest t = parse_translation(
      R"({"model": "mt", "input": "x", "repetition_penalty": 0.5, "no_repeat_ngram_size": 3, "min_tokens": 2})");
  EXPECT_EQ(t.rules.repetition_penalty, 0.5);
  EXPECT_EQ(t.rules.no_repeat_ngram_size, 3);
  EXPECT_EQ(t.rules.min_tokens, 2);
  // Batch keys: equal rules, one key; any difference, another.
  EXPECT_EQ(t.rules.key(), parse_translation(R"({"model": "mt", "input": "y", "repetition_penalty": 0.5,
                                                 "no_repeat_ngram_size": 3, "min_tokens": 2})").rules.key());
  EXPECT_NE(t.rules.key(), parse_translation(R"({"model": "mt", "input": "x", "repetition_penalty": 0.5000001,
                                                 "no_repeat_ngram_size": 3, "min_tokens": 2})").rules.key());
  EXPECT_NE(TokenRules{}.key(), (TokenRules{1.0, 0, 1}).key());
  EXPECT_NE(TokenRules{}.key(), (TokenRules{1.0, 1, 0}).key());

  struct Case {
    const char* body;
    const char* param;
  };
  const Case completions[] = {
      {R"({"model": "lm", "prompt": "x", "repetition_penalty": 0})", "repetition_penalty"},
      {R"({"model": "lm", "prompt": "x", "repetition_penalty": -1})", "repetition_penalty"},
      {R"({"model": "lm", "prompt": "x", "repetition_penalty": 1001})", "repetition_penalty"},
      {R"({"model": "lm", "prompt": "x", "repetition_penalty": "1.2"})", "repetition_penalty"},
      {R"({"model": "lm", "prompt": "x", "no_repeat_ngram_size": -1})", "no_repeat_ngram_size"},
      {R"({"model": "lm", "prompt": "x", "no_repeat_ngram_size": 1.5})", "no_repeat_ngram_size"},
      {R"({"model": "lm", "prompt": "x", "min_tokens": -2})", "min_tokens"},
      {R"({"model": "lm", "prompt": "x", "max_tokens": 4, "min_tokens": 5})", "min_tokens"},
      {R"({"model": "lm", "prompt": "x", "beam_size": 0, "temperature": 0})", "beam_size"},
      {R"({"model": "lm", "prompt": "x", "beam_size": 65, "temperature": 0})", "beam_size"},
      {R"({"model": "lm", "prompt": "x", "length_penalty": -0.5})", "length_penalty"},
      {R"({"model": "lm", "prompt": "x", "beam_size": 4})", "temperature"},  // beam search is not sampled
      {R"({"model": "lm", "prompt": "x", "beam_size": 2, "n": 3, "temperature": 0})", "n"},
      {R"({"model": "lm", "prompt": "x", "beam_size": 2, "stream": true, "temperature": 0})", "stream"},
      {R"({"model": "lm", "prompt": "x", "beam_size": 2, "ignore_eos": true, "temperature": 0})", "ignore_eos"},
  };
  for (const Case& c : completions) {
    try {
      (void)parse_completion(c.body);
      ADD_FAILURE() << "accepted: " << c.body;
    } catch (const HttpError& e) {
      EXPECT_EQ(e.status, 400) << c.body;
      EXPECT_EQ(e.param, c.param) << c.body << ": " << e.what();
    }
  }
  const Case translations[] = {
      {R"({"model": "mt", "input": "x", "repetition_penalty": 0})", "repetition_penalty"},
      {R"({"model": "mt", "input": "x", "no_repeat_ngram_size": -3})", "no_repeat_ngram_size"},
      {R"({"model": "mt", "input": "x", "min_tokens": "3"})", "min_tokens"},
      {R"({"model": "mt", "input": "x", "max_length": 3, "min_tokens": 4})", "min_tokens"},
  };
  for (const Case& c : translations) {
    try {
      (void)parse_translation(c.body);
      ADD_FAILURE() << "accepted: " << c.body;
    } catch (const HttpError& e) {
      EXPECT_EQ(e.status, 400) << c.body;
      EXPECT_EQ(e.param, c.param) << c.body << ": " << e.what();
    }
  }
}

TEST(ServeProtocol, MalformedBodiesAndLimits) {
  for (const char* body : {"", "{", "[1, 2]", "\"text\"", "{\"model\": \"x\",}"}) {
    try {
      (void)parse_embedding(body);
      ADD_FAILURE() << "accepted: " << body;
    } catch (const HttpError& e) {
      EXPECT_EQ(e.status, 400) << body;
      EXPECT_EQ(e.code, "invalid_json") << body;
    }
  }
  RequestLimits limits;
  limits.max_inputs = 2;
  limits.max_input_bytes = 5;
  EXPECT_NO_THROW((void)parse_embedding(R"({"model": "e", "input": ["12345", "1"]})", limits));
  try {
    (void)parse_embedding(R"({"model": "e", "input": ["a", "b", "c"]})", limits);
    ADD_FAILURE();
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status, 413);
    EXPECT_EQ(e.code, "too_many_inputs");
  }
  try {
    (void)parse_translation(R"({"model": "m", "input": "123456"})", limits);
    ADD_FAILURE();
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status, 413);
    EXPECT_EQ(e.param, "input");
  }
}

// Bytes that are not UTF-8 (found by fuzz_serve_request): the parse error quotes them, and the error
// body must still be JSON; generated text cut inside a character likewise.
TEST(ServeProtocol, InvalidUtf8IsRefusedAndNeverBreaksAnAnswer) {
  const std::string body = std::string("{\"model\": \"lm\", \"prompt\": \"\x80\xc3\"}");
  try {
    (void)parse_completion(body);
    ADD_FAILURE() << "accepted invalid UTF-8";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status, 400);
    const json err = json::parse(error_body(e));  // throws (failing the test) if it is not JSON
    EXPECT_TRUE(err["error"]["message"].is_string());
  }
  const json c = json::parse(completion_body("cmpl-1", 0, "lm", {{std::string("ab\xe2\x82"), "length"}}, {1, 2}));
  EXPECT_EQ(c["choices"][0]["text"], "ab\xef\xbf\xbd");  // U+FFFD
}

TEST(ServeProtocol, ExceptionsBecomeStatusesAndStreamsCutBetweenCharacters) {
  EXPECT_EQ(http_error_of(HttpError(413, "invalid_request_error", "long")).status, 413);
  EXPECT_EQ(http_error_of(Error("bad id")).status, 400);
  EXPECT_EQ(http_error_of(std::runtime_error("disk")).status, 500);
  // Out of memory is not the request's fault: 503, a code saying why, and when to try again.
  const HttpError oom = http_error_of(OutOfMemoryError("out of memory on cuda:0: asked for 512 MiB"));
  EXPECT_EQ(oom.status, 503);
  EXPECT_EQ(oom.code, "out_of_memory");
  EXPECT_EQ(oom.retry_after, 1);
  EXPECT_EQ(std::string(oom.what()), "out of memory on cuda:0: asked for 512 MiB");
  // Nor is a failed GPU call: 500 with a code saying so, not the 400 of bad input.
  const HttpError device = http_error_of(DeviceError("CUDA: kernel top_of_rows failed to launch: an illegal memory access"));
  EXPECT_EQ(device.status, 500);
  EXPECT_EQ(device.code, "device_error");
  EXPECT_EQ(sendable_prefix("abcdef", 2), 4u);
  EXPECT_EQ(sendable_prefix("ab", 5), 0u);
  EXPECT_EQ(sendable_prefix("abc", 0), 3u);
  // "a" then U+00E9 (c3 a9) then "x": holding 1 byte leaves "a\xc3\xa9"; holding 2 would split the
  // character, so only "a" may go.
  EXPECT_EQ(sendable_prefix("a\xc3\xa9x", 1), 3u);
  EXPECT_EQ(sendable_prefix("a\xc3\xa9x", 2), 1u);
}

TEST(ServeProtocol, TranslationsAndClassifications) {
  const TranslationRequest t = parse_translation(
      R"({"model": "mt", "input": ["hola"], "beam_size": 5, "n_best": 2, "length_penalty": 0.6, "max_length": 20,
          "truncate": true})");
  EXPECT_EQ(t.beam_size, 5);
  EXPECT_EQ(t.num_hypotheses, 2);
  EXPECT_TRUE(t.old_n_best_name);  // so the answer repeats the hypotheses under "n_best" too
  EXPECT_EQ(t.length_penalty, 0.6);
  EXPECT_EQ(t.max_length, 20);
  EXPECT_TRUE(t.truncate);
  EXPECT_FALSE(parse_translation(R"({"model": "mt", "input": "x"})").max_length.has_value());
  EXPECT_THROW((void)parse_translation(R"({"model": "mt", "input": "x", "beam_size": 2, "n_best": 3})"), HttpError);
  // The naming scheme's num_hypotheses is the same field; both at once is an error naming it.
  const TranslationRequest named = parse_translation(R"({"model": "mt", "input": "x", "num_hypotheses": 3})");
  EXPECT_EQ(named.num_hypotheses, 3);
  EXPECT_FALSE(named.old_n_best_name);
  try {
    (void)parse_translation(R"({"model": "mt", "input": "x", "num_hypotheses": 2, "n_best": 2})");
    ADD_FAILURE() << "both names were accepted";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.param, "num_hypotheses");
  }
  EXPECT_THROW((void)parse_translation(R"({"model": "mt", "input": "x", "beam_size": 0})"), HttpError);
  EXPECT_EQ(parse_classification(R"({"model": "c", "input": "x", "top_k": 3})").top_k, 3);
  EXPECT_THROW((void)parse_classification(R"({"model": "c", "input": "x", "top_k": 0})"), HttpError);
  EXPECT_TRUE(parse_embedding(R"({"model": "e", "input": "x", "encoding_format": "base64"})").base64);
  EXPECT_THROW((void)parse_embedding(R"({"model": "e", "input": "x", "encoding_format": "int8"})"), HttpError);
  // 1.0f and -2.0f: bytes 00 00 80 3f 00 00 00 c0.
  EXPECT_EQ(json::parse(embedding_body("e", {{1.f, -2.f}}, 1, true))["data"][0]["embedding"], "AACAPwAAAMA=");
}

TEST(ServeProtocol, ScoresReadInputsAndSourcesAndAnswerALogProbabilityEach) {
  const ScoreRequest lm = parse_score(R"({"model": "lm", "input": ["a b", "c"]})");
  EXPECT_EQ(lm.inputs, (std::vector<std::string>{"a b", "c"}));
  EXPECT_TRUE(lm.sources.empty());
  const ScoreRequest mt = parse_score(R"({"model": "mt", "input": "the light", "source": "la luz"})");
  EXPECT_EQ(mt.sources, std::vector<std::string>{"la luz"});
  try {
    (void)parse_score(R"({"model": "mt", "input": ["a", "b"], "source": ["x"]})");
    ADD_FAILURE() << "a source count that differs was accepted";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "source");
  }
  EXPECT_THROW((void)parse_score(R"({"model": "mt", "source": ["x"]})"), HttpError);  // no input
  const json body = json::parse(score_body("lm", {{-1.5, 3}, {-0.25, 1}}, {4, 0}));
  EXPECT_EQ(body["object"], "list");
  EXPECT_EQ(body["data"][1]["index"], 1);
  EXPECT_EQ(body["data"][1]["log_prob"], -0.25);
  EXPECT_EQ(body["data"][0]["tokens"], 3);
  EXPECT_EQ(body["usage"]["total_tokens"], 4);
}

TEST(ServeProtocol, AnswersAndErrorsHaveOpenAisShapes) {
  const json err = json::parse(error_body(bad_field("top_p", "'top_p' is 0")));
  EXPECT_EQ(err["error"]["message"], "'top_p' is 0");
  EXPECT_EQ(err["error"]["type"], "invalid_request_error");
  EXPECT_EQ(err["error"]["param"], "top_p");
  EXPECT_TRUE(json::parse(error_body(HttpError(500, "server_error", "x")))["error"]["param"].is_null());
  const json c = json::parse(completion_body("cmpl-1", 7, "lm", {{"abc", "stop"}, {"d", "length"}}, {3, 4}));
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][1]["index"], 1);
  EXPECT_EQ(c["choices"][1]["finish_reason"], "length");
  EXPECT_EQ(c["usage"]["total_tokens"], 7);
  const std::string chunk = completion_chunk("cmpl-1", 7, "lm", 0, "piece", "");
  ASSERT_EQ(chunk.rfind("data: ", 0), 0u);
  ASSERT_EQ(chunk.substr(chunk.size() - 2), "\n\n");
  const json cj = json::parse(chunk.substr(6));
  EXPECT_EQ(cj["choices"][0]["text"], "piece");
  EXPECT_TRUE(cj["choices"][0]["finish_reason"].is_null());
  const json e = json::parse(embedding_body("enc", {{1.f, 2.f}, {3.f, 4.f}}, 5));
  EXPECT_EQ(e["data"][1]["embedding"][0], 3.0);
  EXPECT_EQ(e["usage"]["prompt_tokens"], 5);
  // Every item has its hypotheses, one included (the 1-best's log_prob is there).
  const json t = json::parse(translation_body("mt", {{{"hello", -0.5, -1.0}}, {}}, false, {4, 2}));
  EXPECT_EQ(t["data"][0]["translation"], "hello");
  EXPECT_EQ(t["data"][0]["score"], -0.5);
  EXPECT_EQ(t["data"][0]["hypotheses"].size(), 1u);
  EXPECT_EQ(t["data"][0]["hypotheses"][0]["log_prob"], -1.0);
  EXPECT_FALSE(t["data"][0].contains("n_best"));
  EXPECT_EQ(t["data"][1]["translation"], "");
  EXPECT_TRUE(t["data"][1]["hypotheses"].empty());
  // A request that said "n_best" gets the list under that name too, for one release.
  const json old = json::parse(translation_body("mt", {{{"hello", -0.5, -1.0}, {"hi", -0.7, -1.4}}}, true, {4, 2}));
  EXPECT_EQ(old["data"][0]["n_best"], old["data"][0]["hypotheses"]);
  EXPECT_EQ(old["data"][0]["hypotheses"][1]["translation"], "hi");
  EXPECT_EQ(stop_position("one two three", {"three", "two"}), 4u);
  EXPECT_EQ(stop_position("one", {"x"}), std::string::npos);
}

}  // namespace
}  // namespace qkv::serve
