#include "qkv/kernels/attention_causal.h"

#include <algorithm>
#include <cstring>

#include "qkv/kernels/attention_products.h"
#include "qkv/kernels/dropout.h"
#include "qkv/kernels/softmax.h"
#include "qkv/kernels/vec_math.h"

namespace qkv::kernels::causal {
namespace {

void zero(float* from, int64_t count) {
  if (count > 0) std::memset(from, 0, static_cast<size_t>(count) * sizeof(float));
}

bool query_dropped(const AttentionMask& m, const AttentionDims& d, int64_t b, int64_t i) {
  return m.query_keep && m.query_keep[b * d.Tq + i] == 0;
}

// The first dropped query of batch row b, or Tq.
int64_t first_dropped_query(const AttentionMask& m, const AttentionDims& d, int64_t b) {
  int64_t i = 0;
  while (i < d.Tq && !query_dropped(m, d, b, i)) ++i;
  return i;
}

// Keys [0, i] rounded up to 8 (at most Tk): the lanes that the full row's vector loops put them in.
int64_t lane_span(const AttentionDims& d, int64_t i) { return std::min(d.Tk, (i + 8) / 8 * 8); }

// Score row i holding q.k for keys [0, i]: scaled, the padded keys filled, then the softmax over
// the keys rounded up to 8 (the entries past i filled: they come out 0), zeros after that.
void softmax_row_of_scores(float* row, const AttentionMask& m, const AttentionDims& d, int64_t b, int64_t i,
                           float divisor) {
  if (query_dropped(m, d, b, i)) {  // every key masked: the full row's uniform weights, as its bits
    for (int64_t j = 0; j < d.Tk; ++j) row[j] = m.fill;
    softmax_row(row, d.Tk);
    return;
  }
  const int64_t keys = i + 1, span = lane_span(d, i);
  for (int64_t j = 0; j < keys; ++j) row[j] = row[j] / divisor;
  if (m.key_keep)
    for (int64_t j = 0; j < keys; ++j)
      if (m.key_keep[b * d.Tk + j] == 0) row[j] = m.fill;
  for (int64_t j = keys; j < span; ++j) row[j] = m.fill;
  softmax_row(row, span);
  zero(row + span, d.Tk - span);
}

// Row i of dS from dPd (in place) over the block's keys [0, n): dS = P * (dP - rowsum(dP * P)) / divisor,
// zero where masked. The row sum runs over the lane span: the full row's terms past it are dP * 0.
void score_grad_row(float* dsr, const float* pr, const AttentionMask& m, const AttentionDims& d,
                    const AttentionDropout& drop, int64_t b, int64_t bh, int64_t i, int64_t n, float inv_divisor) {
  if (query_dropped(m, d, b, i)) return zero(dsr, n);  // masked_fill passes no gradient
  if (drop.p > 0.f) dropout_row(dsr, dsr, n, drop.p, drop.seed, drop.row_counter(d, bh, i));
  const float dot = simd::dot(dsr, pr, lane_span(d, i));
  for (int64_t j = 0; j < n; ++j) dsr[j] = pr[j] * (dsr[j] - dot) * inv_divisor;
  if (m.key_keep)
    for (int64_t j = 0; j <= i; ++j)
      if (m.key_keep[b * d.Tk + j] == 0) dsr[j] = 0.f;
  zero(dsr + i + 1, n - i - 1);
}

}  // namespace

bool applies(const AttentionMask& m, const AttentionDims& d, int64_t b) {
  if (!m.causal || m.bias || d.Tq != d.Tk || d.Tq < kMinLength || !(m.fill <= -1e9f)) return false;
  return !m.key_keep || m.key_keep[b * d.Tk] != 0;
}

void forward_head(const AttentionDims& d, Rows q, Rows k, Rows v, OutRows out, float* probs, float* dropped,
                  const AttentionMask& m, const AttentionDropout& drop, int64_t b, int64_t bh, float divisor) {
  for (int64_t i0 = 0; i0 < d.Tq; i0 += kBlock) {
    const int64_t i1 = std::min(d.Tq, i0 + kBlock), rows = i1 - i0;
    float* block = probs + i0 * d.Tk;
    head_product(d, false, true, rows, i1, d.dk, q.row(i0), q.stride, k.data, k.stride, 0.f, block, d.Tk);
    for (int64_t i = i0; i < i1; ++i) softmax_row_of_scores(probs + i * d.Tk, m, d, b, i, divisor);
    const float* weights = drop.p > 0.f ? dropped : probs;
    if (drop.p > 0.f)
      for (int64_t i = i0; i < i1; ++i)
        dropout_row(dropped + i * d.Tk, probs + i * d.Tk, query_dropped(m, d, b, i) ? d.Tk : i1, drop.p, drop.seed,
                    drop.row_counter(d, bh, i));
    head_product(d, false, false, rows, d.dk, i1, weights + i0 * d.Tk, d.Tk, v.data, v.stride, 0.f, out.row(i0),
                 out.stride);
    // A dropped query weighs every key: its row again over all of them (the full product's row).
    for (int64_t i = i0; i < i1; ++i)
      if (query_dropped(m, d, b, i))
        head_product(d, false, false, 1, d.dk, d.Tk, weights + i * d.Tk, d.Tk, v.data, v.stride, 0.f, out.row(i),
                     out.stride);
  }
}

void backward_head(const AttentionDims& d, Rows dout, Rows q, Rows k, Rows v, const float* probs, float* ds,
                   float* dropped, const AttentionMask& m, const AttentionDropout& drop, int64_t b, int64_t bh,
                   float inv_divisor, const HeadGrads& g) {
  // Rows from the first dropped query on are read over all keys by dV's products (below).
  const int64_t first_dropped = first_dropped_query(m, d, b);
  // Query blocks: the dropped weights, dPd = dO V^T, dS, and dQ = dS K.
  for (int64_t i0 = 0; i0 < d.Tq; i0 += kBlock) {
    const int64_t i1 = std::min(d.Tq, i0 + kBlock), rows = i1 - i0;
    if (drop.p > 0.f)
      for (int64_t i = i0; i < i1; ++i)
        dropout_row(dropped + i * d.Tk, probs + i * d.Tk, i < first_dropped ? i1 : d.Tk, drop.p, drop.seed,
                    drop.row_counter(d, bh, i));
    head_product(d, false, true, rows, i1, d.dk, dout.row(i0), dout.stride, v.data, v.stride, 0.f, ds + i0 * d.Tk,
                 d.Tk);
    for (int64_t i = i0; i < i1; ++i)
      score_grad_row(ds + i * d.Tk, probs + i * d.Tk, m, d, drop, b, bh, i, i1, inv_divisor);
    head_product(d, false, false, rows, d.dk, i1, ds + i0 * d.Tk, d.Tk, k.data, k.stride, g.beta, g.dq.row(i0),
                 g.dq.stride);
  }
  // Key blocks [j0, j1): dV = Pd^T dO over queries [j0, Tq) and the dropped ones before j0 (which
  // weigh every key; the kept queries between them weigh these keys 0), dK = dS^T Q over [j0, Tq)
  // (a dropped query's dS is 0).
  const float* weights = drop.p > 0.f ? dropped : probs;
  for (int64_t j0 = 0; j0 < d.Tk; j0 += kBlock) {
    const int64_t cols = std::min(d.Tk, j0 + kBlock) - j0, from = std::min(j0, first_dropped);
    head_product(d, true, false, cols, d.dk, d.Tq - from, weights + from * d.Tk + j0, d.Tk, dout.row(from),
                 dout.stride, g.beta, g.dv.row(j0), g.dv.stride);
    head_product(d, true, false, cols, d.dk, d.Tq - j0, ds + j0 * d.Tk + j0, d.Tk, q.row(j0), q.stride, g.beta,
                 g.dk.row(j0), g.dk.stride);
  }
}

}  // namespace qkv::kernels::causal
