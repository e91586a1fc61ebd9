// CUDA kernels: the GPU side of the CPU kernels in kernels/*.h, with the same signatures and the
// same meaning, on device pointers. Each host function launches on the stream of the current CUDA
// device (core/cuda_runtime.h: cuda::current_stream(); ops make the tensor's device current) and
// returns without waiting, except where it returns a value computed on the device (it then waits
// for that value). A failed launch throws qkv::DeviceError naming the kernel (QKV_CUDA_CHECK).
//
// This header has no CUDA types, so the ops (plain C++) can include it. Its functions exist only in
// a build with -DQKV_CUDA=ON; ops call them inside `if constexpr (cuda::kBuilt)` (ops/dispatch.h).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "qkv/core/dtype.h"
#include "qkv/kernels/adam.h"
#include "qkv/kernels/attention.h"

namespace qkv::kernels::cuda {

// ---- matrix products through cuBLAS (kernels/gemm.h; gemm.cu) ----------------------------------
// Row-major C = alpha * op(A) @ op(B) + beta * C, float32 with float32 accumulation: cuBLAS's
// default math, no TF32 (set QKV_CUDA_TF32=1 to allow it).
void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
// C = alpha * op(A) @ op(B) + bias (N floats, or null) on every row: a linear layer's forward.
void sgemm_plus_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                     int64_t lda, const float* B, int64_t ldb, const float* bias, float* C, int64_t ldc);
// `batch` products of the same shapes, operand i at A + i * stride_a (and likewise B, C).
void sgemm_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b, float beta, float* C,
                   int64_t ldc, int64_t stride_c, int64_t batch);
// The products of ops in bf16 precision (ops/precision.h), `batch` of them (operand i at A + i *
// stride_a, likewise B and C): op(A) and op(B) rounded to bf16 (nearest even, as kernels::gemm_bf16
// and Tensor::to(BF16)), products summed in float32 by cuBLAS, C float32: C = alpha op(A) op(B) +
// beta C, then + bias (N floats, or null) on every row. The rounded operands are contiguous scratch.
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
               int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b, float beta, float* C, int64_t ldc,
               int64_t stride_c, int64_t batch, const float* bias = nullptr);
// A bf16 weight's product: C (M, N) = X (M, K) bf16 @ W (N, K)^T bf16, float32 sums, + bias; C f32.
void gemm_bf16_nt(int64_t M, int64_t N, int64_t K, const bfloat16* X, const bfloat16* W, const float* bias,
                  float* C);

// ---- int8 products (kernels/int8_gemm.h's scheme; int8_gemm.cu) ------------------------------
// An int8 weight on a GPU (ops::prepare_linear_weight): row-major (int8_weight_rows(out),
// int8_weight_ld(in)) int8, quantized per output channel as on the CPU, zeros past `in` and past
// `out` (cuBLAS's int8 products ask for dimensions that are multiples of 4), and int8_weight_rows(out)
// float scales (0 past `out`).
constexpr int64_t int8_weight_ld(int64_t in_features) { return (in_features + 3) / 4 * 4; }
constexpr int64_t int8_weight_rows(int64_t out_features) { return (out_features + 3) / 4 * 4; }
// C (M, N) = dequantized(quantize(X) @ Wq^T) + bias with kernels::gemm_int8's arithmetic, so its
// bits: X (M, K) f32 quantized per row (scale max|x| / 127, round-half-even of x * 127 / max|x|),
// the products summed exactly in int32 (cuBLAS), C = float(sum) * (x_scale * w_scale) + bias in one
// fused multiply-add. Wq and w_scales in the form above; bias N floats or null; C (M, N) f32.
void gemm_int8(int64_t M, int64_t N, int64_t K, const float* X, const int8_t* Wq, const float* w_scales,
               const float* bias, float* C);

// ---- rows (ops::gather_rows, beam search's cache reordering; rows.cu) ----------------------------
// For i < n and s < segments: row i of `out` gets row rows[i] of `in` (host ids), `count` elements
// at the start of each of a row's `segments` segments, `stride` elements apart (a row is segments x
// stride elements; a key/value cache's row: heads x capacity x dk, the first `length` positions of
// each head). Elements of element_size bytes (1, 2, 4 or 8). A launch per 512 rows, the ids in its
// arguments.
void copy_rows(void* out, const void* in, const int64_t* rows, int64_t n, int64_t segments, int64_t stride,
               int64_t count, int64_t element_size);

// ---- elementwise (kernels/elementwise.h) --------------------------------------------------------
void add(float* out, const float* a, const float* b, int64_t n);
void add_inplace(float* acc, const float* x, int64_t n);
void mul(float* out, const float* a, const float* b, int64_t n);
void mul_backward(float* d, const float* dy, const float* other, int64_t n, bool accumulate);
void scale(float* out, const float* x, float s, int64_t n);
void axpy(float* acc, const float* x, float s, int64_t n);
void add_row_broadcast(float* out, const float* x, const float* row, int64_t rows, int64_t width);
void relu_forward(float* y, const float* x, int64_t n);
void relu_backward(float* dx, const float* dy, const float* x, int64_t n, bool accumulate);
void silu_forward(float* y, const float* x, int64_t n);
void silu_backward(float* dx, const float* dy, const float* x, int64_t n, bool accumulate);
void gelu_forward(float* y, const float* x, int64_t n);
void gelu_backward(float* dx, const float* dy, const float* x, int64_t n, bool accumulate);
void gelu_tanh_forward(float* y, const float* x, int64_t n);
void gelu_tanh_backward(float* dx, const float* dy, const float* x, int64_t n, bool accumulate);
void tanh_forward(float* y, const float* x, int64_t n);
// dx = dy * (1 - y^2) from the output y.
void tanh_backward(float* dx, const float* dy, const float* y, int64_t n, bool accumulate);
// The CPU's masks bit for bit: element i keeps when kernels::dropout_keep(seed, offset + i, p).
void dropout_forward(float* y, const float* x, int64_t n, float p, uint64_t seed, uint64_t offset);
void dropout_backward(float* dx, const float* dy, int64_t n, float p, uint64_t seed, uint64_t offset,
                      bool accumulate);
// out[c] += sum_r x[r, c] (a linear layer's bias gradient); out[r, :] = row[:] for every r.
void column_sum_accumulate(float* out, const float* x, int64_t rows, int64_t cols);
void broadcast_rows(float* out, const float* row, int64_t rows, int64_t cols);
// out[i] = ids[i] != pad_id.
void keep_mask(int32_t* out, const int32_t* ids, int64_t n, int32_t pad_id);
// x (B, T, D) += table[t, :] for each (b, t): out may be x.
void add_positional(float* out, const float* x, const float* table, int64_t B, int64_t T, int64_t D);
// Every element of a float32 array set to `value`.
void fill(float* out, float value, int64_t n);
// Sum of x^2 in double (clip_grad_norm); waits for the result.
double sum_of_squares(const float* x, int64_t n);
// The sum of every array's sum of squares, waiting once for all of them.
double sum_of_squares_many(const std::vector<std::pair<const float*, int64_t>>& arrays);
// PyTorch 1.13's single-tensor Adam with the same float32 operations as kernels::adam_step (adam.cu).
void adam_step(float* param, const float* grad, float* m, float* v, int64_t n, const kernels::AdamScalars& s);
// One tensor of adam_step_many: its arrays of n floats and its AdamW decay factor (param_scale).
struct AdamArrays {
  float* param;
  const float* grad;
  float *m, *v;
  int64_t n;
  float param_scale;
};
// adam_step on every tensor, each with its own param_scale (s.param_scale is not read), in a launch
// per 36 tensors or 16M elements: the same operations element by element, so the same bits.
void adam_step_many(const std::vector<AdamArrays>& arrays, const kernels::AdamScalars& s);

// ---- layernorm (kernels/layernorm.h; same arguments, same derivations) --------------------------
void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* weight,
                       const float* bias, int64_t rows, int64_t C, float eps);
void add_layernorm_forward(float* y, const float* a, const float* b, const float* weight, const float* bias,
                           int64_t rows, int64_t C, float eps, bool unbiased);
void layernorm_backward(float* dx, float* dweight, float* dbias, const float* dy, const float* x,
                        const float* mean, const float* rstd, const float* weight, int64_t rows, int64_t C,
                        bool accumulate_dx);
void layernorm_backward_from_output(float* dx, float* dweight, float* dbias, const float* dy, const float* y,
                                    const float* rstd, const float* weight, const float* bias, int64_t rows,
                                    int64_t C, bool accumulate_dx);
void layernorm_unbiased_forward(float* y, float* mean, float* rdenom, float* stddev, const float* x,
                                const float* weight, const float* bias, int64_t rows, int64_t C, float eps);
void layernorm_unbiased_backward(float* dx, float* dweight, float* dbias, const float* dy, const float* x,
                                 const float* mean, const float* rdenom, const float* stddev, const float* weight,
                                 int64_t rows, int64_t C, bool accumulate_dx);
void layernorm_unbiased_backward_from_output(float* dx, float* dweight, float* dbias, const float* dy,
                                             const float* y, const float* rdenom, const float* stddev,
                                             const float* weight, const float* bias, int64_t rows, int64_t C,
                                             bool accumulate_dx);
void rms_norm_forward(float* y, float* rstd, const float* x, const float* weight, int64_t rows, int64_t C, float eps);
void add_rms_norm_forward(float* y, const float* a, const float* b, const float* weight, int64_t rows, int64_t C,
                          float eps);
void rms_norm_backward(float* dx, float* dweight, const float* dy, const float* x, const float* rstd,
                       const float* weight, int64_t rows, int64_t C, bool accumulate_dx);

// ---- embedding (kernels/embedding.h) ------------------------------------------------------------
// Ids are checked here, on the device: the position n of the first id outside [0, V) is returned
// (the call waits for it; the op reads the id itself), -1 when every id is valid.
int64_t embedding_forward(float* out, const float* table, const int32_t* ids, int64_t N, int64_t D, int64_t V);
int64_t embedding_forward_bf16(float* out, const bfloat16* table, const int32_t* ids, int64_t N, int64_t D,
                               int64_t V);
// dtable[ids[n], :] += dout[n, :] (atomic adds), skipping n where ids[n] == padding_idx (>= 0).
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int64_t D,
                        int32_t padding_idx);

// ---- softmax, losses, decoding (kernels/softmax.h, cross_entropy.h, log_softmax.h) --------------
void softmax_forward(float* y, const float* x, int64_t rows, int64_t C);
void softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t C, bool accumulate);
// As kernels::cross_entropy_forward: lse (N), row_loss (N) or null; returns the sum of the valid
// rows' losses (in double) and *valid their count (the call waits for both). Targets outside [0, V)
// other than ignore_index: *bad_target gets the first such row, else -1.
double cross_entropy_forward(float* lse, float* row_loss, const float* logits, const int32_t* targets, int64_t N,
                             int64_t V, int32_t ignore_index, float label_smoothing, int64_t* valid,
                             int64_t* bad_target);
// dlogits may be logits (in place).
void cross_entropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                            int64_t N, int64_t V, int32_t ignore_index, float label_smoothing, float scale);
// Each row of x (N, C) becomes its log-softmax in place; lse (N) gets the rows' normalisers.
void log_softmax_rows(float* x, float* lse, int64_t N, int64_t C);
// The k (<= kMaxTopOfRows) highest entries of each row of x (N, V) with their column ids, best first,
// ties to the smaller id; -inf and NaN are never taken, and places left over hold -inf and id -1.
// values and ids (N, k) on the device (top_of_rows.cu).
inline constexpr int kMaxTopOfRows = 16;
void top_of_rows(const float* x, int64_t N, int64_t V, int k, float* values, int32_t* ids);

// ---- attention (kernels/attention.h: the same views, masks, dropout counters and gradients) -----
// probs may be null (inference). key_rows as the CPU's (beam search's mapped cache).
void attention_forward(const AttentionDims& d, const float* q, HeadsView qs, const float* k, HeadsView ks,
                       const float* v, HeadsView vs, float* out, HeadsView os, float* probs,
                       const AttentionMask& mask, const AttentionDropout& drop, const KeyRows& key_rows = {});
// dq, dk, dv are written, or added to when accumulate is set. probs is the forward's softmax.
// dbias, unless null: each head's gradient of the position bias, (B, H, Tq, Tk), as the CPU's.
void attention_backward(const AttentionDims& d, const float* dout, HeadsView dos, const float* q, HeadsView qs,
                        const float* k, HeadsView ks, const float* v, HeadsView vs, const float* probs,
                        const AttentionMask& mask, const AttentionDropout& drop, float* dq, HeadsView dqs,
                        float* dk, HeadsView dks, float* dv, HeadsView dvs, bool accumulate,
                        float* dbias = nullptr);
// dbias (Tq, Tk, H) = ds (B, H, Tq, Tk) summed over B in order, as kernels::attention_bias_grad.
void attention_bias_grad(const AttentionDims& d, const float* ds, float* dbias);

}  // namespace qkv::kernels::cuda
