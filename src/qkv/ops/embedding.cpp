#include "qkv/kernels/embedding.h"

#include <algorithm>
#include <sstream>

#include "qkv/ops/dispatch.h"
#include "qkv/ops/grad_slot.h"
#include "qkv/ops/ops.h"

namespace qkv::ops {

namespace {
[[noreturn]] void bad_id(int32_t id, int64_t V, int64_t n, const Tensor& ids) {
  std::ostringstream os;
  os << "embedding: id " << id << " out of range for vocabulary size " << V << " (at flat position " << n
     << " of ids " << ids.shape() << ")";
  throw Error(os.str());
}

// The GPU's lookup: the kernel checks the ids and names the first bad one's position.
void embedding_forward_cuda(Tensor& out, const Tensor& table, const Tensor& ids) {
  if constexpr (cuda::kBuilt) {
    const int64_t V = table.size(0), D = table.size(1), N = ids.numel();
    int64_t bad = -1;
    switch (table.dtype()) {
      case DType::F32: bad = kernels::cuda::embedding_forward(out.f32(), table.f32(), ids.i32(), N, D, V); break;
      case DType::BF16:
        bad = kernels::cuda::embedding_forward_bf16(out.f32(), table.data<bfloat16>(), ids.i32(), N, D, V);
        break;
      default: QKV_CHECK(false, "embedding: no lookup from a " << table.describe() << " table (f32 or bf16)");
    }
    if (bad >= 0) bad_id(ids.reshape(Dims{N}).narrow(0, bad, 1).to_ids()[0], V, bad, ids);
  }
}
}  // namespace

Tensor embedding_forward(const Tensor& table_in, const Tensor& ids_in) {
  QKV_CHECK(table_in.dim() == 2, "embedding: table must be (vocab, dim), got " << table_in.shape());
  QKV_CHECK(ids_in.dtype() == DType::I32, "embedding: ids must be i32, got " << ids_in.describe());
  check_same_device("embedding", {&table_in, &ids_in});
  const Tensor table = table_in.contiguous(), ids = ids_in.contiguous();
  const int64_t V = table.size(0), D = table.size(1), N = ids.numel();
  Dims out_shape = ids.shape();
  out_shape.push_back(D);
  Tensor out = empty_like_device(out_shape, table);
  if (on_cuda(table)) {
    embedding_forward_cuda(out, table, ids);
    return out;
  }
  const int32_t* id = ids.i32();
  for (int64_t n = 0; n < N; ++n)
    if (id[n] < 0 || id[n] >= V) bad_id(id[n], V, n, ids);
  switch (table.dtype()) {  // the rows come out float32 whatever the table stores
    case DType::F32: kernels::embedding_forward(out.f32(), table.f32(), id, N, D); break;
    case DType::BF16: kernels::embedding_forward_bf16(out.f32(), table.data<bfloat16>(), id, N, D); break;
    default: QKV_CHECK(false, "embedding: no lookup from a " << table.describe() << " table (f32 or bf16)");
  }
  return out;
}

void embedding_backward(const Tensor& dout_in, const Tensor& ids_in, Tensor* dtable, const Dims& table_shape,
                        int32_t padding_idx) {
  check_same_device("embedding backward", {&dout_in, &ids_in});
  Tensor dout = dout_in.contiguous();
  const Tensor ids = ids_in.contiguous();
  const int64_t D = table_shape[1], N = ids.numel();
  QKV_CHECK(dout.numel() == N * D, "embedding backward: grad " << dout.shape() << " vs ids " << ids.shape());
  prepare_zeroed_slot(dtable, table_shape, dout.device());
  if (on_cuda(dout)) {  // the kernel skips the padding id's lookups itself
    if constexpr (cuda::kBuilt) kernels::cuda::embedding_backward(dtable->f32(), dout.f32(), ids.i32(), N, D, padding_idx);
    return;
  }
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
  kernels::embedding_backward(dtable->f32(), dout.f32(), ids.i32(), N, D);
}

}  // namespace qkv::ops
