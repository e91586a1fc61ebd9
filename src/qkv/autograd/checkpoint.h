// Activation checkpointing: run f without recording, keep only its input, and replay f with
// recording during backward (as torch.utils.checkpoint). Trades one extra forward of f for the
// memory of every activation inside it. f must be deterministic: it must not draw dropout masks.
#pragma once
#include <functional>
#include <vector>

#include "qkv/autograd/graph.h"

namespace qkv::fn {

// y = f(x). Parameters used inside f receive their gradients during the replay. `params` (those f
// uses) are held by the recorded node until the replay has run, as every other op holds its
// inputs: code that watches backward for parameters whose gradient is final (the data-parallel
// gradient all-reduce, which starts a bucket once no pending node refers to its parameters) then
// sees them as still in use.
Var checkpoint(const std::function<Var(const Var&)>& f, const Var& x, const std::vector<Var>& params = {});

}  // namespace qkv::fn
