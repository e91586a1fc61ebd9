#include "qkv/models/model.h"

namespace qkv::models {

namespace {
// Validated before any member is built, so a bad size is refused naming its field rather than
// failing in the allocator or in the positional table.
const TransformerConfig& validated(const TransformerConfig& c) {
  c.validate();
  return c;
}
}  // namespace

Model::Model(const TransformerConfig& config, uint64_t seed) : config_(validated(config)), gen_(seed) {}

}  // namespace qkv::models
