// Learning-rate schedules (step counts from 1):
//   constant:      lr
//   noam:          the paper's: factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
//   inverse_sqrt:  linear warm-up from 0 to lr over `warmup` steps, then lr * sqrt(warmup / step)
//                  (fairseq's inverse_sqrt; the same shape as noam with the peak given directly)
//   linear:        the same warm-up, then a straight line from lr down to 0 just after step
//                  `total_steps`: lr * (total - step + 1) / (total - warmup + 1), so the last step
//                  still moves (Hugging Face's get_linear_schedule_with_warmup, steps from 1)
//   cosine:        the same warm-up, then lr * (1 + cos(pi * (step - warmup) / (total - warmup + 1))) / 2
// A run with a fixed step budget ends linear and cosine at a rate near 0: the annealing that
// checkpoint averaging only imitates. Past total_steps both stay at 0. total_steps 0 means "not
// decided yet": the Trainer sets it at the end of the warm-up to the steps that fit its time budget
// (the warm-up does not depend on it); asking for a rate past the warm-up before that is an error.
#pragma once
#include <cstdint>
#include <string>

namespace qkv::train {

struct Schedule {
  std::string kind = "constant";  // constant | noam | inverse_sqrt | linear | cosine
  double lr = 1e-4;               // constant / inverse_sqrt: the (peak) rate; noam: the factor
  int64_t warmup = 4000;
  int64_t d_model = 512;          // noam only
  int64_t total_steps = 0;        // linear / cosine: the run's steps (the decay ends there); 0: not yet known

  double at(int64_t step) const;  // throws qkv::Error for an unknown kind or step < 1
};

// Throws qkv::Error for an unknown kind (listing the choices), lr <= 0, warmup <= 0 where used, or
// a linear / cosine schedule whose total_steps is set but does not exceed its warm-up.
void check_schedule(const Schedule& s);

}  // namespace qkv::train

namespace qkv::train {
// linear and cosine need the run's step count (--steps, or the steps that fit --time-budget).
inline bool schedule_needs_total_steps(const std::string& kind) { return kind == "linear" || kind == "cosine"; }

// The step at which a decaying schedule should end so that the run fits its time budget: the steps
// done so far plus what the rest of the budget buys at the pace so far (validations included), with
// 1% to spare, and at least one step past the warm-up.
int64_t steps_that_fit(int64_t steps_done, double seconds_used, double budget_seconds, int64_t warmup);
}  // namespace qkv::train
