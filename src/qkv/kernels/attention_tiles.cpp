#include "qkv/kernels/attention_tiles.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <limits>

#include "qkv/kernels/vec_math.h"

namespace qkv::kernels::tiles {
namespace {

constexpr int kRows = 3;           // queries per tile
constexpr int64_t kMaxKeys = 128;  // past this, BLAS's blocking wins (attention.cpp)
constexpr int64_t kMaxDk = 256;

int64_t padded(int64_t n) { return (n + 7) / 8 * 8; }

// r[i] = row i of an 8 x 8 block, transposed in place: r[c] = column c.
void transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// keys_t[c * Tkp + j] = k[j][c]; keys past Tk are zero.
void transpose_keys(const float* k, int64_t k_stride, int64_t Tk, int64_t dk, int64_t Tkp, float* keys_t) {
  alignas(32) static constexpr float kZeros[8] = {};
  for (int64_t j0 = 0; j0 < Tkp; j0 += 8) {
    for (int64_t c0 = 0; c0 < dk; c0 += 8) {
      __m256 r[8];
      for (int64_t i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(j0 + i < Tk ? k + (j0 + i) * k_stride + c0 : kZeros);
      transpose8(r);
      for (int64_t c = 0; c < 8; ++c) _mm256_storeu_ps(keys_t + (c0 + c) * Tkp + j0, r[c]);
    }
  }
}

// Scores of the tile's 3 queries (q[r]; unused rows repeat row 0) against keys [j0, j0 + 8 NJ),
// times the scale, into the tile's score rows of Tkp floats. Each score is one sum over the
// dimensions in order, whatever NJ. 3 queries x 4 vectors: 12 accumulators, as in the GEMM tile.
template <int NJ>
void score_tile(const float* const q[kRows], const float* keys_t, int64_t Tkp, int64_t dk, int64_t j0, __m256 scale,
                float* scores) {
  __m256 acc[kRows][NJ];
  for (auto& row : acc)
    for (__m256& a : row) a = _mm256_setzero_ps();
  const float* col = keys_t + j0;
  for (int64_t c = 0; c < dk; ++c, col += Tkp) {
    __m256 kv[NJ];
    for (int n = 0; n < NJ; ++n) kv[n] = _mm256_loadu_ps(col + 8 * n);
    for (int r = 0; r < kRows; ++r) {
      const __m256 qv = _mm256_broadcast_ss(q[r] + c);
      for (int n = 0; n < NJ; ++n) acc[r][n] = _mm256_fmadd_ps(qv, kv[n], acc[r][n]);
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int n = 0; n < NJ; ++n) _mm256_storeu_ps(scores + r * Tkp + j0 + 8 * n, _mm256_mul_ps(acc[r][n], scale));
}

// out[r][c0, c0 + 8 NV) = sum over keys j < Tk of p[r][j] v[j][c0, ...), in 3 x 4-vector tiles like
// the scores'. Every row is stored (rows past Tq repeat the first), so the accumulators stay in
// registers.
template <int NV>
void value_tile(const float* const p[kRows], const float* v, int64_t v_stride, int64_t Tk, int64_t c0,
                float* const out[kRows]) {
  __m256 acc[kRows][NV];
  for (auto& row : acc)
    for (__m256& a : row) a = _mm256_setzero_ps();
  for (int64_t j = 0; j < Tk; ++j) {
    __m256 vv[NV];
    for (int n = 0; n < NV; ++n) vv[n] = _mm256_loadu_ps(v + j * v_stride + c0 + 8 * n);
    for (int r = 0; r < kRows; ++r) {
      const __m256 pv = _mm256_broadcast_ss(p[r] + j);
      for (int n = 0; n < NV; ++n) acc[r][n] = _mm256_fmadd_ps(pv, vv[n], acc[r][n]);
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int n = 0; n < NV; ++n) _mm256_storeu_ps(out[r] + c0 + 8 * n, acc[r][n]);
}

// The masks applied to the tile's score rows (row r: query query[r]), then softmax in place, the
// rows interleaved so that their reductions overlap. Masked keys get the fill, as masked_fill does
// (a dropped query: every key); keys past Tk get -inf, so exp gives them exactly 0.
void masked_softmax_rows(float* scores, const int64_t query[kRows], const AttentionDims& d, const AttentionMask& mask,
                         int64_t b, const HeadScratch& s) {
  const int64_t Tkp = padded(d.Tk);
  const __m256 fill = _mm256_set1_ps(mask.fill);
  bool dropped[kRows], causal[kRows];
  const float* keep[kRows];
  __m256 last_visible[kRows], m[kRows], sum[kRows], shift[kRows];
  for (int r = 0; r < kRows; ++r) {
    dropped[r] = mask.query_keep && mask.query_keep[b * d.Tq + query[r]] == 0;
    causal[r] = mask.causal && !dropped[r];
    keep[r] = dropped[r] ? s.in_range.data() : s.keep.data();
    last_visible[r] = _mm256_set1_ps(static_cast<float>(query[r] + (d.Tk - d.Tq)));
    m[r] = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    sum[r] = _mm256_setzero_ps();
  }
  __m256 key_index = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t j = 0; j < Tkp; j += 8) {
    const __m256 fill_or_pad = _mm256_loadu_ps(s.fill.data() + j);
    for (int r = 0; r < kRows; ++r) {
      float* row = scores + r * Tkp;
      __m256 x = dropped[r] ? fill : _mm256_loadu_ps(row + j);
      if (causal[r]) x = _mm256_blendv_ps(x, fill, _mm256_cmp_ps(key_index, last_visible[r], _CMP_GT_OQ));
      x = _mm256_blendv_ps(fill_or_pad, x, _mm256_loadu_ps(keep[r] + j));
      _mm256_storeu_ps(row + j, x);
      m[r] = _mm256_max_ps(m[r], x);
    }
    key_index = _mm256_add_ps(key_index, _mm256_set1_ps(8.f));
  }
  for (int r = 0; r < kRows; ++r) shift[r] = _mm256_set1_ps(simd::max_lanes(m[r]));
  // Masked scores take exp_or_zero (the same bits, without exp's underflowing multiplications); a
  // dropped query's row is all fill, which shifts to 0.
  const auto exp_pass = [&]<__m256 (*Exp)(__m256)>() {
    for (int64_t j = 0; j < Tkp; j += 8)
      for (int r = 0; r < kRows; ++r) {
        float* row = scores + r * Tkp;
        const __m256 e = Exp(_mm256_sub_ps(_mm256_loadu_ps(row + j), shift[r]));
        _mm256_storeu_ps(row + j, e);
        sum[r] = _mm256_add_ps(sum[r], e);
      }
  };
  if (s.some_key_masked || mask.causal) exp_pass.template operator()<simd::exp_or_zero>();
  else exp_pass.template operator()<simd::exp>();
  for (int r = 0; r < kRows; ++r) sum[r] = _mm256_set1_ps(1.f / simd::sum_lanes(sum[r]));
  for (int64_t j = 0; j < Tkp; j += 8)
    for (int r = 0; r < kRows; ++r) {
      float* row = scores + r * Tkp;
      _mm256_storeu_ps(row + j, _mm256_mul_ps(_mm256_loadu_ps(row + j), sum[r]));
    }
}

// keep and fill for batch row b's keys (see HeadScratch).
void prepare_key_masks(const AttentionDims& d, const AttentionMask& mask, int64_t b, HeadScratch& s) {
  const int64_t Tkp = padded(d.Tk);
  const float all_bits = std::bit_cast<float>(int32_t{-1});
  s.some_key_masked = false;
  for (int64_t j = 0; j < Tkp; ++j) {
    const bool kept = j < d.Tk && (!mask.key_keep || mask.key_keep[b * d.Tk + j] != 0);
    s.some_key_masked |= !kept;
    s.keep[j] = kept ? all_bits : 0.f;
    s.in_range[j] = j < d.Tk ? all_bits : 0.f;
    s.fill[j] = j < d.Tk ? mask.fill : -std::numeric_limits<float>::infinity();
  }
}

void reserve(HeadScratch& s, const AttentionDims& d) {
  const auto Tkp = static_cast<size_t>(padded(d.Tk));
  s.keys_t.resize(static_cast<size_t>(d.dk) * Tkp);
  s.keep.resize(Tkp);
  s.in_range.resize(Tkp);
  s.fill.resize(Tkp);
  s.scores.resize(kRows * Tkp);
}

}  // namespace

bool supports(const AttentionDims& d) {
  return d.dk > 0 && d.dk % 8 == 0 && d.dk <= kMaxDk && d.Tk >= 1 && d.Tk <= kMaxKeys;
}

void attend_head(const AttentionDims& d, const float* q, int64_t q_stride, const float* k, int64_t k_stride,
                 const float* v, int64_t v_stride, float* out, int64_t out_stride, float* probs,
                 const AttentionMask& mask, int64_t b, float divisor, HeadScratch& s) {
  reserve(s, d);
  const int64_t Tkp = padded(d.Tk);
  transpose_keys(k, k_stride, d.Tk, d.dk, Tkp, s.keys_t.data());
  if (s.masks_of_row != b) {  // the heads of a batch row share its key masks
    prepare_key_masks(d, mask, b, s);
    s.masks_of_row = b;
  }
  // Times 1 / sqrt(dk) rather than divided by sqrt(dk) as training does: a division per score cost
  // more than the rest of the tile's epilogue; the two differ by at most an ulp of each score.
  const __m256 scale = _mm256_set1_ps(1.f / divisor);
  for (int64_t i0 = 0; i0 < d.Tq; i0 += kRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kRows, d.Tq - i0));
    // Rows past Tq repeat the tile's first query in their own score rows: they compute its values
    // again and store them into its output row (the same values), so the tile has no row count.
    int64_t query[kRows];
    const float* qr[kRows];
    const float* pr[kRows];
    float* outr[kRows];
    for (int r = 0; r < kRows; ++r) {
      query[r] = i0 + (r < rows ? r : 0);
      qr[r] = q + query[r] * q_stride;
      pr[r] = s.scores.data() + r * Tkp;
      outr[r] = out + query[r] * out_stride;
    }
    const float* keys_t = s.keys_t.data();
    int64_t j0 = 0;
    for (; j0 + 32 <= Tkp; j0 += 32) score_tile<4>(qr, keys_t, Tkp, d.dk, j0, scale, s.scores.data());
    switch ((Tkp - j0) / 8) {
      case 3:
        score_tile<3>(qr, keys_t, Tkp, d.dk, j0, scale, s.scores.data());
        break;
      case 2:
        score_tile<2>(qr, keys_t, Tkp, d.dk, j0, scale, s.scores.data());
        break;
      case 1:
        score_tile<1>(qr, keys_t, Tkp, d.dk, j0, scale, s.scores.data());
        break;
      default:
        break;
    }
    masked_softmax_rows(s.scores.data(), query, d, mask, b, s);
    if (probs)
      for (int r = 0; r < rows; ++r) std::copy(pr[r], pr[r] + d.Tk, probs + query[r] * d.Tk);
    int64_t c0 = 0;
    for (; c0 + 32 <= d.dk; c0 += 32) value_tile<4>(pr, v, v_stride, d.Tk, c0, outr);
    switch ((d.dk - c0) / 8) {
      case 3:
        value_tile<3>(pr, v, v_stride, d.Tk, c0, outr);
        break;
      case 2:
        value_tile<2>(pr, v, v_stride, d.Tk, c0, outr);
        break;
      case 1:
        value_tile<1>(pr, v, v_stride, d.Tk, c0, outr);
        break;
      default:
        break;
    }
  }
}

}  // namespace qkv::kernels::tiles
