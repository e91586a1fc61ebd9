#include "qkv/nn/packed_linears.h"

namespace qkv::nn {

void PackedLinears::add(const Linear& layer) {
  const Tensor w = layer.weight.value().contiguous();
  if (precision_ == LinearPrecision::Int8)
    quantized_[&layer] = kernels::quantize_weights(w.f32(), w.size(0), w.size(1));
  else
    packs_[&layer] = kernels::pack_weights(w.f32(), w.size(0), w.size(1));
}

const kernels::PackedWeights* PackedLinears::find(const Linear& layer) const {
  const auto it = packs_.find(&layer);
  return it == packs_.end() ? nullptr : &it->second;
}

const kernels::QuantizedWeights* PackedLinears::find_int8(const Linear& layer) const {
  const auto it = quantized_.find(&layer);
  return it == quantized_.end() ? nullptr : &it->second;
}

int64_t PackedLinears::bytes() const {
  int64_t total = 0;
  for (const auto& [layer, pack] : packs_) total += pack.panels() * kernels::PackedWeights::kPanel * pack.in_features() * 4;
  for (const auto& [layer, q] : quantized_)
    total += q.panels() * kernels::QuantizedWeights::kPanel * (q.padded_in_features() + 4);
  return total;
}

Var linear(const Linear& layer, const Var& x, const PackedLinears* packed) {
  const kernels::PackedWeights* pack = packed ? packed->find(layer) : nullptr;
  const kernels::QuantizedWeights* quantized = packed ? packed->find_int8(layer) : nullptr;
  const bool records = grad_enabled() && (x.requires_grad() || layer.weight.requires_grad() ||
                                          (layer.bias.defined() && layer.bias.requires_grad()));
  const int64_t K = layer.weight.size(1), rows = x.value().numel() / std::max<int64_t>(K, 1);
  if ((!pack && !quantized) || records || x.size(-1) != K) return layer.forward(x);
  const Tensor in = x.value().contiguous();
  const int64_t out = layer.weight.size(0);
  Dims shape = in.shape();
  shape[shape.size() - 1] = out;
  Tensor y = Tensor::empty(shape);
  const Tensor bias = layer.bias.defined() ? layer.bias.value().contiguous() : Tensor();
  const float* b = bias.defined() ? bias.f32() : nullptr;
  if (quantized)
    kernels::gemm_int8(in.f32(), rows, K, *quantized, b, y.f32(), out);
  else
    kernels::gemm_packed(in.f32(), rows, K, *pack, b, y.f32(), out);
  return Var(std::move(y));
}

}  // namespace qkv::nn
