// Matrix products through cuBLAS: qkv's tensors are row-major, cuBLAS's column-major, so a
// row-major C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T: the operands swap
// places and keep their transpose flags.
#include <cublas_v2.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <mutex>

#include "qkv/core/cuda_check.h"
#include "qkv/core/device.h"
#include "qkv/kernels/cuda/common.cuh"
#include "qkv/kernels/cuda/kernels.h"

namespace qkv::kernels::cuda {
namespace {

const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
    default: return "error";
  }
}

#define QKV_CUBLAS_CHECK(call)                                                                               \
  do {                                                                                                       \
    const cublasStatus_t qkv_cublas_status_ = (call);                                                        \
    QKV_CHECK(qkv_cublas_status_ == CUBLAS_STATUS_SUCCESS,                                                   \
              "cuBLAS: " << #call << " failed: " << cublas_status_name(qkv_cublas_status_) << " (status "    \
                         << static_cast<int>(qkv_cublas_status_) << ")");                                    \
  } while (0)

// One handle per device, bound to the device's stream, created on first use.
cublasHandle_t handle() {
  static std::array<cublasHandle_t, kMaxDevicesPerType> handles{};
  static std::mutex mutex;
  int device = 0;
  QKV_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mutex);
  cublasHandle_t& h = handles[static_cast<size_t>(device)];
  if (!h) {
    QKV_CUBLAS_CHECK(cublasCreate(&h));
    QKV_CUBLAS_CHECK(cublasSetStream(h, qkv::cuda::current_stream()));
    // float32 products stay float32: TF32 rounds inputs to 10 mantissa bits, and the CPU agreement
    // the tests check (1e-5) would not hold. QKV_CUDA_TF32=1 lets cuBLAS use it.
    const char* tf32 = std::getenv("QKV_CUDA_TF32");
    const bool allow_tf32 = tf32 && tf32[0] == '1';
    QKV_CUBLAS_CHECK(cublasSetMathMode(h, allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  }
  return h;
}

cublasOperation_t op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }
int i32(int64_t v) { return static_cast<int>(v); }

__global__ void broadcast_bias_kernel(float* C, const float* bias, int64_t M, int64_t N, int64_t ldc) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < M * N; i += int64_t{gridDim.x} * blockDim.x)
    C[i / N * ldc + i % N] = bias[i % N];
}

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + 255) / 256;
  return static_cast<unsigned>(b < 65535 ? b : 65535);
}

// dst (batch, rows, dst_ld) = src's matrices (rows, cols; leading dimension ld, matrix i at src + i *
// stride) rounded to bf16 bits by core/dtype.h's rule (bf16_bits_of). Columns past cols are
// padding, left as they are.
__global__ void round_to_bf16_kernel(uint16_t* dst, int64_t dst_ld, const float* src, int64_t rows, int64_t cols,
                                     int64_t ld, int64_t stride, int64_t batch) {
  const int64_t area = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < batch * area; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t m = i / area, r = i % area / cols, c = i % cols;
    dst[(m * rows + r) * dst_ld + c] = bf16_bits_of(__float_as_uint(src[m * stride + r * ld + c]));
  }
}

// The stored matrices of an operand, rounded into scratch: rows x cols each (op(X) is `trans`'s),
// rows padded to a multiple of 8 elements (16 bytes), which cuBLAS's fastest kernels ask of a leading
// dimension (a vocabulary of 50257 columns would otherwise fall to slower ones).
struct RoundedOperand {
  RoundedOperand(const float* src, int64_t rows, int64_t cols, int64_t src_ld, int64_t stride, int64_t batch,
                 cudaStream_t stream)
      : ld((cols + 7) / 8 * 8),
        area(rows * ((cols + 7) / 8 * 8)),
        memory(static_cast<size_t>(std::max<int64_t>(1, batch * rows * ((cols + 7) / 8 * 8))) * 2, stream) {
    if (batch * rows * cols > 0) {
      round_to_bf16_kernel<<<blocks_for(batch * rows * cols), 256, 0, stream>>>(memory.as<uint16_t>(), ld, src, rows,
                                                                                 cols, src_ld, stride, batch);
      QKV_CUDA_CHECK_LAUNCH("round_to_bf16");
    }
  }
  int64_t ld, area;
  detail::Scratch memory;
};

}  // namespace

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  QKV_CUBLAS_CHECK(cublasSgemm(handle(), op(trans_b), op(trans_a), i32(N), i32(M), i32(K), &alpha, B, i32(ldb), A,
                               i32(lda), &beta, C, i32(ldc)));
}

void sgemm_plus_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                     int64_t lda, const float* B, int64_t ldb, const float* bias, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (bias) {  // C = bias, then C += op(A) op(B): the CPU's order for the BLAS path
    broadcast_bias_kernel<<<blocks_for(M * N), 256, 0, qkv::cuda::current_stream()>>>(C, bias, M, N, ldc);
    QKV_CUDA_CHECK_LAUNCH("broadcast_bias");
  }
  sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, bias ? 1.f : 0.f, C, ldc);
}

void sgemm_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b, float beta, float* C,
                   int64_t ldc, int64_t stride_c, int64_t batch) {
  if (M == 0 || N == 0 || batch == 0) return;
  QKV_CUBLAS_CHECK(cublasSgemmStridedBatched(handle(), op(trans_b), op(trans_a), i32(N), i32(M), i32(K), &alpha, B,
                                             i32(ldb), stride_b, A, i32(lda), stride_a, &beta, C, i32(ldc), stride_c,
                                             i32(batch)));
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
               int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b, float beta, float* C, int64_t ldc,
               int64_t stride_c, int64_t batch, const float* bias) {
  if (M == 0 || N == 0 || batch == 0) return;
  cudaStream_t stream = qkv::cuda::current_stream();
  RoundedOperand a(A, trans_a ? K : M, trans_a ? M : K, lda, stride_a, batch, stream);
  RoundedOperand b(B, trans_b ? N : K, trans_b ? K : N, ldb, stride_b, batch, stream);
  if (bias) {  // C = bias, then C += op(A) op(B): the CPU's order
    QKV_CHECK(batch == 1 && beta == 0.f, "gemm_bf16: a bias is added to one product written afresh");
    broadcast_bias_kernel<<<blocks_for(M * N), 256, 0, stream>>>(C, bias, M, N, ldc);
    QKV_CUDA_CHECK_LAUNCH("broadcast_bias");
    beta = 1.f;
  }
  QKV_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      handle(), op(trans_b), op(trans_a), i32(N), i32(M), i32(K), &alpha, b.memory.as<uint16_t>(), CUDA_R_16BF,
      i32(b.ld), b.area, a.memory.as<uint16_t>(), CUDA_R_16BF, i32(a.ld), a.area, &beta, C, CUDA_R_32F, i32(ldc),
      stride_c, i32(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  a.memory.release();
  b.memory.release();
}

void gemm_bf16_nt(int64_t M, int64_t N, int64_t K, const bfloat16* X, const bfloat16* W, const float* bias,
                  float* C) {
  if (M == 0 || N == 0) return;
  if (bias) {
    broadcast_bias_kernel<<<blocks_for(M * N), 256, 0, qkv::cuda::current_stream()>>>(C, bias, M, N, N);
    QKV_CUDA_CHECK_LAUNCH("broadcast_bias");
  }
  const float alpha = 1.f, beta = bias ? 1.f : 0.f;
  // Column-major C^T (N, M) = W (N, K) @ X^T: W's rows are columns of the (K, N) column-major W^T.
  QKV_CUBLAS_CHECK(cublasGemmEx(handle(), CUBLAS_OP_T, CUBLAS_OP_N, i32(N), i32(M), i32(K), &alpha, W, CUDA_R_16BF,
                                i32(K), X, CUDA_R_16BF, i32(K), &beta, C, CUDA_R_32F, i32(N), CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
}

}  // namespace qkv::kernels::cuda
