// Learning-rate schedules (step counts from 1):
//   constant:      lr
//   noam:          the paper's: factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
//   inverse_sqrt:  linear warm-up from 0 to lr over `warmup` steps, then lr * sqrt(warmup / step)
//                  (fairseq's inverse_sqrt; the same shape as noam with the peak given directly)
#pragma once
#include <cstdint>
#include <string>

namespace qkv::train {

struct Schedule {
  std::string kind = "constant";  // constant | noam | inverse_sqrt
  double lr = 1e-4;               // constant / inverse_sqrt: the (peak) rate; noam: the factor
  int64_t warmup = 4000;
  int64_t d_model = 512;          // noam only

  double at(int64_t step) const;  // throws qkv::Error for an unknown kind or step < 1
};

// Throws qkv::Error for an unknown kind (listing the choices), lr <= 0, or warmup <= 0 where used.
void check_schedule(const Schedule& s);

}  // namespace qkv::train
