#include "qkv/kernels/bf16_gemm.h"
#include "qkv/kernels/elementwise.h"
#include "qkv/kernels/gemm.h"
#include "qkv/kernels/int8_gemm.h"
#include "qkv/kernels/packed_gemm.h"
#include "qkv/ops/dispatch.h"
#include "qkv/ops/grad_slot.h"
#include "qkv/ops/ops.h"

#include <algorithm>

namespace qkv::ops {

namespace {
void check_linear_shapes(const Tensor& x, const Tensor& w, const Tensor& b) {
  QKV_CHECK(w.dim() == 2, "linear: weight must be 2-D (out, in), got " << w.shape());
  QKV_CHECK(x.dim() >= 1 && x.size(-1) == w.size(1),
            "linear: input " << x.shape() << " does not match weight " << w.shape()
                             << " (input's last dim must equal weight.size(1))");
  QKV_CHECK(!b.defined() || (b.dim() == 1 && b.size(0) == w.size(0)),
            "linear: bias " << b.shape() << " does not match weight " << w.shape());
}

// The product C = alpha * op(A) @ op(B) + beta * C (+ bias) of a CPU op in `precision`: float32
// through kernels::sgemm (OpenBLAS for small shapes, gemm_blocked for large), or bf16 operands
// through kernels::gemm_bf16.
void cpu_product(Precision precision, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias = nullptr) {
  if (precision == Precision::BF16)
    return kernels::gemm_bf16(ta, tb, M, N, K, 1.f, A, lda, B, ldb, beta, C, ldc, bias);
  if (bias) return kernels::sgemm_plus_bias(ta, tb, M, N, K, 1.f, A, lda, B, ldb, bias, C, ldc);  // beta 0
  kernels::sgemm(ta, tb, M, N, K, 1.f, A, lda, B, ldb, beta, C, ldc);
}

// The same product on a GPU, `batch` of them (operand i at A + i * stride_a, likewise B and C): float32
// through cuBLAS's sgemm, or bf16 operands with float32 sums through kernels::cuda::gemm_bf16.
void gpu_product(Precision precision, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                 int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b, float beta, float* C, int64_t ldc,
                 int64_t stride_c, int64_t batch = 1, const float* bias = nullptr) {
  if constexpr (cuda::kBuilt) {
    if (precision == Precision::BF16)
      return kernels::cuda::gemm_bf16(ta, tb, M, N, K, 1.f, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc,
                                      stride_c, batch, bias);
    if (bias) return kernels::cuda::sgemm_plus_bias(ta, tb, M, N, K, 1.f, A, lda, B, ldb, bias, C, ldc);  // beta 0
    if (batch == 1) return kernels::cuda::sgemm(ta, tb, M, N, K, 1.f, A, lda, B, ldb, beta, C, ldc);
    kernels::cuda::sgemm_batched(ta, tb, M, N, K, 1.f, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc, stride_c,
                                 batch);
  }
}
}  // namespace

Tensor linear_forward(const Tensor& x_in, const Tensor& w, const Tensor& b, Precision precision) {
  check_linear_shapes(x_in, w, b);
  check_same_device("linear", {&x_in, &w, &b});
  const Tensor x = x_in.contiguous();
  const Tensor wc = w.contiguous();
  const int64_t K = w.size(1), N = w.size(0), M = x.numel() / K;
  Dims out_shape = x.shape();
  out_shape[out_shape.size() - 1] = N;
  Tensor y = empty_like_device(out_shape, x);
  // (M, N) = (M, K) @ (N, K)^T + b, the bias added as the product is stored.
  const Tensor bc = b.defined() ? b.contiguous() : Tensor();
  const float* bias = bc.defined() ? bc.f32() : nullptr;
  if (on_cuda(x)) {
    gpu_product(precision, false, true, M, N, K, x.f32(), K, 0, wc.f32(), K, 0, 0.f, y.f32(), N, 0, 1, bias);
  } else {
    cpu_product(precision, false, true, M, N, K, x.f32(), K, wc.f32(), K, 0.f, y.f32(), N, bias);
  }
  return y;
}

namespace {
// The int8 case's kernel view of an I8 packed weight and its scales.
kernels::QuantizedWeights quantized_view(const LinearWeight& w) {
  QKV_CHECK(w.scale.defined() && w.scale.dtype() == DType::F32 &&
                w.scale.numel() == kernels::QuantizedWeights::scale_count(w.out_features()),
            "linear: an i8 weight needs its f32 scales, got " << w.scale.describe());
  return kernels::QuantizedWeights::view(w.weight.data<int8_t>(), w.scale.f32(), w.out_features(), w.in_features());
}

// The f32 output of x @ W^T for W of N outputs, on x's device: x's shape with its last dim N.
Tensor linear_output(const Tensor& x, int64_t N) {
  Dims shape = x.shape();
  shape[shape.size() - 1] = N;
  return empty_like_device(shape, x);
}

// A bf16 weight on a GPU: cuBLAS multiplies bf16 operands with float32 sums, the input rounded to
// bf16 first, the reference path's arithmetic on the GPU's matrix units.
Tensor linear_forward_bf16_cuda(const Tensor& x_in, const Tensor& W, const Tensor& b) {
  const Tensor x = x_in.to(DType::BF16);
  const int64_t K = W.size(1), N = W.size(0), M = x.numel() / std::max<int64_t>(K, 1);
  Tensor y = linear_output(x, N);
  const Tensor bias = b.defined() ? b.contiguous() : Tensor();
  if constexpr (cuda::kBuilt) {
    on_cuda(x);
    kernels::cuda::gemm_bf16_nt(M, N, K, x.data<bfloat16>(), W.contiguous().data<bfloat16>(),
                                bias.defined() ? bias.f32() : nullptr, y.f32());
  }
  return y;
}

// An I8 weight on a GPU (prepare_linear_weight's padded rows and scales): kernels::cuda::gemm_int8,
// the CPU's int8 arithmetic and bits.
Tensor linear_forward_int8_cuda(const Tensor& x_in, const LinearWeight& w, const Tensor& b) {
  const int64_t K = w.in_features(), N = w.out_features();
  QKV_CHECK(w.scale.defined() && w.scale.dtype() == DType::F32 && w.scale.device() == w.weight.device() &&
                w.scale.numel() == kernels::cuda::int8_weight_rows(N),
            "linear: an i8 weight on " << w.weight.device().name() << " needs its f32 scales there, got "
                                       << w.scale.describe());
  const Tensor x = x_in.contiguous();
  const int64_t M = x.numel() / std::max<int64_t>(K, 1);
  Tensor y = linear_output(x, N);
  const Tensor bias = b.defined() ? b.contiguous() : Tensor();
  if constexpr (cuda::kBuilt) {
    on_cuda(x);
    kernels::cuda::gemm_int8(M, N, K, x.f32(), w.weight.data<int8_t>(), w.scale.f32(),
                             bias.defined() ? bias.f32() : nullptr, y.f32());
  }
  return y;
}

// The float kernel of each activation (kernels/elementwise.h) as the row map of gemm_int8_mapped:
// GELU's form for quantized values, the others as they are.
kernels::RowMap activation_row_map(Activation act) {
  switch (act) {
    case Activation::ReLU: return kernels::relu_forward;
    case Activation::GELU: return kernels::gelu_forward_to_quantize;
    case Activation::GELUTanh: return kernels::gelu_tanh_forward;
    case Activation::SiLU: return kernels::silu_forward;
  }
  QKV_CHECK(false, "activation_linear_forward: unknown activation " << static_cast<int>(act));
  return nullptr;
}

// An I8 packed weight on the CPU: gemm_int8's products (one quantization of x for several weights, a
// row map applied as x is quantized).
bool int8_on_cpu(const LinearWeight& w) {
  return w.weight.dtype() == DType::I8 && w.weight.layout() == Layout::Packed && !w.weight.device().is_cuda();
}

// The product with a packed weight (shapes and devices already checked); an I8 weight maps each row
// of x through input_map, where there is one, as it quantizes it.
Tensor packed_linear_forward(const Tensor& x_in, const LinearWeight& w, const Tensor& b, kernels::RowMap input_map) {
  const Tensor& W = w.weight;
  QKV_CHECK(W.layout() == Layout::Packed && (W.dtype() == DType::F32 || W.dtype() == DType::I8 || W.dtype() == DType::BF16),
            "linear: no product with a " << W.describe() << " weight");
  const Tensor x = x_in.contiguous();
  const int64_t K = W.size(1), N = W.size(0), M = x.numel() / std::max<int64_t>(K, 1);
  Tensor y = linear_output(x, N);
  const Tensor bias = b.defined() ? b.contiguous() : Tensor();
  const float* bias_or_null = bias.defined() ? bias.f32() : nullptr;
  if (W.dtype() == DType::I8)
    kernels::gemm_int8_mapped(x.f32(), M, K, input_map, quantized_view(w), bias_or_null, y.f32(), N);
  else if (W.dtype() == DType::BF16)
    kernels::gemm_bf16_packed(x.f32(), M, K, reinterpret_cast<const uint32_t*>(W.data<bfloat16>()), N, K, bias_or_null,
                              y.f32(), N);
  else
    kernels::gemm_packed(x.f32(), M, K, kernels::PackedWeights::view(W.f32(), N, K), bias_or_null, y.f32(), N);
  return y;
}
}  // namespace

// The products with a prepared weight, one case per (dtype, layout, device).
Tensor linear_forward(const Tensor& x_in, const LinearWeight& w, const Tensor& b) {
  const Tensor& W = w.weight;
  if (W.dtype() == DType::F32 && W.layout() == Layout::Strided) return linear_forward(x_in, W, b);
  check_linear_shapes(x_in, W, b);
  check_same_device("linear", {&x_in, &W, &b});
  if (W.dtype() == DType::BF16 && W.device().is_cuda()) return linear_forward_bf16_cuda(x_in, W, b);
  if (W.dtype() == DType::I8 && W.device().is_cuda()) return linear_forward_int8_cuda(x_in, w, b);
  if (W.dtype() == DType::BF16 && W.layout() == Layout::Strided)  // the reference path (ops.h): bf16 products
    return linear_forward(x_in, W.to(DType::F32), b, Precision::BF16);
  return packed_linear_forward(x_in, w, b, nullptr);
}

Tensor activation_forward(const Tensor& x, Activation act) {
  switch (act) {
    case Activation::ReLU: return relu_forward(x);
    case Activation::GELU: return gelu_forward(x);
    case Activation::GELUTanh: return gelu_tanh_forward(x);
    case Activation::SiLU: return silu_forward(x);
  }
  QKV_CHECK(false, "activation_forward: unknown activation " << static_cast<int>(act));
  return {};
}

Tensor activation_linear_forward(const Tensor& h, Activation act, const LinearWeight& w, const Tensor& b) {
  if (!int8_on_cpu(w)) return linear_forward(activation_forward(h, act), w, b);
  check_linear_shapes(h, w.weight, b);
  check_same_device("linear", {&h, &w.weight, &b});
  return packed_linear_forward(h, w, b, activation_row_map(act));
}

std::vector<Tensor> linear_forward_many(const Tensor& x_in, const std::vector<const LinearWeight*>& ws,
                                        const std::vector<Tensor>& bs) {
  QKV_CHECK(ws.size() == bs.size(), "linear_forward_many: " << ws.size() << " weights and " << bs.size() << " biases");
  const bool int8 = !ws.empty() && std::all_of(ws.begin(), ws.end(), [&](const LinearWeight* w) {
    return int8_on_cpu(*w) && w->in_features() == ws.front()->in_features();
  });
  std::vector<Tensor> ys;
  if (!int8 || x_in.device().is_cuda()) {
    for (size_t i = 0; i < ws.size(); ++i) ys.push_back(linear_forward(x_in, *ws[i], bs[i]));
    return ys;
  }
  const Tensor x = x_in.contiguous();
  const int64_t K = ws.front()->in_features(), M = x.numel() / std::max<int64_t>(K, 1);
  std::vector<kernels::QuantizedWeights> views;
  std::vector<Tensor> biases;
  std::vector<kernels::Int8Product> products;
  for (size_t i = 0; i < ws.size(); ++i) {
    check_linear_shapes(x_in, ws[i]->weight, bs[i]);
    check_same_device("linear", {&x_in, &ws[i]->weight, &bs[i]});
    ys.push_back(linear_output(x, ws[i]->out_features()));
    views.push_back(quantized_view(*ws[i]));
    biases.push_back(bs[i].defined() ? bs[i].contiguous() : Tensor());
  }
  for (size_t i = 0; i < ws.size(); ++i)
    products.push_back({&views[i], biases[i].defined() ? biases[i].f32() : nullptr, ys[i].f32(),
                        ws[i]->out_features()});
  kernels::gemm_int8_many(x.f32(), M, K, products.data(), static_cast<int64_t>(products.size()));
  return ys;
}

void linear_backward(const Tensor& dy_in, const Tensor& x_in, const Tensor& w, Tensor* dx, Tensor* dw, Tensor* db,
                     Precision precision) {
  check_same_device("linear backward", {&dy_in, &x_in, &w});
  // A bf16 x (saved_for_backward) is read as it is by a bf16 product on the CPU, else widened
  // (exactly); only dw reads it.
  const bool x_bits = x_in.dtype() == DType::BF16 && precision == Precision::BF16 && !on_cuda(x_in);
  const Tensor x = x_in.dtype() == DType::BF16 && dw && !x_bits ? x_in.to(DType::F32) : x_in.contiguous();
  const Tensor dy = dy_in.contiguous(), wc = w.contiguous();
  const int64_t K = w.size(1), N = w.size(0), M = x.numel() / K;
  QKV_CHECK(dy.numel() == M * N, "linear backward: grad " << dy.shape() << " vs input " << x.shape());
  const Device device = x.device();
  if (dx) {  // dx (M, K) = dy (M, N) @ w (N, K)
    const bool acc = prepare_slot(dx, x.shape(), device);
    if (on_cuda(x)) gpu_product(precision, false, false, M, K, N, dy.f32(), N, 0, wc.f32(), K, 0, acc ? 1.f : 0.f, dx->f32(), K, 0);
    else cpu_product(precision, false, false, M, K, N, dy.f32(), N, wc.f32(), K, acc ? 1.f : 0.f, dx->f32(), K);
  }
  const uint16_t* x_words = x_bits ? reinterpret_cast<const uint16_t*>(x.data<bfloat16>()) : nullptr;
  // bf16 on the CPU: db summed as the dw product packs dy (kernels::gemm_bf16_weight_and_bias_grad).
  const bool fused_db = dw && db && precision == Precision::BF16 && !on_cuda(x);
  if (dw) {  // dw (N, K) = dy^T (N, M) @ x (M, K)
    const float beta = prepare_slot(dw, w.shape(), device) ? 1.f : 0.f;
    if (fused_db) {
      prepare_zeroed_slot(db, Dims{N}, device);
      kernels::gemm_bf16_weight_and_bias_grad(N, K, M, dy.f32(), N, x_bits ? nullptr : x.f32(), x_words, K, beta,
                                              dw->f32(), K, db->f32());
    } else if (on_cuda(x)) {
      gpu_product(precision, true, false, N, K, M, dy.f32(), N, 0, x.f32(), K, 0, beta, dw->f32(), K, 0);
    } else if (x_bits) {
      kernels::gemm_bf16_b_bits(true, N, K, M, 1.f, dy.f32(), N, x_words, K, beta, dw->f32(), K);
    } else {
      cpu_product(precision, true, false, N, K, M, dy.f32(), N, x.f32(), K, beta, dw->f32(), K);
    }
  }
  if (db && !fused_db) {  // db (N) = sum over the M rows of dy
    prepare_zeroed_slot(db, Dims{N}, device);
    QKV_KERNEL(x, column_sum_accumulate(db->f32(), dy.f32(), M, N));
  }
}

namespace {
struct MatmulDims {
  int64_t batch, M, K, N;
};
MatmulDims check_matmul(const Tensor& a, const Tensor& b, bool transpose_b) {
  QKV_CHECK(a.dim() >= 2 && a.dim() == b.dim(),
            "matmul: operands " << a.shape() << " and " << b.shape() << " need the same rank >= 2");
  for (int i = 0; i < a.dim() - 2; ++i)
    QKV_CHECK(a.size(i) == b.size(i), "matmul: batch dims of " << a.shape() << " and " << b.shape() << " differ");
  const int64_t M = a.size(-2), K = a.size(-1);
  const int64_t bK = transpose_b ? b.size(-1) : b.size(-2), N = transpose_b ? b.size(-2) : b.size(-1);
  QKV_CHECK(K == bK, "matmul: inner dims of " << a.shape() << " and " << b.shape()
                                             << (transpose_b ? " (b transposed)" : "") << " differ");
  return {a.numel() / (M * K), M, K, N};
}

// matmul_backward's products on a GPU, each over the batch in one strided-batched call.
void matmul_backward_cuda(const MatmulDims& d, const Tensor& dc, const Tensor& a, const Tensor& b, bool transpose_b,
                          Tensor* da, Tensor* db, Precision precision) {
  const int64_t ldb = transpose_b ? d.K : d.N, MN = d.M * d.N, MK = d.M * d.K, KN = d.K * d.N;
  if (da) {  // da (M, K) = dc (M, N) @ op(b)^T
    const float beta = prepare_slot(da, a.shape(), a.device()) ? 1.f : 0.f;
    gpu_product(precision, false, !transpose_b, d.M, d.K, d.N, dc.f32(), d.N, MN, b.f32(), ldb, KN, beta, da->f32(),
                d.K, MK, d.batch);
  }
  if (db) {
    const float beta = prepare_slot(db, b.shape(), b.device()) ? 1.f : 0.f;
    if (transpose_b)  // db (N, K) = dc^T (N, M) @ a (M, K)
      gpu_product(precision, true, false, d.N, d.K, d.M, dc.f32(), d.N, MN, a.f32(), d.K, MK, beta, db->f32(), d.K,
                  KN, d.batch);
    else  // db (K, N) = a^T (K, M) @ dc (M, N)
      gpu_product(precision, true, false, d.K, d.N, d.M, a.f32(), d.K, MK, dc.f32(), d.N, MN, beta, db->f32(), d.N,
                  KN, d.batch);
  }
}
}  // namespace

Tensor matmul_forward(const Tensor& a_in, const Tensor& b_in, bool transpose_b, Precision precision) {
  const MatmulDims d = check_matmul(a_in, b_in, transpose_b);
  check_same_device("matmul", {&a_in, &b_in});
  const Tensor a = a_in.contiguous(), b = b_in.contiguous();
  Dims out_shape = a.shape();
  out_shape[out_shape.size() - 1] = d.N;
  Tensor c = empty_like_device(out_shape, a);
  const int64_t ldb = transpose_b ? d.K : d.N;
  if (on_cuda(a)) {
    gpu_product(precision, false, transpose_b, d.M, d.N, d.K, a.f32(), d.K, d.M * d.K, b.f32(), ldb, d.K * d.N, 0.f,
                c.f32(), d.N, d.M * d.N, d.batch);
    return c;
  }
#pragma omp parallel for schedule(static) if (d.batch > 1)
  for (int64_t i = 0; i < d.batch; ++i)
    cpu_product(precision, false, transpose_b, d.M, d.N, d.K, a.f32() + i * d.M * d.K, d.K, b.f32() + i * d.K * d.N,
                ldb, 0.f, c.f32() + i * d.M * d.N, d.N);
  return c;
}

void matmul_backward(const Tensor& dc_in, const Tensor& a_in, const Tensor& b_in, bool transpose_b, Tensor* da,
                     Tensor* db, Precision precision) {
  const MatmulDims d = check_matmul(a_in, b_in, transpose_b);
  check_same_device("matmul backward", {&dc_in, &a_in, &b_in});
  const Tensor dc = dc_in.contiguous(), a = a_in.contiguous(), b = b_in.contiguous();
  if (on_cuda(a)) {
    matmul_backward_cuda(d, dc, a, b, transpose_b, da, db, precision);
    return;
  }
  const int64_t ldb = transpose_b ? d.K : d.N;
  if (da) {  // da (M, K) = dc (M, N) @ op(b)^T
    const float beta = prepare_slot(da, a.shape(), a.device()) ? 1.f : 0.f;
#pragma omp parallel for schedule(static) if (d.batch > 1)
    for (int64_t i = 0; i < d.batch; ++i)
      cpu_product(precision, false, !transpose_b, d.M, d.K, d.N, dc.f32() + i * d.M * d.N, d.N,
                  b.f32() + i * d.K * d.N, ldb, beta, da->f32() + i * d.M * d.K, d.K);
  }
  if (db) {
    const float beta = prepare_slot(db, b.shape(), b.device()) ? 1.f : 0.f;
#pragma omp parallel for schedule(static) if (d.batch > 1)
    for (int64_t i = 0; i < d.batch; ++i) {
      float* out = db->f32() + i * d.K * d.N;
      if (transpose_b)  // db (N, K) = dc^T (N, M) @ a (M, K)
        cpu_product(precision, true, false, d.N, d.K, d.M, dc.f32() + i * d.M * d.N, d.N, a.f32() + i * d.M * d.K, d.K,
                    beta, out, d.K);
      else  // db (K, N) = a^T (K, M) @ dc (M, N)
        cpu_product(precision, true, false, d.K, d.N, d.M, a.f32() + i * d.M * d.K, d.K, dc.f32() + i * d.M * d.N, d.N,
                    beta, out, d.N);
    }
  }
}

}  // namespace qkv::ops
