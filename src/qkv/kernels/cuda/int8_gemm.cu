// int8 products on a GPU with the CPU's arithmetic (kernels/int8_gemm.h): activations quantized per
// row by a kernel of qkv's, the int8 products summed exactly in int32 by cuBLAS, and dequantized by
// one fused multiply-add an element. Every step is exact or rounds as the CPU's does, so a product
// gives kernels::gemm_int8's bits.
#include <algorithm>
#include <cstdint>

#include "qkv/core/cuda_check.h"
#include "qkv/core/cuda_runtime.h"
#include "qkv/kernels/cuda/common.cuh"
#include "qkv/kernels/cuda/cublas.cuh"
#include "qkv/kernels/cuda/kernels.h"
#include "qkv/kernels/int8_gemm.h"

namespace qkv::kernels::cuda {
namespace {

using detail::i32;

constexpr unsigned kQuantizeThreads = 256;

// Row r < M of x (M, K) into q (rows, ld) int8 and scales[r], as kernels::quantize_row: scale =
// max|x| / 127 and q = round-half-even(x * (127 / max|x|)), each step one IEEE operation (no
// contraction can change them); a row below kNegligibleMax has scale 0 and quantizes to zeros.
// Columns [K, ld) and rows [M, rows) are zeros, which add nothing to the int32 sums. One block a row.
__global__ void quantize_rows_kernel(int8_t* q, float* scales, const float* x, int64_t M, int64_t K, int64_t rows,
                                     int64_t ld) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int8_t* out = q + r * ld;
    if (r >= M) {  // uniform in the block: the reduction below is not skipped by some threads only
      for (int64_t k = threadIdx.x; k < ld; k += blockDim.x) out[k] = 0;
      continue;
    }
    const float* row = x + r * K;
    float most = 0.f;
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) most = fmaxf(most, fabsf(row[k]));
    most = detail::block_reduce(most, detail::Max{});  // a maximum: the order does not matter
    const bool negligible = !(most >= kNegligibleMax);
    const float inverse = negligible ? 0.f : __fdiv_rn(127.f, most);
    if (threadIdx.x == 0) scales[r] = negligible ? 0.f : __fdiv_rn(most, 127.f);
    for (int64_t k = threadIdx.x; k < ld; k += blockDim.x)
      out[k] = k < K ? static_cast<int8_t>(__float2int_rn(__fmul_rn(row[k], inverse))) : int8_t{0};
  }
}

// C (M, N) = float(acc) * (a_scales[r] * w_scales[c]) + bias[c] (0 without a bias), the CPU's
// store_dequantized_row: the scales' product rounded, then one fused multiply-add.
__global__ void dequantize_kernel(float* C, const int32_t* acc, int64_t acc_ld, const float* a_scales,
                                  const float* w_scales, const float* bias, int64_t M, int64_t N) {
  for (int64_t r = blockIdx.x * int64_t{blockDim.y} + threadIdx.y; r < M; r += int64_t{gridDim.x} * blockDim.y) {
    const float s = a_scales[r];
    for (int64_t c = threadIdx.x; c < N; c += blockDim.x)
      C[r * N + c] = fmaf(__int2float_rn(acc[r * acc_ld + c]), __fmul_rn(s, w_scales[c]), bias ? bias[c] : 0.f);
  }
}

}  // namespace

void gemm_int8(int64_t M, int64_t N, int64_t K, const float* X, const int8_t* Wq, const float* w_scales,
               const float* bias, float* C) {
  if (M == 0 || N == 0) return;
  cudaStream_t stream = qkv::cuda::current_stream();
  // Every dimension and leading dimension of cuBLAS's int8 product a multiple of 4, as its integer
  // tensor-core kernels ask: K and N by the weight's own padding (int8_weight_ld, int8_weight_rows),
  // M by zero rows of the quantized input, and the int32 sums' rows by padding.
  const int64_t ld = int8_weight_ld(K), rows_a = int8_weight_rows(M), rows_w = int8_weight_rows(N);
  const int64_t acc_ld = (rows_w + 7) / 8 * 8;
  detail::Scratch xq(static_cast<size_t>(rows_a * ld), stream);
  detail::Scratch a_scales(static_cast<size_t>(rows_a) * sizeof(float), stream);
  detail::Scratch acc(static_cast<size_t>(rows_a * acc_ld) * sizeof(int32_t), stream);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(rows_a, int64_t{1} << 20));
  quantize_rows_kernel<<<blocks, kQuantizeThreads, 0, stream>>>(xq.as<int8_t>(), a_scales.as<float>(), X, M, K,
                                                                rows_a, ld);
  QKV_CUDA_CHECK_LAUNCH("quantize_rows");
  // Row-major acc (rows_a, rows_w) = xq @ Wq^T is column-major acc^T (rows_w, rows_a) = Wq xq^T. Read
  // column-major, Wq's rows are the columns of an (ld, rows_w) matrix, taken transposed, and xq's
  // those of an (ld, rows_a) matrix, taken as they are: cuBLAS's "TN" int8 form.
  const int32_t one = 1, zero = 0;
  QKV_CUBLAS_CHECK(cublasGemmEx(detail::cublas_handle(), CUBLAS_OP_T, CUBLAS_OP_N, i32(rows_w), i32(rows_a), i32(ld),
                                &one, Wq, CUDA_R_8I, i32(ld), xq.as<int8_t>(), CUDA_R_8I, i32(ld), &zero,
                                acc.as<int32_t>(), CUDA_R_32I, i32(acc_ld), CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT));
  const detail::RowGrid g = detail::row_grid(M, N);
  dequantize_kernel<<<g.grid, g.block, 0, stream>>>(C, acc.as<int32_t>(), acc_ld, a_scales.as<float>(), w_scales, bias,
                                                    M, N);
  QKV_CUDA_CHECK_LAUNCH("dequantize");
  xq.release();
  a_scales.release();
  acc.release();
}

}  // namespace qkv::kernels::cuda
