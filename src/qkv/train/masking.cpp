#include "qkv/train/masking.h"

#include <cmath>
#include <utility>

#include "qkv/core/error.h"
#include "qkv/core/hash.h"

namespace qkv::train {

namespace {
// SplitMix64's step: the golden-ratio increment, then its finaliser.
uint64_t splitmix64(uint64_t x) { return mix64(x + 0x9e3779b97f4a7c15ULL); }

// A stream of 64-bit draws keyed by (seed, key1, key2): draw i is a hash of the key and i, so the
// same key always gives the same stream, on every platform.
class KeyedStream {
 public:
  KeyedStream(uint64_t seed, uint64_t key1, uint64_t key2)
      : base_(splitmix64(splitmix64(splitmix64(seed) ^ key1) ^ (key2 * 0xd6e8feb86659fd93ULL))) {}
  uint64_t next() { return splitmix64(base_ + 0x632be59bd9b4e019ULL * ++counter_); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  uint64_t below(uint64_t n) { return next() % n; }  // bias < n / 2^64: negligible for vocabularies

 private:
  uint64_t base_, counter_ = 0;
};
}  // namespace

Masker::Masker(MaskingOptions o) : options_(std::move(o)) {
  QKV_CHECK(options_.probability > 0 && options_.probability <= 1,
            "masking: probability must be in (0, 1], got " << options_.probability);
  QKV_CHECK(options_.mask_share >= 0 && options_.random_share >= 0 && options_.mask_share + options_.random_share <= 1,
            "masking: mask_share " << options_.mask_share << " and random_share " << options_.random_share
                                   << " must be >= 0 and sum to at most 1");
  QKV_CHECK(options_.vocab_size > 0 && options_.mask_id >= 0 && options_.mask_id < options_.vocab_size,
            "masking: mask_id " << options_.mask_id << " must be an id of the vocabulary (" << options_.vocab_size
                                << " ids); config.json mask_id");
  special_.assign(static_cast<size_t>(options_.vocab_size), false);
  options_.specials.push_back(options_.mask_id);
  for (const int32_t id : options_.specials)
    if (id >= 0 && id < options_.vocab_size) special_[static_cast<size_t>(id)] = true;
  size_t normal = 0;
  for (const bool s : special_) normal += !s;
  QKV_CHECK(normal > 0, "masking: every id of the vocabulary is special");
}

MaskedSequence Masker::mask(const std::vector<int32_t>& ids, uint64_t seed, uint64_t key1, uint64_t key2) const {
  MaskedSequence m{ids, std::vector<int32_t>(ids.size(), -1)};
  std::vector<size_t> candidates;
  for (size_t i = 0; i < ids.size(); ++i)
    if (!special(ids[i])) candidates.push_back(i);
  if (candidates.empty()) return m;
  const size_t C = candidates.size();
  const size_t n = std::max<size_t>(1, static_cast<size_t>(std::llround(options_.probability * static_cast<double>(C))));
  KeyedStream rng(seed, key1, key2);
  for (size_t k = 0; k < std::min(n, C); ++k) {
    std::swap(candidates[k], candidates[k + rng.below(C - k)]);  // partial Fisher-Yates: k-th choice
    const size_t pos = candidates[k];
    m.labels[pos] = ids[pos];
    const double u = rng.uniform();
    if (u < options_.mask_share) {
      m.ids[pos] = options_.mask_id;
    } else if (u < options_.mask_share + options_.random_share) {
      int32_t r = ids[pos];
      // Rejection keeps the draw uniform over the non-special ids; the bound only matters for a
      // vocabulary that is nearly all special, where the token is then kept.
      for (int tries = 0; tries < 64; ++tries) {
        const auto c = static_cast<int32_t>(rng.below(static_cast<uint64_t>(options_.vocab_size)));
        if (!special(c)) {
          r = c;
          break;
        }
      }
      m.ids[pos] = r;
    }
  }
  return m;
}

}  // namespace qkv::train
