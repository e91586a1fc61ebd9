#include "qkv/train/schedule.h"

#include <algorithm>
#include <cmath>

#include "qkv/core/error.h"

namespace qkv::train {

void check_schedule(const Schedule& s) {
  QKV_CHECK(s.kind == "constant" || s.kind == "noam" || s.kind == "inverse_sqrt" || schedule_needs_total_steps(s.kind),
            "unknown learning-rate schedule '" << s.kind << "' (expected constant, noam, inverse_sqrt, linear or cosine)");
  QKV_CHECK(s.lr > 0, "learning rate must be positive, got " << s.lr);
  QKV_CHECK(s.kind == "constant" || s.warmup > 0, "warm-up steps must be positive, got " << s.warmup);
  QKV_CHECK(!schedule_needs_total_steps(s.kind) || s.total_steps == 0 || s.total_steps > s.warmup,
            "the " << s.kind << " schedule decays to 0 at the run's last step: give --steps greater than --warmup (steps "
                   << s.total_steps << ", warm-up " << s.warmup << ")");
}

double Schedule::at(int64_t step) const {
  check_schedule(*this);
  QKV_CHECK(step >= 1, "learning-rate schedule: step " << step << " < 1");
  const double t = static_cast<double>(step), w = static_cast<double>(warmup);
  if (kind == "constant") return lr;
  if (kind == "noam") return lr * std::pow(static_cast<double>(d_model), -0.5) * std::min(std::pow(t, -0.5), t * std::pow(w, -1.5));
  if (step <= warmup) return lr * t / w;  // the warm-up all the others share
  if (kind == "inverse_sqrt") return lr * std::sqrt(w / t);
  QKV_CHECK(total_steps > 0, "the " << kind << " schedule's last step is not set (step " << step
                                     << " is past the warm-up): give --steps or --time-budget");
  // linear / cosine: progress through the decay, 1 just after the last step
  const double decay_steps = static_cast<double>(total_steps - warmup + 1);
  const double progress = std::min(1.0, (t - w) / decay_steps);
  if (kind == "linear") return lr * (1.0 - progress);
  return lr * 0.5 * (1.0 + std::cos(M_PI * progress));  // cosine
}

int64_t steps_that_fit(int64_t steps_done, double seconds_used, double budget_seconds, int64_t warmup) {
  const double pace = seconds_used / static_cast<double>(std::max<int64_t>(1, steps_done));
  const double more = pace > 0 ? 0.99 * std::max(0.0, budget_seconds - seconds_used) / pace : 0.0;
  return std::max(warmup + 1, steps_done + static_cast<int64_t>(std::min(more, 1e15)));
}

}  // namespace qkv::train
