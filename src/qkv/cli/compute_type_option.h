// --compute-type for every command that runs a model (translate, generate, score, embed, classify,
// similar), and --quantize int8, its older spelling.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "qkv/nn/compute_type.h"

namespace qkv::cli {

struct ComputeTypeOption {
  std::string compute_type = "float32";
  std::string quantize = "none";  // "int8": --compute-type int8
};

// Adds --compute-type {float32,bf16,int8,int8_bf16} and --quantize {none,int8}; the two exclude
// each other (a usage error names both).
void add_compute_type_options(CLI::App& app, ComputeTypeOption& o);
nn::ComputeType chosen_compute_type(const ComputeTypeOption& o);

}  // namespace qkv::cli
