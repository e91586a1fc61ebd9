// Causal self-attention in training, one head at a time, without the masked upper triangle.
//
// Query i of a causal self-attention (Tq == Tk) reads keys [0, i] alone, yet the full per-head
// products compute every score and every weighted sum: at 256 positions, 44% of their work is on
// masked entries (a GPT step's attention spent 8% of the step there). Here the queries go in blocks
// of kBlock: block [i0, i1) multiplies against keys [0, i1) alone, and the key-side products of the
// backward (dV, dK) take, for keys [j0, j1), the queries [j0, Tq) alone.
//
// The bits are those of attention.cpp's full products (up to 512 positions, the largest K that
// gemm_blocked sums in one block when A is transposed): gemm_blocked sums each element over k in one
// order whatever M and N, and the terms skipped are exact zeros (masked weights and their
// gradients; exp of the fill is 0). A row's softmax runs over its keys rounded up to 8, so that
// softmax_row sums them in the lanes the full row puts them in. tests/ops/fused_attention_test.cpp
// checks this against the full path (which a position bias of zeros takes).
#pragma once
#include <cstdint>

#include "qkv/kernels/attention.h"

namespace qkv::kernels::causal {

// A head's rows: row t at data + t * stride.
struct Rows {
  const float* data;
  int64_t stride;
  const float* row(int64_t t) const { return data + t * stride; }
};
struct OutRows {
  float* data;
  int64_t stride;
  float* row(int64_t t) const { return data + t * stride; }
};

// Queries per block: a multiple of gemm_blocked's 6-row tile and of 8 (so a row's keys rounded up
// to 8 stay inside its block but for the last). At 256 positions the blocks compute 59% of the
// full products' entries.
constexpr int64_t kBlock = 48;
// Heads shorter than two blocks keep the full products.
constexpr int64_t kMinLength = 2 * kBlock;

// Whether batch row b's heads can run in blocks: causal self-attention (Tq == Tk, at least two
// blocks long), no position bias, key 0 kept (so that every kept query has a key and its masked
// entries weigh exactly 0), a fill of -1e9 or below. A dropped query (the seed's target mask on
// padding) masks every key, so its softmax is uniform over all Tk of them: its row is computed over
// all keys, and dV's products for keys past it read it too.
bool applies(const AttentionMask& m, const AttentionDims& d, int64_t b);

// The forward of head bh (batch row b): probs (Tq, Tk) gets the softmax, zeros past each row's
// keys; `dropped`, when dropout is on, the dropped weights (Tq, Tk) the values are summed with.
void forward_head(const AttentionDims& d, Rows q, Rows k, Rows v, OutRows out, float* probs, float* dropped,
                  const AttentionMask& m, const AttentionDropout& drop, int64_t b, int64_t bh, float divisor);

// The backward of head bh, as attention_backward's (attention.h) for the full head. probs: the
// forward's softmax (zeros past each row's keys); ds and dropped: (Tq, Tk) scratch each; beta 1 adds
// to dq, dk, dv.
struct HeadGrads {
  OutRows dq, dk, dv;
  float beta;
};
void backward_head(const AttentionDims& d, Rows dout, Rows q, Rows k, Rows v, const float* probs, float* ds,
                   float* dropped, const AttentionMask& m, const AttentionDropout& drop, int64_t b, int64_t bh,
                   float inv_divisor, const HeadGrads& grads);

}  // namespace qkv::kernels::causal
