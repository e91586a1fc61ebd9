// Activation checkpointing: run f without recording, keep only its input, and replay f with
// recording during backward (as torch.utils.checkpoint). Trades one extra forward of f for the
// memory of every activation inside it. f must be deterministic: it must not draw dropout masks.
#pragma once
#include <functional>

#include "qkv/autograd/graph.h"

namespace qkv::fn {

// y = f(x). Parameters used inside f receive their gradients during the replay.
Var checkpoint(const std::function<Var(const Var&)>& f, const Var& x);

}  // namespace qkv::fn
