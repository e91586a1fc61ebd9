#include "qkv/train/schedule.h"

#include <algorithm>
#include <cmath>

#include "qkv/core/error.h"

namespace qkv::train {

void check_schedule(const Schedule& s) {
  QKV_CHECK(s.kind == "constant" || s.kind == "noam" || s.kind == "inverse_sqrt",
            "unknown learning-rate schedule '" << s.kind << "' (expected constant, noam or inverse_sqrt)");
  QKV_CHECK(s.lr > 0, "learning rate must be positive, got " << s.lr);
  QKV_CHECK(s.kind == "constant" || s.warmup > 0, "warm-up steps must be positive, got " << s.warmup);
}

double Schedule::at(int64_t step) const {
  check_schedule(*this);
  QKV_CHECK(step >= 1, "learning-rate schedule: step " << step << " < 1");
  const double t = static_cast<double>(step), w = static_cast<double>(warmup);
  if (kind == "constant") return lr;
  if (kind == "noam") return lr * std::pow(static_cast<double>(d_model), -0.5) * std::min(std::pow(t, -0.5), t * std::pow(w, -1.5));
  return step < warmup ? lr * t / w : lr * std::sqrt(w / t);  // inverse_sqrt
}

}  // namespace qkv::train
