// metrics.jsonl: every progress report and validation of a run, one JSON object a line, appended
// as training goes, for curves (`qkv plot`, qkv.plot.curves) and for scripts:
//   {"event":"step","step":120,"epoch":1,"time":35.2,"loss":3.21,"lr":0.0005,"grad_norm":1.2,
//    "tokens_per_second":5000.0,"tokens":12345}
//   {"event":"validation","step":1000,"time":300.1,"loss":2.9,"perplexity":18.2,"best":true}
//   (validation lines add "bleu", "accuracy" and "macro_f1" when the run computes them; a
//   classifier's add "labels":["neg","pos"] and "confusion":[[5,1],[2,4]], the dev counts by gold
//   label (rows) and predicted label (columns), for its confusion matrix and per-label F1)
// `time` is training seconds, earlier runs of a resumed run included. A resumed run first drops
// the lines after the step it resumes from (a killed run may have logged steps it never saved), so
// the file reads as one uninterrupted run. Each line is written with one write() and flushed, so
// a killed run leaves whole lines (a torn last line is dropped when the run resumes).
#pragma once
#include <cstdint>
#include <string>

#include "qkv/train/trainer.h"

namespace qkv::train {

class MetricsLog {
 public:
  // A new run (resume_step < 0) starts the file afresh at its first line; a resumed one keeps the
  // lines up to resume_step.
  MetricsLog(std::string path, int64_t resume_step);
  const std::string& path() const { return path_; }
  void step(const StepReport& r);
  void validation(const ValidationReport& v);
  // `events` with this log's appends before each of its on_log / on_validation.
  TrainerEvents wrap(const TrainerEvents& events);

 private:
  void append(const std::string& line);
  std::string path_;
  bool fresh_ = false;
};

}  // namespace qkv::train
