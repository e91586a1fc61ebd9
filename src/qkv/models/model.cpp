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

void Model::set_compute_type(nn::ComputeType type) {
  for (nn::Linear* l : inference_linears()) l->set_compute_type(type);
  for (nn::Embedding* e : inference_embeddings()) e->set_compute_type(type);
  compute_type_ = type;
}

void Model::clear_compute_type() {
  for (nn::Linear* l : inference_linears()) l->clear_inference_weight();
  for (nn::Embedding* e : inference_embeddings()) e->clear_inference_table();
  compute_type_.reset();
}

void Model::to(Device device) {
  const std::optional<nn::ComputeType> type = compute_type_;
  clear_compute_type();  // packed forms are a CPU kernel's: prepared again where the weights go
  nn::Module::to(device);
  if (type) set_compute_type(*type);
}

int64_t Model::inference_bytes() const {
  int64_t bytes = 0;
  auto& self = const_cast<Model&>(*this);  // the lists are the family's own members, only read here
  for (const nn::Linear* l : self.inference_linears()) bytes += l->inference_weight().bytes();
  for (const nn::Embedding* e : self.inference_embeddings())
    if (e->inference_table().defined()) bytes += e->inference_table().nbytes();
  return bytes;
}

}  // namespace qkv::models
