// Products with bf16 operands and float32 sums: the arithmetic of mixed-precision training
// (`--precision bf16`) and of bf16 inference.
//
// gemm_bf16 has gemm_blocked's contract (blocked_gemm.h: C = alpha * op(A) @ op(B) + beta * C + bias,
// row-major, ld* row strides) with every element of A and B rounded to bf16 (nearest even, NaN kept)
// as it is read; the products of two bf16 values are exact in float32 and are summed in float32.
// That is what PyTorch's CPU autocast computes for a matmul, except that qkv keeps C in float32
// (autocast rounds it to bf16 too).
//
// Three builds (bf16_isa below), chosen by kernels/isa.h:
//   amx          AMX-BF16's TDPBF16PS multiplies 16 x 32 by 32 x 16 bf16 tiles into 16 x 16 float32
//                sums (bf16_amx_blocking.h), from the avx512_bf16 build's panels with each K block's
//                pairs padded to a multiple of 16. Denormals as zero, like vdpbf16ps.
//   avx512_bf16  vdpbf16ps multiplies 16 column pairs of bf16 at once (two k per instruction), from
//                panels packed per call as gemm_blocked packs its float panels; twice the float32
//                FMA rate on Zen 4. Like every vdpbf16ps, it treats bf16 denormals as zero.
//   widened      every CPU: the operands rounded to bf16 values held in float32, then gemm_blocked's
//                AVX2 FMAs; the same products, summed in another order (results agree to float32
//                rounding, not bit for bit).
// Either way, each element of C is one fixed sequence of operations whatever the thread count.
#pragma once
#include <cstdint>

namespace qkv::kernels {

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
               const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias = nullptr);

// gemm_bf16 with B given as bf16, its bits (row-major (K, N), row stride ldb; op(B) = B), and no
// bias: a bf16 copy kept for a backward (ops::saved_for_backward) multiplied as it is, where widening
// it first wrote a float32 copy twice its size and the packing read that back (dW = dY^T X of every
// linear layer in `--precision bf16`). Each build gives the bits it gives gemm_bf16 on B's float32
// values (which are exactly those bf16 values).
void gemm_bf16_b_bits(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                      const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc);

// A linear layer's weight and bias gradients in bf16 precision: dW (M x N, row stride ldw) =
// dY^T X + beta dW as gemm_bf16 with trans_a computes it (X float32, or its bf16 bits as
// gemm_bf16_b_bits reads them: exactly one of X, X_bits), and db[i] += the sum over k of dY[k][i]
// (M floats) in column_sum_accumulate's order: the same bits as those two calls. The avx512_bf16
// build sums each row of dY^T while its packing holds it in registers, instead of reading dY again
// (the bias gradient's pass took 1.3-1.9% of a Bible bf16 step on a Zen 4); the others make the two
// calls. dY is (K x M) with row stride ld_dy, X (K x N) with row stride ldx.
void gemm_bf16_weight_and_bias_grad(int64_t M, int64_t N, int64_t K, const float* dY, int64_t ld_dy, const float* X,
                                    const uint16_t* X_bits, int64_t ldx, float beta, float* dW, int64_t ldw, float* db);

// Which build gemm_bf16 runs: "amx (AMX-BF16 tiles)", "avx512_bf16 (vdpbf16ps)" or "widened to float32
// (AVX2 FMA)".
const char* gemm_bf16_description();

// Inference: a weight W (out, in) rounded to bf16 once and packed in the avx512_bf16 build's order,
// so that decoding's many small products neither convert nor pack it again (half the bytes of a
// float32 weight to stream per step). Only where that build runs (packed_bf16_available()).
// The layout: K in gemm_bf16's blocks for a row-major A; within block b, panels of 32 output
// features, panel q holding for each input pair kp the 32 words (W[q*32 + j][2kp] | W[..][2kp+1] << 16);
// inputs past `in` and features past `out` are zero. The AMX build pads each block's pairs with zero
// words to a multiple of 16 (bf16_isa::packed_pair_multiple()): the layout is the process's, never
// written to a file.
bool packed_bf16_available();  // isa_enabled(Isa::Avx512Bf16)
// 32-bit words of storage a packed (out, in) weight takes.
int64_t packed_bf16_words(int64_t out_features, int64_t in_features);
// Packs W (out, in) row-major into `storage` (packed_bf16_words words, 64-byte aligned).
void pack_bf16_weights_into(const float* W, int64_t out_features, int64_t in_features, uint32_t* storage);
// C (M, out) = bf16(A) (M, in; row stride lda) @ W^T + bias (out floats, or null), C of row stride
// ldc; float32 sums. Every element of C's M x out block is written. Requires packed_bf16_available().
void gemm_bf16_packed(const float* A, int64_t M, int64_t lda, const uint32_t* packed, int64_t out_features,
                      int64_t in_features, const float* bias_or_null, float* C, int64_t ldc);

namespace bf16_isa {

using Gemm = void (*)(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                      int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias);
// gemm_bf16_b_bits's form of a build.
using GemmBBits = void (*)(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                           const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc);
// Each build's GemmBBits: the one of the same build as `gemm` (one of the Gemm pointers below).
GemmBBits b_bits_form_of(Gemm gemm);

Gemm widened();
// Null below Isa::Avx512Bf16 (the CPU lacks it, or QKV_ISA chose a lower level).
Gemm avx512_bf16_or_null();
// Null below Isa::Amx.
Gemm amx_or_null();
// The tile build where the CPU has AMX (best_isa()), whatever level is active: for the tests. Null
// elsewhere.
Gemm amx_where_the_cpu_has_it();
// The AMX build's blocking on a scalar model of the tiles (bf16_gemm_amx_emulated.cpp): for tests,
// on every CPU; slow.
Gemm amx_emulated();
// The build gemm_bf16 uses.
Gemm chosen();

// The K block length of the avx512_bf16 build for a row-major (or, trans_a, transposed) A: even,
// at most 1024 (512), depending on K alone.
int64_t k_block(int64_t K, bool trans_a);
constexpr int64_t kPanelColumns = 32;

// The packed weights' layout for a build: each K block's pairs padded to a multiple of
// `pair_multiple` (1: the avx512_bf16 build, 16: the AMX build).
int64_t packed_words(int64_t out_features, int64_t in_features, int64_t pair_multiple);
void pack_weights_into(const float* W, int64_t out_features, int64_t in_features, int64_t pair_multiple,
                       uint32_t* storage);
// The multiple of the build gemm_bf16_packed runs: 16 at Isa::Amx, else 1.
int64_t packed_pair_multiple();

// Defined in bf16_gemm_avx512.cpp, compiled with -mavx512bf16; call only where the CPU has it.
void gemm_packed_avx512_bf16_unchecked(const float* A, int64_t M, int64_t lda, const uint32_t* packed,
                                       int64_t out_features, int64_t in_features, const float* bias, float* C,
                                       int64_t ldc);
// Defined in bf16_gemm_amx.cpp, compiled with -mamx-tile -mamx-bf16; call only at Isa::Amx. The
// packed weights in the AMX layout (pair_multiple 16).
void gemm_packed_amx_unchecked(const float* A, int64_t M, int64_t lda, const uint32_t* packed, int64_t out_features,
                               int64_t in_features, const float* bias, float* C, int64_t ldc);
void gemm_amx_unchecked(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                        int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                        const float* bias);
// Defined in bf16_gemm_amx_emulated.cpp, for every CPU.
void gemm_packed_amx_emulated(const float* A, int64_t M, int64_t lda, const uint32_t* packed, int64_t out_features,
                              int64_t in_features, const float* bias, float* C, int64_t ldc);
void gemm_amx_emulated(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                       int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias);
void gemm_avx512_bf16_unchecked(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                                const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                                int64_t ldc, const float* bias);
void gemm_avx512_bf16_weight_and_bias_grad_unchecked(int64_t M, int64_t N, int64_t K, const float* dY, int64_t ld_dy,
                                                     const float* X, const uint16_t* X_bits, int64_t ldx, float beta,
                                                     float* dW, int64_t ldw, float* db);
// gemm_bf16_weight_and_bias_grad as two calls on `gemm` (any build): the product, then the sums.
void weight_and_bias_grad_in_two_calls(Gemm gemm, int64_t M, int64_t N, int64_t K, const float* dY, int64_t ld_dy,
                                       const float* X, const uint16_t* X_bits, int64_t ldx, float beta, float* dW,
                                       int64_t ldw, float* db);
void gemm_avx512_bf16_b_bits_unchecked(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                                       int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc);
void gemm_amx_b_bits_unchecked(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                               const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc);
void gemm_amx_emulated_b_bits(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                              const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace bf16_isa

}  // namespace qkv::kernels
