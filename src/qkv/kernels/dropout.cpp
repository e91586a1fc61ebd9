#include "qkv/kernels/dropout.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "qkv/kernels/elementwise.h"
#include "qkv/kernels/random.h"

namespace qkv::kernels {
namespace {

// x * c mod 2^64 in each 64-bit lane, c given as its 32-bit halves: lo(x) lo(c) + (hi(x) lo(c) +
// lo(x) hi(c)) << 32 (the hi x hi term is shifted out entirely).
inline __m256i mul64(__m256i x, __m256i c_lo, __m256i c_hi) {
  const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(x, 32), c_lo), _mm256_mul_epu32(x, c_hi));
  return _mm256_add_epi64(_mm256_mul_epu32(x, c_lo), _mm256_slli_epi64(cross, 32));
}

inline __m256i splat64(uint64_t v) { return _mm256_set1_epi64x(static_cast<long long>(v)); }

// mix64 of random.h, four lanes at once.
inline __m256i mix64x4(__m256i x) {
  static constexpr uint64_t kM1 = 0xbf58476d1ce4e5b9ULL, kM2 = 0x94d049bb133111ebULL;
  x = _mm256_xor_si256(x, _mm256_srli_epi64(x, 30));
  x = mul64(x, splat64(kM1 & 0xffffffffu), splat64(kM1 >> 32));
  x = _mm256_xor_si256(x, _mm256_srli_epi64(x, 27));
  x = mul64(x, splat64(kM2 & 0xffffffffu), splat64(kM2 >> 32));
  return _mm256_xor_si256(x, _mm256_srli_epi64(x, 31));
}

// Keep masks (all ones or zero per float lane) of eight consecutive counters.
class KeepDraws {
 public:
  KeepDraws(uint64_t seed, float p)
      : seed_term_(splat64(seed * 0x9e3779b97f4a7c15ULL)),
        // uniform01 = u * 2^-24 with u < 2^24 an integer, so u * 2^-24 >= p exactly when u >= ceil(p * 2^24)
        // (p * 2^24 is exact in double).
        below_(splat64(static_cast<uint64_t>(std::ceil(static_cast<double>(p) * 16777216.0)) - 1)) {}

  __m256 keep8(uint64_t counter) const {
    const __m256i c = _mm256_add_epi64(splat64(counter + 0x632be59bd9b4e019ULL), _mm256_setr_epi64x(0, 1, 2, 3));
    const __m256i k0 = keep4(c), k1 = keep4(_mm256_add_epi64(c, splat64(4)));
    // Each 64-bit lane's mask fills both its halves: take the even halves of k0, then of k1.
    const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    return _mm256_castsi256_ps(
        _mm256_blend_epi32(_mm256_permutevar8x32_epi32(k0, even), _mm256_permutevar8x32_epi32(k1, even), 0xF0));
  }

 private:
  __m256i keep4(__m256i mixed_counter) const {
    const __m256i h = mix64x4(_mm256_add_epi64(seed_term_, mix64x4(mixed_counter)));
    return _mm256_cmpgt_epi64(_mm256_srli_epi64(h, 40), below_);  // both sides < 2^25: signed is fine
  }
  __m256i seed_term_, below_;
};

}  // namespace

void dropout_row(float* out, const float* in, int64_t n, float p, uint64_t seed, uint64_t counter) {
  const float keep_scale = 1.f / (1.f - p);
  const KeepDraws draws(seed, p);
  const __m256 scale8 = _mm256_set1_ps(keep_scale);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 kept = _mm256_mul_ps(_mm256_loadu_ps(in + j), scale8);
    _mm256_storeu_ps(out + j, _mm256_and_ps(kept, draws.keep8(counter + static_cast<uint64_t>(j))));
  }
  for (; j < n; ++j) out[j] = dropout_keep(seed, counter + static_cast<uint64_t>(j), p) ? in[j] * keep_scale : 0.f;
}

namespace {
// Elements per OpenMP chunk of dropout_forward / _backward, and the size below which one thread
// does the whole loop (fork and join cost more).
constexpr int64_t kChunk = 4096;
constexpr int64_t kParallelMin = 1 << 12;
}  // namespace

void dropout_forward(float* y, const float* x, int64_t n, float p, uint64_t seed, uint64_t offset) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t i = c * kChunk;
    dropout_row(y + i, x + i, std::min(kChunk, n - i), p, seed, offset + static_cast<uint64_t>(i));
  }
}

void dropout_backward(float* dx, const float* dy, int64_t n, float p, uint64_t seed, uint64_t offset,
                      bool accumulate) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t i = c * kChunk, len = std::min(kChunk, n - i);
    if (!accumulate) {
      dropout_row(dx + i, dy + i, len, p, seed, offset + static_cast<uint64_t>(i));
      continue;
    }
    alignas(32) float g[kChunk];
    dropout_row(g, dy + i, len, p, seed, offset + static_cast<uint64_t>(i));
    for (int64_t j = 0; j < len; ++j) dx[i + j] += g[j];
  }
}

}  // namespace qkv::kernels
