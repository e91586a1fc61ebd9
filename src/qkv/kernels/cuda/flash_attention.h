// Attention on a GPU that never stores the (B, H, Tq, Tk) softmax (flash_attention.cu): the forward
// keeps two floats per query row, the backward recomputes the softmax tile by tile. The masks,
// dropout counters and gradients are kernels/attention.h's; the results agree with the CPU's to
// float32 rounding. No CUDA types: the ops include it (calls only in a -DQKV_CUDA=ON build).
#pragma once
#include <cstdint>

#include "qkv/kernels/attention.h"

namespace qkv::kernels::cuda {

// Whether the flash kernels take these dimensions: 1 <= dk <= 128, at least one query and one key.
bool flash_attention_fits(const AttentionDims& d);
// The padded head width a kernel is compiled for (32, 64 or 128).
int64_t flash_head_width(int64_t dk);

// out = attention(q, k, v); stats (B, H, Tq, 2) gets each row's softmax maximum and 1 / its sum
// (what the backward needs), or is null when no backward follows.
void flash_attention_forward(const AttentionDims& d, const float* q, HeadsView qs, const float* k, HeadsView ks,
                             const float* v, HeadsView vs, float* out, HeadsView os, float* stats,
                             const AttentionMask& mask, const AttentionDropout& drop);

// dq, dk, dv (written, or added to when accumulate) from the forward's out and stats. dbias_rows,
// unless null, gets each head's gradient of the position bias, (B, H, Tq, Tk), as the CPU's
// kernels::attention_backward writes it (kernels::cuda::attention_bias_grad sums it over the batch).
void flash_attention_backward(const AttentionDims& d, const float* dout, HeadsView dos, const float* q, HeadsView qs,
                              const float* k, HeadsView ks, const float* v, HeadsView vs, const float* out,
                              HeadsView os, const float* stats, const AttentionMask& mask,
                              const AttentionDropout& drop, float* dq, HeadsView dqs, float* dk, HeadsView dks,
                              float* dv, HeadsView dvs, bool accumulate, float* dbias_rows = nullptr);

// The same on the tensor cores (flash_attention_bf16.cu), for bf16 precision: Q, K, V, dO, the
// probabilities and dS rounded to bf16 for the products, sums and softmax in float32. The statistics
// of one form are read by the same form's backward only.
bool flash_bf16_supported();  // whether the current GPU has bf16 tensor cores (compute capability 8.0+)
void flash_attention_forward_bf16(const AttentionDims& d, const float* q, HeadsView qs, const float* k, HeadsView ks,
                                  const float* v, HeadsView vs, float* out, HeadsView os, float* stats,
                                  const AttentionMask& mask, const AttentionDropout& drop);
void flash_attention_backward_bf16(const AttentionDims& d, const float* dout, HeadsView dos, const float* q,
                                   HeadsView qs, const float* k, HeadsView ks, const float* v, HeadsView vs,
                                   const float* out, HeadsView os, const float* stats, const AttentionMask& mask,
                                   const AttentionDropout& drop, float* dq, HeadsView dqs, float* dk, HeadsView dks,
                                   float* dv, HeadsView dvs, bool accumulate, float* dbias_rows = nullptr);

}  // namespace qkv::kernels::cuda
