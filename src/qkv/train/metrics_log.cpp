#include "qkv/train/metrics_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "qkv/core/error.h"

namespace qkv::train {

namespace {
using nlohmann::ordered_json;  // fields in the order the header documents

// NaN and infinity have no JSON spelling; a report never holds them (a non-finite loss stops the
// run before it is reported), but a rate over zero seconds could.
ordered_json finite_or_null(double v) { return std::isfinite(v) ? ordered_json(v) : ordered_json(nullptr); }

// The lines of `path` whose step is at most `last_step` (whole JSON objects only).
std::string lines_up_to(const std::string& path, int64_t last_step) {
  std::ifstream in(path);
  std::string line, kept;
  while (std::getline(in, line)) {
    const ordered_json j = ordered_json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) continue;
    if (j["step"].get<int64_t>() <= last_step) kept += line + "\n";
  }
  return kept;
}
}  // namespace

MetricsLog::MetricsLog(std::string path, int64_t resume_step) : path_(std::move(path)) {
  if (resume_step < 0) {
    fresh_ = true;  // emptied at the first append, so a run that fails to start leaves an old log alone
    return;
  }
  const std::string kept = std::filesystem::exists(path_) ? lines_up_to(path_, resume_step) : "";
  const std::string tmp = path_ + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    QKV_CHECK(out, tmp << ": cannot write the metrics log: " << std::strerror(errno));
    out << kept;
    QKV_CHECK(out.flush(), tmp << ": cannot write the metrics log: " << std::strerror(errno));
  }
  std::filesystem::rename(tmp, path_);
}

void MetricsLog::append(const std::string& line) {
  const int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | (fresh_ ? O_TRUNC : 0), 0644);
  fresh_ = false;
  QKV_CHECK(fd >= 0, path_ << ": cannot append to the metrics log: " << std::strerror(errno));
  const ssize_t written = ::write(fd, line.data(), line.size());
  const int saved_errno = errno;
  ::close(fd);
  QKV_CHECK(written == static_cast<ssize_t>(line.size()),
            path_ << ": cannot append to the metrics log: " << std::strerror(saved_errno));
}

void MetricsLog::step(const StepReport& r) {
  const ordered_json j = {{"event", "step"},
                  {"step", r.step},
                  {"epoch", r.epoch},
                  {"time", finite_or_null(r.elapsed)},
                  {"loss", finite_or_null(r.loss)},
                  {"lr", finite_or_null(r.lr)},
                  {"grad_norm", finite_or_null(r.grad_norm)},
                  {"tokens_per_second", finite_or_null(r.tokens_per_second)},
                  {"tokens", r.tokens}};
  append(j.dump() + "\n");
}

void MetricsLog::validation(const ValidationReport& v) {
  ordered_json j = {{"event", "validation"},
            {"step", v.step},
            {"time", finite_or_null(v.elapsed)},
            {"loss", finite_or_null(v.result.loss)},
            {"perplexity", finite_or_null(v.result.perplexity())},
            {"best", v.best}};
  if (v.result.bleu >= 0) j["bleu"] = v.result.bleu;
  if (v.result.accuracy >= 0) j["accuracy"] = v.result.accuracy;
  if (v.result.macro_f1 >= 0) j["macro_f1"] = v.result.macro_f1;
  if (!v.result.confusion.empty()) {
    j["labels"] = v.result.labels;
    j["confusion"] = v.result.confusion;
  }
  append(j.dump() + "\n");
}

TrainerEvents MetricsLog::wrap(const TrainerEvents& events) {
  TrainerEvents e = events;
  e.on_log = [this, inner = events.on_log](const StepReport& r) {
    step(r);
    if (inner) inner(r);
  };
  e.on_validation = [this, inner = events.on_validation](const ValidationReport& v) {
    validation(v);
    if (inner) inner(v);
  };
  return e;
}

}  // namespace qkv::train
