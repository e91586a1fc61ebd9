#include "qkv/kernels/elementwise.h"
#include "qkv/kernels/positional.h"
#include "qkv/ops/dispatch.h"
#include "qkv/ops/ops.h"

namespace qkv::ops {

Tensor split_heads(const Tensor& x_in, int64_t num_heads) {
  QKV_CHECK(x_in.dim() == 3, "split_heads: input must be (B, T, D), got " << x_in.shape());
  QKV_CHECK(num_heads > 0 && x_in.size(2) % num_heads == 0,
            "split_heads: d_model " << x_in.size(2) << " is not divisible by num_heads " << num_heads);
  const Tensor x = x_in.contiguous();
  // (B, T, D) -> (B, T, H, dk) -> (B, H, T, dk)
  return x.reshape(Dims{x.size(0), x.size(1), num_heads, x.size(2) / num_heads}).transpose(1, 2);
}

Tensor combine_heads(const Tensor& x) {
  QKV_CHECK(x.dim() == 4, "combine_heads: input must be (B, H, T, dk), got " << x.shape());
  // (B, H, T, dk) -> (B, T, H, dk) -> (B, T, D)
  return x.transpose(1, 2).contiguous().reshape(Dims{x.size(0), x.size(2), x.size(1) * x.size(3)});
}

Tensor add_positional_forward(const Tensor& x_in, const Tensor& table) {
  QKV_CHECK(x_in.dim() == 3, "positional encoding: input must be (B, T, D), got " << x_in.shape());
  QKV_CHECK(table.dim() == 2 && table.size(1) == x_in.size(2),
            "positional encoding: table " << table.shape() << " does not match input " << x_in.shape());
  QKV_CHECK(x_in.size(1) <= table.size(0), "positional encoding: sequence length " << x_in.size(1)
                                                                                  << " exceeds max_seq_length "
                                                                                  << table.size(0));
  check_same_device("positional encoding", {&x_in, &table});
  const Tensor x = x_in.contiguous();
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2);
  Tensor y = empty_like_device(x.shape(), x);
  const Tensor table_c = table.contiguous();  // held: a temporary's buffer would return to the pool
  const float* pe = table_c.f32();
  if (on_cuda(x)) {
    if constexpr (cuda::kBuilt) kernels::cuda::add_positional(y.f32(), x.f32(), pe, B, T, D);
    return y;
  }
  for (int64_t b = 0; b < B; ++b) kernels::add(y.f32() + b * T * D, x.f32() + b * T * D, pe, T * D);
  return y;
}

Tensor sinusoidal_table(int64_t max_len, int64_t d_model) {
  QKV_CHECK(max_len > 0 && d_model > 0, "sinusoidal_table: bad sizes " << max_len << ", " << d_model);
  Tensor pe = Tensor::empty(Dims{max_len, d_model});
  kernels::sinusoidal_table(pe.f32(), max_len, d_model);
  return pe;
}

Tensor sinusoidal_table_halves(int64_t max_len, int64_t d_model) {
  QKV_CHECK(max_len > 0 && d_model > 0, "sinusoidal_table_halves: bad sizes " << max_len << ", " << d_model);
  Tensor pe = Tensor::empty(Dims{max_len, d_model});
  kernels::sinusoidal_table_halves(pe.f32(), max_len, d_model);
  return pe;
}

Tensor sinusoidal_table_fairseq(int64_t max_len, int64_t d_model, int64_t first_position) {
  QKV_CHECK(max_len > 0 && d_model >= 4 && first_position >= 0,
            "sinusoidal_table_fairseq: bad sizes " << max_len << ", " << d_model << ", " << first_position);
  Tensor pe = Tensor::empty(Dims{max_len, d_model});
  kernels::sinusoidal_table_fairseq(pe.f32(), max_len, d_model, first_position);
  return pe;
}

}  // namespace qkv::ops
