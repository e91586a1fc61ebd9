// Fused scaled dot-product attention for (B, H) heads:
//   S = (Q @ K^T) / sqrt(dk) [+ bias]   (Tq, Tk) per head; T5: no division, a position bias
//   S[masked] = fill                     masked_fill, as seed 000 does (not an addition)
//   P = softmax(S)                       saved for backward, (B, H, Tq, Tk)
//   O = dropout(P) @ V                   (Tq, dk) per head
// Q, K, V, O may be strided views (e.g. split heads of a (B, T, D) tensor); the last dim is contiguous.
#pragma once
#include <cstdint>

namespace qkv::kernels {

struct HeadsView {  // element strides of a (B, H, T, dk) view
  int64_t b, h, t;
};

struct AttentionDims {
  int64_t B, H, Tq, Tk, dk;
  // Training in bf16 precision: the products' operands rounded to bf16, float32 sums (Q K^T, P V and
  // the backward's four; attention_products.h). The softmax and its backward stay float32.
  bool bf16_products = false;
};

struct AttentionMask {
  const int32_t* key_keep = nullptr;    // (B, Tk): 0 masks key column j for every query (padding)
  const int32_t* query_keep = nullptr;  // (B, Tq): 0 masks every key of query row i (seed's tgt mask)
  bool causal = false;                  // masks key j > i + (Tk - Tq)
  float fill = -1e9f;                   // seed 000's value; -inf turns fully masked rows into NaN
  // T5: added to the scores after the scale, before the masks, shared by the batch rows. (Tq, Tk, H):
  // element (h, i, j) at (i * Tk + j) * H + h. Null: none.
  const float* bias = nullptr;
  bool scale_scores = true;  // divide q.k by sqrt(dk); false (T5): by exactly 1
};

struct AttentionDropout {
  float p = 0.f;  // on the attention weights; 0 disables
  uint64_t seed = 0;
  uint64_t offset = 0;  // counter base: element (b, h, i, j) draws offset + ((b*H + h)*Tq + i)*Tk + j

  // The counter of element (b, h, i, 0), bh = b * H + h: dropout_row's for row i of that head.
  uint64_t row_counter(const AttentionDims& d, int64_t bh, int64_t i) const {
    return offset + static_cast<uint64_t>((bh * d.Tq + i) * d.Tk);
  }
};

// A cache whose rows are moved by a map rather than copied (beam search reorders its sequences every
// step): key and value j of batch row b of q are position j of batch row rows[b * stride + j] of k
// and v, whose batch dimension may be larger than q's (rows that ended keep their storage).
struct KeyRows {
  const int32_t* rows = nullptr;  // null: batch row b's keys are in batch row b
  int64_t stride = 0;
};

// scratch: scratch_slots * Tq * Tk floats, one slot per OpenMP thread (used only when dropout p > 0).
// probs: (B, H, Tq, Tk), or null in inference when nothing reads the softmax (not stored then).
// inference: no gradient will be taken. Without dropout, heads of at most 8 queries (decoding
// steps) then skip BLAS for a dot product per key, heads of more queries and at most 128 keys
// (sentences being embedded, prompts) go through register tiles (attention_tiles.h), and the
// softmax uses AVX2 exp. Off in training, whose numbers then never depend on the sequence length's
// path (and stay those of checkpoints written before these paths existed).
// key_rows: given, the call must be inference without dropout; it always takes the direct path
// (the same arithmetic as with the rows copied into place, so the same bits).
// A mask with a bias never takes the register tiles (short heads take the per-query path instead).
void attention_forward(const AttentionDims& d, const float* q, HeadsView qs, const float* k, HeadsView ks,
                       const float* v, HeadsView vs, float* out, HeadsView os, float* probs,
                       const AttentionMask& mask, const AttentionDropout& drop, float* scratch,
                       int scratch_slots, bool inference = false, const KeyRows& key_rows = {});

// Per head, with Pd = dropout(P) and dS the gradient w.r.t. the scaled scores S:
//   dV = Pd^T @ dO
//   dPd = dO @ V^T;  dP = dropout_mask(dPd)
//   dS = P * (dP - rowsum(dP * P))        (softmax backward)
//   dS[masked] = 0                        (masked_fill passes no gradient)
//   dQ = dS @ K / sqrt(dk);  dK = dS^T @ Q / sqrt(dk)      (without the division when !scale_scores)
// dq, dk_, dv are written, or added to when accumulate is set.
// dbias, unless null: (B, H, Tq, Tk), written with each head's dS (the bias's gradient before the
// sum over batch rows, which attention_bias_grad takes).
// The softmax P the forward kept, (B, H, Tq, Tk): float32, or the bits of its bf16 rounding (bf16
// precision keeps it so, at half the memory; each head is widened into scratch as it is read).
struct SavedProbs {
  SavedProbs(const float* f32) : f32(f32) {}  // NOLINT: a float32 softmax is the usual case
  explicit SavedProbs(const uint16_t* bf16) : bf16(bf16) {}
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;
};
// scratch: scratch_slots * attention_backward_scratch(d, probs) floats.
int64_t attention_backward_scratch(const AttentionDims& d, const SavedProbs& probs);
void attention_backward(const AttentionDims& d, const float* dout, HeadsView dos, const float* q, HeadsView qs,
                        const float* k, HeadsView ks, const float* v, HeadsView vs, const SavedProbs& probs,
                        const AttentionMask& mask, const AttentionDropout& drop, float* dq, HeadsView dqs,
                        float* dk_, HeadsView dks, float* dv, HeadsView dvs, bool accumulate, float* scratch,
                        int scratch_slots, float* dbias = nullptr);

// dbias (Tq, Tk, H) = ds (B, H, Tq, Tk) summed over B (batch rows in order), in the bias's layout.
void attention_bias_grad(const AttentionDims& d, const float* ds, float* dbias);

}  // namespace qkv::kernels
