#include "qkv/decoding/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "qkv/core/error.h"
#include "qkv/core/hash.h"

namespace qkv::decoding {

void validate_sampling_options(const SamplingOptions& o) {
  QKV_CHECK(std::isfinite(o.temperature) && o.temperature > 0,
            "--temperature: must be a positive number, got " << o.temperature);
  QKV_CHECK(o.top_k >= 0, "--top-k: must be >= 0 (0 = off), got " << o.top_k);
  QKV_CHECK(std::isfinite(o.top_p) && o.top_p > 0 && o.top_p <= 1,
            "--top-p: must be in (0, 1] (1 = off), got " << o.top_p);
}

namespace {
constexpr double kMinusInfinity = -std::numeric_limits<double>::infinity();

// Top-p over the surviving logits z (kMinusInfinity = filtered): sets the dropped ones to kMinusInfinity.
void apply_top_p(std::vector<double>& z, double top_p) {
  std::vector<int32_t> kept;
  double zmax = kMinusInfinity;
  for (size_t i = 0; i < z.size(); ++i)
    if (z[i] != kMinusInfinity) {
      kept.push_back(static_cast<int32_t>(i));
      zmax = std::max(zmax, z[i]);
    }
  // Ascending by logit; among equal logits the higher id first, so the lower id ranks higher.
  std::sort(kept.begin(), kept.end(), [&](int32_t a, int32_t b) { return z[a] != z[b] ? z[a] < z[b] : a > b; });
  std::vector<double> p(kept.size());
  double total = 0;
  for (size_t j = 0; j < kept.size(); ++j) total += p[j] = std::exp(z[kept[j]] - zmax);
  // Filtered tokens have probability 0 and a cumulative sum of 0 <= 1 - top_p: HF drops them too.
  const double threshold = 1.0 - top_p;
  double cumulative = 0;
  for (size_t j = 0; j + 1 < kept.size(); ++j) {  // the last (most probable) token is always kept
    cumulative += p[j] / total;
    if (cumulative <= threshold) z[kept[j]] = kMinusInfinity;
  }
}
}  // namespace

std::vector<double> sampling_distribution(const float* logits, int64_t vocab, const SamplingOptions& o) {
  QKV_CHECK(vocab > 0, "sampling: empty logits row");
  std::vector<double> z(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) {
    QKV_CHECK(!std::isnan(logits[i]) && logits[i] != std::numeric_limits<float>::infinity(),
              "sampling: logit of token " << i << " is " << logits[i]);
    z[i] = static_cast<double>(logits[i]) / o.temperature;  // -inf stays -inf
  }
  if (o.top_k > 0 && o.top_k < vocab) {
    // The k-th largest logit; everything below it goes (ties with it stay).
    std::vector<double> sorted = z;
    std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(), std::greater<double>());
    const double kth = sorted[static_cast<size_t>(o.top_k - 1)];
    for (double& v : z)
      if (v < kth) v = kMinusInfinity;
  }
  if (o.top_p < 1) apply_top_p(z, o.top_p);

  const double zmax = *std::max_element(z.begin(), z.end());
  QKV_CHECK(zmax != kMinusInfinity, "sampling: every logit is -inf");
  std::vector<double> probs(z.size());
  double total = 0;
  for (size_t i = 0; i < z.size(); ++i) total += probs[i] = z[i] == kMinusInfinity ? 0.0 : std::exp(z[i] - zmax);
  for (double& p : probs) p /= total;
  return probs;
}

double sampling_uniform(uint64_t seed, uint64_t line, uint64_t step) {
  // Each stage is a bijection of its input (odd multipliers, xor with a constant, mix64), so
  // different lines (or steps) of one seed never share a chain state.
  uint64_t h = mix64(seed ^ 0x243f6a8885a308d3ULL);
  h = mix64(h + line * 0x9e3779b97f4a7c15ULL + 0x13198a2e03707344ULL);
  h = mix64(h ^ (step * 0xd1b54a32d192ed03ULL + 0xa4093822299f31d0ULL));
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

int32_t draw_token(const std::vector<double>& probs, double u) {
  QKV_CHECK(!probs.empty(), "sampling: empty distribution");
  const double total = std::accumulate(probs.begin(), probs.end(), 0.0);
  QKV_CHECK(total > 0, "sampling: the distribution has no mass");
  const double target = u * total;
  double cumulative = 0;
  int32_t last_positive = -1;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0) continue;
    cumulative += probs[i];
    last_positive = static_cast<int32_t>(i);
    if (target < cumulative) return last_positive;
  }
  return last_positive;  // u * total rounded up to total
}

int32_t sample_token(const float* logits, int64_t vocab, const SamplingOptions& options, uint64_t seed,
                     uint64_t line, uint64_t step) {
  return draw_token(sampling_distribution(logits, vocab, options), sampling_uniform(seed, line, step));
}

int32_t argmax_token(const float* logits, int64_t vocab) {
  QKV_CHECK(vocab > 0, "greedy: empty logits row");
  int32_t best = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    QKV_CHECK(!std::isnan(logits[i]), "greedy: logit of token " << i << " is NaN");
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

}  // namespace qkv::decoding
