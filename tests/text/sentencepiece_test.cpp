// Tests for qkv/text/sentencepiece.h: a tiny model trained on a generated English+Spanish corpus
// (accents, ñ, ü, ¿ ¡). Determinism (identical .model bytes; seeded sampling), the fixed special ids,
// encode/decode round trips and SentencePiece's normalization (NFKC, whitespace), decode skipping
// pad/bos/eos, byte fallback for unseen characters, and one test per error (missing/corrupt model,
// invalid UTF-8 in training input naming file:line, empty input, bad options).
#include "qkv/text/sentencepiece.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "error_message.h"
#include "file_bytes.h"

namespace qkv::text {
namespace {

namespace fs = std::filesystem;

using test_support::file_bytes;

void write_bytes(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

// Deterministic English and Spanish sentences. All text is NFC (precomposed), hence NFKC-stable.
std::vector<std::string> make_sentences(int n, uint32_t seed) {
  static const std::vector<std::string> en = {"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog",
                                              "house", "water", "light", "world", "morning", "evening", "river",
                                              "mountain", "children", "reading", "books", "garden", "small", "city"};
  static const std::vector<std::string> es = {"el", "niño", "pingüino", "año", "café", "está", "corazón", "también",
                                              "mañana", "señor", "canción", "vergüenza", "árbol", "jamás", "aquí",
                                              "camión", "música", "qué", "él", "montaña", "ciudad", "agua", "pequeño"};
  std::mt19937 rng(seed);
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    const bool spanish = i % 2 == 1;
    const auto& words = spanish ? es : en;
    const int len = 3 + static_cast<int>(rng() % 7);
    std::string s;
    for (int j = 0; j < len; ++j) {
      if (j) s += ' ';
      std::string w = words[rng() % words.size()];
      if (j == 0 && w[0] >= 'a' && w[0] <= 'z') w[0] = static_cast<char>(w[0] - 'a' + 'A');
      s += w;
    }
    const int kind = static_cast<int>(rng() % 4);
    if (spanish && kind == 0) s = "¿" + s + "?";
    else if (spanish && kind == 1) s = "¡" + s + "!";
    else if (kind == 2) s += ", " + words[rng() % words.size()] + ".";
    else s += ".";
    out.push_back(s);
  }
  return out;
}

std::string join_lines(const std::vector<std::string>& lines, const std::string& eol = "\n") {
  std::string s;
  for (const std::string& l : lines) s += l + eol;
  return s;
}

SpmTrainOptions tiny_options() {
  SpmTrainOptions o;
  o.vocab_size = 400;  // 4 special + 256 bytes + ~60 characters + learned pieces
  return o;
}

using qkv::test_support::error_message_of;

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

class SentencePieceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::path(::testing::TempDir()) / ("qkv_spm_test_" + std::to_string(::getpid())));
    fs::create_directories(*dir_);
    corpus_ = new std::vector<std::string>(make_sentences(400, 1));
    write_bytes(path("corpus.txt"), join_lines(*corpus_));
    train_sentencepiece({path("corpus.txt")}, path("tiny"), tiny_options());
    sp_ = new SentencePiece(path("tiny.model"));
  }
  static void TearDownTestSuite() {
    delete sp_;
    delete corpus_;
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::string path(const std::string& name) { return (*dir_ / name).string(); }

  static fs::path* dir_;
  static std::vector<std::string>* corpus_;
  static SentencePiece* sp_;
};

fs::path* SentencePieceTest::dir_ = nullptr;
std::vector<std::string>* SentencePieceTest::corpus_ = nullptr;
SentencePiece* SentencePieceTest::sp_ = nullptr;

TEST_F(SentencePieceTest, SpecialIdsAndVocabLayout) {
  const SentencePiece& sp = *sp_;
  EXPECT_EQ(sp.vocab_size(), 400);
  EXPECT_EQ(sp.pad_id(), 0);
  EXPECT_EQ(sp.unk_id(), 1);
  EXPECT_EQ(sp.bos_id(), 2);
  EXPECT_EQ(sp.eos_id(), 3);
  EXPECT_EQ(sp.piece(0), "<pad>");
  EXPECT_EQ(sp.piece(1), "<unk>");
  EXPECT_EQ(sp.piece(2), "<s>");
  EXPECT_EQ(sp.piece(3), "</s>");
  EXPECT_EQ(sp.piece(4), "<0x00>");  // byte fallback pieces come right after the specials
  EXPECT_EQ(sp.piece(259), "<0xFF>");
  EXPECT_NE(sp.piece(260).rfind("<0x", 0), 0u);
  EXPECT_TRUE(contains(error_message_of([&] { sp.piece(400); }), "id 400 out of range [0, 400)"));
  EXPECT_TRUE(contains(error_message_of([&] { sp.piece(-1); }), "out of range"));

  // The .vocab file lists every piece with its score, in id order.
  const std::string vocab = file_bytes(path("tiny.vocab"));
  EXPECT_EQ(std::count(vocab.begin(), vocab.end(), '\n'), 400);
  EXPECT_EQ(vocab.rfind("<pad>\t0\n<unk>\t0\n<s>\t0\n</s>\t0\n<0x00>\t0\n", 0), 0u) << vocab.substr(0, 80);
}

TEST_F(SentencePieceTest, TrainingIsDeterministic) {
  // Same inputs and options, different prefix: identical bytes (the model records no paths).
  train_sentencepiece({path("corpus.txt")}, path("again"), tiny_options());
  EXPECT_EQ(file_bytes(path("again.model")), file_bytes(path("tiny.model")));
  EXPECT_EQ(file_bytes(path("again.vocab")), file_bytes(path("tiny.vocab")));

  // Sampling: the seed picks the sample, reproducibly.
  SpmTrainOptions o = tiny_options();
  o.input_sentence_size = 150;
  o.seed = 5;
  train_sentencepiece({path("corpus.txt")}, path("s5a"), o);
  train_sentencepiece({path("corpus.txt")}, path("s5b"), o);
  o.seed = 6;
  train_sentencepiece({path("corpus.txt")}, path("s6"), o);
  EXPECT_EQ(file_bytes(path("s5a.model")), file_bytes(path("s5b.model")));
  EXPECT_NE(file_bytes(path("s5a.model")), file_bytes(path("s6.model")));
  EXPECT_NE(file_bytes(path("s5a.model")), file_bytes(path("tiny.model")));
}

TEST_F(SentencePieceTest, CrlfAndSeveralFilesGiveTheSameModel) {
  // The same sentences split over two files, one with CRLF endings and blank lines, and a BOM.
  const std::vector<std::string> a(corpus_->begin(), corpus_->begin() + 150);
  const std::vector<std::string> b(corpus_->begin() + 150, corpus_->end());
  write_bytes(path("part_a.txt"), "\xEF\xBB\xBF" + join_lines(a, "\r\n") + "\r\n  \r\n");
  write_bytes(path("part_b.txt"), "\n" + join_lines(b));
  train_sentencepiece({path("part_a.txt"), path("part_b.txt")}, path("parts"), tiny_options());
  EXPECT_EQ(file_bytes(path("parts.model")), file_bytes(path("tiny.model")));
}

TEST_F(SentencePieceTest, RoundTripsNormalizedText) {
  const SentencePiece& sp = *sp_;
  std::vector<std::string> texts = *corpus_;
  const std::vector<std::string> unseen = make_sentences(200, 99);  // new combinations of known words
  texts.insert(texts.end(), unseen.begin(), unseen.end());
  texts.push_back("¿Dónde está el pingüino? ¡Aquí, señor!");
  texts.push_back("vergüenza");
  texts.push_back("");
  for (const std::string& t : texts) {
    const std::vector<int32_t> ids = sp.encode(t);
    for (const int32_t id : ids) {
      ASSERT_GE(id, 4) << "no special ids from encode: " << t;
      ASSERT_LT(id, sp.vocab_size()) << t;
    }
    EXPECT_EQ(sp.decode(ids), t);
  }
  // Learned pieces really are subwords: a corpus sentence takes fewer ids than characters.
  EXPECT_LT(sp.encode("El niño está aquí.").size(), 10u);
}

TEST_F(SentencePieceTest, NormalizationCanonicalisesWhitespaceAndNfkc) {
  const SentencePiece& sp = *sp_;
  EXPECT_EQ(sp.decode(sp.encode("  hola   mundo  ")), "hola mundo");
  EXPECT_EQ(sp.decode(sp.encode("el\tniño")), "el niño");
  EXPECT_EQ(sp.encode("  el   niño "), sp.encode("el niño"));
  EXPECT_EQ(sp.decode(sp.encode("ﬁsh")), "fish");  // NFKC: ligature fi
  EXPECT_EQ(sp.decode(sp.encode("ＡＢＣ１２")), "ABC12");  // NFKC: full width
  EXPECT_EQ(sp.decode(sp.encode("nin\xCC\x83o")), "niño");  // NFKC composes n + U+0303
}

TEST_F(SentencePieceTest, DecodeSkipsPadBosEos) {
  const SentencePiece& sp = *sp_;
  const std::string text = "¡Mañana el pequeño camión!";
  const std::vector<int32_t> ids = sp.encode(text);
  ASSERT_GE(ids.size(), 2u);
  std::vector<int32_t> framed = {sp.bos_id()};
  framed.insert(framed.end(), ids.begin(), ids.begin() + 1);
  framed.push_back(sp.pad_id());
  framed.insert(framed.end(), ids.begin() + 1, ids.end());
  framed.insert(framed.end(), {sp.eos_id(), sp.pad_id(), sp.pad_id()});
  EXPECT_EQ(sp.decode(framed), text);
  EXPECT_EQ(sp.decode({sp.bos_id(), sp.eos_id(), sp.pad_id()}), "");
  EXPECT_EQ(sp.decode({}), "");
  EXPECT_TRUE(contains(error_message_of([&] { sp.decode({4, 400}); }), "id 400 out of range [0, 400)"));
  EXPECT_TRUE(contains(error_message_of([&] { sp.decode({-2}); }), "id -2 out of range"));
}

TEST_F(SentencePieceTest, UnseenCharactersUseByteFallback) {
  const SentencePiece& sp = *sp_;
  for (const std::string t : {"日本語 el niño", "emoji 😀 ok", "Ωmega ∑ §"}) {
    const std::vector<int32_t> ids = sp.encode(t);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), sp.unk_id()), 0) << t;
    EXPECT_TRUE(std::any_of(ids.begin(), ids.end(), [](int32_t id) { return id >= 4 && id < 260; })) << t;
    EXPECT_EQ(sp.decode(ids), t);
  }
}

TEST_F(SentencePieceTest, WithoutByteFallbackUnseenCharactersAreUnk) {
  SpmTrainOptions o = tiny_options();
  o.byte_fallback = false;
  o.vocab_size = 150;
  train_sentencepiece({path("corpus.txt")}, path("nobytes"), o);
  const SentencePiece sp(path("nobytes.model"));
  EXPECT_EQ(sp.vocab_size(), 150);
  EXPECT_EQ(sp.piece(4).rfind("<0x", 0), std::string::npos);
  const std::vector<int32_t> ids = sp.encode("日本 el niño");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), sp.unk_id()), 1) << "one unk for the unseen run";
  EXPECT_EQ(sp.decode(ids), " ⁇  el niño");
  EXPECT_EQ(sp.decode(sp.encode("el pingüino está aquí.")), "el pingüino está aquí.");
}

TEST_F(SentencePieceTest, BpeModelsTrainAndRoundTrip) {
  SpmTrainOptions o = tiny_options();
  o.model_type = "bpe";
  train_sentencepiece({path("corpus.txt")}, path("bpe"), o);
  const SentencePiece sp(path("bpe.model"));
  EXPECT_EQ(sp.pad_id(), 0);
  EXPECT_EQ(sp.eos_id(), 3);
  for (size_t i = 0; i < corpus_->size(); i += 7) EXPECT_EQ(sp.decode(sp.encode((*corpus_)[i])), (*corpus_)[i]);
}

// The library prints nothing: what training did comes back as a summary for the caller to report.
TEST_F(SentencePieceTest, ReturnsASummaryAndPrintsNothing) {
  ::testing::internal::CaptureStderr();
  ::testing::internal::CaptureStdout();
  const SpmTrainSummary summary = train_sentencepiece({path("corpus.txt")}, path("quiet"), tiny_options());
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(summary.vocab_size, 400);
  EXPECT_EQ(summary.lines_total, 400);
  EXPECT_EQ(summary.lines_used, 400);
  const std::string line = summary.line();
  EXPECT_EQ(line.rfind("sentencepiece: trained unigram model, vocab 400 (byte fallback), on 400 lines from 1 file -> " +
                           path("quiet") + ".model, .vocab in ",
                       0),
            0u)
      << line;
}

TEST_F(SentencePieceTest, EncodeRejectsInvalidUtf8) {
  EXPECT_TRUE(contains(error_message_of([&] { sp_->encode("ni\xC3o"); }), "invalid UTF-8 at byte 2"));
}

TEST_F(SentencePieceTest, MissingEmptyOrCorruptModelFileIsAnErrorNamingThePath) {
  const std::string missing = path("does_not_exist.model");
  std::string e = error_message_of([&] { SentencePiece sp(missing); });
  EXPECT_TRUE(contains(e, missing + ": cannot open SentencePiece model")) << e;
  EXPECT_TRUE(contains(e, "No such file")) << e;

  const std::string empty = path("empty.model");
  write_bytes(empty, "");
  e = error_message_of([&] { SentencePiece sp(empty); });
  EXPECT_TRUE(contains(e, empty + ": empty file")) << e;

  std::mt19937 rng(3);
  std::string junk(4096, '\0');
  for (char& c : junk) c = static_cast<char>(rng());
  const std::string corrupt = path("corrupt.model");
  write_bytes(corrupt, junk);
  e = error_message_of([&] { SentencePiece sp(corrupt); });
  EXPECT_TRUE(contains(e, corrupt + ": not a valid SentencePiece model")) << e;

  const std::string text = path("text.model");
  write_bytes(text, "this is not a model\n");
  e = error_message_of([&] { SentencePiece sp(text); });
  EXPECT_TRUE(contains(e, text + ": not a valid SentencePiece model")) << e;
}

TEST_F(SentencePieceTest, InvalidUtf8InTrainingInputNamesFileAndLine) {
  std::vector<std::string> lines = make_sentences(50, 4);
  lines[36] = "El ni\xF1o";  // Latin-1 ñ
  const std::string bad = path("latin1.txt");
  write_bytes(bad, join_lines(lines, "\r\n"));
  for (const int64_t sample : {0, 20}) {
    SpmTrainOptions o = tiny_options();
    o.input_sentence_size = sample;
    const std::string e = error_message_of([&] { train_sentencepiece({path("corpus.txt"), bad}, path("latin1"), o); });
    EXPECT_EQ(e, bad + ":37: invalid UTF-8 at byte 5") << "sample " << sample;
    EXPECT_FALSE(fs::exists(path("latin1.model")));
  }
}

TEST_F(SentencePieceTest, EmptyOrMissingInputIsAnError) {
  write_bytes(path("empty.txt"), "");
  write_bytes(path("blank.txt"), "\n  \n\t\r\n\n");
  for (const char* name : {"empty.txt", "blank.txt"}) {
    for (const int64_t sample : {0, 10}) {
      SpmTrainOptions o = tiny_options();
      o.input_sentence_size = sample;
      const std::string e = error_message_of([&] { train_sentencepiece({path(name)}, path("out_empty"), o); });
      EXPECT_TRUE(contains(e, "no non-empty lines in " + path(name))) << e;
    }
  }
  EXPECT_FALSE(fs::exists(path("out_empty.model")));

  const std::string missing = path("missing.txt");
  std::string e =
      error_message_of([&] { train_sentencepiece({path("corpus.txt"), missing}, path("out_missing"), tiny_options()); });
  EXPECT_TRUE(contains(e, missing + ": cannot open")) << e;
  e = error_message_of([&] { train_sentencepiece({}, path("out_none"), tiny_options()); });
  EXPECT_TRUE(contains(e, "no input files")) << e;
}

// SentencePiece skips lines longer than its max_sentence_length (4192 bytes by default) silently; a
// corpus of paragraphs used to train on nothing ("no non-empty lines"). Lines up to
// kMaxTrainingLineBytes are used; a longer one is refused naming file:line and the limit.
TEST_F(SentencePieceTest, LongLinesAreUsedUpToTheLimitAndRefusedBeyond) {
  // The whole corpus as one line. Not the corpus repeated: SentencePiece's seed-piece search takes
  // time quadratic in the longest substring repeated within one line.
  std::string paragraph;
  for (const std::string& s : *corpus_) paragraph += (paragraph.empty() ? "" : " ") + s;
  ASSERT_GT(paragraph.size(), 4192u);
  write_bytes(path("paragraph.txt"), paragraph + "\n");
  for (const int64_t sample : {0, 1}) {
    SpmTrainOptions o = tiny_options();
    o.input_sentence_size = sample;
    train_sentencepiece({path("paragraph.txt")}, path("paragraph"), o);
    const SentencePiece sp(path("paragraph.model"));
    EXPECT_EQ(sp.decode(sp.encode((*corpus_)[3])), (*corpus_)[3]) << "sample " << sample;
  }

  // A line of exactly the limit: a word with a character found nowhere else, padded with spaces
  // (normalisation collapses them, so training stays cheap). Without byte fallback that character
  // is <unk> unless the line was trained on.
  const std::string word = "Жук";
  const std::string longest = word + std::string(kMaxTrainingLineBytes - 2 * word.size(), ' ') + word;
  write_bytes(path("at_limit.txt"), join_lines(*corpus_) + longest + "\n");
  SpmTrainOptions o = tiny_options();
  o.byte_fallback = false;
  o.vocab_size = 120;
  train_sentencepiece({path("at_limit.txt")}, path("at_limit"), o);
  const SentencePiece sp(path("at_limit.model"));
  const std::vector<int32_t> ids = sp.encode(word);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), sp.unk_id()), 0);
  EXPECT_EQ(sp.decode(ids), word);

  write_bytes(path("too_long.txt"), paragraph + "\n" + longest + " \n");
  for (const int64_t sample : {0, 1}) {
    SpmTrainOptions o = tiny_options();
    o.input_sentence_size = sample;
    const std::string e = error_message_of([&] { train_sentencepiece({path("too_long.txt")}, path("too_long"), o); });
    EXPECT_EQ(e, path("too_long.txt") + ":2: line of 1048577 bytes is longer than the 1048576 bytes SentencePiece "
                                        "training accepts (one sentence a line?)") << "sample " << sample;
    EXPECT_FALSE(fs::exists(path("too_long.model")));
  }
}

TEST_F(SentencePieceTest, BadOptionsAreErrors) {
  const std::vector<std::string> in = {path("corpus.txt")};
  SpmTrainOptions o = tiny_options();
  o.vocab_size = 200;  // <= 4 + 256 with byte fallback
  EXPECT_TRUE(contains(error_message_of([&] { train_sentencepiece(in, path("bad"), o); }), "must exceed the 260 reserved ids"));
  o = tiny_options();
  o.model_type = "wordpiece";
  EXPECT_TRUE(contains(error_message_of([&] { train_sentencepiece(in, path("bad"), o); }), "model_type 'wordpiece'"));
  o = tiny_options();
  o.character_coverage = 0;
  EXPECT_TRUE(contains(error_message_of([&] { train_sentencepiece(in, path("bad"), o); }), "character_coverage"));
  o = tiny_options();
  o.vocab_size = 280;  // fewer than the characters the corpus needs: SentencePiece's own check
  std::string e = error_message_of([&] { train_sentencepiece(in, path("bad"), o); });
  EXPECT_TRUE(contains(e, "SentencePiece training failed")) << e;
  EXPECT_TRUE(contains(e, "Vocabulary size is smaller than required_chars")) << e;
  o = tiny_options();
  o.vocab_size = 20000;  // more pieces than a 400-line corpus can give
  e = error_message_of([&] { train_sentencepiece(in, path("bad"), o); });
  EXPECT_TRUE(contains(e, "Vocabulary size too high")) << e;
  EXPECT_FALSE(fs::exists(path("bad.model")));
  e = error_message_of([&] { train_sentencepiece(in, path("no_such_dir/m"), tiny_options()); });
  EXPECT_TRUE(contains(e, "output directory " + path("no_such_dir") + " does not exist")) << e;
}

}  // namespace
}  // namespace qkv::text
