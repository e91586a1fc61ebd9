// Durations: --time-budget parsing (compound forms like 1h55m) and the progress-line format.
#include "qkv/core/duration.h"

#include <gtest/gtest.h>

#include "qkv/core/error.h"

namespace qkv {
namespace {

TEST(Duration, ParsesSingleUnitsAndPlainSeconds) {
  EXPECT_DOUBLE_EQ(parse_duration("2h"), 7200);
  EXPECT_DOUBLE_EQ(parse_duration("90m"), 5400);
  EXPECT_DOUBLE_EQ(parse_duration("45s"), 45);
  EXPECT_DOUBLE_EQ(parse_duration("45"), 45);
  EXPECT_DOUBLE_EQ(parse_duration("1.5h"), 5400);
  EXPECT_DOUBLE_EQ(parse_duration("0"), 0);
}

TEST(Duration, ParsesCompoundForms) {
  EXPECT_DOUBLE_EQ(parse_duration("1h55m"), 6900);
  EXPECT_DOUBLE_EQ(parse_duration("1h30m15s"), 5415);
  EXPECT_DOUBLE_EQ(parse_duration("2m30s"), 150);
  EXPECT_DOUBLE_EQ(parse_duration("1h5s"), 3605);
}

TEST(Duration, RefusesMalformedTextNamingIt) {
  for (const char* bad : {"", "h", "2x", "1m2h", "1h1h", "1h30", "-5m", "inf", "nan", "1..5h", "2 h", "0x10"}) {
    try {
      parse_duration(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
    }
  }
}

TEST(Duration, FormatsForProgressLines) {
  EXPECT_EQ(format_duration(0), "0:00");
  EXPECT_EQ(format_duration(123), "2:03");
  EXPECT_EQ(format_duration(3723), "1:02:03");
  EXPECT_EQ(format_duration(-1), "?");
}

}  // namespace
}  // namespace qkv
