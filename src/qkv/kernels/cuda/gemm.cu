// Matrix products through cuBLAS: qkv's tensors are row-major, cuBLAS's column-major, so a
// row-major C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T: the operands swap
// places and keep their transpose flags.

#include <algorithm>
#include <array>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "qkv/core/cuda_check.h"
#include "qkv/core/device.h"
#include "qkv/kernels/cuda/common.cuh"
#include "qkv/kernels/cuda/cublas.cuh"
#include "qkv/kernels/cuda/kernels.h"

namespace qkv::kernels::cuda {
namespace detail {

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

// One handle per device, bound to the device's stream, created on first use.
cublasHandle_t cublas_handle() {
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

}  // namespace detail

namespace {

using detail::cublas_handle;
using detail::i32;
using detail::row_grid;
using detail::RowGrid;

cublasOperation_t op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

// C's rows (M x N, leading dimension ldc) = bias.
__global__ void broadcast_bias_kernel(float* C, const float* bias, int64_t M, int64_t N, int64_t ldc) {
  for (int64_t r = blockIdx.x * int64_t{blockDim.y} + threadIdx.y; r < M; r += int64_t{gridDim.x} * blockDim.y)
    for (int64_t c = threadIdx.x; c < N; c += blockDim.x) C[r * ldc + c] = bias[c];
}

void broadcast_bias(float* C, const float* bias, int64_t M, int64_t N, int64_t ldc, cudaStream_t stream) {
  const RowGrid g = row_grid(M, N);
  broadcast_bias_kernel<<<g.grid, g.block, 0, stream>>>(C, bias, M, N, ldc);
  QKV_CUDA_CHECK_LAUNCH("broadcast_bias");
}

// dst (batch * rows, dst_ld) = src's matrices (rows x cols; leading dimension ld, matrix i at src + i *
// stride) rounded to bf16 bits by core/dtype.h's rule (bf16_bits_of), two columns a thread written
// as one 32-bit word (dst_ld is even). A padding column that completes the last pair is written 0.
__global__ void round_to_bf16_kernel(uint16_t* dst, int64_t dst_ld, const float* src, int64_t rows, int64_t cols,
                                     int64_t ld, int64_t stride, int64_t total_rows) {
  for (int64_t row = blockIdx.x * int64_t{blockDim.y} + threadIdx.y; row < total_rows;
       row += int64_t{gridDim.x} * blockDim.y) {
    const float* s = src + row / rows * stride + row % rows * ld;
    uint32_t* d = reinterpret_cast<uint32_t*>(dst + row * dst_ld);
    for (int64_t c = 2 * int64_t{threadIdx.x}; c < cols; c += 2 * int64_t{blockDim.x}) {
      const uint32_t lo = bf16_bits_of(__float_as_uint(s[c]));
      const uint32_t hi = c + 1 < cols ? bf16_bits_of(__float_as_uint(s[c + 1])) : 0u;
      d[c / 2] = lo | hi << 16;
    }
  }
}

// dst's matrices (rows x cols, leading dimension dst_ld, matrix i at dst + i * dst_stride) = src's
// (src_ld, src_stride).
__global__ void copy_matrices_kernel(float* dst, int64_t dst_ld, int64_t dst_stride, const float* src, int64_t src_ld,
                                     int64_t src_stride, int64_t rows, int64_t cols, int64_t total_rows) {
  for (int64_t row = blockIdx.x * int64_t{blockDim.y} + threadIdx.y; row < total_rows;
       row += int64_t{gridDim.x} * blockDim.y) {
    const int64_t m = row / rows, r = row % rows;
    const float* s = src + m * src_stride + r * src_ld;
    float* d = dst + m * dst_stride + r * dst_ld;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) d[c] = s[c];
  }
}

void copy_matrices(float* dst, int64_t dst_ld, int64_t dst_stride, const float* src, int64_t src_ld,
                   int64_t src_stride, int64_t rows, int64_t cols, int64_t batch, cudaStream_t stream) {
  const RowGrid g = row_grid(batch * rows, cols);
  copy_matrices_kernel<<<g.grid, g.block, 0, stream>>>(dst, dst_ld, dst_stride, src, src_ld, src_stride, rows, cols,
                                                       batch * rows);
  QKV_CUDA_CHECK_LAUNCH("copy_matrices");
}

// Leading dimensions padded to a multiple of 8 elements (16 bytes of bf16, 32 of float32): what
// cuBLAS's fastest kernels (on Hopper, those that load and store through the tensor memory
// accelerator) ask of every operand. A vocabulary of 50257 columns would otherwise fall to slower ones.
int64_t padded_ld(int64_t cols) { return (cols + 7) / 8 * 8; }

// The stored matrices of an operand, rounded into scratch: rows x cols each (op(X) is `trans`'s),
// rows padded to padded_ld.
struct RoundedOperand {
  RoundedOperand(const float* src, int64_t rows, int64_t cols, int64_t src_ld, int64_t stride, int64_t batch,
                 cudaStream_t stream)
      : ld(padded_ld(cols)),
        area(rows * padded_ld(cols)),
        memory(static_cast<size_t>(std::max<int64_t>(1, batch * rows * padded_ld(cols))) * 2, stream) {
    if (batch * rows * cols > 0) {
      const RowGrid g = row_grid(batch * rows, (cols + 1) / 2 * 2);
      round_to_bf16_kernel<<<g.grid, g.block, 0, stream>>>(memory.as<uint16_t>(), ld, src, rows, cols, src_ld, stride,
                                                           batch * rows);
      QKV_CUDA_CHECK_LAUNCH("round_to_bf16");
    }
  }
  int64_t ld, area;
  detail::Scratch memory;
};

// A product's output C as cuBLAS is given it: C itself by default. With QKV_CUDA_ALIGN_C=1, where
// C's rows are not 16-byte aligned, scratch with padded rows that finish() copies into C (what C held
// is copied in first where the product adds to it), in case cuBLAS's kernels for aligned rows pay
// for the copies. Measured on an H200 (2026-11-30, bench_gpu_ops times both): they do not. GPT-2
// small's output layer forward at a vocabulary of 50257, bf16, 16384 rows: 13.4 ms written in
// place, 17.6 ms through scratch.
class AlignedOutput {
 public:
  AlignedOutput(float* C, int64_t M, int64_t N, int64_t ldc, int64_t stride_c, int64_t batch, bool keep_contents,
                cudaStream_t stream)
      : data(C), ld(ldc), stride(stride_c), C_(C), M_(M), N_(N), ldc_(ldc), stride_c_(stride_c), batch_(batch),
        stream_(stream) {
    const bool aligned = ldc % 4 == 0 && (batch == 1 || stride_c % 4 == 0) &&
                         reinterpret_cast<uintptr_t>(C) % 16 == 0;
    const char* env = std::getenv("QKV_CUDA_ALIGN_C");
    if (aligned || !env || env[0] != '1') return;
    ld = padded_ld(N);
    stride = M * ld;
    scratch_.emplace(static_cast<size_t>(batch * stride) * sizeof(float), stream);
    data = scratch_->as<float>();
    if (keep_contents) copy_matrices(data, ld, stride, C, ldc, stride_c, M, N, batch, stream);
  }
  void finish() {
    if (!scratch_) return;
    copy_matrices(C_, ldc_, stride_c_, data, ld, stride, M_, N_, batch_, stream_);
    scratch_->release();
  }
  float* data;  // what cuBLAS writes
  int64_t ld, stride;

 private:
  float* C_;
  int64_t M_, N_, ldc_, stride_c_, batch_;
  cudaStream_t stream_;
  std::optional<detail::Scratch> scratch_;
};

}  // namespace

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  QKV_CUBLAS_CHECK(cublasSgemm(cublas_handle(), op(trans_b), op(trans_a), i32(N), i32(M), i32(K), &alpha, B, i32(ldb), A,
                               i32(lda), &beta, C, i32(ldc)));
}

void sgemm_plus_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                     int64_t lda, const float* B, int64_t ldb, const float* bias, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (bias) {  // C = bias, then C += op(A) op(B): the CPU's order for the BLAS path
    broadcast_bias(C, bias, M, N, ldc, qkv::cuda::current_stream());
  }
  sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, bias ? 1.f : 0.f, C, ldc);
}

void sgemm_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b, float beta, float* C,
                   int64_t ldc, int64_t stride_c, int64_t batch) {
  if (M == 0 || N == 0 || batch == 0) return;
  QKV_CUBLAS_CHECK(cublasSgemmStridedBatched(cublas_handle(), op(trans_b), op(trans_a), i32(N), i32(M), i32(K), &alpha, B,
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
  AlignedOutput c(C, M, N, ldc, stride_c, batch, beta != 0.f, stream);
  if (bias) {  // C = bias, then C += op(A) op(B): the CPU's order
    QKV_CHECK(batch == 1 && beta == 0.f, "gemm_bf16: a bias is added to one product written afresh");
    broadcast_bias(c.data, bias, M, N, c.ld, stream);
    beta = 1.f;
  }
  QKV_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      cublas_handle(), op(trans_b), op(trans_a), i32(N), i32(M), i32(K), &alpha, b.memory.as<uint16_t>(), CUDA_R_16BF,
      i32(b.ld), b.area, a.memory.as<uint16_t>(), CUDA_R_16BF, i32(a.ld), a.area, &beta, c.data, CUDA_R_32F,
      i32(c.ld), c.stride, i32(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  c.finish();
  a.memory.release();
  b.memory.release();
}

void gemm_bf16_nt(int64_t M, int64_t N, int64_t K, const bfloat16* X, const bfloat16* W, const float* bias,
                  float* C) {
  if (M == 0 || N == 0) return;
  cudaStream_t stream = qkv::cuda::current_stream();
  AlignedOutput c(C, M, N, N, 0, 1, false, stream);
  if (bias) broadcast_bias(c.data, bias, M, N, c.ld, stream);
  const float alpha = 1.f, beta = bias ? 1.f : 0.f;
  // Column-major C^T (N, M) = W (N, K) @ X^T: W's rows are columns of the (K, N) column-major W^T.
  QKV_CUBLAS_CHECK(cublasGemmEx(cublas_handle(), CUBLAS_OP_T, CUBLAS_OP_N, i32(N), i32(M), i32(K), &alpha, W, CUDA_R_16BF,
                                i32(K), X, CUDA_R_16BF, i32(K), &beta, c.data, CUDA_R_32F, i32(c.ld),
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  c.finish();
}

}  // namespace qkv::kernels::cuda
