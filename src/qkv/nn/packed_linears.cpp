#include "qkv/nn/packed_linears.h"

namespace qkv::nn {

void PackedLinears::add(const Linear& layer) {
  const Tensor w = layer.weight.value().contiguous();
  packs_[&layer] = kernels::pack_weights(w.f32(), w.size(0), w.size(1));
}

const kernels::PackedWeights* PackedLinears::find(const Linear& layer) const {
  const auto it = packs_.find(&layer);
  return it == packs_.end() ? nullptr : &it->second;
}

int64_t PackedLinears::bytes() const {
  int64_t total = 0;
  for (const auto& [layer, pack] : packs_) total += pack.panels() * kernels::PackedWeights::kPanel * pack.in_features() * 4;
  return total;
}

Var linear(const Linear& layer, const Var& x, const PackedLinears* packed) {
  const kernels::PackedWeights* pack = packed ? packed->find(layer) : nullptr;
  const bool records = grad_enabled() && (x.requires_grad() || layer.weight.requires_grad() ||
                                          (layer.bias.defined() && layer.bias.requires_grad()));
  const int64_t K = layer.weight.size(1), rows = x.value().numel() / std::max<int64_t>(K, 1);
  if (!pack || records || rows > kMaxPackedRows || x.size(-1) != K) return layer.forward(x);
  const Tensor in = x.value().contiguous();
  Dims shape = in.shape();
  shape[shape.size() - 1] = pack->out_features();
  Tensor y = Tensor::empty(shape);
  const Tensor bias = layer.bias.defined() ? layer.bias.value().contiguous() : Tensor();
  kernels::gemm_packed(in.f32(), rows, K, *pack, bias.defined() ? bias.f32() : nullptr, y.f32(), pack->out_features());
  return Var(std::move(y));
}

}  // namespace qkv::nn
