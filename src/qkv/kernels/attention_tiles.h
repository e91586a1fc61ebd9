// Inference attention of one head over a short sequence (a sentence being embedded or a prompt
// being read: more than 8 queries, at most 128 keys, dk a multiple of 8), in register tiles of 3
// queries: the head's keys transposed once, so that a tile's scores are 3 x 32 multiply-adds per
// dimension with no horizontal sums; masks and softmax on whole 8-key vectors (the row padded to a
// multiple of 8 with -inf, so no scalar tail); the weighted sum of values in 3 x 32 tiles.
// attention_forward (attention.h) calls it; its per-query path remains for decoding steps.
#pragma once
#include <cstdint>
#include <vector>

#include "qkv/kernels/attention.h"

namespace qkv::kernels::tiles {

// Heads this path takes: dk a multiple of 8 up to 256, 1 to 128 keys.
bool supports(const AttentionDims& d);

// Per-thread buffers, reused across the heads a thread computes in one attention call.
struct HeadScratch {
  std::vector<float> keys_t;    // dk x padded Tk: the head's keys transposed, padding keys zero
  std::vector<float> keep;      // per padded key: all bits set where the key takes part (kept, < Tk)
  std::vector<float> in_range;  // per padded key: all bits set below Tk
  std::vector<float> fill;      // per padded key: the mask's fill below Tk, -inf past it
  std::vector<float> scores;    // 3 x padded Tk: a tile's score rows, then its probabilities
  int64_t masks_of_row = -1;    // the batch row whose keep, in_range and fill these are (one call's)
  bool some_key_masked = false;  // a padded or masked key among them (its scores' exp rounds to 0)
};

// One head (batch row b): q, k, v and out rows at the given strides (last dim contiguous); probs
// (Tq, Tk) receives the softmax unless null. A row's output does not depend on the rows it shares
// a tile with.
void attend_head(const AttentionDims& d, const float* q, int64_t q_stride, const float* k, int64_t k_stride,
                 const float* v, int64_t v_stride, float* out, int64_t out_stride, float* probs,
                 const AttentionMask& mask, int64_t b, float divisor, HeadScratch& scratch);

}  // namespace qkv::kernels::tiles
