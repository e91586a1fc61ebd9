#include "qkv/kernels/positional.h"

#include <cmath>

namespace qkv::kernels {

void sinusoidal_table(float* pe, int64_t max_len, int64_t D) {
  // PyTorch multiplies a float32 arange by the Python double scalar in float32 arithmetic.
  const float step = static_cast<float>(-(std::log(10000.0) / static_cast<double>(D)));
  for (int64_t pos = 0; pos < max_len; ++pos) {
    for (int64_t i = 0; 2 * i < D; ++i) {
      const float div = std::exp(static_cast<float>(2 * i) * step);
      const float angle = static_cast<float>(pos) * div;
      pe[pos * D + 2 * i] = std::sin(angle);
      if (2 * i + 1 < D) pe[pos * D + 2 * i + 1] = std::cos(angle);
    }
  }
}

void sinusoidal_table_halves(float* pe, int64_t max_len, int64_t D) {
  const int64_t sines = (D + 1) / 2;
  for (int64_t pos = 0; pos < max_len; ++pos) {
    for (int64_t c = 0; c < D; ++c) {
      const int64_t i = c < sines ? c : c - sines;  // the frequency's index
      const double angle = static_cast<double>(pos) / std::pow(10000.0, static_cast<double>(2 * i) / static_cast<double>(D));
      pe[pos * D + c] = static_cast<float>(c < sines ? std::sin(angle) : std::cos(angle));
    }
  }
}

void sinusoidal_table_fairseq(float* pe, int64_t max_len, int64_t D, int64_t first_position) {
  const int64_t H = D / 2;
  // torch: math.log(10000) / (half_dim - 1) in double, then arange(half_dim).float() * -emb in float32.
  const float step = static_cast<float>(-(std::log(10000.0) / static_cast<double>(H - 1)));
  for (int64_t pos = 0; pos < max_len; ++pos) {
    const float p = static_cast<float>(pos + first_position);
    for (int64_t i = 0; i < H; ++i) {
      const float angle = p * std::exp(static_cast<float>(i) * step);
      pe[pos * D + i] = std::sin(angle);
      pe[pos * D + H + i] = std::cos(angle);
    }
    if (D % 2 == 1) pe[pos * D + D - 1] = 0.f;
  }
}

}  // namespace qkv::kernels
