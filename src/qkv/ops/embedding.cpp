#include "qkv/kernels/embedding.h"

#include <algorithm>

#include "qkv/ops/grad_slot.h"
#include "qkv/ops/ops.h"

namespace qkv::ops {

Tensor embedding_forward(const Tensor& table_in, const Tensor& ids_in) {
  QKV_CHECK(table_in.dim() == 2, "embedding: table must be (vocab, dim), got " << table_in.shape());
  QKV_CHECK(ids_in.dtype() == DType::I32, "embedding: ids must be i32, got " << ids_in.describe());
  const Tensor table = table_in.contiguous(), ids = ids_in.contiguous();
  const int64_t V = table.size(0), D = table.size(1), N = ids.numel();
  const int32_t* id = ids.i32();
  for (int64_t n = 0; n < N; ++n)
    QKV_CHECK(id[n] >= 0 && id[n] < V, "embedding: id " << id[n] << " out of range for vocabulary size " << V
                                                        << " (at flat position " << n << " of ids " << ids.shape()
                                                        << ")");
  Dims out_shape = ids.shape();
  out_shape.push_back(D);
  Tensor out = Tensor::empty(out_shape);
  switch (table.dtype()) {  // the rows come out float32 whatever the table stores
    case DType::F32: kernels::embedding_forward(out.f32(), table.f32(), id, N, D); break;
    case DType::BF16: kernels::embedding_forward_bf16(out.f32(), table.data<bfloat16>(), id, N, D); break;
    default: QKV_CHECK(false, "embedding: no lookup from a " << table.describe() << " table (f32 or bf16)");
  }
  return out;
}

void embedding_backward(const Tensor& dout_in, const Tensor& ids_in, Tensor* dtable, const Dims& table_shape,
                        int32_t padding_idx) {
  Tensor dout = dout_in.contiguous();
  const Tensor ids = ids_in.contiguous();
  const int64_t D = table_shape[1], N = ids.numel();
  QKV_CHECK(dout.numel() == N * D, "embedding backward: grad " << dout.shape() << " vs ids " << ids.shape());
  if (padding_idx >= 0) {
    // nn.Embedding(padding_idx=p): lookups of p pass no gradient to row p. Zeroing their rows of
    // dout (not row p of dtable afterwards) keeps what a tied output layer adds to row p.
    bool any = false;
    for (int64_t n = 0; n < N && !any; ++n) any = ids.i32()[n] == padding_idx;
    if (any) {
      dout = dout.clone();
      for (int64_t n = 0; n < N; ++n)
        if (ids.i32()[n] == padding_idx) std::fill(dout.f32() + n * D, dout.f32() + (n + 1) * D, 0.f);
    }
  }
  prepare_zeroed_slot(dtable, table_shape);
  kernels::embedding_backward(dtable->f32(), dout.f32(), ids.i32(), N, D);
}

}  // namespace qkv::ops
