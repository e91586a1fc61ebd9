// Tests for qkv/text/utf8.h: strict validation (boundaries, overlongs, surrogates, > U+10FFFF,
// truncation, offsets), an exhaustive comparison against a reference decoder for every string of up
// to 3 bytes, and the checked line reader (CRLF, BOM, missing final newline, file:line errors).
#include "qkv/text/utf8.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "qkv/core/error.h"

namespace qkv::text {
namespace {

namespace fs = std::filesystem;

// Reference: decode each sequence by its lead byte's length, then reject non-continuation bytes,
// truncation, overlong forms, surrogates and code points above U+10FFFF. Returns the offset of the
// first bad sequence, or npos.
size_t reference_bad_offset(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      len = 1, cp = c;
    } else if ((c >> 5) == 0x6) {
      len = 2, cp = c & 0x1F;
    } else if ((c >> 4) == 0xE) {
      len = 3, cp = c & 0x0F;
    } else if ((c >> 3) == 0x1E) {
      len = 4, cp = c & 0x07;
    } else {
      return i;
    }
    if (i + len > s.size()) return i;
    for (size_t k = 1; k < len; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (d & 0x3F);
    }
    static const uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len - 1] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return i;
    i += len;
  }
  return std::string::npos;
}

size_t bad_offset_of(const std::string& s) {
  size_t off = 12345;
  return valid_utf8(s, &off) ? std::string::npos : off;
}

TEST(Utf8Test, AcceptsWellFormedText) {
  for (const std::string& s : {std::string(""), std::string("plain ASCII text, long enough for the fast path"),
                              std::string("¿Qué tal? ¡Muy bien! el niño, el pingüino, años"),
                              std::string("日本語のテキスト"), std::string("emoji 😀 and ‽"),
                              std::string("nul \0 inside", 12)}) {
    size_t off = 777;
    EXPECT_TRUE(valid_utf8(s, &off)) << s;
    EXPECT_EQ(off, 777u) << "bad_offset is only written on failure";
    EXPECT_TRUE(valid_utf8(s));  // bad_offset may be null
  }
}

TEST(Utf8Test, AcceptsRangeBoundaries) {
  for (const char* s : {"\x7F", "\xC2\x80", "\xDF\xBF", "\xE0\xA0\x80", "\xED\x9F\xBF", "\xEE\x80\x80",
                        "\xEF\xBF\xBF", "\xF0\x90\x80\x80", "\xF4\x8F\xBF\xBF", "\xEF\xBF\xBE"}) {
    EXPECT_TRUE(valid_utf8(s)) << ::testing::PrintToString(std::string(s));
  }
}

TEST(Utf8Test, RejectsIllFormedSequencesAtTheRightOffset) {
  struct Case {
    std::string bytes;
    size_t offset;
    const char* why;
  };
  const std::vector<Case> cases = {
      {"\x80", 0, "stray continuation byte"},
      {"abc\xBF", 3, "stray continuation byte after ASCII"},
      {"\xC0\x80", 0, "overlong NUL (C0)"},
      {"ab\xC1\xBF", 2, "overlong 2-byte (C1)"},
      {"\xE0\x80\xAF", 0, "overlong 3-byte"},
      {"\xE0\x9F\xBF", 0, "overlong 3-byte, top"},
      {"\xF0\x80\x80\xAF", 0, "overlong 4-byte"},
      {"\xF0\x8F\xBF\xBF", 0, "overlong 4-byte, top"},
      {"x\xED\xA0\x80", 1, "high surrogate U+D800"},
      {"\xED\xBF\xBF", 0, "low surrogate U+DFFF"},
      {"\xF4\x90\x80\x80", 0, "U+110000"},
      {"\xF5\x80\x80\x80", 0, "lead F5"},
      {"\xFE", 0, "byte FE"},
      {"\xFF", 0, "byte FF"},
      {"abc\xC3", 3, "truncated 2-byte at end"},
      {"\xE2\x82", 0, "truncated 3-byte at end"},
      {"ok \xF0\x9F\x98", 3, "truncated 4-byte at end"},
      {"\xC3" "A", 0, "lead byte followed by ASCII"},
      {"\xE2\x82" "A", 0, "bad third byte"},
      {"\xF0\x9F\x98" "A", 0, "bad fourth byte"},
      {"ñ\xC3\xB1\xE2\x82\xAC\x80", 7, "stray continuation after valid multibyte"},
      {std::string(21, 'a') + "\x80", 21, "after an ASCII run (fast path)"},
      {std::string(16, 'a') + "\xC3", 16, "truncated at a word boundary"},
  };
  for (const Case& c : cases) {
    size_t off = 999;
    EXPECT_FALSE(valid_utf8(c.bytes, &off)) << c.why;
    EXPECT_EQ(off, c.offset) << c.why;
  }
}

TEST(Utf8Test, MatchesReferenceOnAllStringsUpToThreeBytes) {
  std::string s;
  for (int a = 0; a < 256; ++a) {
    s.assign(1, static_cast<char>(a));
    ASSERT_EQ(bad_offset_of(s), reference_bad_offset(s)) << a;
    for (int b = 0; b < 256; ++b) {
      s.assign({static_cast<char>(a), static_cast<char>(b)});
      ASSERT_EQ(bad_offset_of(s), reference_bad_offset(s)) << a << " " << b;
      if (a < 0xC0) continue;  // ASCII/continuation first bytes are covered by the 1- and 2-byte cases
      for (int c = 0; c < 256; ++c) {
        s.assign({static_cast<char>(a), static_cast<char>(b), static_cast<char>(c)});
        ASSERT_EQ(bad_offset_of(s), reference_bad_offset(s)) << a << " " << b << " " << c;
      }
    }
  }
}

TEST(Utf8Test, MatchesReferenceOnRandomStrings) {
  std::mt19937 rng(11);
  // Bytes biased to lead/continuation values so multibyte sequences are frequent.
  const std::vector<unsigned char> pool = {'a', ' ', 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC2, 0xDF,
                                           0xE0, 0xE1, 0xED, 0xEF, 0xF0, 0xF1, 0xF4, 0xF5, 0xFF};
  for (int t = 0; t < 200000; ++t) {
    std::string s(rng() % 12, '\0');
    for (char& ch : s) ch = static_cast<char>(pool[rng() % pool.size()]);
    ASSERT_EQ(bad_offset_of(s), reference_bad_offset(s)) << ::testing::PrintToString(s);
  }
}

TEST(Utf8Test, CheckLineErrorNamesFileLineAndByte) {
  EXPECT_NO_THROW(check_utf8_line("¡Hola!", "corpus.es", 1));
  try {
    check_utf8_line("ni\xC3\x28o", "data/corpus.es", 7);
    FAIL() << "expected qkv::Error";
  } catch (const qkv::Error& e) {
    EXPECT_STREQ(e.what(), "data/corpus.es:7: invalid UTF-8 at byte 2");
  }
}

class Utf8FileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("qkv_utf8_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& contents) {
    const std::string path = (dir_ / name).string();
    std::ofstream out(path, std::ios::binary);
    out << contents;
    return path;
  }
  fs::path dir_;
};

TEST_F(Utf8FileTest, ReadsLinesStrippingCrAndBom) {
  const std::string path = write("a.txt", "\xEF\xBB\xBF" "first\r\n\r\nthird ñ\rx\r\nlast without newline");
  EXPECT_EQ(read_text_lines(path),
            (std::vector<std::string>{"first", "", "third ñ\rx", "last without newline"}));
  EXPECT_EQ(read_text_lines(write("b.txt", "one\ntwo\n")), (std::vector<std::string>{"one", "two"}));
  EXPECT_EQ(read_text_lines(write("c.txt", "")), std::vector<std::string>{});
  EXPECT_EQ(read_text_lines(write("d.txt", "\n")), std::vector<std::string>{""});
}

TEST_F(Utf8FileTest, LineReaderCountsLines) {
  TextLineReader reader(write("a.txt", "a\nb\n"));
  std::string line;
  EXPECT_EQ(reader.line_no(), 0);
  ASSERT_TRUE(reader.next(line));
  EXPECT_EQ(reader.line_no(), 1);
  ASSERT_TRUE(reader.next(line));
  EXPECT_EQ(line, "b");
  EXPECT_EQ(reader.line_no(), 2);
  EXPECT_FALSE(reader.next(line));
}

TEST_F(Utf8FileTest, InvalidUtf8NamesFileAndLine) {
  const std::string path = write("bad.txt", "fine\r\nalso fine ñ\r\nbro\xF0\x9F\x98 ken\r\n");
  try {
    read_text_lines(path);
    FAIL() << "expected qkv::Error";
  } catch (const qkv::Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ":3: invalid UTF-8 at byte 3");
  }
}

TEST_F(Utf8FileTest, MissingFileAndDirectoryAreClearErrors) {
  const std::string missing = (dir_ / "nope.txt").string();
  try {
    read_text_lines(missing);
    FAIL() << "expected qkv::Error";
  } catch (const qkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing + ": cannot open"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
  try {
    read_text_lines(dir_.string());
    FAIL() << "expected qkv::Error";
  } catch (const qkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qkv::text
