// Tests for qkv/text/byte_level_bpe.h: the ids `tokenizers` gives for every reference line
// (tests/python/make_bpe_refs.py: add_prefix_space false and true, merges in both forms),
// lossless decode, hand-made tokenizers whose merges have a known result, any bytes (invalid
// UTF-8) encoding without a crash, and one error per kind of damaged or unsupported file.
#include "qkv/text/byte_level_bpe.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "model/ref_dir.h"
#include "qkv/core/error.h"
#include "qkv/text/byte_level_alphabet.h"
#include "file_bytes.h"

namespace qkv::text {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using test_support::file_bytes;

struct RefCase {
  std::string name, text;
  std::vector<int32_t> ids, ids_prefix;
};

std::vector<RefCase> load_cases() {
  const std::string path = qkv::testing::ref_path("bpe/cases.json");
  if (path.empty()) return {};
  const json j = json::parse(file_bytes(path));
  std::vector<RefCase> cases;
  for (const json& c : j["cases"])
    cases.push_back({c["name"], c["text"], c["ids"].get<std::vector<int32_t>>(), c["ids_prefix"].get<std::vector<int32_t>>()});
  return cases;
}

// 35 hand cases, every fourth of the first 2000 corpus lines, 40 chunks of 25 lines, 300 random.
constexpr size_t kRefCases = 875;

// Compares every case; reports the first few differences by name.
void expect_ids(const ByteLevelBpe& bpe, const std::vector<RefCase>& cases, bool prefix) {
  ASSERT_EQ(cases.size(), kRefCases);
  int mismatches = 0;
  for (const RefCase& c : cases) {
    const std::vector<int32_t>& want = prefix ? c.ids_prefix : c.ids;
    if (bpe.encode(c.text) != want && ++mismatches <= 5)
      ADD_FAILURE() << "case " << c.name << " " << json(c.text).dump() << ": ids differ from tokenizers";
  }
  EXPECT_EQ(mismatches, 0) << "of " << cases.size() << " reference lines";
}

// The reference must not shrink quietly: the training text is the KJV's 12,092 verses when the
// reference says "kjv" (always under CI=true), else 6000 generated lines.
TEST(ByteLevelBpeRef, ReferenceIsComplete) {
  const std::string path = qkv::testing::ref_path("bpe/cases.json");
  ASSERT_FALSE(path.empty());
  const json j = json::parse(file_bytes(path));
  EXPECT_EQ(j["cases"].size(), kRefCases);
  qkv::testing::expect_reference_corpus("bpe/train.txt", j.value("corpus", ""), j.value("corpus_lines", size_t{0}));
}

TEST(ByteLevelBpeRef, EqualsTokenizersOnEveryLine) {
  const auto cases = load_cases();
  expect_ids(ByteLevelBpe::load(qkv::testing::ref_path("bpe/tokenizer.json")), cases, false);
}

TEST(ByteLevelBpeRef, EqualsTokenizersWithPrefixSpace) {
  const auto bpe = ByteLevelBpe::load(qkv::testing::ref_path("bpe/tokenizer_prefix.json"));
  EXPECT_TRUE(bpe.add_prefix_space());
  expect_ids(bpe, load_cases(), true);
}

TEST(ByteLevelBpeRef, OtherMergesFormReadsTheSame) {
  // One file has merges as [["a","b"]] lists, the other as "a b" strings.
  const std::string a = file_bytes(qkv::testing::ref_path("bpe/tokenizer.json"));
  const std::string b = file_bytes(qkv::testing::ref_path("bpe/tokenizer_other_merges.json"));
  EXPECT_NE(json::parse(a)["model"]["merges"][0].is_string(), json::parse(b)["model"]["merges"][0].is_string());
  expect_ids(ByteLevelBpe::load(qkv::testing::ref_path("bpe/tokenizer_other_merges.json")), load_cases(), false);
}

TEST(ByteLevelBpeRef, DecodeIsLossless) {
  const auto bpe = ByteLevelBpe::load(qkv::testing::ref_path("bpe/tokenizer.json"));
  for (const RefCase& c : load_cases()) {
    EXPECT_EQ(bpe.decode(c.ids), c.text) << c.name;
    EXPECT_EQ(bpe.decode(bpe.encode(c.text)), c.text) << c.name;
  }
}

TEST(ByteLevelBpeRef, VocabularyAndSpecialToken) {
  const std::string path = qkv::testing::ref_path("bpe/tokenizer.json");
  const auto bpe = ByteLevelBpe::load(path);
  const json j = json::parse(file_bytes(path));
  EXPECT_EQ(bpe.vocab_size(), static_cast<int64_t>(j["model"]["vocab"].size()));
  const int32_t eot = bpe.token_to_id("<|endoftext|>");
  ASSERT_GE(eot, 0);
  EXPECT_EQ(bpe.id_to_token(eot), "<|endoftext|>");
  EXPECT_EQ(bpe.encode("<|endoftext|>"), std::vector<int32_t>{eot});
  // " the" is frequent in any English training text: one token, "Ġthe" (GPT-2's space symbol).
  const int32_t the = bpe.token_to_id("Ġthe");
  ASSERT_GE(the, 0);
  EXPECT_EQ(bpe.encode(" the"), std::vector<int32_t>{the});
  EXPECT_EQ(bpe.token_to_id("no such token"), -1);
  EXPECT_THROW(bpe.id_to_token(-1), Error);
  EXPECT_THROW(bpe.id_to_token(static_cast<int32_t>(bpe.vocab_size())), Error);
  EXPECT_THROW(bpe.decode({0, static_cast<int32_t>(bpe.vocab_size())}), Error);
}

TEST(ByteLevelBpeRef, AnyBytesEncodeAndDecodeBack) {
  const auto bpe = ByteLevelBpe::load(qkv::testing::ref_path("bpe/tokenizer.json"));
  std::vector<std::string> inputs = {std::string("\xff\xfe abc \xc3", 8), std::string("\xed\xa0\x80 x", 5),
                                     std::string("a\0b", 3), std::string("\xf4\x90\x80\x80", 4), "\xe2\x82"};
  std::mt19937 rng(5);
  for (int i = 0; i < 200; ++i) {
    std::string s(rng() % 64, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 4 == 0 ? ' ' : rng());
    inputs.push_back(s);
  }
  for (const std::string& s : inputs) EXPECT_EQ(bpe.decode(bpe.encode(s)), s) << ::testing::PrintToString(s);
}

TEST(ByteLevelBpeRef, WholeTrainingTextEqualsTokenizersAndConcurrentEncodesAgree) {
  const auto bpe = ByteLevelBpe::load(qkv::testing::ref_path("bpe/tokenizer.json"));
  const std::string text = file_bytes(qkv::testing::ref_path("bpe/train.txt"));
  ASSERT_GT(text.size(), 100000u);
  std::vector<int32_t> want;
  std::ifstream want_in(qkv::testing::ref_path("bpe/train_ids.txt"));
  for (int32_t id; want_in >> id;) want.push_back(id);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = bpe.encode(text);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "encoded " << text.size() << " bytes into " << ids.size() << " ids in " << s << " s ("
            << text.size() / s / 1e6 << " MB/s, starting with an empty cache)\n";
  EXPECT_TRUE(ids == want) << ids.size() << " ids, tokenizers gave " << want.size();
  EXPECT_EQ(bpe.decode(ids), text);
  std::vector<std::vector<int32_t>> results(4);
  std::vector<std::thread> threads;
  for (auto& r : results) threads.emplace_back([&] { r = bpe.encode(text.substr(0, 200000)); });
  for (auto& t : threads) t.join();
  for (const auto& r : results) EXPECT_EQ(r, results[0]);
}

// ----------------------------------------------------------------------- hand-made tokenizers --

class ByteLevelBpeFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("qkv_bpe_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A GPT-2 style tokenizer.json: the 256 byte symbols (ids 0..255), then one token per merge.
  static json minimal(const std::vector<std::pair<std::string, std::string>>& merges) {
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[byte_level_symbols()[b]] = b;
    json merge_list = json::array();
    for (const auto& [a, b] : merges) {
      if (!vocab.contains(a + b)) vocab[a + b] = static_cast<int>(vocab.size());
      merge_list.push_back(a + " " + b);
    }
    return json{{"version", "1.0"},
                {"truncation", nullptr},
                {"padding", nullptr},
                {"added_tokens", json::array()},
                {"normalizer", nullptr},
                {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
                {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
                {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
                {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                           {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                           {"vocab", vocab}, {"merges", merge_list}}}};
  }

  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  ByteLevelBpe load(const json& j) { return ByteLevelBpe::load(write("tokenizer.json", j.dump())); }

  // The message of the qkv::Error loading `j` (or raw `text`) throws; "" if none.
  std::string load_error(const std::string& text) {
    const std::string path = write("bad.json", text);
    try {
      ByteLevelBpe::load(path);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << "the message names no file: " << e.what();
      return e.what();
    }
    return "";
  }
  std::string load_error(const json& j) { return load_error(j.dump()); }

  fs::path dir_;
};

std::vector<std::string> tokens(const ByteLevelBpe& bpe, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (const int32_t id : ids) out.push_back(bpe.id_to_token(id));
  return out;
}
using Tokens = std::vector<std::string>;

TEST_F(ByteLevelBpeFileTest, LowerRankMergesFirst) {
  // "abc" with merges a+b (rank 0) and b+c (rank 1) is ab|c; with the ranks swapped, a|bc.
  const auto ab_first = load(minimal({{"a", "b"}, {"b", "c"}}));
  EXPECT_EQ(tokens(ab_first, ab_first.encode("abc")), (Tokens{"ab", "c"}));
  const auto swapped = load(minimal({{"b", "c"}, {"a", "b"}}));
  EXPECT_EQ(tokens(swapped, swapped.encode("abc")), (Tokens{"a", "bc"}));
  // Equal pairs merge from the left: "aaa" is aa|a.
  const auto aa = load(minimal({{"a", "a"}}));
  EXPECT_EQ(tokens(aa, aa.encode("aaa")), (Tokens{"aa", "a"}));
}

TEST_F(ByteLevelBpeFileTest, KnownWordsAndSpaces) {
  const auto bpe = load(minimal({{"Ġ", "h"}, {"e", "l"}, {"Ġh", "el"}, {"l", "o"}, {"Ġhel", "lo"}, {"Ġ", "Ġ"}}));
  EXPECT_EQ(tokens(bpe, bpe.encode("hello hello")), (Tokens{"h", "el", "lo", "Ġhello"}));
  // Three spaces then a word: "ĠĠ" (the run less its last space), then "Ġhello".
  EXPECT_EQ(tokens(bpe, bpe.encode("   hello\n")), (Tokens{"ĠĠ", "Ġhello", "Ċ"}));
  EXPECT_EQ(tokens(bpe, bpe.encode("it's")), (Tokens{"i", "t", "'", "s"}));
  EXPECT_EQ(bpe.decode(bpe.encode("   hello\n")), "   hello\n");
}

TEST_F(ByteLevelBpeFileTest, AddedTokensAreWholeAndPrefixSpaceIsPerSegment) {
  json j = minimal({{"Ġ", "x"}});
  j["added_tokens"] = json::array({{{"id", 257}, {"content", "<|endoftext|>"}, {"single_word", false}, {"lstrip", false},
                                    {"rstrip", false}, {"normalized", false}, {"special", true}},
                                   {{"id", 258}, {"content", "<|end"}, {"special", false}, {"normalized", true}}});
  j["pre_tokenizer"]["add_prefix_space"] = true;
  const auto bpe = load(j);
  EXPECT_EQ(bpe.vocab_size(), 259);
  EXPECT_EQ(tokens(bpe, bpe.encode("x<|endoftext|>x<|end")), (Tokens{"Ġx", "<|endoftext|>", "Ġx", "<|end"}));
  EXPECT_EQ(tokens(bpe, bpe.encode(" x<|endoftext|>")), (Tokens{"Ġx", "<|endoftext|>"}));
  EXPECT_EQ(bpe.encode(""), std::vector<int32_t>{});
  EXPECT_EQ(bpe.decode(bpe.encode("<|endoftext|>")), "<|endoftext|>");
}

TEST_F(ByteLevelBpeFileTest, MissingByteSymbolsAreDropped) {
  json j = minimal({});
  // Remove "z" (id 'z') and give its id to the last symbol so ids stay 0..N-1: `tokenizers` drops a
  // symbol the vocabulary lacks (there is no unk token).
  j["model"]["vocab"].erase("z");
  j["model"]["vocab"][byte_level_symbols()[255]] = static_cast<int>('z');
  const auto bpe = load(j);
  EXPECT_EQ(tokens(bpe, bpe.encode("azb")), (Tokens{"a", "b"}));
}

TEST_F(ByteLevelBpeFileTest, DamagedFilesNameTheProblem) {
  auto has = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos ? ::testing::AssertionSuccess()
                                               : ::testing::AssertionFailure() << "\"" << msg << "\" lacks \"" << part << "\"";
  };
  EXPECT_TRUE(has(load_error(std::string("{\"model\": ")), "not valid JSON"));
  EXPECT_TRUE(has(load_error(std::string("[1, 2]")), "not a JSON object"));
  EXPECT_THROW(ByteLevelBpe::load((dir_ / "absent.json").string()), Error);

  json j = minimal({{"a", "b"}});
  j["model"]["merges"].push_back("a zz");
  EXPECT_TRUE(has(load_error(j), "model.merges[1]: \"zz\" is not in model.vocab"));

  j = minimal({{"a", "b"}});
  j["model"]["merges"].push_back("b a");  // "ba" is not in the vocabulary
  EXPECT_TRUE(has(load_error(j), "model.merges[1] (the merge of \"b\" and \"a\"): \"ba\" is not in model.vocab"));

  j = minimal({});
  j["model"]["merges"] = json::array({"a b c"});
  EXPECT_TRUE(has(load_error(j), "model.merges[0]"));
  j["model"]["merges"] = json::array({json::array({"a"})});
  EXPECT_TRUE(has(load_error(j), "model.merges[0]"));

  j = minimal({});
  j["model"]["vocab"]["a"] = 9999;
  EXPECT_TRUE(has(load_error(j), "out of range"));
  j["model"]["vocab"]["a"] = -1;
  EXPECT_TRUE(has(load_error(j), "out of range"));
  j["model"]["vocab"]["a"] = "zero";
  EXPECT_TRUE(has(load_error(j), "model.vocab[\"a\"] is not an integer id"));

  j = minimal({});
  j["model"]["vocab"]["extra"] = 3;  // id 3 is already "$"
  EXPECT_TRUE(has(load_error(j), "is given to both"));

  j = minimal({});
  j["added_tokens"] = json::array({{{"id", 3}, {"content", "<eot>"}, {"special", true}}});
  EXPECT_TRUE(has(load_error(j), "added_tokens"));
  j["added_tokens"] = json::array({{{"id", 256}, {"content", ""}, {"special", true}}});
  EXPECT_TRUE(has(load_error(j), "added_tokens[0].content is empty"));

  j = minimal({});
  j.erase("model");
  EXPECT_TRUE(has(load_error(j), "model is missing"));
}

TEST_F(ByteLevelBpeFileTest, UnsupportedComponentsAreRefusedByName) {
  auto error_with = [&](const std::function<void(json&)>& change) {
    json j = minimal({});
    change(j);
    return load_error(j);
  };
  EXPECT_NE(error_with([](json& j) { j["model"]["type"] = "WordPiece"; })
                .find("model.type \"WordPiece\" is not supported (byte-level BPE only)"),
            std::string::npos);
  EXPECT_NE(error_with([](json& j) { j["normalizer"] = {{"type", "NFC"}}; }).find("normalizer \"NFC\" is not supported"),
            std::string::npos);
  EXPECT_NE(error_with([](json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }).find("pre_tokenizer \"Whitespace\""),
            std::string::npos);
  EXPECT_NE(error_with([](json& j) { j["decoder"] = nullptr; }).find("decoder null is not supported"), std::string::npos);
  // RobertaProcessing (BART's) is read, its [token, id] pairs checked.
  EXPECT_NE(error_with([](json& j) { j["post_processor"] = {{"type", "RobertaProcessing"}}; })
                .find("post_processor.cls is not a [token, id] pair"),
            std::string::npos);
  EXPECT_NE(error_with([](json& j) { j["post_processor"] = {{"type", "TemplateProcessing"}}; }).find("post_processor \"TemplateProcessing\""),
            std::string::npos);
  EXPECT_NE(error_with([](json& j) { j["model"]["dropout"] = 0.1; }).find("model.dropout"), std::string::npos);
  EXPECT_NE(error_with([](json& j) { j["model"]["unk_token"] = "<unk>"; }).find("model.unk_token"), std::string::npos);
  EXPECT_NE(error_with([](json& j) { j["padding"] = json::object(); }).find("padding"), std::string::npos);
  EXPECT_NE(error_with([](json& j) {
              j["added_tokens"] = json::array({{{"id", 256}, {"content", "<mask>"}, {"single_word", true}, {"special", true}}});
            }).find("added_tokens[0] (\"<mask>\"): single_word true is not supported"),
            std::string::npos);
}

}  // namespace
}  // namespace qkv::text
