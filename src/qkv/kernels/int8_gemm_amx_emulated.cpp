// gemm_int8's AMX build (int8_amx_blocking.h) on the model of the tiles (amx_tile_model.h), for
// every CPU: the tests run the build's quantization, repacking and blocking where no AMX is at hand,
// bit for bit against the AVX2 build. Not fast, and never chosen by gemm_int8.
#include <cmath>
#include <cstring>

#include "qkv/kernels/amx_tile_model.h"
#include "qkv/kernels/int8_amx_blocking.h"
#include "qkv/kernels/int8_gemm_isa.h"

namespace qkv::kernels::int8_isa {

namespace {

using int8_amx::kPanel;

struct ModelMachine {
  amx::ModelTiles<amx::Op::Int8> tiles;

  void repack_panel(const QuantizedWeights& W, int64_t p, int64_t quads, int8_t* dst) {
    for (int64_t kq = 0; kq < quads; ++kq)
      for (int64_t j = 0; j < kPanel; ++j)
        for (int64_t i = 0; i < 4; ++i) {
          const int64_t k = 4 * kq + i;
          dst[kq * 64 + 4 * j + i] = k < W.padded_in_features() ? W.at(p * kPanel + j, k) : int8_t{0};
        }
  }

  void store_block(const int32_t* sums, int rows, int64_t cols, const float* a_scales, const float* w_scales,
                   const float* bias, float* C, int64_t ldc) {
    for (int r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j)
        C[r * ldc + j] = std::fma(static_cast<float>(sums[r * 2 * kPanel + j]), a_scales[r] * w_scales[j],
                                  bias ? bias[j] : 0.f);
  }
};

// A row quantized as the AVX2 build does (kernels::quantize_row), the padding zero.
float quantize_row_s8(const float* x, int64_t n, int64_t padded, void* q_out) {
  int8_t* q = static_cast<int8_t*>(q_out);
  const float scale = quantize_row(x, n, q);
  std::memset(q + n, 0, static_cast<size_t>(padded - n));
  return scale;
}

constexpr Build kModelBuild{sizeof(int8_t), 2, int8_amx::kBlockRows, quantize_row_s8,
                           int8_amx::block_product_on<ModelMachine>};

}  // namespace

const Build& amx_model_build() { return kModelBuild; }

}  // namespace qkv::kernels::int8_isa
