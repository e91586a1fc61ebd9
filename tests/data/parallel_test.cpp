// Reading line-aligned parallel text (two files or one TSV): content, CRLF/BOM handling, empty-line
// policies, and every error message (missing file, line counts, UTF-8, TSV columns).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/data/parallel.h"
#include "error_message.h"

namespace {

using qkv::data::EmptyLinePolicy;
using qkv::data::ParallelText;
using qkv::data::read_parallel;
using qkv::data::read_parallel_tsv;

// A file under the test temp dir with exactly these bytes; returns its path.
std::string write_file(const std::string& name, const std::string& bytes) {
  const std::string path = ::testing::TempDir() + "qkv_parallel_" + name;
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  return path;
}

using qkv::test_support::error_message_of;

TEST(ParallelReadTest, ReadsAlignedFilesWithCrlfAndBom) {
  const std::string es = write_file("ok.es", "\xEF\xBB\xBFhola mundo\r\nbuenos días\r\n¿qué tal?\r\n");
  const std::string en = write_file("ok.en", "hello world\ngood morning\nhow are you?");  // no final newline
  const ParallelText p = read_parallel(es, en, EmptyLinePolicy::Error);
  EXPECT_EQ(p.size(), 3);
  EXPECT_EQ(p.src, (std::vector<std::string>{"hola mundo", "buenos días", "¿qué tal?"}));
  EXPECT_EQ(p.tgt, (std::vector<std::string>{"hello world", "good morning", "how are you?"}));
  EXPECT_EQ(p.line_numbers, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(p.empty_dropped, 0);
}

TEST(ParallelReadTest, EmptyFilesGiveNoPairs) {
  const std::string a = write_file("empty.es", ""), b = write_file("empty.en", "");
  const ParallelText p = read_parallel(a, b);
  EXPECT_EQ(p.size(), 0);
  EXPECT_EQ(p.empty_dropped, 0);
}

TEST(ParallelReadTest, MissingFileIsNamed) {
  const std::string ok = write_file("present.en", "x\n");
  const std::string missing = ::testing::TempDir() + "qkv_parallel_no_such_file.es";
  EXPECT_EQ(error_message_of([&] { read_parallel(missing, ok); }), missing + ": cannot open file");
  EXPECT_EQ(error_message_of([&] { read_parallel(ok, missing); }), missing + ": cannot open file");
  EXPECT_EQ(error_message_of([&] { read_parallel_tsv(missing); }), missing + ": cannot open file");
}

TEST(ParallelReadTest, DirectoryIsNamed) {
  // A directory opens as a stream on Linux; the first read used to fail as "read error after line 0".
  const std::string ok = write_file("beside_dir.en", "x\n");
  const std::string dir = ::testing::TempDir() + "qkv_parallel_a_directory";
  std::filesystem::create_directories(dir);
  const std::string expected = dir + ": is a directory, expected a text file";
  EXPECT_EQ(error_message_of([&] { read_parallel(dir, ok); }), expected);
  EXPECT_EQ(error_message_of([&] { read_parallel(ok, dir); }), expected);
  EXPECT_EQ(error_message_of([&] { read_parallel_tsv(dir); }), expected);
}

TEST(ParallelReadTest, UnequalLineCounts) {
  const std::string es = write_file("count.es", "a\nb\nc\n"), en = write_file("count.en", "a\nb\n");
  EXPECT_EQ(error_message_of([&] { read_parallel(es, en); }), es + " has 3 lines but " + en + " has 2");
  EXPECT_EQ(error_message_of([&] { read_parallel(en, es); }), en + " has 2 lines but " + es + " has 3");
}

TEST(ParallelReadTest, InvalidUtf8NamesFileLineAndByte) {
  const std::string good = write_file("utf8.en", "one\ntwo\nthree\n");
  struct Case {
    std::string line;
    int byte;  // 1-based offset of the ill-formed sequence's first byte
  };
  const std::vector<Case> cases = {
      {"ab\xFF", 3},                  // never valid in UTF-8
      {"\x80xyz", 1},                 // stray continuation byte
      {"\xC0\xAF", 1},                // overlong '/'
      {"x\xE0\x80\xAF", 2},           // overlong 3-byte form
      {"\xED\xA0\x80", 1},            // UTF-16 surrogate U+D800
      {"\xF4\x90\x80\x80", 1},        // above U+10FFFF
      {"\xF5\x80\x80\x80", 1},        // lead byte beyond F4
      {"caf\xC3", 4},                 // truncated at end of line
      {"\xE2\x82x", 1},               // truncated before ASCII
      {"\xC3\xA9\xFF", 3},            // after a valid 2-byte 'é'
      {"\xF0\x9F\x98\x80 \xE2\x82", 6},  // after a valid 4-byte emoji
  };
  for (const Case& c : cases) {
    const std::string bad = write_file("utf8.es", "one\n" + c.line + "\nthree\n");
    EXPECT_EQ(error_message_of([&] { read_parallel(bad, good); }), bad + ":2: invalid UTF-8 at byte " + std::to_string(c.byte))
        << "line bytes: " << testing::PrintToString(c.line);
  }
  // Well-formed edge cases pass: U+0080, U+07FF, U+0800, U+D7FF, U+E000, U+FFFF, U+10000, U+10FFFF.
  const std::string ok = write_file("utf8_ok.es", "\xC2\x80\xDF\xBF\n\xE0\xA0\x80\xED\x9F\xBF\xEE\x80\x80\xEF\xBF\xBF\n"
                                                  "\xF0\x90\x80\x80\xF4\x8F\xBF\xBF\n");
  EXPECT_EQ(read_parallel(ok, good).size(), 3);
  // The offset counts a stripped BOM, so it matches the raw file.
  const std::string bom = write_file("utf8_bom.es", "\xEF\xBB\xBF\xFF\ntwo\nthree\n");
  EXPECT_EQ(error_message_of([&] { read_parallel(bom, good); }), bom + ":1: invalid UTF-8 at byte 4");
  // The target file is checked too.
  const std::string bad_tgt = write_file("utf8_bad.en", "one\ntwo\nth\xFF" "ree\n");
  EXPECT_EQ(error_message_of([&] { read_parallel(ok, bad_tgt); }), bad_tgt + ":3: invalid UTF-8 at byte 3");
}

TEST(ParallelReadTest, EmptyLinesSkipped) {
  const std::string es = write_file("skip.es", "uno\n\ntres\n   \ncinco\nseis\n");
  const std::string en = write_file("skip.en", "one\ntwo\n\nfour\ncinco\n\t\r\n");
  const ParallelText p = read_parallel(es, en, EmptyLinePolicy::Skip);
  EXPECT_EQ(p.src, (std::vector<std::string>{"uno", "cinco"}));
  EXPECT_EQ(p.tgt, (std::vector<std::string>{"one", "cinco"}));
  EXPECT_EQ(p.line_numbers, (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(p.empty_dropped, 4);  // lines 2 (src), 3 (tgt), 4 (whitespace src), 6 (whitespace tgt)
}

TEST(ParallelReadTest, EmptyLineErrorNamesFileAndLine) {
  const std::string es = write_file("err.es", "uno\ndos\n\n"), en = write_file("err.en", "one\n\nthree\n");
  EXPECT_EQ(error_message_of([&] { read_parallel(es, en, EmptyLinePolicy::Error); }), en + ":2: empty line");
  const std::string es2 = write_file("err2.es", "uno\n \n"), en2 = write_file("err2.en", "one\n\n");
  EXPECT_EQ(error_message_of([&] { read_parallel(es2, en2, EmptyLinePolicy::Error); }), es2 + ":2: empty line");
}

TEST(ParallelTsvTest, ReadsColumns) {
  const std::string tsv = write_file("ok.tsv", "\xEF\xBB\xBFhola\thello\r\nbuenos días\tgood morning\r\na b c\tx y z");
  const ParallelText p = read_parallel_tsv(tsv, EmptyLinePolicy::Error);
  EXPECT_EQ(p.src, (std::vector<std::string>{"hola", "buenos días", "a b c"}));
  EXPECT_EQ(p.tgt, (std::vector<std::string>{"hello", "good morning", "x y z"}));
  EXPECT_EQ(p.line_numbers, (std::vector<int64_t>{1, 2, 3}));
}

TEST(ParallelTsvTest, WrongColumnCountNamesFileAndLine) {
  const std::string none = write_file("none.tsv", "a\tb\nno tab here\n");
  EXPECT_EQ(error_message_of([&] { read_parallel_tsv(none); }), none + ":2: expected 2 tab-separated columns, found 1");
  const std::string three = write_file("three.tsv", "a\tb\tc\n");
  EXPECT_EQ(error_message_of([&] { read_parallel_tsv(three); }), three + ":1: expected 2 tab-separated columns, found 3");
}

TEST(ParallelTsvTest, EmptyPolicies) {
  const std::string tsv = write_file("empty.tsv", "a\tb\n\tb\na\t\n\nc\td\n \t \n");
  const ParallelText p = read_parallel_tsv(tsv, EmptyLinePolicy::Skip);
  EXPECT_EQ(p.src, (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(p.tgt, (std::vector<std::string>{"b", "d"}));
  EXPECT_EQ(p.line_numbers, (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(p.empty_dropped, 4);
  EXPECT_EQ(error_message_of([&] { read_parallel_tsv(tsv, EmptyLinePolicy::Error); }), tsv + ":2: empty source column");
  const std::string t2 = write_file("empty2.tsv", "a\tb\nc\t\n");
  EXPECT_EQ(error_message_of([&] { read_parallel_tsv(t2, EmptyLinePolicy::Error); }), t2 + ":2: empty target column");
  const std::string t3 = write_file("empty3.tsv", "a\tb\n\r\n");
  EXPECT_EQ(error_message_of([&] { read_parallel_tsv(t3, EmptyLinePolicy::Error); }), t3 + ":2: empty line");
}

TEST(ParallelTsvTest, InvalidUtf8) {
  const std::string tsv = write_file("utf8.tsv", "a\tb\nok\tbad\xC3(\n");
  EXPECT_EQ(error_message_of([&] { read_parallel_tsv(tsv); }), tsv + ":2: invalid UTF-8 at byte 7");
}

}  // namespace
