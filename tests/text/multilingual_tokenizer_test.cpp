// qkv's reading of the multilingual tokenizers (text/multilingual_tokenizer.h) against
// transformers' M2M100Tokenizer, NllbTokenizer (current and legacy layouts), MBart50Tokenizer and
// MBartTokenizer built over one SentencePiece BPE model (tests/python/make_m2m100_refs.py): the
// ids of varied lines with the default and another source language, and their decoded text; and
// the fast classes' ids.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "error_message.h"
#include "model/hf_import_refs.h"
#include "model/ref_dir.h"
#include "qkv/text/multilingual_tokenizer.h"

namespace qkv {
namespace {

using nlohmann::json;
using text::MultilingualTokenizer;

const char* const kTokenizers[] = {"hf_m2m100", "hf_nllb", "hf_mbart50", "tok_mbart", "tok_nllb_legacy"};

TEST(MultilingualTokenizer, IdsAndTextEqualTransformers) {
  const json all = testing::read_ref_json("hf_m2m100_refs.json");
  for (const char* name : kTokenizers) {
    const json& r = all[name];
    const auto t = MultilingualTokenizer::load(testing::ref_path(name));
    EXPECT_EQ(t->vocab_size(), r["vocab_size"].get<int64_t>()) << name;
    EXPECT_EQ(t->default_source_language(), r["src_lang"].get<std::string>()) << name;
    const int32_t other = t->language_id(r["other_lang"].get<std::string>());
    ASSERT_GE(other, 0) << name;
    for (size_t i = 0; i < r["lines"].size(); ++i) {
      const std::string line = r["lines"][i].get<std::string>();
      const std::vector<int32_t> ids = t->encode(line);
      EXPECT_EQ(t->with_special_tokens(ids), r["ids"][i].get<std::vector<int32_t>>()) << name << ": '" << line << "'";
      EXPECT_EQ(t->with_language(ids, other), r["other_ids"][i].get<std::vector<int32_t>>()) << name << ": '" << line << "'";
      EXPECT_EQ(t->decode(r["ids"][i].get<std::vector<int32_t>>()), r["decoded"][i].get<std::string>())
          << name << ": '" << line << "'";
    }
    for (const auto& [code, id] : r["lang_ids"].items()) EXPECT_EQ(t->language_id(code), id.get<int32_t>()) << code;
  }
}

TEST(MultilingualTokenizer, IdsEqualTheFastTokenizersToo) {
  // AutoTokenizer loads the fast classes (NllbTokenizerFast, MBart50TokenizerFast...) by default:
  // their ids are the slow classes' (qkv's) on every line. Their decoded text may differ in
  // whitespace at the ends (the slow classes strip it; qkv follows them), which is only reported.
  const json all = testing::read_ref_json("hf_m2m100_refs.json");
  for (const char* name : {"hf_nllb", "hf_mbart50", "tok_mbart", "tok_nllb_legacy"}) {
    const json& r = all[name];
    if (r.contains("fast_error")) {
      std::cout << name << ": no fast tokenizer (" << r["fast_error"].get<std::string>() << ")\n";
      continue;
    }
    const auto t = MultilingualTokenizer::load(testing::ref_path(name));
    for (size_t i = 0; i < r["lines"].size(); ++i) {
      const std::vector<int32_t> fast = r["fast_ids"][i].get<std::vector<int32_t>>();
      EXPECT_EQ(t->with_special_tokens(t->encode(r["lines"][i].get<std::string>())), fast) << name << " line " << i;
      const std::string ours = t->decode(fast), theirs = r["fast_decoded"][i].get<std::string>();
      if (ours != theirs)
        std::cout << name << " line " << i << ": fast decodes '" << theirs << "', qkv (slow) '" << ours << "'\n";
    }
  }
}

TEST(MultilingualTokenizer, KindsAndLayouts) {
  EXPECT_EQ(MultilingualTokenizer::load(testing::ref_path("hf_m2m100"))->kind(), MultilingualTokenizer::Kind::M2M100);
  EXPECT_EQ(MultilingualTokenizer::load(testing::ref_path("hf_nllb"))->kind(), MultilingualTokenizer::Kind::Nllb);
  EXPECT_EQ(MultilingualTokenizer::load(testing::ref_path("hf_mbart50"))->kind(), MultilingualTokenizer::Kind::MBart50);
  const auto mbart = MultilingualTokenizer::load(testing::ref_path("tok_mbart"));
  EXPECT_EQ(mbart->kind(), MultilingualTokenizer::Kind::MBart);
  // mbart-large-cc25's layout: X </s> en_XX.
  const int32_t en = mbart->language_id("en_XX");
  EXPECT_EQ(mbart->with_language({10, 11}, en), (std::vector<int32_t>{10, 11, 2, en}));
  EXPECT_EQ(mbart->language_id("eng_Latn"), -1);
}

// A copy of reference tokenizer `name` as transformers before 4.34 saved it: tokenizer_config.json
// without added_tokens_decoder, and no added_tokens.json (whose ids a later version wrote).
std::string saved_before_4_34(const std::string& name) {
  const std::string dir = testing::fresh_temp_dir("qkv_legacy_tokenizer", name);
  std::filesystem::copy(testing::ref_path(name), dir, std::filesystem::copy_options::recursive);
  std::filesystem::remove(dir + "/added_tokens.json");
  std::ifstream in(dir + "/tokenizer_config.json");
  json config = json::parse(in);
  config.erase("added_tokens_decoder");
  std::ofstream(dir + "/tokenizer_config.json") << config.dump(2);
  return dir;
}

// Without added_tokens_decoder the language codes listed in additional_special_tokens get the ids
// the older versions computed. For M2M100, mBART-50 and mBART these are the ids transformers 4.47
// gives (the references'); for NLLB they are fairseq's layout (the codes right after the pieces,
// <mask> after them), where 4.47 made the references with <mask> first: every code one id higher.
TEST(MultilingualTokenizer, TokenizersSavedBefore434GetTheComputedIds) {
  const json all = testing::read_ref_json("hf_m2m100_refs.json");
  for (const char* name : kTokenizers) {
    const json& r = all[name];
    const auto t = MultilingualTokenizer::load(saved_before_4_34(name));
    EXPECT_EQ(t->vocab_size(), r["vocab_size"].get<int64_t>()) << name;
    const bool nllb = std::string(name).find("nllb") != std::string::npos;
    const int32_t first_added = static_cast<int32_t>(r["vocab_size"].get<int64_t>()) - 203;  // NLLB: 202 codes, <mask>
    const auto expected = [&](std::vector<int32_t> ids) {
      for (int32_t& id : ids)
        if (nllb && id >= first_added) id = id == first_added ? first_added + 202 : id - 1;
      return ids;
    };
    const int32_t other = t->language_id(r["other_lang"].get<std::string>());
    for (size_t i = 0; i < r["lines"].size(); ++i) {
      const std::string line = r["lines"][i].get<std::string>();
      const std::vector<int32_t> ids = t->encode(line);
      EXPECT_EQ(t->with_special_tokens(ids), expected(r["ids"][i].get<std::vector<int32_t>>())) << name << ": '" << line << "'";
      EXPECT_EQ(t->with_language(ids, other), expected(r["other_ids"][i].get<std::vector<int32_t>>())) << name;
      EXPECT_EQ(t->decode(t->with_special_tokens(ids)), r["decoded"][i].get<std::string>()) << name << ": '" << line << "'";
    }
    for (const auto& [code, id] : r["lang_ids"].items())
      EXPECT_EQ(t->language_id(code), expected({id.get<int32_t>()})[0]) << name << " " << code;
  }
  // NLLB's codes in fairseq's order right after the pieces, as the released tokenizer has them.
  const auto nllb = MultilingualTokenizer::load(saved_before_4_34("hf_nllb"));
  EXPECT_EQ(nllb->language_id("ace_Arab"), all["hf_nllb"]["vocab_size"].get<int32_t>() - 203);
  EXPECT_EQ(nllb->special_token_id("<mask>"), all["hf_nllb"]["vocab_size"].get<int32_t>() - 1);
}

TEST(MultilingualTokenizer, WithoutAddedTokensDecoderTheCodesMustBeListed) {
  const std::string dir = saved_before_4_34("hf_mbart50");
  for (const char* file : {"/tokenizer_config.json", "/special_tokens_map.json"}) {
    std::ifstream in(dir + file);
    json j = json::parse(in);
    j.erase("additional_special_tokens");
    std::ofstream(dir + file) << j.dump(2);
  }
  const std::string m = test_support::error_message_of([&] { (void)MultilingualTokenizer::load(dir); });
  EXPECT_NE(m.find(dir + "/tokenizer_config.json: field \"added_tokens_decoder\" is missing"), std::string::npos) << m;
  EXPECT_NE(m.find("additional_special_tokens"), std::string::npos) << m;
}

}  // namespace
}  // namespace qkv
