// The GELU kernels' lanes and loops, included by kernels/gelu.cpp (AVX2) and kernels/gelu_avx512.cpp
// (the same source built with AVX-512F, where the double-precision steps run 8 lanes at once). Every
// lane gets the same IEEE operations in both builds, so both give the same bits
// (GeluKernel.Avx512BuildGivesTheSameBits). Everything here has internal linkage: each build keeps
// its own copy.
#pragma once
#include <cstdint>

#include "qkv/kernels/gelu_isa.h"
#include "qkv/kernels/map_lanes.h"
#include "qkv/kernels/vec_math.h"

namespace qkv::kernels {
namespace {
using namespace simd;

// The lanes are forced inline into map8's loop. Out of line, each call of gelu_lane paid the call
// and re-broadcast all of its constants (42 vbroadcastss in a 213-instruction function); inline, GCC
// keeps some of them in registers across the loop (it still broadcasts about 36 a pass) and
// schedules the lane with the loop's loads and stores: GELU (erf) 20% faster forward and 18%
// backward, GELU-tanh's backward 5% (bench_gelu, Zen 4, AVX2), the same bits for all 2^32 inputs.
// tanh_parts stays out of line: inlined, GELU-tanh's forward ran 16% slower.
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
// |x| below this: Phi from its odd series; above: from erfcx at z = |x| / sqrt 2 >= 0.5.
constexpr float kCdfSeriesMax = 0.7072f;

// Phi(x) - 1/2 = x S(x^2) for |x| < 0.7072, S of degree 4: relative error 1.4e-9. Phi(x) >= 0.24
// there, so 0.5 + x S loses at most an ulp for x < 0.
__m256 cdf_odd_part(__m256 x) {
  const __m256 x2 = _mm256_mul_ps(x, x);
  __m256 p = splat(1.042510485e-04f);
  p = _mm256_fmadd_ps(p, x2, splat(-1.182509237e-03f));
  p = _mm256_fmadd_ps(p, x2, splat(9.972699918e-03f));
  p = _mm256_fmadd_ps(p, x2, splat(-6.649032980e-02f));
  p = _mm256_fmadd_ps(p, x2, splat(3.989422917e-01f));
  return _mm256_mul_ps(x, p);
}

// The Gaussian tail at a = |x| (clamped to 15: beyond, Phi(-a) and phi(a) times anything below
// 2^12 underflow to 0, and inf stays out of a^2), as what the callers multiply by exp(-a^2 / 2):
//   exp(-a^2 / 2) = gauss.times(1 - lo / 2), with a^2 = hi + lo split exactly (lo's square is far
//   below an ulp), and Phi(-a) = erfc(a / sqrt 2) / 2 = erfcx(a / sqrt 2) / 2 * exp(-a^2 / 2).
// Phi(-a) computed this way, never as 1 + erf(x / sqrt 2), keeps full relative accuracy for x < 0.
struct GaussTail {
  __m256 a, half_lo;
  ExpParts gauss;
  // factor * exp(-a^2 / 2); a subnormal result is rounded once, at the end.
  __m256 times(__m256 factor) const { return gauss.times(_mm256_fnmadd_ps(factor, half_lo, factor)); }
};
GaussTail gauss_tail(__m256 x) {
  const __m256 a = min_keep_nan(15.f, abs(x));
  const Square s = square(a);
  return {a, _mm256_mul_ps(s.lo, splat(0.5f)), exp_parts(_mm256_mul_ps(s.hi, splat(-0.5f)))};
}
constexpr double kInvSqrt2d = 0.70710678118654752440;
constexpr double kInvSqrt2Pid = 0.39894228040143267794;

// x Phi(x): x (1/2 + x S) for small |x|; else with E = -a Phi(-a) (one rounding, subnormals too),
// x Phi(x) = E for x < 0 and x (1 - Phi(-a)) = x + E for x > 0. gelu(-inf) = -0 and gelu(inf) = inf
// (the limits; 0.5 x (1 + erf) would give NaN at -inf), NaN stays NaN.
[[gnu::always_inline]] inline __m256 gelu_lane(__m256 x) {
  const GaussTail t = gauss_tail(x);
  const __m256 minus_a_half_erfcx = in_double(t.a, [](auto a) {
    return dmul(dmul(a, dsplat(a, -0.5)), erfcx_mid(dmul(a, dsplat(a, kInvSqrt2d))));
  });
  const __m256 e = t.times(minus_a_half_erfcx);
  const __m256 series = _mm256_mul_ps(x, _mm256_add_ps(splat(0.5f), cdf_odd_part(x)));
  const __m256 tail = select(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ), e, _mm256_add_ps(x, e));
  return select(_mm256_cmp_ps(t.a, splat(kCdfSeriesMax), _CMP_LT_OQ), series, tail);
}

// GELU for values that are quantized to 8 bits next: gelu_lane's steps in float alone (erfcx's
// rational in float, 3 ulp; exp(-a^2 / 2) from the rounded square). Against gelu_lane, over all 2^32
// inputs: |difference| <= 1.2e-7 max(1, |x|), 4.2e-6 relative where |gelu| > 1e-30; inf, -inf and
// NaN alike. A row's quantization step is max|row| / 127, so this moves a quantized value only when
// GELU lands within 1.2e-7 of a rounding boundary. 1.5x faster than gelu_lane on AVX2 (bench_gelu:
// no double steps, one float division for two double ones).
[[gnu::always_inline]] inline __m256 gelu_to_quantize_lane(__m256 x) {
  const __m256 a = min_keep_nan(15.f, abs(x));
  const __m256 gauss = exp_parts(_mm256_mul_ps(_mm256_mul_ps(a, a), splat(-0.5f))).value();
  const __m256 minus_a_half_erfcx =
      _mm256_mul_ps(_mm256_mul_ps(a, splat(-0.5f)), erfcx_mid(_mm256_mul_ps(a, splat(float(kInvSqrt2d)))));
  const __m256 e = _mm256_mul_ps(minus_a_half_erfcx, gauss);  // -a Phi(-a)
  const __m256 series = _mm256_mul_ps(x, _mm256_add_ps(splat(0.5f), cdf_odd_part(x)));
  const __m256 tail = select(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ), e, _mm256_add_ps(x, e));
  return select(_mm256_cmp_ps(a, splat(kCdfSeriesMax), _CMP_LT_OQ), series, tail);
}

// gelu'(x) = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi). Small |x|: 1/2 + x S + x phi(x).
// Tails: with T = Phi(-a) - a phi(a) = exp(-a^2 / 2) (erfcx(a / sqrt 2) / 2 - a / sqrt(2 pi)) (the
// difference in double, one exp, one rounding, subnormals included), gelu' = T for x < 0 and
// 1 - Phi(-a) + a phi(a) = 1 - T for x > 0. Limits at -inf and inf: 0 and 1.
[[gnu::always_inline]] inline __m256 gelu_grad_lane(__m256 x) {
  const GaussTail t = gauss_tail(x);
  const __m256 small = _mm256_cmp_ps(t.a, splat(kCdfSeriesMax), _CMP_LT_OQ);
  const __m256 tail_factor = in_double(t.a, [](auto a) {
    const auto half_erfcx = dmul(dsplat(a, 0.5), erfcx_mid(dmul(a, dsplat(a, kInvSqrt2d))));
    return dfnmadd(a, dsplat(a, kInvSqrt2Pid), half_erfcx);
  });
  const __m256 T = t.times(select(small, _mm256_mul_ps(x, splat(kInvSqrt2Pi)), tail_factor));
  const __m256 series = _mm256_add_ps(_mm256_add_ps(splat(0.5f), cdf_odd_part(x)), T);
  const __m256 tail = select(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ), T, _mm256_sub_ps(splat(1.f), T));
  return select(small, series, tail);
}

// gelu_grad_lane in float steps alone (erfcx's rational in float, exp(-a^2 / 2) from the rounded
// square), for a bf16-kept input (bf16 precision's backward; gelu_to_quantize_lane is the forward's
// float form). T = exp(-a^2 / 2) (erfcx(a / sqrt 2) / 2 - a / sqrt(2 pi)) cancels where gelu' has
// its root (x = -0.75): small there in absolute terms, not relative ones. Against gelu_grad_lane
// (GeluKernel.FloatStepsForBf16AreWithinTheirBound): 1.7e-7 of the terms' size (0.25) near the
// root, 3.9e-6 relative for |x| >= 2; the same infinities and NaN.
[[gnu::always_inline]] inline __m256 gelu_grad_float_lane(__m256 x) {
  const __m256 a = min_keep_nan(15.f, abs(x));
  const __m256 gauss = exp_parts(_mm256_mul_ps(_mm256_mul_ps(a, a), splat(-0.5f))).value();
  const __m256 small = _mm256_cmp_ps(a, splat(kCdfSeriesMax), _CMP_LT_OQ);
  const __m256 half_erfcx = _mm256_mul_ps(splat(0.5f), erfcx_mid(_mm256_mul_ps(a, splat(float(kInvSqrt2d)))));
  const __m256 tail_factor = _mm256_fnmadd_ps(a, splat(float(kInvSqrt2Pid)), half_erfcx);
  const __m256 T = _mm256_mul_ps(gauss, select(small, _mm256_mul_ps(x, splat(kInvSqrt2Pi)), tail_factor));
  const __m256 series = _mm256_add_ps(_mm256_add_ps(splat(0.5f), cdf_odd_part(x)), T);
  const __m256 tail = select(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ), T, _mm256_sub_ps(splat(1.f), T));
  return select(small, series, tail);
}

// sqrt(2 / pi) and GELU-tanh's cubic coefficient, in double: u is computed in double (below).
constexpr double kSqrt2OverPi = 0.79788456080286536;
constexpr double kGeluCubic = 0.044715;

// The pieces of GELU-tanh at x, with xc = x clamped to [-20, 20] (u(20) = 301: tanh is +-1 and the
// tails underflow long before) and u = k (xc + a xc^3):
//   tanh(u) = (1 - e) / (1 + e) for u >= 0 with e = exp(-2|u|) in [0, 1], and
//   1 + tanh(u) = 2 d for u >= 0, 2 e d for u < 0, where d = 1 / (1 + e);
// so 0.5 x (1 + tanh u) never cancels and inf / inf never happens. e varies as 2|u| e: the float
// rounding of u alone (|u| up to 60) would cost 60 * 2^-23 relative, so u is formed in double and
// split as u = hi + lo, and exp(-2|u|) = exp(-2|hi|) (1 - 2|u|'s lo part).
struct TanhParts {
  __m256 xc, d, two_lo;  // two_lo: the low part of 2|u|
  __m256 u_nonneg;       // mask
  ExpParts exp2u;        // exp(-2 |hi|), |hi| clamped to 60 (times any factor below 2^12: 0)
  // factor * exp(-2|u|); a subnormal result is rounded once, at the end.
  __m256 times(__m256 factor) const { return exp2u.times(_mm256_fnmadd_ps(factor, two_lo, factor)); }
};
template <class D>
D gelu_tanh_u(D x) {
  const D x2 = dmul(x, x);
  return dmul(dmul(dsplat(x, kSqrt2OverPi), x), dfmadd(dsplat(x, kGeluCubic), x2, dsplat(x, 1.0)));
}
TanhParts tanh_parts(__m256 x) {
  const __m256 xc = max_keep_nan(-20.f, min_keep_nan(20.f, x));
  const SplitFloat u = split_in_double(xc, [](auto v) { return gelu_tanh_u(v); });
  const __m256 hi = u.hi, lo = u.lo;
  const __m256 two_lo = _mm256_mul_ps(splat(2.f), _mm256_xor_ps(lo, sign_bit(hi)));  // 2|u| = 2|hi| + two_lo
  TanhParts t{xc, _mm256_setzero_ps(), two_lo, _mm256_cmp_ps(hi, _mm256_setzero_ps(), _CMP_GE_OQ),
              exp_parts(_mm256_mul_ps(min_keep_nan(60.f, abs(hi)), splat(-2.f)))};
  t.d = _mm256_div_ps(splat(1.f), _mm256_add_ps(splat(1.f), t.times(splat(1.f))));
  return t;
}

// 0.5 x (1 + tanh u) = x d (u >= 0) or x e d (u < 0, e folded into one rounding).
[[gnu::always_inline]] inline __m256 gelu_tanh_lane(__m256 x) {
  const TanhParts t = tanh_parts(x);
  return select(t.u_nonneg, _mm256_mul_ps(x, t.d), t.times(_mm256_mul_ps(t.xc, t.d)));
}

// dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) du, du = k (1 + 3 a x^2) (header). With 1 - t^2 = 4 e d^2 and
// w = 2 x du (in double, rounded once):
//   u >= 0: d + e d (w d);   u < 0: e d (1 + w d)   (no cancellation but at the root, x = -0.75).
[[gnu::always_inline]] inline __m256 gelu_tanh_grad_lane(__m256 x) {
  const TanhParts t = tanh_parts(x);
  const __m256 w = in_double(t.xc, [](auto v) {
    const auto du = dfmadd(dsplat(v, 3 * kGeluCubic * kSqrt2OverPi), dmul(v, v), dsplat(v, kSqrt2OverPi));
    return dmul(dadd(v, v), du);
  });
  const __m256 pos = _mm256_fmadd_ps(t.times(t.d), _mm256_mul_ps(w, t.d), t.d);
  const __m256 neg = t.times(_mm256_mul_ps(t.d, _mm256_fmadd_ps(w, t.d, splat(1.f))));
  return select(t.u_nonneg, pos, neg);
}

// GELU-tanh and its derivative in float steps alone, for bf16 precision (`--precision bf16`): there
// the input is a sum of bf16 products (or, in the backward, kept rounded to bf16) and the output is
// rounded to bf16 (2^-9 relative) for the next product, so gelu_tanh_lane's double-precision u and
// split exp buy nothing. The same formulas with u = k (xc + a xc^3) and e = exp(-2|u|) in float:
// u's rounding moves e by about 2|u| ulps, far from a bf16 rounding step where the result is not
// negligible. Against gelu_tanh_lane and gelu_tanh_grad_lane over 8.6 million inputs
// (GeluKernel.FloatStepsForBf16AreWithinTheirBound): 9.9e-6 relative at most (x = -9.19), the
// derivative 1.1e-5 relative (x = -9.40) and 3.6e-7 of its terms' size at its root; the same
// infinities and NaN. bf16's rounding step is 3.9e-3.
struct FloatTanhParts {
  __m256 xc, e, d, u_nonneg;  // e = exp(-2|u|), d = 1 / (1 + e)
};
[[gnu::always_inline]] inline FloatTanhParts float_tanh_parts(__m256 x) {
  const __m256 xc = max_keep_nan(-20.f, min_keep_nan(20.f, x));
  const __m256 cubic = _mm256_fmadd_ps(splat(static_cast<float>(kGeluCubic)), _mm256_mul_ps(xc, xc), splat(1.f));
  const __m256 u = _mm256_mul_ps(_mm256_mul_ps(splat(static_cast<float>(kSqrt2OverPi)), xc), cubic);
  const __m256 e = exp_parts(_mm256_mul_ps(min_keep_nan(60.f, abs(u)), splat(-2.f))).value();
  return {xc, e, _mm256_div_ps(splat(1.f), _mm256_add_ps(splat(1.f), e)),
          _mm256_cmp_ps(u, _mm256_setzero_ps(), _CMP_GE_OQ)};
}

// x d (u >= 0) or e (xc d) (u < 0), as gelu_tanh_lane.
[[gnu::always_inline]] inline __m256 gelu_tanh_float_lane(__m256 x) {
  const FloatTanhParts t = float_tanh_parts(x);
  return select(t.u_nonneg, _mm256_mul_ps(x, t.d), _mm256_mul_ps(t.e, _mm256_mul_ps(t.xc, t.d)));
}

// d + e d (w d) (u >= 0) or e d (1 + w d) (u < 0), w = 2 xc k (1 + 3 a xc^2), as gelu_tanh_grad_lane.
[[gnu::always_inline]] inline __m256 gelu_tanh_grad_float_lane(__m256 x) {
  const FloatTanhParts t = float_tanh_parts(x);
  const __m256 du = _mm256_fmadd_ps(splat(static_cast<float>(3 * kGeluCubic * kSqrt2OverPi)),
                                    _mm256_mul_ps(t.xc, t.xc), splat(static_cast<float>(kSqrt2OverPi)));
  const __m256 w = _mm256_mul_ps(_mm256_add_ps(t.xc, t.xc), du);
  const __m256 ed = _mm256_mul_ps(t.e, t.d);
  const __m256 pos = _mm256_fmadd_ps(ed, _mm256_mul_ps(w, t.d), t.d);
  const __m256 neg = _mm256_mul_ps(ed, _mm256_fmadd_ps(w, t.d, splat(1.f)));
  return select(t.u_nonneg, pos, neg);
}

// The kernels of the build that includes this header.
gelu_isa::Kernels this_builds_kernels() {
  return {[](float* y, const float* x, int64_t n) { map8(y, x, n, [](__m256 v) { return gelu_lane(v); }); },
          [](float* y, const float* x, int64_t n) { map8(y, x, n, [](__m256 v) { return gelu_to_quantize_lane(v); }); },
          [](float* dx, const float* dy, const float* x, int64_t n, bool acc) {
            map8_grad(dx, dy, x, n, acc, [](__m256 v) { return gelu_grad_lane(v); });
          },
          [](float* y, const float* x, int64_t n) { map8(y, x, n, [](__m256 v) { return gelu_tanh_lane(v); }); },
          [](float* dx, const float* dy, const float* x, int64_t n, bool acc) {
            map8_grad(dx, dy, x, n, acc, [](__m256 v) { return gelu_tanh_grad_lane(v); });
          },
          [](float* dx, const float* dy, const float* x, int64_t n, bool acc) {
            map8_grad(dx, dy, x, n, acc, [](__m256 v) { return gelu_grad_float_lane(v); });
          },
          [](float* y, const float* x, int64_t n) { map8(y, x, n, [](__m256 v) { return gelu_tanh_float_lane(v); }); },
          [](float* dx, const float* dy, const float* x, int64_t n, bool acc) {
            map8_grad(dx, dy, x, n, acc, [](__m256 v) { return gelu_tanh_grad_float_lane(v); });
          }};
}

}  // namespace
}  // namespace qkv::kernels
