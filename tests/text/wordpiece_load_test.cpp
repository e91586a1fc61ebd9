// Hand-made WordPiece tokenizer.json files: results known by construction (greedy longest match,
// unknown words, the decoder's cleanup, added-token options) and one qkv::Error per kind of bad or
// unsupported file, naming the file and the field; load_tokenizer's choice by model.type.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/text/tokenizer.h"
#include "qkv/text/wordpiece.h"

namespace qkv::text {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class WordPieceFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("qkv_wordpiece_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A BERT-style tokenizer.json with a tiny vocabulary (ids in the order given).
  static json minimal() {
    const std::vector<std::string> tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able",
                                             "hello", "world", "!", "##s", "don", "'", "t", "a", "##b", "ab", "##c", "[", "]"};
    json vocab = json::object();
    for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
    json added = json::array();
    for (int id = 0; id < 5; ++id)
      added.push_back({{"id", id}, {"content", tokens[id]}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", false}, {"special", true}});
    return json{
        {"version", "1.0"},
        {"truncation", {{"max_length", 128}, {"strategy", "LongestFirst"}, {"stride", 0}}},
        {"padding", {{"strategy", {{"Fixed", 128}}}, {"direction", "Right"}, {"pad_id", 0}, {"pad_token", "[PAD]"}}},
        {"added_tokens", added},
        {"normalizer", {{"type", "BertNormalizer"}, {"clean_text", true}, {"handle_chinese_chars", true},
                        {"strip_accents", nullptr}, {"lowercase", true}}},
        {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
        {"post_processor", {{"type", "TemplateProcessing"},
                            {"single", json::array({{{"SpecialToken", {{"id", "[CLS]"}, {"type_id", 0}}}},
                                                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                                    {{"SpecialToken", {{"id", "[SEP]"}, {"type_id", 0}}}}})},
                            {"pair", json::array()},
                            {"special_tokens", {{"[CLS]", {{"id", "[CLS]"}, {"ids", {2}}, {"tokens", {"[CLS]"}}}},
                                                {"[SEP]", {{"id", "[SEP]"}, {"ids", {3}}, {"tokens", {"[SEP]"}}}}}}}},
        {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
        {"model", {{"type", "WordPiece"}, {"unk_token", "[UNK]"}, {"continuing_subword_prefix", "##"},
                   {"max_input_chars_per_word", 100}, {"vocab", vocab}}}};
  }

  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  WordPiece load(const json& j) { return WordPiece::load(write("tokenizer.json", j.dump())); }

  // The message of the qkv::Error loading `text` throws (through load_tokenizer); "" if none.
  std::string load_error(const std::string& text) {
    const std::string path = write("bad.json", text);
    try {
      load_tokenizer(path);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << "the message names no file: " << e.what();
      return e.what();
    }
    return "";
  }
  std::string load_error(const json& j) { return load_error(j.dump()); }

  fs::path dir_;
};

std::vector<std::string> tokens(const WordPiece& wp, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (const int32_t id : ids) out.push_back(wp.id_to_token(id));
  return out;
}
using Tokens = std::vector<std::string>;

TEST_F(WordPieceFileTest, GreedyLongestMatchFirst) {
  const WordPiece wp = load(minimal());
  EXPECT_EQ(tokens(wp, wp.encode("UNAFFABLE hello!")), (Tokens{"un", "##aff", "##able", "hello", "!"}));
  EXPECT_EQ(tokens(wp, wp.encode("abc")), (Tokens{"ab", "##c"}));  // "ab" before "a" "##b"
  EXPECT_EQ(tokens(wp, wp.encode("unx worlds")), (Tokens{"[UNK]", "world", "##s"}));  // a word that cannot be split
  EXPECT_EQ(tokens(wp, wp.encode("Don't")), (Tokens{"don", "'", "t"}));
  EXPECT_EQ(wp.encode(""), std::vector<int32_t>{});
  EXPECT_EQ(wp.with_special_tokens({}), (std::vector<int32_t>{2, 3}));
}

TEST_F(WordPieceFileTest, LongWordsAreUnknownCountedInCharacters) {
  json j = minimal();
  j["model"]["max_input_chars_per_word"] = 4;
  j["model"]["vocab"]["éééé"] = j["model"]["vocab"].size();
  j["normalizer"]["strip_accents"] = false;
  const WordPiece wp = load(j);
  EXPECT_EQ(tokens(wp, wp.encode("éééé ababa")), (Tokens{"éééé", "[UNK]"}));  // 8 bytes, 4 characters; 5 characters
}

TEST_F(WordPieceFileTest, DecodeJoinsPiecesAndCleansUp) {
  const WordPiece wp = load(minimal());
  const std::vector<int32_t> ids = wp.with_special_tokens(wp.encode("unaffable hello world ! don ' t"));
  // The cleanup works on each token with its leading space: " !" loses the space, " '" does not.
  EXPECT_EQ(wp.decode(ids), "unaffable hello world! don ' t");
  EXPECT_EQ(wp.decode(ids, false), "[CLS] unaffable hello world! don ' t [SEP]");
  EXPECT_EQ(wp.decode({6, 5}), "##aff un");  // the first token keeps its prefix, as in tokenizers
  EXPECT_THROW(wp.decode({0, static_cast<int32_t>(wp.vocab_size())}), Error);
  json j = minimal();
  j["decoder"] = nullptr;  // no decoder: tokens joined by spaces
  EXPECT_EQ(load(j).decode({5, 6, 7, 10}), "un ##aff ##able !");
}

TEST_F(WordPieceFileTest, AddedTokensMatchRawTextWithTheirOptions) {
  json j = minimal();
  const WordPiece plain = load(j);
  EXPECT_EQ(tokens(plain, plain.encode("hello[MASK]world [mask]")),
            (Tokens{"hello", "[MASK]", "world", "[", "[UNK]", "]"}));  // unnormalized: case matters
  j["added_tokens"][4]["lstrip"] = true;
  j["added_tokens"][4]["single_word"] = true;
  const WordPiece single = load(j);
  EXPECT_EQ(tokens(single, single.encode("hello [MASK]world")), (Tokens{"hello", "[", "[UNK]", "]", "world"}));
  EXPECT_EQ(tokens(single, single.encode("hello [MASK]! world")), (Tokens{"hello", "[MASK]", "!", "world"}));
  j["added_tokens"].push_back({{"id", 21}, {"content", "Hello World"}, {"normalized", true}, {"special", false}});
  const WordPiece normalized = load(j);
  EXPECT_EQ(normalized.vocab_size(), 22);
  EXPECT_EQ(normalized.encode("HELLO WORLD!"), (std::vector<int32_t>{21, 10}));  // matched after lowercasing
  EXPECT_EQ(normalized.special_id("Hello World"), -1);
  EXPECT_EQ(normalized.decode({21, 2}), "Hello World");  // not special: kept
}

TEST_F(WordPieceFileTest, BertProcessingAndNoPostProcessor) {
  json j = minimal();
  j["post_processor"] = {{"type", "BertProcessing"}, {"sep", {"[SEP]", 3}}, {"cls", {"[CLS]", 2}}};
  EXPECT_EQ(load(j).with_special_tokens({8}), (std::vector<int32_t>{2, 8, 3}));
  j["post_processor"] = nullptr;
  EXPECT_EQ(load(j).with_special_tokens({8}), (std::vector<int32_t>{8}));
}

TEST_F(WordPieceFileTest, LoadTokenizerChoosesByModelType) {
  const auto tok = load_tokenizer(write("tokenizer.json", minimal().dump()));
  EXPECT_EQ(tok->with_special_tokens(tok->encode("hello")), (std::vector<int32_t>{2, 8, 3}));
  EXPECT_EQ(tok->special_token_id("[MASK]"), 4);
  json j = minimal();
  j["model"]["type"] = "Unigram";
  const std::string msg = load_error(j);
  EXPECT_NE(msg.find("bad.json: model.type \"Unigram\" is not supported (qkv reads byte-level BPE and WordPiece)"),
            std::string::npos) << msg;
}

TEST_F(WordPieceFileTest, BadFilesAreRefusedNamingTheField) {
  auto expect_error = [&](json j, const std::string& part) {
    const std::string msg = load_error(j);
    EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
  };
  json j = minimal();
  j["model"].erase("vocab");
  expect_error(j, "model.vocab is missing");
  j = minimal();
  j["model"]["unk_token"] = "<unk>";
  expect_error(j, "model.unk_token \"<unk>\" is not in model.vocab");
  j = minimal();
  j["model"].erase("unk_token");
  expect_error(j, "model.unk_token is missing");
  j = minimal();
  j["model"]["max_input_chars_per_word"] = -1;
  expect_error(j, "model.max_input_chars_per_word is not a non-negative integer");
  j = minimal();
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array()}};
  expect_error(j, "normalizer \"Sequence\" is not supported");
  j = minimal();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_error(j, "pre_tokenizer \"Whitespace\" is not supported");
  j = minimal();
  j["post_processor"] = {{"type", "RobertaProcessing"}};
  expect_error(j, "post_processor \"RobertaProcessing\" is not supported");
  j = minimal();
  j["decoder"] = {{"type", "ByteLevel"}};
  expect_error(j, "decoder \"ByteLevel\" is not supported");
  j = minimal();
  j["normalizer"]["lowercase"] = "yes";
  expect_error(j, "normalizer.lowercase is not true or false");
  j = minimal();
  j["model"]["vocab"]["hello"] = 9;  // "world" has 9
  expect_error(j, "model.vocab: id 9 is given to both");
  j = minimal();
  j["model"]["vocab"]["hello"] = 50;
  expect_error(j, "\"hello\" has id 50, out of range");
  j = minimal();
  j["added_tokens"][4]["id"] = 7;
  expect_error(j, "added_tokens[4]: \"[MASK]\" has id 7 but model.vocab gives it 4");
  j = minimal();
  j["post_processor"]["single"][0]["SpecialToken"]["id"] = "[BOS]";
  expect_error(j, "post_processor.single[0]: \"[BOS]\" is not in post_processor.special_tokens");
  j = minimal();
  j["post_processor"]["special_tokens"]["[CLS]"]["ids"] = {99};
  expect_error(j, "post_processor.special_tokens[\"[CLS]\"].ids: id 99 is out of range");
  j = minimal();
  j["post_processor"]["single"][1]["Sequence"]["id"] = "B";
  expect_error(j, "post_processor.single[1]: a single-sequence template can only hold sequence \"A\"");
  EXPECT_NE(load_error(std::string("{\"model\": ")).find("not valid JSON"), std::string::npos);
  const std::string missing = (dir_ / "no_such.json").string();
  EXPECT_THROW(load_tokenizer(missing), Error);
}

}  // namespace
}  // namespace qkv::text
