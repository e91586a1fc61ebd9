// The seq2seq search (decoding/search.h over beam.h and constraints.h) against transformers'
// generate on Marian, BART, mBART, M2M100 and T5 models imported from Hugging Face
// (tests/python/make_seq2seq_search_refs.py): greedy and beam search with n-best lists, length
// penalties 0, 1, 2, repetition_penalty, no_repeat_ngram_size, min_length, min_new_tokens and
// forced_bos_token_id, each alone and together; identical ids, scores within 1e-4.
//
// One convention differs on purpose (docs/cli.md, Search): once num_beams hypotheses have ended,
// qkv keeps them (fairseq, CTranslate2), where transformers lets a better one that ends in the same
// step replace the worst. The references record, where that changed the n-best, the first
// num_beams hypotheses transformers' search ended (first_k), and qkv must give those.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/hf_import_refs.h"
#include "qkv/api/translator.h"
#include "qkv/decoding/search.h"

namespace qkv {
namespace {

using json = nlohmann::json;

const char* const kSearchModels[] = {"search_marian", "search_bart", "search_mbart", "search_m2m100", "search_t5"};

// The generate() keywords of a reference case as qkv's options.
decoding::SearchOptions search_options_of(const json& o) {
  decoding::SearchOptions s;
  s.beam_size = o.value("num_beams", 1);
  s.n_best = o.value("num_return_sequences", 1);
  s.length_penalty = o.value("length_penalty", 1.0f);
  // transformers' max_new_tokens counts the EOS, qkv's limit the tokens before it.
  s.max_length_ratio = 0;
  s.max_length_offset = o["max_new_tokens"].get<int64_t>() - 1;
  // Both count the decoder start in min_length; min_new_tokens n lets EOS be the (n + 1)th token.
  s.min_length = o.value("min_length", int64_t{0});
  if (o.contains("min_new_tokens")) s.min_length = o["min_new_tokens"].get<int64_t>() + 1;
  s.constraints.repetition_penalty = o.value("repetition_penalty", 1.0f);
  s.constraints.no_repeat_ngram_size = o.value("no_repeat_ngram_size", int64_t{0});
  s.forced_bos_id = o.value("forced_bos_token_id", -1);
  return s;
}

struct Expected {
  std::vector<std::vector<int32_t>> tokens;  // best first
  std::vector<double> scores;                // beam search only
};

// What qkv must find for source i of a case: transformers' hypotheses, or the first num_beams to
// end where transformers replaced one of them.
Expected expected(const json& c, size_t i) {
  const json& first_k = c["first_k"][i];
  const json& outputs = first_k.is_null() ? c["outputs"][i] : first_k["outputs"];
  const json& scores = first_k.is_null() ? c["scores"][i] : first_k["scores"];
  return {outputs.get<std::vector<std::vector<int32_t>>>(), scores.get<std::vector<double>>()};
}

void expect_found(const std::vector<std::vector<decoding::Hypothesis>>& got, const json& c, bool scored,
                  const std::string& what) {
  ASSERT_EQ(got.size(), c["outputs"].size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const Expected want = expected(c, i);
    ASSERT_EQ(got[i].size(), want.tokens.size()) << what << ", source " << i;
    for (size_t h = 0; h < want.tokens.size(); ++h) {
      EXPECT_EQ(got[i][h].tokens, want.tokens[h]) << what << ", source " << i << ", hypothesis " << h;
      EXPECT_TRUE(got[i][h].finished) << what << ", source " << i << ", hypothesis " << h;
      if (scored) {
        EXPECT_NEAR(got[i][h].score, want.scores[h], 1e-4) << what << ", source " << i << ", hypothesis " << h;
      }
    }
  }
}

TEST(HfSeq2SeqSearch, GreedyBeamAndRulesEqualGenerate) {
  const json refs = testing::read_ref_json("hf_seq2seq_search_refs.json");
  int64_t first_k = 0;
  for (const char* name : kSearchModels) {
    const json& r = refs[name];
    const api::Translator translator(testing::imported_checkpoint(name));
    const std::vector<data::IdLine> sources = testing::id_lines(r["sources"]);
    ASSERT_GE(sources.size(), 8u) << name;
    first_k += r["first_k_cases"].get<int64_t>();
    for (const json& c : r["cases"]) {
      decoding::SearchOptions o = search_options_of(c["options"]);
      for (const bool cache : {true, false}) {
        o.use_cache = cache;
        const std::string what = std::string(name) + " " + c["name"].get<std::string>() + (cache ? "" : " (no cache)");
        // One batch: padding and the order by length must not change a sentence's search.
        expect_found(decoding::search_in_batches(translator.model(), sources, o, 16), c, o.beam_size > 1, what);
      }
    }
  }
  // The convention that differs is exercised (the references say where).
  EXPECT_GT(first_k, 0);
}

// Each case's option changes transformers' best output for some source of some model (else the
// comparison above could not see qkv ignore it), compared with the same search without it.
TEST(HfSeq2SeqSearch, EveryOptionChangesSomeReference) {
  const json refs = testing::read_ref_json("hf_seq2seq_search_refs.json");
  std::map<std::string, int64_t> changed;
  for (const char* name : kSearchModels) {
    std::map<std::string, json> cases;
    for (const json& c : refs[name]["cases"]) cases[c["name"].get<std::string>()] = c;
    for (const auto& [case_name, c] : cases) {
      const json& plain = cases.at(c["options"]["num_beams"].get<int>() == 1 ? "greedy" : "beam4_nbest4");
      changed[case_name];
      for (size_t i = 0; i < refs[name]["sources"].size(); ++i)
        if (expected(c, i).tokens.at(0) != expected(plain, i).tokens.at(0)) ++changed[case_name];
    }
  }
  for (const auto& [case_name, count] : changed)
    if (case_name != "greedy" && case_name != "beam4_nbest4") {
      EXPECT_GT(count, 0) << case_name;
    }
}

}  // namespace
}  // namespace qkv
