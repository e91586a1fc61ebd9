#include "qkv/cli/compute_type_option.h"
#include "qkv/cli/quiet.h"

#include "qkv/core/cuda_runtime.h"
#include "qkv/core/error.h"
#include "qkv/ops/ops.h"

#include <iostream>

namespace qkv::cli {

namespace {
// A CLI11 check from a parser that throws qkv::Error with the message to show for bad text.
template <class Parse>
CLI::Validator parsed_by(Parse parse, const std::string& description) {
  return CLI::Validator(
      [parse](std::string& text) -> std::string {
        try {
          (void)parse(text);
          return {};
        } catch (const Error& e) {
          return e.what();
        }
      },
      description);
}
}  // namespace

void add_compute_type_options(CLI::App& app, ComputeTypeOption& o) {
  auto* type = app.add_option("--compute-type", o.compute_type,
                              "How the model computes (chosen once, at load): float32 (weights packed for qkv's "
                              "GEMM), int8 (linear layers in 8-bit integers per output channel, as CTranslate2's "
                              "int8: about twice as fast, slightly different results), bf16 (linear layers and "
                              "embeddings stored in bfloat16), int8_bf16 (int8 linears, bfloat16 embeddings). "
                              "`qkv info` lists them")
                   ->capture_default_str()
                   ->check(parsed_by([](const std::string& name) { return nn::parse_compute_type(name, "compute type"); },
                                     "{float32,int8,bf16,int8_bf16}"));
  app.add_option("--quantize", o.quantize, "int8: the same as --compute-type int8 (the older spelling)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "int8"}))
      ->excludes(type);
  add_device_option(app, o.device);
}

CLI::Option* add_device_option(CLI::App& app, std::string& device) {
  return app
      .add_option("--device", device,
                  "Where the model runs: cpu, or cuda / cuda:N (an NVIDIA GPU; needs a build with -DQKV_CUDA=ON)")
      ->capture_default_str()
      ->check(parsed_by([](const std::string& name) { return parse_device(name); }, "{cpu,cuda,cuda:N}"));
}

Device chosen_device(const std::string& name) {
  const Device device = parse_device(name);
  cuda::check_available(device);
  return device;
}

nn::ComputeType chosen_compute_type(const ComputeTypeOption& o) {
  if (o.quantize == "int8") return nn::ComputeType::Int8;
  const nn::ComputeType type = nn::parse_compute_type(o.compute_type, "--compute-type");
  if (o.device == "cpu" && ops::linear_kernel_is_reference(nn::linear_dtype(type)))
    print_note("--compute-type " + o.compute_type +
               " runs its reference path here, slower than float32 (this CPU lacks AVX512_BF16, or QKV_ISA chose "
               "a lower level: qkv --version)");
  return type;
}

}  // namespace qkv::cli
