// Vectorised float math for AVX2 + FMA (the build targets x86-64-v3): exp, erf and tanh on 8 lanes,
// and the pieces the GELU kernels build on. Measured against double precision over a dense sweep
// (tests/kernels/vec_math_test.cpp): exp 1.2 ulp, erf 1.6 ulp, tanh 1.5 ulp at most.
//
// Coefficients are our own minimax fits for relative error (Lawson's iteratively reweighted least
// squares, in double precision); the fit error is given next to each. The polynomials run in float
// with their coefficients rounded to float, the erfcx rational in double. The kernels process arrays
// 8 at a time and pad the tail to 8 lanes, so a value's result never depends on its position or n.
//
// A translation unit compiled with AVX-512F (kernels/gelu_avx512.cpp) includes this header too: the
// functions then live in the inline namespace `avx512` instead of `avx2`, so the two builds of these
// inline functions never share a symbol (the linker would otherwise keep either copy for both).
#pragma once
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#if defined(__AVX512F__)
#define QKV_SIMD_ISA avx512
#else
#define QKV_SIMD_ISA avx2
#endif

namespace qkv::kernels::simd {
inline namespace QKV_SIMD_ISA {

inline __m256 splat(float v) { return _mm256_set1_ps(v); }
inline __m256 abs(__m256 x) { return _mm256_andnot_ps(splat(-0.f), x); }
// Sign bit of x (as a float with only that bit), to put back on a result computed for |x|.
inline __m256 sign_bit(__m256 x) { return _mm256_and_ps(splat(-0.f), x); }
inline __m256 select(__m256 mask, __m256 if_true, __m256 if_false) { return _mm256_blendv_ps(if_false, if_true, mask); }
// min/max return their second operand when either is NaN: with x second, a NaN x passes through.
inline __m256 min_keep_nan(float bound, __m256 x) { return _mm256_min_ps(splat(bound), x); }
inline __m256 max_keep_nan(float bound, __m256 x) { return _mm256_max_ps(splat(bound), x); }

// The largest of the 8 lanes, lane 0 first and then each lane that compares greater (a NaN lane
// after lane 0 is passed over, as in a scalar loop over the row).
inline float max_lanes(__m256 m) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float mx = lanes[0];
  for (int i = 1; i < 8; ++i) mx = lanes[i] > mx ? lanes[i] : mx;
  return mx;
}

// The sum of the 8 lanes as a pairwise tree: ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)).
inline float sum_lanes(__m256 s) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

// sum_j a[j] * b[j]: lane l of 8 FMA lanes takes j = l mod 8, the lanes summed as sum_lanes does,
// then the last n mod 8 terms by FMA. Every term has a fixed place whatever the compiler, so a sum
// over a prefix rounded up to 8 has the bits of the whole row's when b is zero past the prefix
// (attention's softmax backward over a causal row's keys: kernels/attention_causal.h).
inline float dot(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j), acc);
  float sum = sum_lanes(acc);
  for (; j < n; ++j) sum = std::fma(a[j], b[j], sum);
  return sum;
}

// exp(x) = 2^n * exp(r), n = round(x / ln 2), r = x - n ln 2 in [-ln2/2, ln2/2]. With FMA, n * ln2_hi
// is exact and x - n * ln2_hi (23 significant bits at most) too; ln2_lo adds the rest of ln 2.
// The result is kept apart as mantissa * scale1 * scale2 with n = n1 + n2 so that each power of two
// is a normal float down to n = -2 * 126: a result in the subnormal range is rounded to the subnormal
// grid once, by the last multiplication, and a caller can fold a factor into the mantissa before it
// (ExpParts::times), so that factor * exp(x) is not rounded twice to that coarse grid.
struct ExpParts {
  __m256 mantissa, scale1, scale2;
  // factor * exp(x), with the factor applied before the scaling.
  __m256 times(__m256 factor) const {
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(factor, mantissa), scale1), scale2);
  }
  __m256 value() const { return _mm256_mul_ps(_mm256_mul_ps(mantissa, scale1), scale2); }
};

// x is clamped to [-120, 89]: exp(-120) * any factor our callers use (< 2^12) is below half the
// smallest subnormal, and exp(89) overflows to inf as it should. NaN passes through (min/max order).
inline ExpParts exp_parts(__m256 x) {
  x = max_keep_nan(-120.f, min_keep_nan(89.f, x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, splat(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fmadd_ps(n, splat(-0.693147182464599609375f), x);  // ln2_hi = float(ln 2)
  r = _mm256_fmadd_ps(n, splat(1.904654323148236e-09f), r);            // -(ln 2 - ln2_hi)
  // exp(r) = 1 + r + r^2 q(r), q of degree 4: relative error 3.1e-9 on [-ln2/2, ln2/2].
  __m256 q = splat(1.381461276e-03f);
  q = _mm256_fmadd_ps(q, r, splat(8.368710056e-03f));
  q = _mm256_fmadd_ps(q, r, splat(4.166838899e-02f));
  q = _mm256_fmadd_ps(q, r, splat(1.666652113e-01f));
  q = _mm256_fmadd_ps(q, r, splat(4.999999404e-01f));
  const __m256 p = _mm256_fmadd_ps(_mm256_mul_ps(r, r), q, _mm256_add_ps(splat(1.f), r));
  // n in [-173, 129] (NaN gives INT_MIN: any garbage scale, times a NaN mantissa, stays NaN).
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
  const auto pow2 = [](__m256i k) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
  };
  return {p, pow2(n1), pow2(n2)};
}

inline __m256 exp(__m256 x) { return exp_parts(x).value(); }

// exp(x) with the same bits, for inputs that are often far below zero (a softmax over masked
// scores: -1e9 minus the row's maximum). exp(x) rounds to +0 for every x < -104 (exp(-103.97) is
// half the smallest subnormal), and those lanes take exp(0) and are then cleared: a multiplication
// whose result underflows takes a slow path on the CPUs measured, and every masked key paid it.
inline constexpr float kExpIsZeroBelow = -104.f;  // exp(x) rounds to +0 for every float x below it
inline __m256 exp_or_zero(__m256 x) {
  const __m256 below = _mm256_cmp_ps(x, splat(kExpIsZeroBelow), _CMP_LT_OQ);
  return _mm256_andnot_ps(below, exp(_mm256_andnot_ps(below, x)));
}

// x^2 = hi + lo exactly (FMA). exp(-x^2) computed from the rounded hi alone would be off by
// x^2 * 2^-24 relative: 12 ulp at x = 4.
struct Square {
  __m256 hi, lo;
};
inline Square square(__m256 x) {
  const __m256 hi = _mm256_mul_ps(x, x);
  return {hi, _mm256_fmsub_ps(x, x, hi)};
}

// Double-precision steps are written once, as generic lambdas and templates over these overloads: 4
// lanes (__m256d) always, 8 lanes (__m512d) in an AVX-512 build. Each lane gets the same IEEE
// operations either way, so both give the same bits.
inline __m256d dsplat(__m256d, double v) { return _mm256_set1_pd(v); }
inline __m256d dadd(__m256d a, __m256d b) { return _mm256_add_pd(a, b); }
inline __m256d dsub(__m256d a, __m256d b) { return _mm256_sub_pd(a, b); }
inline __m256d dmul(__m256d a, __m256d b) { return _mm256_mul_pd(a, b); }
inline __m256d ddiv(__m256d a, __m256d b) { return _mm256_div_pd(a, b); }
inline __m256d dfmadd(__m256d a, __m256d b, __m256d c) { return _mm256_fmadd_pd(a, b, c); }
inline __m256d dfnmadd(__m256d a, __m256d b, __m256d c) { return _mm256_fnmadd_pd(a, b, c); }
// The same steps on 8 floats, for a kernel that wants them in float (GELU's form for quantized values).
inline __m256 dsplat(__m256, double v) { return _mm256_set1_ps(static_cast<float>(v)); }
inline __m256 dfmadd(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
inline __m256 ddiv(__m256 a, __m256 b) { return _mm256_div_ps(a, b); }
#if defined(__AVX512F__)
inline __m512d dsplat(__m512d, double v) { return _mm512_set1_pd(v); }
inline __m512d dadd(__m512d a, __m512d b) { return _mm512_add_pd(a, b); }
inline __m512d dsub(__m512d a, __m512d b) { return _mm512_sub_pd(a, b); }
inline __m512d dmul(__m512d a, __m512d b) { return _mm512_mul_pd(a, b); }
inline __m512d ddiv(__m512d a, __m512d b) { return _mm512_div_pd(a, b); }
inline __m512d dfmadd(__m512d a, __m512d b, __m512d c) { return _mm512_fmadd_pd(a, b, c); }
inline __m512d dfnmadd(__m512d a, __m512d b, __m512d c) { return _mm512_fnmadd_pd(a, b, c); }
#endif

// f applied to the 8 lanes of x in double precision, rounded back to float once: one call on 8 lanes
// with AVX-512 (half the instructions: the GELU kernels ran 1.4x faster on Zen 4), else two of 4.
template <class F>
__m256 in_double(__m256 x, F f) {
#if defined(__AVX512F__)
  return _mm512_cvtpd_ps(f(_mm512_cvtps_pd(x)));
#else
  const __m128 lo = _mm256_cvtpd_ps(f(_mm256_cvtps_pd(_mm256_castps256_ps128(x))));
  const __m128 hi = _mm256_cvtpd_ps(f(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))));
  return _mm256_set_m128(hi, lo);
#endif
}

// u = f(x) in double for the 8 lanes of x, returned as float hi + lo: hi = u rounded, lo = (u - hi)
// rounded (u to about 48 bits).
struct SplitFloat {
  __m256 hi, lo;
};
template <class F>
SplitFloat split_in_double(__m256 x, F f) {
#if defined(__AVX512F__)
  const __m512d u = f(_mm512_cvtps_pd(x));
  const __m256 hi = _mm512_cvtpd_ps(u);
  return {hi, _mm512_cvtpd_ps(_mm512_sub_pd(u, _mm512_cvtps_pd(hi)))};
#else
  const __m256d u_lo4 = f(_mm256_cvtps_pd(_mm256_castps256_ps128(x)));
  const __m256d u_hi4 = f(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));
  const __m128 hi_lo4 = _mm256_cvtpd_ps(u_lo4), hi_hi4 = _mm256_cvtpd_ps(u_hi4);
  return {_mm256_set_m128(hi_hi4, hi_lo4),
          _mm256_set_m128(_mm256_cvtpd_ps(_mm256_sub_pd(u_hi4, _mm256_cvtps_pd(hi_hi4))),
                          _mm256_cvtpd_ps(_mm256_sub_pd(u_lo4, _mm256_cvtps_pd(hi_lo4))))};
#endif
}

// erfcx(z) = erfc(z) exp(z^2) for z in [0.45, 10.5] as P(z) / Q(z), degrees 4 and 5: relative error
// 1.0e-9. Evaluated in double: in float (D = __m256, GELU's form for quantized values), the roundings
// of the two Horner sums and the quotient add up to 3 ulp. All coefficients are positive and z > 0,
// so the sums never cancel.
template <class D>
D erfcx_mid(D z) {
  const auto c = [z](double v) { return dsplat(z, v); };
  D p = c(0.043020082022588224);
  p = dfmadd(p, z, c(0.27109510360466377));
  p = dfmadd(p, z, c(0.8136913796817804));
  p = dfmadd(p, z, c(1.3104481425526013));
  p = dfmadd(p, z, c(1.0000075802130222));
  D q = c(0.07625082557696172);
  q = dfmadd(q, z, c(0.48051562574309625));
  q = dfmadd(q, z, c(1.480133280965789));
  q = dfmadd(q, z, c(2.5653422045475502));
  q = dfmadd(q, z, c(2.438904830702456));
  q = dfmadd(q, z, c(1.0));
  return ddiv(p, q);
}

// erf(z) - z for |z| < 0.5 as z P(z^2), P of degree 4: relative error 1.4e-9 (of erf). erf(z) is then
// fma(z, P, z), rounded once: P is small (<= 0.13), so its own rounding hardly shows.
inline __m256 erf_small(__m256 z) {
  const __m256 z2 = _mm256_mul_ps(z, z);
  __m256 p = splat(4.717990290e-03f);
  p = _mm256_fmadd_ps(p, z2, splat(-2.675718442e-02f));
  p = _mm256_fmadd_ps(p, z2, splat(1.128282249e-01f));
  p = _mm256_fmadd_ps(p, z2, splat(-3.761260808e-01f));
  p = _mm256_fmadd_ps(p, z2, splat(1.283791661e-01f));
  return _mm256_fmadd_ps(z, p, z);
}

// erf(z) = z P(z^2) for |z| < 0.5; beyond, erf(|z|) = 1 - erfcx(|z|) exp(-z^2), where the
// subtraction loses nothing (erfc <= 0.48 there) and rounds to exactly 1 once erfc < 2^-25
// (|z| > 3.92). |z| is clamped to 10.5 (erfc(10.5) ~ 1e-49), which keeps inf out of z^2 and of the
// rational. erf(-0) = -0 (from z P), NaN propagates.
inline __m256 erf(__m256 z) {
  const __m256 a = min_keep_nan(10.5f, abs(z));
  const Square s = square(a);
  // exp(-hi - lo) = exp(-hi) (1 - lo) to first order; lo <= 2^-24 hi, its square is far below an ulp.
  const __m256 r = in_double(a, [](auto v) { return erfcx_mid(v); });
  const __m256 erfc = exp_parts(_mm256_sub_ps(_mm256_setzero_ps(), s.hi)).times(_mm256_fnmadd_ps(r, s.lo, r));
  const __m256 big = _mm256_or_ps(_mm256_sub_ps(splat(1.f), erfc), sign_bit(z));
  return select(_mm256_cmp_ps(a, splat(0.5f), _CMP_LT_OQ), erf_small(z), big);
}

// tanh(u) for 0 <= u < 0.55 as u + u^3 P(u^2), P of degree 4: relative error 1.0e-9. Written as
// fma(u^3, P, u): tiny u gives u exactly (no 1 - e cancellation).
inline __m256 tanh_small(__m256 u) {
  const __m256 u2 = _mm256_mul_ps(u, u);
  __m256 p = splat(-6.274238229e-03f);
  p = _mm256_fmadd_ps(p, u2, splat(2.107167803e-02f));
  p = _mm256_fmadd_ps(p, u2, splat(-5.385230854e-02f));
  p = _mm256_fmadd_ps(p, u2, splat(1.333258599e-01f));
  p = _mm256_fmadd_ps(p, u2, splat(-3.333331645e-01f));
  return _mm256_fmadd_ps(_mm256_mul_ps(u2, u), p, u);
}

// tanh(|u|) = (1 - e) / (1 + e), e = exp(-2|u|) in (0, 1]: never inf / inf. For |u| >= 0.55,
// e <= 0.33 so 1 - e does not cancel. |u| is clamped to 10, where tanh already rounds to 1.
inline __m256 tanh(__m256 u) {
  const __m256 a = min_keep_nan(10.f, abs(u));
  const __m256 e = exp(_mm256_mul_ps(a, splat(-2.f)));
  const __m256 big = _mm256_div_ps(_mm256_sub_ps(splat(1.f), e), _mm256_add_ps(splat(1.f), e));
  // On |u|, the sign put back last: tanh(-0) = -0.
  return _mm256_or_ps(select(_mm256_cmp_ps(a, splat(0.55f), _CMP_LT_OQ), tanh_small(a), big), sign_bit(u));
}

}  // namespace QKV_SIMD_ISA
}  // namespace qkv::kernels::simd
