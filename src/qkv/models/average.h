// Checkpoint averaging: the element-wise mean of the weights of several checkpoints of one run
// (Vaswani et al. 2017, section 6.1, average the last 5 or 20 checkpoints of a training run). The
// averaged model usually translates better than any one of them.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "qkv/models/transformer.h"

namespace qkv::models {

// Loads every checkpoint directory in `dirs` and returns a model whose every parameter is the mean
// of theirs (summed in double, rounded once to float). The configs must be identical: a difference
// is a qkv::Error naming both directories. One directory returns that model unchanged.
std::unique_ptr<Model> average_checkpoints(const std::vector<std::string>& dirs);

}  // namespace qkv::models
