#include "qkv/data/synthetic.h"

#include <random>

#include "qkv/core/error.h"

namespace qkv::data {

SyntheticBatch synthetic_batch(const std::string& task, int64_t B, int64_t L, int64_t V, uint64_t seed, int64_t step) {
  if (task == "random") {
    QKV_CHECK(V >= 2, "synthetic random task needs a vocabulary of at least 2");
    std::mt19937_64 eng(seed * 0x9e3779b97f4a7c15ULL + 17);  // the same batch every step, as the seed
    std::uniform_int_distribution<int32_t> id(1, static_cast<int32_t>(V - 1));
    SyntheticBatch b{Tensor::empty(Dims{B, L}, DType::I32), Tensor::empty(Dims{B, L}, DType::I32)};
    for (int64_t i = 0; i < B * L; ++i) b.src.i32()[i] = id(eng);
    for (int64_t i = 0; i < B * L; ++i) b.tgt.i32()[i] = id(eng);
    return b;
  }
  QKV_CHECK(task == "copy", "unknown synthetic task '" << task << "' (expected random or copy)");
  QKV_CHECK(V > kCopyFirstId && L >= 2, "synthetic copy task needs vocabulary > " << kCopyFirstId << " and length >= 2");
  std::mt19937_64 eng(seed * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(step) * 0xbf58476d1ce4e5b9ULL + 29);
  std::uniform_int_distribution<int32_t> id(kCopyFirstId, static_cast<int32_t>(V - 1));
  std::uniform_int_distribution<int64_t> len(L / 2, L);
  const int64_t W = L + 2;
  SyntheticBatch b{Tensor::zeros(Dims{B, L}, DType::I32), Tensor::zeros(Dims{B, W}, DType::I32)};
  for (int64_t r = 0; r < B; ++r) {
    const int64_t n = len(eng);
    b.tgt.i32()[r * W] = kCopyBos;
    for (int64_t t = 0; t < n; ++t) {
      const int32_t v = id(eng);
      b.src.i32()[r * L + t] = v;
      b.tgt.i32()[r * W + t + 1] = v;
    }
    b.tgt.i32()[r * W + n + 1] = kCopyEos;
  }
  return b;
}

}  // namespace qkv::data
