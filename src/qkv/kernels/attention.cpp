#include "qkv/kernels/attention.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "qkv/core/dtype.h"
#include "qkv/kernels/attention_causal.h"
#include "qkv/kernels/attention_tiles.h"
#include "qkv/kernels/attention_products.h"
#include "qkv/kernels/dropout.h"
#include "qkv/kernels/softmax.h"
#include "qkv/kernels/vec_math.h"

namespace qkv::kernels {
namespace {

// Sets the masked entries of score row i (query i of batch b) to `value`: the whole row for a
// dropped query, the keys after the query's position when causal, the dropped keys. Applied after
// an unmasked pass over the row, so that pass has no branch and vectorises.
void fill_masked(float* row, float value, const AttentionMask& m, int64_t b, int64_t i, const AttentionDims& d) {
  if (m.query_keep && m.query_keep[b * d.Tq + i] == 0) {
    for (int64_t j = 0; j < d.Tk; ++j) row[j] = value;
    return;
  }
  if (m.causal)
    for (int64_t j = std::max<int64_t>(0, i + (d.Tk - d.Tq) + 1); j < d.Tk; ++j) row[j] = value;
  if (m.key_keep)
    for (int64_t j = 0; j < d.Tk; ++j)
      if (m.key_keep[b * d.Tk + j] == 0) row[j] = value;
}

// row += bias(h, i, :), T5's position bias (Tq, Tk, H), shared by every batch row.
void add_bias(float* row, const AttentionMask& m, const AttentionDims& d, int64_t h, int64_t i) {
  const float* bias = m.bias + i * d.Tk * d.H + h;
  for (int64_t j = 0; j < d.Tk; ++j) row[j] += bias[j * d.H];
}

// What q.k is divided by: the seed divides by math.sqrt(d_k) (a double) applied to a float tensor,
// so by that float; T5 folds the scale into its initialisation and divides by exactly 1.
float score_divisor(const AttentionMask& m, int64_t dk) {
  return m.scale_scores ? static_cast<float>(std::sqrt(static_cast<double>(dk))) : 1.f;
}

// Score row i of head (b, h), holding q.k: scaled, biased, masked, then its softmax.
void softmax_of_scores(float* row, const AttentionMask& m, const AttentionDims& d, int64_t b, int64_t h, int64_t i,
                       float divisor) {
  for (int64_t j = 0; j < d.Tk; ++j) row[j] = row[j] / divisor;
  if (m.bias) add_bias(row, m, d, h, i);
  fill_masked(row, m.fill, m, b, i, d);
  softmax_row(row, d.Tk);
}

// Pd = P * keep / (1 - p) for one head, into `out`.
void apply_dropout(float* out, const float* p, const AttentionDims& d, const AttentionDropout& dr, int64_t bh) {
  for (int64_t i = 0; i < d.Tq; ++i)
    dropout_row(out + i * d.Tk, p + i * d.Tk, d.Tk, dr.p, dr.seed, dr.row_counter(d, bh, i));
}

float dot(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  float sum = _mm_cvtss_f32(s);
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// y += a * x
void axpy(float* y, float a, const float* x, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

// A few queries per head (a decoding step: one query, or the beams of a sentence reading its
// encoder output), or a short sequence (a sentence being embedded: tens of queries and keys), without
// dropout: the two products are a dot product per key and a weighted sum of value rows. BLAS costs
// more in call overhead and copies than these small heads take (dk 32 or 64, tens of keys), and the
// keys and values a head's first query brings into cache serve the others. Past kMaxDirectKeys
// keys, BLAS's blocking wins when there are many queries.
constexpr int64_t kMaxFewQueries = 8;
constexpr int64_t kMaxDirectKeys = 128;

bool any_mask(const AttentionMask& m) { return m.key_keep || m.query_keep || m.causal; }

// Sums of each of 8 vectors, as one vector: lane j holds the sum of a[j]'s 8 lanes.
inline __m256 sum_lanes_of_8(const __m256 a[8]) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);  // per 128-bit half: keys 0-3 / 4-7
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// Where key (or value) j of a head is: a strided sequence of rows, or (a beam-search cache whose
// rows are moved by a map instead of copied) position j of whichever batch row the map names.
struct StridedRows {
  const float* head;  // row 0 of the head
  int64_t t_stride;
  const float* operator()(int64_t j) const { return head + j * t_stride; }
};
struct MappedRows {
  const float* head;     // row 0 of the head in batch row 0
  const int32_t* rows;   // the batch row of each position j
  int64_t b_stride, t_stride;
  const float* operator()(int64_t j) const { return head + rows[j] * b_stride + j * t_stride; }
};

// One query's scores q.k / sqrt(dk) against a head whose dk is NV vectors of 8 (dk 32 or 64, the
// common head sizes): 8 keys at a time, reduced together (one horizontal sum per 8 keys, not one
// per key).
template <int NV, class Keys>
void scores_of_one_query(const float* q, const Keys& key_at, float* row, int64_t Tk, float divisor) {
  __m256 qv[NV];
  for (int c = 0; c < NV; ++c) qv[c] = _mm256_loadu_ps(q + 8 * c);
  const __m256 div = _mm256_set1_ps(divisor);
  int64_t j = 0;
  for (; j + 8 <= Tk; j += 8) {
    __m256 acc[8];
    for (int r = 0; r < 8; ++r) {
      const float* key = key_at(j + r);
      __m256 a = _mm256_mul_ps(qv[0], _mm256_loadu_ps(key));
      for (int c = 1; c < NV; ++c) a = _mm256_fmadd_ps(qv[c], _mm256_loadu_ps(key + 8 * c), a);
      acc[r] = a;
    }
    _mm256_storeu_ps(row + j, _mm256_div_ps(sum_lanes_of_8(acc), div));
  }
  for (; j < Tk; ++j) {
    const float* key = key_at(j);
    __m256 a = _mm256_mul_ps(qv[0], _mm256_loadu_ps(key));
    for (int c = 1; c < NV; ++c) a = _mm256_fmadd_ps(qv[c], _mm256_loadu_ps(key + 8 * c), a);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    row[j] = _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h))) / divisor;
  }
}

// o = sum_j row[j] v_j with o in NV registers over all keys (no load and store of it per key).
template <int NV, class Values>
void weighted_values(const float* row, int64_t Tk, const Values& value_at, float* o) {
  __m256 acc[NV];
  for (int c = 0; c < NV; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t j = 0; j < Tk; ++j) {
    const __m256 p = _mm256_broadcast_ss(row + j);
    const float* value = value_at(j);
    for (int c = 0; c < NV; ++c) acc[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(value + 8 * c), acc[c]);
  }
  for (int c = 0; c < NV; ++c) _mm256_storeu_ps(o + 8 * c, acc[c]);
}

template <class Keys, class Values>
void attend_few_queries(const AttentionDims& d, const float* qh, int64_t q_stride, const Keys& key_at,
                        const Values& value_at, float* oh, int64_t o_stride, float* probs, const AttentionMask& mask,
                        int64_t b, int64_t h, float divisor) {
  const bool masked = any_mask(mask);
  for (int64_t i = 0; i < d.Tq; ++i) {
    const float* q = qh + i * q_stride;
    float* row = probs + i * d.Tk;
    float* o = oh + i * o_stride;
    if (d.dk == 64) {
      scores_of_one_query<8>(q, key_at, row, d.Tk, divisor);
    } else if (d.dk == 32) {
      scores_of_one_query<4>(q, key_at, row, d.Tk, divisor);
    } else {
      for (int64_t j = 0; j < d.Tk; ++j) row[j] = dot(q, key_at(j), d.dk) / divisor;
    }
    if (mask.bias) add_bias(row, mask, d, h, i);
    if (masked) fill_masked(row, mask.fill, mask, b, i, d);
    softmax_row(row, d.Tk);
    if (d.dk == 64) {
      weighted_values<8>(row, d.Tk, value_at, o);
    } else if (d.dk == 32) {
      weighted_values<4>(row, d.Tk, value_at, o);
    } else {
      for (int64_t c = 0; c < d.dk; ++c) o[c] = 0.f;
      for (int64_t j = 0; j < d.Tk; ++j) axpy(o, row[j], value_at(j), d.dk);
    }
  }
}

// Row i of head (b, h)'s dS from dPd in dsr, in place, and dbr the same before the 1 / divisor is
// folded in (the bias's gradient); masked entries are zero in both.
void score_grad_with_bias(float* dsr, float* dbr, const float* pr, float dot, float inv_divisor,
                          const AttentionMask& m, int64_t b, int64_t i, const AttentionDims& d) {
  for (int64_t j = 0; j < d.Tk; ++j) dbr[j] = pr[j] * (dsr[j] - dot);
  fill_masked(dbr, 0.f, m, b, i, d);
  for (int64_t j = 0; j < d.Tk; ++j) dsr[j] = dbr[j] * inv_divisor;
}

}  // namespace

void attention_forward(const AttentionDims& d, const float* q, HeadsView qs, const float* k, HeadsView ks,
                       const float* v, HeadsView vs, float* out, HeadsView os, float* probs,
                       const AttentionMask& mask, const AttentionDropout& drop, float* scratch,
                       int scratch_slots, bool inference, const KeyRows& key_rows) {
  const float divisor = score_divisor(mask, d.dk);
  const int64_t heads = d.B * d.H;
  // Without probs (inference that keeps no softmax), the per-query and BLAS paths work in a thread's own rows.
  const auto head_probs = [&](int64_t bh, std::vector<float>& own) {
    if (probs) return probs + bh * d.Tq * d.Tk;
    own.resize(static_cast<size_t>(d.Tq * d.Tk));
    return own.data();
  };
  if (key_rows.rows) {
#pragma omp parallel
    {
      std::vector<float> own_probs;
#pragma omp for schedule(static)
      for (int64_t bh = 0; bh < heads; ++bh) {
        const int64_t b = bh / d.H, h = bh % d.H;
        const int32_t* rows = key_rows.rows + b * key_rows.stride;
        attend_few_queries(d, q + b * qs.b + h * qs.h, qs.t, MappedRows{k + h * ks.h, rows, ks.b, ks.t},
                           MappedRows{v + h * vs.h, rows, vs.b, vs.t}, out + b * os.b + h * os.h, os.t,
                           head_probs(bh, own_probs), mask, b, h, divisor);
      }
    }
    return;
  }
  const bool direct = inference && drop.p == 0.f;
  // The tiles read no bias: short heads with one take the per-query path.
  const bool tiled = direct && d.Tq > kMaxFewQueries && tiles::supports(d) && !mask.bias;
#pragma omp parallel
  {
    tiles::HeadScratch tile_scratch;
    std::vector<float> own_probs;
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < heads; ++bh) {
      const int64_t b = bh / d.H, h = bh % d.H;
      const float* qh = q + b * qs.b + h * qs.h;
      const float* kh = k + b * ks.b + h * ks.h;
      const float* vh = v + b * vs.b + h * vs.h;
      float* oh = out + b * os.b + h * os.h;
      if (tiled) {
        tiles::attend_head(d, qh, qs.t, kh, ks.t, vh, vs.t, oh, os.t, probs ? probs + bh * d.Tq * d.Tk : nullptr,
                           mask, b, divisor, tile_scratch);
        continue;
      }
      float* ph = head_probs(bh, own_probs);  // (Tq, Tk)
      if (direct && (d.Tq <= kMaxFewQueries || d.Tk <= kMaxDirectKeys)) {
        attend_few_queries(d, qh, qs.t, StridedRows{kh, ks.t}, StridedRows{vh, vs.t}, oh, os.t, ph, mask, b, h,
                           divisor);
        continue;
      }
      float* pd = drop.p > 0.f ? scratch + static_cast<int64_t>(omp_get_thread_num() % scratch_slots) * d.Tq * d.Tk
                               : nullptr;
      if (causal::applies(mask, d, b)) {
        causal::forward_head(d, {qh, qs.t}, {kh, ks.t}, {vh, vs.t}, {oh, os.t}, ph, pd, mask, drop, b, bh, divisor);
        continue;
      }
      head_product(d, false, true, d.Tq, d.Tk, d.dk, qh, qs.t, kh, ks.t, 0.f, ph, d.Tk);
      for (int64_t i = 0; i < d.Tq; ++i) softmax_of_scores(ph + i * d.Tk, mask, d, b, h, i, divisor);
      const float* weights = ph;
      if (pd) {
        apply_dropout(pd, ph, d, drop, bh);
        weights = pd;
      }
      head_product(d, false, false, d.Tq, d.dk, d.Tk, weights, d.Tk, vh, vs.t, 0.f, oh, os.t);
    }
  }
}

int64_t attention_backward_scratch(const AttentionDims& d, const SavedProbs& probs) {
  return (probs.bf16 ? 3 : 2) * d.Tq * d.Tk;  // dS and Pd, and the widened P
}

void attention_backward(const AttentionDims& d, const float* dout, HeadsView dos, const float* q, HeadsView qs,
                        const float* k, HeadsView ks, const float* v, HeadsView vs, const SavedProbs& probs,
                        const AttentionMask& mask, const AttentionDropout& drop, float* dq, HeadsView dqs,
                        float* dk_, HeadsView dks, float* dv, HeadsView dvs, bool accumulate, float* scratch,
                        int scratch_slots, float* dbias) {
  const float inv_divisor = 1.f / score_divisor(mask, d.dk);
  const float beta = accumulate ? 1.f : 0.f;
  const int64_t heads = d.B * d.H;
  const int64_t area = d.Tq * d.Tk;
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < heads; ++bh) {
    const int64_t b = bh / d.H, h = bh % d.H;
    const int slot = omp_get_thread_num() % scratch_slots;
    float* ds = scratch + static_cast<int64_t>(slot) * attention_backward_scratch(d, probs);  // dPd, dP, dS
    float* pd = ds + area;
    const float* doh = dout + b * dos.b + h * dos.h;
    const float* qh = q + b * qs.b + h * qs.h;
    const float* kh = k + b * ks.b + h * ks.h;
    const float* vh = v + b * vs.b + h * vs.h;
    const float* ph = pd + area;  // a bf16 softmax is widened into the slot's third area
    if (probs.bf16) widen_bf16(probs.bf16 + bh * area, area, pd + area);
    else ph = probs.f32 + bh * area;

    if (causal::applies(mask, d, b)) {
      const causal::HeadGrads grads{{dq + b * dqs.b + h * dqs.h, dqs.t}, {dk_ + b * dks.b + h * dks.h, dks.t},
                                    {dv + b * dvs.b + h * dvs.h, dvs.t}, beta};
      causal::backward_head(d, {doh, dos.t}, {qh, qs.t}, {kh, ks.t}, {vh, vs.t}, ph, ds, pd, mask, drop, b, bh,
                            inv_divisor, grads);
      continue;
    }
    const float* weights = ph;
    if (drop.p > 0.f) {
      apply_dropout(pd, ph, d, drop, bh);
      weights = pd;
    }
    // dV = Pd^T @ dO   (Tk, dk)
    head_product(d, true, false, d.Tk, d.dk, d.Tq, weights, d.Tk, doh, dos.t, beta, dv + b * dvs.b + h * dvs.h,
                 dvs.t);
    // dPd = dO @ V^T   (Tq, Tk)
    head_product(d, false, true, d.Tq, d.Tk, d.dk, doh, dos.t, vh, vs.t, 0.f, ds, d.Tk);
    for (int64_t i = 0; i < d.Tq; ++i) {
      float* dsr = ds + i * d.Tk;
      const float* pr = ph + i * d.Tk;
      if (drop.p > 0.f) dropout_row(dsr, dsr, d.Tk, drop.p, drop.seed, drop.row_counter(d, bh, i));
      const float dot = simd::dot(dsr, pr, d.Tk);
      if (dbias) {
        score_grad_with_bias(dsr, dbias + bh * area + i * d.Tk, pr, dot, inv_divisor, mask, b, i, d);
        continue;
      }
      for (int64_t j = 0; j < d.Tk; ++j) dsr[j] = pr[j] * (dsr[j] - dot) * inv_divisor;
      fill_masked(dsr, 0.f, mask, b, i, d);
    }
    // dQ = dS @ K,  dK = dS^T @ Q   (the 1/sqrt(dk) is already folded into dS)
    head_product(d, false, false, d.Tq, d.dk, d.Tk, ds, d.Tk, kh, ks.t, beta, dq + b * dqs.b + h * dqs.h, dqs.t);
    head_product(d, true, false, d.Tk, d.dk, d.Tq, ds, d.Tk, qh, qs.t, beta, dk_ + b * dks.b + h * dks.h, dks.t);
  }
}

void attention_bias_grad(const AttentionDims& d, const float* ds, float* dbias) {
  const int64_t area = d.Tq * d.Tk;
#pragma omp parallel for schedule(static)
  for (int64_t ij = 0; ij < area; ++ij)
    for (int64_t h = 0; h < d.H; ++h) {
      float sum = 0.f;
      for (int64_t b = 0; b < d.B; ++b) sum += ds[(b * d.H + h) * area + ij];
      dbias[ij * d.H + h] = sum;
    }
}

}  // namespace qkv::kernels
