// Dropout's keep draws eight at a time: the same draws as kernels::dropout_keep (random.h), built
// by dropout.cpp for AVX2 and by dropout_avx512.cpp with AVX-512DQ's 64-bit product (dropout_isa.h).
// Everything here has internal linkage, so the two builds never share a symbol.
#pragma once
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace qkv::kernels {
namespace {

inline __m256i splat64(uint64_t v) { return _mm256_set1_epi64x(static_cast<long long>(v)); }

// x * c mod 2^64 in each 64-bit lane. AVX-512DQ has the product (vpmullq); AVX2 builds it from its
// 32-bit halves: lo(x) lo(c) + (hi(x) lo(c) + lo(x) hi(c)) << 32 (hi x hi is shifted out entirely).
inline __m256i mul64(__m256i x, uint64_t c) {
#if defined(__AVX512DQ__) && defined(__AVX512VL__)
  return _mm256_mullo_epi64(x, splat64(c));
#else
  const __m256i c_lo = splat64(c & 0xffffffffu), c_hi = splat64(c >> 32);
  const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(x, 32), c_lo), _mm256_mul_epu32(x, c_hi));
  return _mm256_add_epi64(_mm256_mul_epu32(x, c_lo), _mm256_slli_epi64(cross, 32));
#endif
}

// mix64 of random.h, four lanes at once.
inline __m256i mix64x4(__m256i x) {
  static constexpr uint64_t kM1 = 0xbf58476d1ce4e5b9ULL, kM2 = 0x94d049bb133111ebULL;
  x = _mm256_xor_si256(x, _mm256_srli_epi64(x, 30));
  x = mul64(x, kM1);
  x = _mm256_xor_si256(x, _mm256_srli_epi64(x, 27));
  x = mul64(x, kM2);
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

// out[j] = keep(seed, counter + j) ? in[j] / (1 - p) : 0 for j < n; out may be in.
void dropout_row_lanes(float* out, const float* in, int64_t n, float p, uint64_t seed, uint64_t counter) {
  const float keep_scale = 1.f / (1.f - p);
  const KeepDraws draws(seed, p);
  const __m256 scale8 = _mm256_set1_ps(keep_scale);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 kept = _mm256_mul_ps(_mm256_loadu_ps(in + j), scale8);
    _mm256_storeu_ps(out + j, _mm256_and_ps(kept, draws.keep8(counter + static_cast<uint64_t>(j))));
  }
  if (j == n) return;
  // The last 1-7 elements through the same lanes (no scalar hash: this header is built for two ISAs).
  alignas(32) float tail[8] = {};
  std::memcpy(tail, in + j, static_cast<size_t>(n - j) * sizeof(float));
  const __m256 kept = _mm256_mul_ps(_mm256_load_ps(tail), scale8);
  _mm256_store_ps(tail, _mm256_and_ps(kept, draws.keep8(counter + static_cast<uint64_t>(j))));
  std::memcpy(out + j, tail, static_cast<size_t>(n - j) * sizeof(float));
}

}  // namespace
}  // namespace qkv::kernels
