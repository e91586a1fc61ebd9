// How long jobs report themselves on stderr (cli/progress.h, cli/train_progress.h): the progress
// line's words, rate and ETA; a terminal's line redrawn in place, a log's lines no more often than
// the interval (the last one always); validation scores with fixed decimals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "qkv/cli/progress.h"
#include "qkv/cli/train_progress.h"

namespace {
using qkv::cli::progress_text;
using qkv::cli::ProgressLine;

// What `write` wrote into a temporary FILE.
template <class Write>
std::string written(Write write) {
  std::FILE* f = std::tmpfile();
  EXPECT_NE(f, nullptr);
  if (!f) return "";
  write(f);
  std::fflush(f);
  std::rewind(f);
  std::string text;
  char buf[256];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  std::fclose(f);
  return text;
}

TEST(ProgressText, SaysDoneTotalRateAndEta) {
  EXPECT_EQ(progress_text("translated", 120, 1000, "sentences", 120 / 35.2),
            "translated 120/1000 sentences, 35.2 sentences/s, ETA 0:25");
  EXPECT_EQ(progress_text("generated", 3, 3, "lines", 1.5), "generated 3/3 lines, 2.0 lines/s, ETA 0:00");
  // Nothing done yet, or no time passed: no rate to go by.
  EXPECT_EQ(progress_text("translated", 0, 10, "sentences", 4.0), "translated 0/10 sentences, 0.0 sentences/s, ETA ?");
  EXPECT_EQ(progress_text("translated", 5, 10, "sentences", 0.0), "translated 5/10 sentences, 0.0 sentences/s, ETA ?");
  EXPECT_EQ(progress_text("translated", 1, 7201, "sentences", 1.0), "translated 1/7201 sentences, 1.0 sentences/s, ETA 2:00:00");
}

TEST(ProgressLine, ALogGetsALineAnIntervalApartAndTheLastOne) {
  const std::string log = written([](std::FILE* f) {
    ProgressLine p("translated", "sentences", false, false, 3600.0, f);
    p.update(1, 3);  // within the interval: nothing
    p.update(2, 3);
    p.update(3, 3);  // the last: always
    p.finish();
  });
  EXPECT_EQ(log.rfind("translated 3/3 sentences, ", 0), 0u) << log;
  EXPECT_EQ(log.find("1/3"), std::string::npos) << log;
  EXPECT_EQ(log.back(), '\n');
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
  const std::string every = written([](std::FILE* f) {
    ProgressLine p("translated", "sentences", false, false, 0.0, f);
    p.update(1, 2);
    p.update(2, 2);
  });
  EXPECT_EQ(std::count(every.begin(), every.end(), '\n'), 2) << every;
}

TEST(ProgressLine, ATerminalLineIsRedrawnInPlaceAndEndedOnce) {
  const std::string tty = written([](std::FILE* f) {
    ProgressLine p("classified", "sentences", false, true, 3600.0, f);
    p.update(1, 2);
    p.update(2, 2);
    p.finish();
    p.finish();  // a second finish adds nothing
  });
  EXPECT_EQ(tty.rfind("\rclassified 1/2 sentences, ", 0), 0u) << tty;
  EXPECT_NE(tty.find("\rclassified 2/2 sentences, "), std::string::npos) << tty;
  EXPECT_EQ(std::count(tty.begin(), tty.end(), '\n'), 1) << tty;
  EXPECT_EQ(tty.back(), '\n');
  const std::string cleared = written([](std::FILE* f) {
    ProgressLine p("translated", "sentences", false, true, 0.0, f);
    p.update(1, 2);
    p.clear();  // output to the same terminal comes next
  });
  EXPECT_NE(cleared.find("\r\33[K"), std::string::npos);
  EXPECT_EQ(cleared.find('\n'), std::string::npos);
}

TEST(ProgressLine, QuietWritesNothing) {
  EXPECT_EQ(written([](std::FILE* f) {
              ProgressLine p("translated", "sentences", true, true, 0.0, f);
              p.update(1, 1);
              p.finish();
            }),
            "");
}

// BLEU used to be printed as to_string(bleu).substr(0, 5): "5.000", "23.45", "100.0".
TEST(ValidationLine, BleuHasTwoDecimals) {
  qkv::train::ValidationReport v;
  v.step = 300;
  v.result.loss = 3.0;
  for (const auto& [bleu, shown] :
       {std::pair{5.0, "dev BLEU 5.00"}, std::pair{23.456, "dev BLEU 23.46"}, std::pair{100.0, "dev BLEU 100.00"}}) {
    v.result.bleu = bleu;
    const std::string line = qkv::cli::validation_line(v);
    EXPECT_NE(line.find(std::string("ppl 20.09  ") + shown), std::string::npos) << line;
    EXPECT_EQ(line.rfind("validation step 300: dev loss 3.0000  ", 0), 0u) << line;
  }
  v.best = true;
  EXPECT_EQ(qkv::cli::validation_line(v), "validation step 300: dev loss 3.0000  ppl 20.09  dev BLEU 100.00  (best, saved)");
  v.result.bleu = -1;
  v.result.accuracy = 0.5;
  v.result.macro_f1 = 0.25;
  EXPECT_EQ(qkv::cli::validation_line(v),
            "validation step 300: dev loss 3.0000  accuracy 0.5000  macro-F1 0.2500  (best, saved)");
  v.result.macro_f1 = -1;
  EXPECT_EQ(qkv::cli::validation_line(v), "validation step 300: dev loss 3.0000  ppl 20.09  accuracy 0.5000  (best, saved)");
}

}  // namespace
