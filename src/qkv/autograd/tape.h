// Transitional: the tape is now qkv::Graph (graph.h). Tests that still spell it Tape use this alias.
#pragma once
#include "qkv/autograd/graph.h"

namespace qkv {
using Tape = Graph;
}  // namespace qkv
