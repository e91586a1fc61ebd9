// --compute-type for every command that runs a model (translate, generate, score, embed, classify,
// similar), --quantize int8, its older spelling, and --device (where the model runs).
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "qkv/core/device.h"
#include "qkv/nn/compute_type.h"

namespace qkv::cli {

struct ComputeTypeOption {
  std::string compute_type = "float32";
  std::string quantize = "none";  // "int8": --compute-type int8
  std::string device = "cpu";
};

// Adds --compute-type {float32,bf16,int8,int8_bf16} and --quantize {none,int8}; the two exclude
// each other (a usage error names both).
void add_compute_type_options(CLI::App& app, ComputeTypeOption& o);
nn::ComputeType chosen_compute_type(const ComputeTypeOption& o);

// --device cpu|cuda|cuda:N (train has it too): validated as a name by CLI11; whether the GPU exists
// is checked when it is used, with an error naming it (no CUDA build, no GPU, index out of range).
CLI::Option* add_device_option(CLI::App& app, std::string& device);
// The device named, checked to be usable (throws qkv::Error otherwise).
Device chosen_device(const std::string& device);

}  // namespace qkv::cli
