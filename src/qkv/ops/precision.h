// The arithmetic of the products of linear layers and matmuls: float32, or bf16 operands with
// float32 sums (mixed-precision training, `qkv train --precision bf16`).
//
// Like PyTorch's CPU autocast, the choice is a scope on the calling thread: the ops called while a
// ProductPrecisionScope lives take it as their default, and an op's backward multiplies in the
// precision its forward did (fn::linear and fn::matmul pass it on). Only the products change:
// weights, gradients and optimizer state stay float32; softmax, LayerNorm, losses and reductions
// run in float32 as always (where autocast differs: it also rounds each product's result to bf16,
// qkv keeps it float32). What a backward keeps may be bf16 (ops::saved_for_backward): a linear
// layer's last-used input (the same gradient), GELU's and SiLU's input (as autocast), and on the CPU
// the fused attention's softmax, which its backward then reads rounded. Attention multiplies as
// autocast's SDPA does in bf16 precision: Q, K, V, dO, the probabilities and dS rounded to bf16,
// sums and softmax float32; on the CPU through gemm_bf16 (kernels/attention_products.h), on a GPU on
// the tensor cores (kernels/cuda/flash_attention_bf16.cu). On the CPU, GELU and GELU-tanh and their
// derivatives take float steps alone in bf16 precision (ops/elementwise.cpp: their results go
// through bf16, their backward's input is kept in bf16).
#pragma once
#include <string>

namespace qkv::ops {

enum class Precision { Float32, BF16 };

const char* precision_name(Precision p);  // "float32", "bf16"
const char* precision_names();            // "float32, bf16"
// "float32"/"fp32" or "bf16"/"bfloat16"; throws qkv::Error naming the accepted names otherwise.
Precision parse_precision(const std::string& name);

// The products' precision for ops called on this thread (Float32 outside any scope).
Precision product_precision();

class ProductPrecisionScope {
 public:
  explicit ProductPrecisionScope(Precision p);
  ~ProductPrecisionScope();
  ProductPrecisionScope(const ProductPrecisionScope&) = delete;
  ProductPrecisionScope& operator=(const ProductPrecisionScope&) = delete;

 private:
  Precision saved_;
};

// What runs bf16 products on this machine, in words: "avx512_bf16 (vdpbf16ps)".
std::string bf16_product_kernel();

// The instruction-set level the CPU kernels run at and what chose it (kernels/isa.h), for
// `qkv --version` and the Python module: "avx512_bf16 (the best this CPU allows)". Throws
// qkv::Error when QKV_ISA names a level this CPU lacks, or none: check_cpu_kernel_level() at
// start-up makes that an error before any work.
std::string cpu_kernel_level();
void check_cpu_kernel_level();

}  // namespace qkv::ops
