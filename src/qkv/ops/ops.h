// qkv::ops — tensor operations with shape checks, forward and hand-written backward.
//
// Conventions
// - Shapes are PyTorch's: (B, T, D) means batch, time, model width; dim 0 outermost.
// - Every backward takes gradient slots `Tensor* dX`: a null slot is skipped; an undefined tensor is
//   allocated and written; a defined one is accumulated into (+=). This is how a tensor used twice
//   collects both gradients. A defined slot may share its buffer with another gradient
//   (fn::accumulate_grad hands an intermediate its first gradient without a copy): write into a
//   slot only after prepare_slot (grad_slot.h), which gives a shared one a buffer of its own.
// - A shape mismatch throws qkv::Error naming the op and both shapes.
// - Ops call kernels (raw loops); nn modules never call kernels, only ops through autograd.
// - Dispatch on dtype (and, with a second backend, device) happens here and nowhere above: an op
//   takes its inputs' dtypes and layouts as they come and picks the kernel (linear_forward with a
//   LinearWeight, embedding_forward with a bf16 table).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/ops/precision.h"

namespace qkv::ops {

// ---- linear / matmul -------------------------------------------------------------------------
// y = x @ w^T + b.   x (..., K), w (N, K) as nn.Linear stores it, b (N) or undefined -> y (..., N)
// `precision` (ops/precision.h): float32 products, or bf16 operands with float32 sums (CPU only).
Tensor linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Precision precision = product_precision());
// dx = dy @ w;  dw += dy^T @ x (over all leading dims);  db += sum of dy over leading dims. The
// products in `precision` (pass the forward's). x may be the bf16 form saved_for_backward
// kept: it is widened for the product, which in bf16 precision rounds it to the same bits.
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor* dx, Tensor* dw, Tensor* db,
                     Precision precision = product_precision());
// What a backward keeps of an activation x that nothing else keeps: in bf16 precision on the CPU, x
// rounded to bf16 (half the memory), otherwise x itself. (Not yet on a GPU: no GPU has run it.)
// - A linear layer's input (fn::InputUse::LastUse): the bf16 product of dw rounds x so anyway, so
//   the gradients are the bits of keeping x in float32.
// - GELU's, GELU-tanh's and SiLU's input: their derivative is then taken at the rounded input, as
//   under PyTorch's autocast, where the linear layer before them gives a bf16 tensor.
// linear_backward and those activations' backwards read either form.
Tensor saved_for_backward(const Tensor& x, Precision precision);

// A linear layer's weight in the form inference multiplies with, chosen once when a model's compute
// type is set (nn::Linear::set_compute_type):
// - F32, Layout::Packed: panels of 16 output features for kernels::gemm_packed (the same values;
//   another summation order than BLAS, so results agree to rounding).
// - I8, Layout::Packed, with `scale`: quantized per output channel (kernels/int8_gemm.h), `scale`
//   F32 (out padded to 16) the channels' scales; activations are quantized per row on the fly.
// - BF16, Layout::Packed where the CPU has AVX512_BF16 (kernels/bf16_gemm.h: panels of 32 output
//   features, input pairs; the input rounded to bf16 as it is read, float32 sums), else row-major:
//   the weight rounded to bfloat16, which the reference path widens, with the input rounded to bf16,
//   to float32 and multiplies in float32 (the same products), one matrix at a time.
// - F32 row-major: the weight itself (BLAS), as linear_forward(x, w, b).
// On a GPU: F32 the weight itself, BF16 row-major rounded, and I8 quantized as on the CPU into
// zero-padded rows (Layout::Packed; kernels/cuda/kernels.h: int8_weight_rows, int8_weight_ld) with
// `scale` beside it on the GPU: its products give the CPU's int8 bits (kernels::cuda::gemm_int8).
struct LinearWeight {
  Tensor weight;
  Tensor scale;
  bool defined() const { return weight.defined(); }
  int64_t out_features() const { return weight.size(0); }
  int64_t in_features() const { return weight.size(1); }
  // Bytes of storage (weight and scales).
  int64_t bytes() const { return (weight.defined() ? weight.nbytes() : 0) + (scale.defined() ? scale.nbytes() : 0); }
};
// w (out, in) f32 in the form `dtype` names: F32 packed, I8 packed with scales, BF16 packed or row-major.
// A copy: later changes to w are not seen. An I8 weight of more than
// kernels::QuantizedWeights::kMaxInFeatures inputs throws (its int32 sums could overflow).
LinearWeight prepare_linear_weight(const Tensor& w, DType dtype);
// y = x @ W^T + b with W in any LinearWeight form, dispatched on its dtype and layout. x f32.
Tensor linear_forward(const Tensor& x, const LinearWeight& w, const Tensor& b);
// linear_forward of one x with several weights (attention's W_q, W_k, W_v): ys[i] = x @ ws[i]^T +
// bs[i] (bs[i] may be undefined). The same values as separate calls. int8 weights on the CPU share one
// quantization of x and one parallel region; other forms are separate calls.
std::vector<Tensor> linear_forward_many(const Tensor& x, const std::vector<const LinearWeight*>& ws,
                                        const std::vector<Tensor>& bs);
// The activations of a feed-forward (nn::Activation is this enum).
enum class Activation { ReLU, GELU, GELUTanh, SiLU };
Tensor activation_forward(const Tensor& x, Activation act);
// linear_forward(activation_forward(h, act), w, b): a feed-forward's second product at inference.
// With an int8 weight on the CPU, each row of h goes through the activation as it is quantized,
// and act(h) is never written out; GELU there is kernels::gelu_forward_to_quantize (within 1.2e-7
// max(1, |x|) of GELU; the 8-bit step of a row is max|row| / 127), the others give the same bits as
// the two ops apart. Every other form computes act(h) first.
Tensor activation_linear_forward(const Tensor& h, Activation act, const LinearWeight& w, const Tensor& b);
// What multiplies with a prepare_linear_weight(w, dtype) weight on this machine, in words
// (`qkv info`): "qkv's packed float32 GEMM (AVX2, FMA)".
std::string linear_kernel_description(DType dtype);
// Whether a `dtype` weight multiplies through the slow reference path on this CPU (bf16 without
// AVX512_BF16): the CLI says so once.
bool linear_kernel_is_reference(DType dtype);

// Batched matmul over matching leading dims: a (..., M, K) @ b (..., K, N) -> (..., M, N);
// transpose_b uses b (..., N, K). Inputs may be any views (copied to contiguous if needed).
Tensor matmul_forward(const Tensor& a, const Tensor& b, bool transpose_b = false,
                      Precision precision = product_precision());
// da = dc @ b^T (or dc @ b when transpose_b);  db = a^T @ dc (or dc^T @ a).
void matmul_backward(const Tensor& dc, const Tensor& a, const Tensor& b, bool transpose_b, Tensor* da, Tensor* db,
                     Precision precision = product_precision());

// ---- embedding -------------------------------------------------------------------------------
// table (V, D) f32 or bf16, ids i32 (...) -> (..., D) f32. An id outside [0, V) throws naming the
// id and V.
Tensor embedding_forward(const Tensor& table, const Tensor& ids);
// dtable[id] += dout[n]  (scatter-add; repeated ids add up).
// padding_idx >= 0: lookups of that id pass no gradient (nn.Embedding's padding_idx).
void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor* dtable, const Dims& table_shape,
                        int32_t padding_idx = -1);

// ---- elementwise -----------------------------------------------------------------------------
Tensor add_forward(const Tensor& a, const Tensor& b);   // same shapes; backward: da = db = dy
Tensor scale_forward(const Tensor& x, float s);         // backward: dx = s * dy
// a * b elementwise, same shapes (a gated feed-forward's product); backward: da = dy * b, db = dy * a.
Tensor mul_forward(const Tensor& a, const Tensor& b);
void mul_backward(const Tensor& dy, const Tensor& a, const Tensor& b, Tensor* da, Tensor* db);
void scale_backward(const Tensor& dy, float s, Tensor* dx);
Tensor relu_forward(const Tensor& x);
// dx = dy * (x > 0). Passing the output y instead of x gives the same mask (y > 0 iff x > 0).
void relu_backward(const Tensor& dy, const Tensor& x_or_y, Tensor* dx);
// SiLU (swish): y = x sigmoid(x) (derivative in kernels/elementwise.h).
Tensor silu_forward(const Tensor& x);
void silu_backward(const Tensor& dy, const Tensor& x, Tensor* dx);
Tensor gelu_forward(const Tensor& x);
void gelu_backward(const Tensor& dy, const Tensor& x, Tensor* dx);
// y = tanh(x); backward from the output: d tanh(x)/dx = 1 - tanh(x)^2, so dx = dy * (1 - y^2).
Tensor tanh_forward(const Tensor& x);
void tanh_backward(const Tensor& dy, const Tensor& y, Tensor* dx);
// GELU's tanh approximation, torch's F.gelu(x, approximate='tanh') (derivative in kernels/elementwise.h).
Tensor gelu_tanh_forward(const Tensor& x);
void gelu_tanh_backward(const Tensor& dy, const Tensor& x, Tensor* dx);
// Inverted dropout with a counter-based mask drawn from (seed, offset): reproducible for any
// thread count, regenerated in backward rather than stored. p must be in [0, 1).
Tensor dropout_forward(const Tensor& x, float p, uint64_t seed, uint64_t offset);
void dropout_backward(const Tensor& dy, float p, uint64_t seed, uint64_t offset, Tensor* dx);
// Adds dy into *dx under the slot convention (used by ops whose input gradient is dy itself).
void accumulate(const Tensor& dy, Tensor* dx);

// ---- normalisation ---------------------------------------------------------------------------
enum class LayerNormVariant {
  Standard,     // nn.LayerNorm: (x - mean) / sqrt(biased variance + eps)
  UnbiasedStd,  // seed 003: (x - mean) / (unbiased std + eps), std dividing by C - 1 (so C >= 2)
  RMS,          // T5: x / sqrt(mean(x^2) + eps) * weight; no bias, no mean (CPU only for now)
};
struct LayerNormOut {
  Tensor y;       // x's shape
  Tensor mean;    // (rows) = numel / C; undefined for RMS
  Tensor rstd;    // (rows): the factor of x - mean, 1 / sqrt(var + eps) or 1 / (std + eps) (RMS: of x)
  Tensor stddev;  // (rows), UnbiasedStd only: the unbiased std, for backward
  LayerNormVariant variant = LayerNormVariant::Standard;
};
// Over the last dim C: weight (C), bias (C). UnbiasedStd refuses C = 1 (its std is undefined).
// RMS takes an undefined bias (and refuses a defined one); its backward leaves dbias alone, and on
// a CUDA tensor it throws (no GPU kernel yet). Backward derivations in kernels/layernorm.h.
LayerNormOut layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                               LayerNormVariant variant = LayerNormVariant::Standard);
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const LayerNormOut& saved,
                        Tensor* dx, Tensor* dweight, Tensor* dbias);
// Inference: layernorm(a + b) for a and b of one shape, in one pass per row (kernels::add_layernorm_forward:
// the bits of add then layernorm_forward), keeping no statistics for a backward.
Tensor add_layernorm_forward(const Tensor& a, const Tensor& b, const Tensor& weight, const Tensor& bias, float eps,
                             LayerNormVariant variant = LayerNormVariant::Standard);

// The same gradients from the output y (saved instead of x, so x can be freed). Recovering
// xhat = (y - bias) / weight costs about eps_f32 * (|xhat| + |bias / weight|) of accuracy, so this
// is used only when every |weight| >= kLayerNormMinWeight and |bias| <= kLayerNormMaxBiasRatio * |weight|
// (xhat then keeps ~1e-6 absolute accuracy); otherwise the op saves x.
constexpr float kLayerNormMinWeight = 1e-3f;
constexpr float kLayerNormMaxBiasRatio = 8.f;
// Always false on a GPU (the weights would be read on the host, a wait at every layer norm), and for
// an undefined bias (RMS, whose backward always uses x).
bool layernorm_can_use_output(const Tensor& weight, const Tensor& bias);
// `saved` needs rstd (and stddev for UnbiasedStd), not mean.
void layernorm_backward_from_output(const Tensor& dy, const Tensor& y, const Tensor& weight, const Tensor& bias,
                                    const LayerNormOut& saved, Tensor* dx, Tensor* dweight, Tensor* dbias);

// Softmax over the last dim.
Tensor softmax_forward(const Tensor& x);
void softmax_backward(const Tensor& dy, const Tensor& y, Tensor* dx);

// ---- attention -------------------------------------------------------------------------------
struct AttentionMasks {
  Tensor key_keep;    // i32 (B, Tk) or undefined: 0 = padding key, masked for all queries
  Tensor query_keep;  // i32 (B, Tq) or undefined: 0 = masked query row (seed 000's target mask)
  bool causal = false;
  float fill = -1e9f;  // value written into masked scores (seed 000: -1e9; -inf is the other choice)
  // T5: a bias added to every batch row's scores after scaling and before the masks, f32
  // (Tq, Tk, H) contiguous (the layout of an embedding lookup of (Tq, Tk) relative-position buckets),
  // or undefined. Its gradient is the scores' gradient summed over the batch (attention_backward's dbias).
  Tensor bias;
  bool scale_scores = true;  // divide q.k by sqrt(dk) (seed 000); false: T5, which folds it into its init
};
struct AttentionDropoutSpec {
  float p = 0.f;
  uint64_t seed = 0;
  uint64_t offset = 0;
};
// softmax(masked_fill(Q K^T / sqrt(dk) [+ masks.bias])) [dropout] @ V, one fused op (T5: without the / sqrt(dk)).
// q (B, H, Tq, dk), k and v (B, H, Tk, dk): may be strided views with a contiguous last dim.
// Returns out (B, H, Tq, dk) contiguous; *probs gets the saved softmax (B, H, Tq, Tk).
// inference: no gradient will be taken, so short heads may take the kernel's direct path and the softmax its AVX2 exp
// (see kernels::attention_forward); training keeps one summation order for every length. An inference call may
// pass probs null when nothing reads the softmax: it is then neither allocated nor stored (the output is the same).
Tensor attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMasks& masks,
                         const AttentionDropoutSpec& dropout, Tensor* probs, bool inference = false);
// Inference attention over a cache whose rows move by a map instead of being copied (beam search):
// key and value j of row b of q are position j of row key_rows[b, j] of k and v. q (B, H, Tq, dk) with
// Tq <= 8, k and v (Bk, H, Tk, dk) with any Bk (rows that ended keep their storage), key_rows i32
// (B, Tk) with a contiguous last dim, every entry in [0, Bk). Same numbers as attention_forward on
// the rows gathered into place, masks.bias (Tq, Tk, H) and scale_scores included.
Tensor attention_forward_mapped(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_rows,
                                const AttentionMasks& masks, Tensor* probs);
// dbias: the gradient of masks.bias (Tq, Tk, H), under the slot convention (null: not wanted).
// On a CUDA tensor, a bias or scale_scores == false throws (not implemented there yet).
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                        const AttentionMasks& masks, const AttentionDropoutSpec& dropout, Tensor* dq, Tensor* dk,
                        Tensor* dv, Tensor* dbias = nullptr);
// What a training forward keeps for its backward (the *_saving forwards). On the CPU, or where the
// caller reads the weights, the softmax itself (probs, (B, H, Tq, Tk)). On a GPU otherwise the
// rows' softmax statistics (stats, (B, H, Tq, 2)) and the output, from which the backward recomputes
// the softmax tile by tile (FlashAttention): nothing of size Tq x Tk is kept.
struct AttentionSaved {
  Tensor probs;
  Tensor stats;
  Tensor out;  // (B, H, Tq, dk): the result, or the heads view of a multi-head result
  // The products ran in bf16 (bf16 precision: on a GPU the flash kernels on the tensor cores, on the
  // CPU bf16 operands with float32 sums): the backward's do too.
  bool bf16 = false;
};
// attention_forward in training, keeping in *saved what the backward needs; keep_weights: the
// softmax is wanted (saved->probs is then always it).
Tensor attention_forward_saving(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMasks& masks,
                                const AttentionDropoutSpec& dropout, AttentionSaved* saved, bool keep_weights);
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const AttentionSaved& saved, const AttentionMasks& masks, const AttentionDropoutSpec& dropout,
                        Tensor* dq, Tensor* dk, Tensor* dv, Tensor* dbias = nullptr);
// Multi-head attention on projections: q (B, Tq, D), k and v (B, Tk, D), each read as H heads of
// dk = D / H (split_heads views); returns (B, Tq, D), the heads combined. The arithmetic of
// combine_heads(attention_forward(split_heads(q), split_heads(k), split_heads(v))), bit for bit,
// without the copies: the kernel writes each head's output straight into its columns, and the
// backward reads dout and writes dq, dk, dv (slots shaped like q, k, v) the same way.
Tensor multi_head_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t num_heads,
                                    const AttentionMasks& masks, const AttentionDropoutSpec& dropout, Tensor* probs,
                                    bool inference = false);
void multi_head_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                   int64_t num_heads, const Tensor& probs, const AttentionMasks& masks,
                                   const AttentionDropoutSpec& dropout, Tensor* dq, Tensor* dk, Tensor* dv,
                                   Tensor* dbias = nullptr);
Tensor multi_head_attention_forward_saving(const Tensor& q, const Tensor& k, const Tensor& v, int64_t num_heads,
                                           const AttentionMasks& masks, const AttentionDropoutSpec& dropout,
                                           AttentionSaved* saved, bool keep_weights);
void multi_head_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                   int64_t num_heads, const AttentionSaved& saved, const AttentionMasks& masks,
                                   const AttentionDropoutSpec& dropout, Tensor* dq, Tensor* dk, Tensor* dv,
                                   Tensor* dbias = nullptr);
// 1 where ids != pad_id, else 0: i32 of ids' shape.
Tensor keep_mask(const Tensor& ids, int32_t pad_id);
// The composed (unfused) masked fill used to test the fused op: scores (B, H, Tq, Tk).
Tensor masked_fill_forward(const Tensor& scores, const AttentionMasks& masks);
void masked_fill_backward(const Tensor& dy, const AttentionMasks& masks, Tensor* dscores);

// Row i of the result is row rows[i] of `in` along dim 0 (beam reordering, dropping rows). On a
// GPU, one launch for all the rows.
Tensor gather_rows(const Tensor& in, const std::vector<int64_t>& rows);
// A key/value cache (N, H, capacity, dk), contiguous, reordered out of place: row i of the result
// (rows.size(), H, capacity, dk) is row rows[i] of `cache` over positions [0, length); the rest is
// left unset (a cache's positions past its length are never read).
Tensor gather_cache_rows(const Tensor& cache, const std::vector<int64_t>& rows, int64_t length);

// ---- heads -----------------------------------------------------------------------------------
// (B, T, D) -> (B, H, T, D / H): a view (no copy), as x.view(B, T, H, dk).transpose(1, 2).
Tensor split_heads(const Tensor& x, int64_t num_heads);
// (B, H, T, dk) -> (B, T, H * dk) contiguous: x.transpose(1, 2).contiguous().view(B, T, D).
Tensor combine_heads(const Tensor& x);
// Gradients: split's backward is combine of dy; combine's backward is split of dy (then copied).

// ---- positional encoding ---------------------------------------------------------------------
// x (B, T, D) + table[:T] with table (max_len, D). T > max_len throws naming both.
Tensor add_positional_forward(const Tensor& x, const Tensor& table);
Tensor sinusoidal_table(int64_t max_len, int64_t d_model);
// Marian's layout (sines, then cosines): kernels/positional.h.
Tensor sinusoidal_table_halves(int64_t max_len, int64_t d_model);
// M2M100's / fairseq's layout, row p for fairseq position p + first_position: kernels/positional.h.
Tensor sinusoidal_table_fairseq(int64_t max_len, int64_t d_model, int64_t first_position);

// ---- loss ------------------------------------------------------------------------------------
struct CrossEntropyOut {
  Tensor loss;      // scalar (1): mean over non-ignored rows (NaN if none, as PyTorch)
  Tensor lse;       // (N) log-sum-exp per row, saved for backward
  Tensor row_loss;  // (N) unreduced per-row loss (0 for ignored rows)
  int64_t valid = 0;
};
// logits (N, V), targets i32 (N) with ids in [0, V) or == ignore_index.
CrossEntropyOut cross_entropy_forward(const Tensor& logits, const Tensor& targets, int32_t ignore_index,
                                      float label_smoothing);
// dlogits = dloss / valid * (softmax - (1 - eps) onehot - eps / V), zero on ignored rows.
void cross_entropy_backward(float dloss, const Tensor& logits, const Tensor& targets, const CrossEntropyOut& saved,
                            int32_t ignore_index, float label_smoothing, Tensor* dlogits);
// The same, overwriting `logits` (contiguous, not shared) with the gradient and returning it: saves
// a (N, V) buffer at the memory peak of a training step.
Tensor cross_entropy_backward_inplace(float dloss, Tensor logits, const Tensor& targets, const CrossEntropyOut& saved,
                                      int32_t ignore_index, float label_smoothing);

// ---- in-place updates (optimizers, gradient clipping and accumulation) -------------------------
// The scalars of one Adam step (kernels/adam.h: PyTorch 1.13's single-tensor Adam, same rounding).
struct AdamScalars {
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float step_size;             // lr / (1 - beta1^t), computed in double and rounded
  float bias_correction2_sqrt;
  float eps;
  float weight_decay;          // L2 added to the gradient, as torch.optim.Adam
  float param_scale = 1.f;     // AdamW's decoupled decay: the parameter times this first (rounded)
};
// param, exp_avg, exp_avg_sq updated in place from grad; all f32, contiguous, of one shape.
void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamScalars& s);
// One parameter of adam_step_many, with its own AdamW decay factor (AdamScalars::param_scale).
struct AdamTensors {
  Tensor* param;
  const Tensor* grad;
  Tensor* exp_avg;
  Tensor* exp_avg_sq;
  float param_scale = 1.f;
};
// adam_step on every parameter (each with its param_scale; s.param_scale is not read): the same bits
// as one call each. A GPU's parameters are updated together, in a few launches.
void adam_step_many(const std::vector<AdamTensors>& tensors, const AdamScalars& s);
// x *= s in place (x f32, contiguous).
void scale_inplace(Tensor& x, float s);
// acc += x in place (f32, contiguous, one shape).
void add_inplace(Tensor& acc, const Tensor& x);
// Sum of x^2 over all elements, accumulated in double (clip_grad_norm).
double sum_of_squares(const Tensor& x);
// The sum over tensors of their sums of squares (clip_grad_norm): on a GPU the host waits once, not
// once per tensor. Tensors of one device; the sums added in order.
double sum_of_squares(const std::vector<Tensor>& xs);

// ---- decoding ----------------------------------------------------------------------------------
// Each row of x (N, V) f32 contiguous becomes its log-softmax, in place (kernels::log_softmax_row:
// vectorised exponentials, the sum in double); returns the rows' normalisers (N): NaN for a row
// with NaN logits, -inf for a row of -inf.
Tensor log_softmax_rows_inplace(Tensor& x);
// The `count` (1 to max_top_of_rows()) highest entries of each row of x (N, V) f32 and their column
// ids, best first, ties to the smaller id; -inf and NaN are never taken, and places left over hold
// -inf and id -1. (N, count) f32 values and i32 ids on x's device: on a GPU a search step brings back
// these instead of every score.
std::pair<Tensor, Tensor> top_of_rows(const Tensor& x, int64_t count);
int64_t max_top_of_rows();

}  // namespace qkv::ops
