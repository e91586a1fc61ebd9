// How `qkv train` shows a run: the progress line of each log step, validations, saves, and the
// closing line, all on stderr. On a terminal the progress line redraws in place.
#pragma once
#include <cstdio>
#include <cstring>
#include <string>

#include "qkv/core/duration.h"
#include "qkv/train/trainer.h"

namespace qkv::cli {

// "validation step 300: dev loss 3.1234  ppl 22.74  dev BLEU 18.50  (best, saved)": what a
// validation found, scores with fixed decimals so that the lines of a run line up.
inline std::string validation_line(const train::ValidationReport& v) {
  char line[1024];  // room for a loss and a perplexity near DBL_MAX, each up to 309 digits
  const char* best = v.best ? "  (best, saved)" : "";
  const auto step = static_cast<long long>(v.step);
  if (v.result.macro_f1 >= 0) {  // classification: a perplexity would mean nothing
    std::snprintf(line, sizeof line, "validation step %lld: dev loss %.4f  accuracy %.4f  macro-F1 %.4f%s", step,
                  v.result.loss, v.result.accuracy, v.result.macro_f1, best);
    return line;
  }
  char more[96] = "";
  if (v.result.bleu >= 0) std::snprintf(more, sizeof more, "  dev BLEU %.2f", v.result.bleu);
  if (v.result.accuracy >= 0)
    std::snprintf(more + std::strlen(more), sizeof more - std::strlen(more), "  accuracy %.4f", v.result.accuracy);
  std::snprintf(line, sizeof line, "validation step %lld: dev loss %.4f  ppl %.2f%s%s", step, v.result.loss,
                v.result.perplexity(), more, best);
  return line;
}

class TrainProgress {
 public:
  explicit TrainProgress(bool tty) : tty_(tty) {}

  train::TrainerEvents events() {
    train::TrainerEvents e;
    e.on_log = [this](const train::StepReport& r) { log(r); };
    e.on_validation = [this](const train::ValidationReport& v) { validation(v); };
    e.on_info = [this](const std::string& m) { info(m); };
    return e;
  }

  void info(const std::string& message) {
    end_line();
    std::fprintf(stderr, "qkv train: %s\n", message.c_str());
  }

  void finished(const train::TrainResult& r, const std::string& saved_to) {
    end_line();
    std::fprintf(stderr, "qkv train: %s at step %lld after %s%s%s\n", r.stop_reason.c_str(),
                 static_cast<long long>(r.step), format_duration(r.elapsed).c_str(),
                 saved_to.empty() ? "" : ("; saved " + saved_to).c_str(),
                 r.interrupted && !saved_to.empty() ? " (continue with --resume)" : "");
  }

 private:
  void log(const train::StepReport& r) {
    const std::string step = r.max_steps > 0 ? std::to_string(r.step) + "/" + std::to_string(r.max_steps)
                                             : std::to_string(r.step);
    std::fprintf(stderr, "%sstep %s  epoch %lld  loss %.4f  lr %.2e  |g| %.2f  %.0f tok/s  elapsed %s  eta %s%s",
                 tty_ ? "\r" : "", step.c_str(), static_cast<long long>(r.epoch), r.loss, r.lr, r.grad_norm,
                 r.tokens_per_second, format_duration(r.elapsed).c_str(), format_duration(r.eta).c_str(),
                 tty_ ? "   " : "\n");
    std::fflush(stderr);
    open_line_ = tty_;
  }

  void validation(const train::ValidationReport& v) {
    end_line();
    std::fprintf(stderr, "%s\n", validation_line(v).c_str());
  }

  void end_line() {
    if (open_line_) std::fprintf(stderr, "\n");
    open_line_ = false;
  }

  bool tty_;
  bool open_line_ = false;
};

}  // namespace qkv::cli
