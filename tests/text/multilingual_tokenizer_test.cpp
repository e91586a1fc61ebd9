// qkv's reading of the multilingual tokenizers (text/multilingual_tokenizer.h) against
// transformers' M2M100Tokenizer, NllbTokenizer (current and legacy layouts), MBart50Tokenizer and
// MBartTokenizer built over one SentencePiece BPE model (tests/python/make_m2m100_refs.py): the
// ids of varied lines with the default and another source language, and their decoded text; and
// the fast classes' ids.
#include <gtest/gtest.h>

#include <iostream>
#include <nlohmann/json.hpp>

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

}  // namespace
}  // namespace qkv
