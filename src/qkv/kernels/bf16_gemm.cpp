// gemm_bf16's widened build, for every CPU, and the choice of build (bf16_gemm.h).
#include "qkv/kernels/bf16_gemm.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/dtype.h"
#include "qkv/kernels/blocked_gemm.h"
#include "qkv/kernels/elementwise.h"
#include "qkv/kernels/isa.h"
#include "qkv/kernels/product_clock.h"

namespace qkv::kernels {

namespace {

// rows x cols floats of a matrix with row stride ld, each rounded to its bf16 value, into dst
// (row stride cols).
// 8 lanes at a time with core/dtype.h's rule (bf16_bits_of): nearest even, a NaN kept quiet. The
// plain loop over f32_to_bf16, which GCC vectorizes too, took 1.5x this one's time on a head's
// 36 x 64 operand (about 600 against 390 ns, -O3 -march=x86-64-v3 on the Zen 4 without AVX-512):
// it runs for every head's operands once bf16 precision multiplies attention in bf16.
void round_rows_to_bf16_values(const float* src, int64_t rows, int64_t cols, int64_t ld, float* dst) {
  const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7fff), kept = _mm256_set1_epi32(-65536);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i quiet = _mm256_set1_epi32(0x00400000);
  for (int64_t i = 0; i < rows; ++i) {
    const float* s = src + i * ld;
    float* d = dst + i * cols;
    int64_t j = 0;
    for (; j + 8 <= cols; j += 8) {
      const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(s + j));
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
      const __m256i rounded = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(half, lsb)), kept);
      const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
      const __m256i quieted = _mm256_and_si256(_mm256_or_si256(u, quiet), kept);
      _mm256_storeu_ps(d + j, _mm256_castsi256_ps(_mm256_blendv_epi8(rounded, quieted, nan)));
    }
    for (; j < cols; ++j) d[j] = bf16_to_f32(f32_to_bf16(s[j]));
  }
}

// Large operands (a training step's linear layers: a GPT's 2048 x 2048) are split among the threads
// by rows: a pass on one thread while the other waited took about a tenth of a GPT bf16 step on
// the Zen 4 without AVX-512 (perf: 5.8% of its samples). Elementwise, so the bits do not depend on
// the split. Inside a parallel region (attention's heads) it stays on the caller's thread.
constexpr int64_t kParallelRoundMin = 1 << 16;

template <class RowPass>
void over_rows(int64_t rows, int64_t cols, const RowPass& pass) {
  if (rows * cols < kParallelRoundMin || rows < 2 || omp_in_parallel()) {
    pass(0, rows);
    return;
  }
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
    pass(rows * t / T, rows * (t + 1) / T);
  }
}

void round_to_bf16_values(const float* src, int64_t rows, int64_t cols, int64_t ld, float* dst) {
  over_rows(rows, cols, [&](int64_t r0, int64_t r1) {
    round_rows_to_bf16_values(src + r0 * ld, r1 - r0, cols, ld, dst + r0 * cols);
  });
}

void gemm_widened(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  if (M <= 0 || N <= 0) return;
  thread_local std::vector<float> a_values, b_values;
  const int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
  const int64_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
  a_values.resize(static_cast<size_t>(a_rows * a_cols));
  b_values.resize(static_cast<size_t>(b_rows * b_cols));
  round_to_bf16_values(A, a_rows, a_cols, lda, a_values.data());
  round_to_bf16_values(B, b_rows, b_cols, ldb, b_values.data());
  gemm_blocked(trans_a, trans_b, M, N, K, alpha, a_values.data(), a_cols, b_values.data(), b_cols, beta, C, ldc,
               bias);
}

// B's bf16 bits widened to the float32 values they are (exactly), then gemm_widened's product.
void gemm_widened_b_bits(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                         const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  thread_local std::vector<float> b_wide;
  b_wide.resize(static_cast<size_t>(std::max<int64_t>(K, 0) * N));
  float* wide = b_wide.data();  // the caller's: in the lambda, b_wide would be each thread's own
  over_rows(K, N, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) widen_bf16(B + k * ldb, N, wide + k * N);
  });
  gemm_widened(trans_a, false, M, N, K, alpha, A, lda, b_wide.data(), N, beta, C, ldc, nullptr);
}

}  // namespace

namespace bf16_isa {

Gemm widened() { return gemm_widened; }

GemmBBits b_bits_form_of(Gemm gemm) {
  if (gemm == gemm_widened) return gemm_widened_b_bits;
  if (gemm == gemm_avx512_bf16_unchecked) return gemm_avx512_bf16_b_bits_unchecked;
  if (gemm == gemm_amx_unchecked) return gemm_amx_b_bits_unchecked;
  if (gemm == gemm_amx_emulated) return gemm_amx_emulated_b_bits;
  return nullptr;
}

Gemm avx512_bf16_or_null() { return isa_enabled(Isa::Avx512Bf16) ? gemm_avx512_bf16_unchecked : nullptr; }

Gemm amx_or_null() { return isa_enabled(Isa::Amx) ? gemm_amx_unchecked : nullptr; }

Gemm amx_where_the_cpu_has_it() { return best_isa() >= Isa::Amx ? gemm_amx_unchecked : nullptr; }

Gemm amx_emulated() { return gemm_amx_emulated; }

Gemm chosen() {
  static const Gemm gemm = amx_or_null()           ? amx_or_null()
                           : avx512_bf16_or_null() ? avx512_bf16_or_null()
                                                   : widened();
  return gemm;
}

int64_t k_block(int64_t K, bool trans_a) {
  const int64_t max_block = trans_a ? 512 : 1024;  // the packed A^T block must stay in L2
  const int64_t blocks = (K + max_block - 1) / max_block, block = (K + blocks - 1) / blocks;
  return block + (block & 1);
}

namespace {

// Words per panel row count of a K block of `valid` inputs: its pairs, padded to `pair_multiple`.
int64_t block_pairs(int64_t valid, int64_t pair_multiple) {
  const int64_t pairs = (valid + 1) / 2;
  return (pairs + pair_multiple - 1) / pair_multiple * pair_multiple;
}

}  // namespace

int64_t packed_words(int64_t out_features, int64_t in_features, int64_t pair_multiple) {
  const int64_t panels = (out_features + kPanelColumns - 1) / kPanelColumns, kc = k_block(in_features, false);
  int64_t pairs = 0;
  for (int64_t k0 = 0; k0 < in_features; k0 += kc) pairs += block_pairs(std::min(kc, in_features - k0), pair_multiple);
  return panels * kPanelColumns * pairs;
}

void pack_weights_into(const float* W, int64_t out_features, int64_t in_features, int64_t pair_multiple,
                       uint32_t* storage) {
  const int64_t panels = (out_features + kPanelColumns - 1) / kPanelColumns, kc = k_block(in_features, false);
  const auto bits = [&](int64_t o, int64_t k) -> uint32_t {
    return o < out_features && k < in_features ? f32_to_bf16(W[o * in_features + k]).bits : 0u;
  };
  uint32_t* dst = storage;
  for (int64_t k0 = 0; k0 < in_features; k0 += kc) {
    const int64_t pairs = block_pairs(std::min(kc, in_features - k0), pair_multiple);
    for (int64_t q = 0; q < panels; ++q)
      for (int64_t kp = 0; kp < pairs; ++kp)
        for (int64_t j = 0; j < kPanelColumns; ++j, ++dst) {
          const int64_t o = q * kPanelColumns + j, k = k0 + 2 * kp;
          *dst = bits(o, k) | bits(o, k + 1) << 16;
        }
  }
}

int64_t packed_pair_multiple() { return amx_or_null() ? 16 : 1; }

}  // namespace bf16_isa

bool packed_bf16_available() { return isa_enabled(Isa::Avx512Bf16); }

int64_t packed_bf16_words(int64_t out_features, int64_t in_features) {
  return bf16_isa::packed_words(out_features, in_features, bf16_isa::packed_pair_multiple());
}

void pack_bf16_weights_into(const float* W, int64_t out_features, int64_t in_features, uint32_t* storage) {
  bf16_isa::pack_weights_into(W, out_features, in_features, bf16_isa::packed_pair_multiple(), storage);
}

void gemm_bf16_packed(const float* A, int64_t M, int64_t lda, const uint32_t* packed, int64_t out_features,
                      int64_t in_features, const float* bias_or_null, float* C, int64_t ldc) {
  QKV_CHECK(packed_bf16_available(), "gemm_bf16_packed: needs AVX512_BF16 (kernels/isa.h: " << isa_description()
                                                                                              << ")");
  const product_clock::Scope clock("bf16", M, out_features, in_features, false, true);
  if (bf16_isa::amx_or_null())
    return bf16_isa::gemm_packed_amx_unchecked(A, M, lda, packed, out_features, in_features, bias_or_null, C, ldc);
  bf16_isa::gemm_packed_avx512_bf16_unchecked(A, M, lda, packed, out_features, in_features, bias_or_null, C, ldc);
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
               const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  const product_clock::Scope clock("bf16", M, N, K, trans_a, trans_b);
  bf16_isa::chosen()(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
}

void gemm_bf16_b_bits(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                      const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const product_clock::Scope clock("bf16", M, N, K, trans_a, false);
  static const bf16_isa::GemmBBits gemm = bf16_isa::b_bits_form_of(bf16_isa::chosen());
  gemm(trans_a, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

namespace bf16_isa {

void weight_and_bias_grad_in_two_calls(Gemm gemm, int64_t M, int64_t N, int64_t K, const float* dY, int64_t ld_dy,
                                       const float* X, const uint16_t* X_bits, int64_t ldx, float beta, float* dW,
                                       int64_t ldw, float* db) {
  if (X_bits) b_bits_form_of(gemm)(true, M, N, K, 1.f, dY, ld_dy, X_bits, ldx, beta, dW, ldw);
  else gemm(true, false, M, N, K, 1.f, dY, ld_dy, X, ldx, beta, dW, ldw, nullptr);
  if (ld_dy == M) return column_sum_accumulate(db, dY, K, M);
  for (int64_t i = 0; i < M; ++i) {  // column_sum_accumulate's order: each column from row 0 on
    float sum = 0.f;
    for (int64_t k = 0; k < K; ++k) sum += dY[k * ld_dy + i];
    db[i] += sum;
  }
}

}  // namespace bf16_isa

void gemm_bf16_weight_and_bias_grad(int64_t M, int64_t N, int64_t K, const float* dY, int64_t ld_dy, const float* X,
                                    const uint16_t* X_bits, int64_t ldx, float beta, float* dW, int64_t ldw,
                                    float* db) {
  QKV_CHECK((X == nullptr) != (X_bits == nullptr), "gemm_bf16_weight_and_bias_grad: give X or X_bits, not both");
  const product_clock::Scope clock("bf16", M, N, K, true, false);
  if (bf16_isa::chosen() == bf16_isa::avx512_bf16_or_null())
    return bf16_isa::gemm_avx512_bf16_weight_and_bias_grad_unchecked(M, N, K, dY, ld_dy, X, X_bits, ldx, beta, dW,
                                                                     ldw, db);
  bf16_isa::weight_and_bias_grad_in_two_calls(bf16_isa::chosen(), M, N, K, dY, ld_dy, X, X_bits, ldx, beta, dW, ldw,
                                              db);
}

const char* gemm_bf16_description() {
  if (bf16_isa::amx_or_null()) return "amx (AMX-BF16 tiles)";
  return bf16_isa::avx512_bf16_or_null() ? "avx512_bf16 (vdpbf16ps)" : "widened to float32 (AVX2 FMA)";
}

}  // namespace qkv::kernels
