// qkv info CHECKPOINT [--json]
// qkv info --system [--json]
//
// What a checkpoint directory holds: architecture, sizes and options, parameter count, the
// training step and settings it was saved at, and its files. Loading is the full strict load
// (shapes, finite weights, manifest), so `qkv info` doubles as a check of a checkpoint.
// With --system, what this machine gives qkv instead: the CPU, the kernels chosen for it (QKV_ISA),
// the threads, and the GPUs a CUDA build sees.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "qkv/cli/commands.h"
#include "qkv/core/cpu_features.h"
#include "qkv/core/cuda_runtime.h"
#include "qkv/core/threads.h"
#include "qkv/core/duration.h"
#include "qkv/models/checkpoint.h"
#include "qkv/ops/ops.h"
#include "qkv/ops/precision.h"
#include "qkv/train/train_state.h"

namespace qkv::cli {

namespace {
namespace fs = std::filesystem;
using nlohmann::json;

std::string human_bytes(uintmax_t bytes) {
  char buf[32];
  if (bytes < 1024) {
    std::snprintf(buf, sizeof buf, "%ju B", bytes);
  } else if (bytes < (1u << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / 1024);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  }
  return buf;
}

// The compute types the checkpoint can run in on this CPU: the kernel of each type's linears and
// the memory its inference weights take beside the float32 ones (measured by preparing them).
json describe_compute_types(models::Model& model) {
  json types = json::object();
  for (const nn::ComputeType t :
       {nn::ComputeType::Float32, nn::ComputeType::Int8, nn::ComputeType::BF16, nn::ComputeType::Int8BF16}) {
    model.set_compute_type(t);
    types[nn::compute_type_name(t)] = {{"linears", ops::linear_kernel_description(nn::linear_dtype(t))},
                                       {"tables", dtype_name(nn::table_dtype(t))},
                                       {"inference_bytes", model.inference_bytes()}};
    model.clear_compute_type();
  }
  return {{"default", nn::compute_type_name(nn::ComputeType::Float32)},
          {"cpu", cpu_features().description()},
          {"cpu_features", cpu_features().summary()},
          {"types", types}};
}

json describe(const std::string& dir) {
  const std::unique_ptr<models::Model> model = models::load_model(dir);
  const io::ManifestCheck manifest = io::verify_manifest(dir);
  int64_t params = 0;
  for (const Var& p : model->parameters()) params += p.value().numel();
  json j = {{"checkpoint", dir},
            {"architecture", model->config().architecture},
            {"parameters", params},
            {"config", json::parse(models::config_to_json(model->config()))},
            {"manifest", manifest.has_manifest}};
  if (manifest.step >= 0) j["step"] = manifest.step;
  j["compute_types"] = describe_compute_types(*model);
  json files = json::object();
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) files[e.path().filename().string()] = e.file_size();
  j["files"] = files;
  if (fs::exists(dir + "/train_state.json")) {
    const train::TrainState s = train::read_train_state(dir + "/train_state.json");
    j["step"] = s.step;
    j["training"] = {{"kind", s.kind}, {"elapsed_seconds", s.elapsed}};
    if (s.has_hyper)
      j["training"]["schedule"] = {{"kind", s.hyper.schedule.kind}, {"lr", s.hyper.schedule.lr},
                                   {"warmup", s.hyper.schedule.warmup}};
    if (s.has_hyper && train::schedule_needs_total_steps(s.hyper.schedule.kind))
      j["training"]["schedule"]["total_steps"] = s.hyper.schedule.total_steps;
    if (s.best > -1e299) j["training"]["best_dev_score"] = s.best;
  }
  return j;
}

void print_text(const json& j) {
  const json& c = j["config"];
  std::printf("checkpoint    %s\n", j["checkpoint"].get<std::string>().c_str());
  std::printf("architecture  %s\n", j["architecture"].get<std::string>().c_str());
  if (j["architecture"] == models::kEncoderOnly) {
    std::printf("model         d_model %lld, %lld heads, %lld layers, d_ff %lld, vocabulary %lld, positions %lld, "
                "%lld token types\n",
                c["d_model"].get<long long>(), c["num_heads"].get<long long>(), c["num_layers"].get<long long>(),
                c["d_ff"].get<long long>(), c["vocab_size"].get<long long>(), c["max_seq_length"].get<long long>(),
                c["type_vocab_size"].get<long long>());
    std::string heads = c["pooler"].get<bool>() ? "pooler" : "no pooler";
    if (c["mlm_head"].get<bool>()) heads += ", masked-LM head";
    if (!c["labels"].empty()) {
      heads += ", classifier over " + std::to_string(c["labels"].size()) + " labels (";
      for (size_t i = 0; i < c["labels"].size() && i < 8; ++i)
        heads += (i ? " " : "") + c["labels"][i].get<std::string>();
      heads += c["labels"].size() > 8 ? " ...)" : ")";
    }
    std::printf("heads         %s; [CLS] %lld, [SEP] %lld, [MASK] %lld, [PAD] %lld\n", heads.c_str(),
                c["cls_id"].get<long long>(), c["sep_id"].get<long long>(), c["mask_id"].get<long long>(),
                c["pad_id"].get<long long>());
  } else if (j["architecture"] == models::kDecoderOnly) {
    std::printf("model         d_model %lld, %lld heads, %lld layers, d_ff %lld, vocabulary %lld, context %lld\n",
                c["d_model"].get<long long>(), c["num_heads"].get<long long>(), c["num_layers"].get<long long>(),
                c["d_ff"].get<long long>(), c["vocab_size"].get<long long>(), c["max_seq_length"].get<long long>());
  } else {
    std::printf("model         d_model %lld, %lld heads, %lld+%lld layers, d_ff %lld, vocabulary %lld/%lld, "
                "max_seq_length %lld\n",
                c["d_model"].get<long long>(), c["num_heads"].get<long long>(), c["num_layers"].get<long long>(),
                c["num_layers"].get<long long>(), c["d_ff"].get<long long>(), c["src_vocab_size"].get<long long>(),
                c["tgt_vocab_size"].get<long long>(), c["max_seq_length"].get<long long>());
    // The ids decoding starts and stops with, and the padding id: an imported model's differ from
    // the seed's (Marian: decoding starts from the pad id, EOS 0).
    std::printf("special ids   pad %lld, decoder start (bos) %lld, eos %lld%s\n", c["pad_id"].get<long long>(),
                c["bos_id"].get<long long>(), c["eos_id"].get<long long>(),
                c.value("target_query_mask", true) ? "" : "; the target mask hides future keys only");
  }
  const std::string norm = c.contains("norm") ? c["norm"].get<std::string>()
                           : j["architecture"] == models::kEncoderOnly ? "post" : "pre";
  std::string positions = c.contains("positions") ? c["positions"].get<std::string>() : "sinusoidal";
  if (positions == "relative")  // T5's bias buckets
    positions = "relative (" + std::to_string(c.value("relative_attention_num_buckets", 32)) + " buckets, max distance " +
                std::to_string(c.value("relative_attention_max_distance", 128)) + ")";
  // T5's and BART's options, said only where they leave the seed's choice.
  std::string layout_options;
  if (!c.value("scale_attention_scores", true)) layout_options += ", unscaled attention scores";
  if (!c.value("linear_bias", true)) layout_options += ", no biases";
  if (c.value("gated_feed_forward", false)) layout_options += ", gated feed-forward";
  if (c.value("scale_decoder_output", false)) layout_options += ", decoder output scaled by d_model^-0.5";
  if (c.value("head_dim", 0) > 0) layout_options += ", heads of " + std::to_string(c.value("head_dim", 0));
  if (c.value("embedding_norm", false)) layout_options += ", embedding norm";
  if (c.value("forced_bos_id", -1) >= 0)
    layout_options += ", first target token forced to " + std::to_string(c.value("forced_bos_id", -1));
  // Encoder-decoder configs written before share_embeddings existed lack the field (not shared).
  const std::string shared = j["architecture"] == models::kEncoderDecoder
                                 ? std::string(", shared source/target embeddings ") +
                                       (c.value("share_embeddings", false) ? "yes" : "no")
                                 : "";
  std::printf("options       norm %s (%s, eps %g), activation %s, %s positions, dropout %g, ffn dropout %g, "
              "tied output %s%s, scaled embeddings %s%s\n",
              norm.c_str(), c["layer_norm"].get<std::string>().c_str(), c["layer_norm_eps"].get<double>(),
              c["activation"].get<std::string>().c_str(), positions.c_str(), c["dropout"].get<double>(),
              c["ffn_dropout"].get<double>(), c["tie_output_embedding"].get<bool>() ? "yes" : "no", shared.c_str(),
              c["scale_embeddings"].get<bool>() ? "yes" : "no", layout_options.c_str());
  const int64_t params = j["parameters"].get<int64_t>();
  std::printf("parameters    %lld (%s as float32)\n", static_cast<long long>(params),
              human_bytes(static_cast<uintmax_t>(params) * 4).c_str());
  if (j.contains("training")) {
    const json& t = j["training"];
    std::printf("training      %s, step %lld, %s of training", t["kind"].get<std::string>().c_str(),
                j["step"].get<long long>(), format_duration(t["elapsed_seconds"].get<double>()).c_str());
    if (t.contains("schedule"))
      std::printf(", %s lr %g warmup %lld", t["schedule"]["kind"].get<std::string>().c_str(),
                  t["schedule"]["lr"].get<double>(), t["schedule"]["warmup"].get<long long>());
    if (t.contains("schedule") && t["schedule"].contains("total_steps"))
      std::printf(" to 0 at step %lld", t["schedule"]["total_steps"].get<long long>());
    if (t.contains("best_dev_score")) std::printf(", best dev score %.2f", t["best_dev_score"].get<double>());
    std::printf("\n");
  } else if (j.contains("step")) {
    std::printf("training      step %lld (weights only)\n", j["step"].get<long long>());
  }
  std::printf("files        ");
  for (const auto& [name, size] : j["files"].items())
    std::printf(" %s (%s)", name.c_str(), human_bytes(size.get<uintmax_t>()).c_str());
  std::printf("\nintegrity     %s\n", j["manifest"].get<bool>() ? "manifest.json verified (sizes and CRC-32)"
                                                                 : "no manifest.json (written by an older qkv); loads");
  const json& ct = j["compute_types"];
  std::printf("compute type  %s by default (--compute-type); on this CPU (%s: %s):\n",
              ct["default"].get<std::string>().c_str(), ct["cpu"].get<std::string>().c_str(),
              ct["cpu_features"].get<std::string>().c_str());
  for (const char* name : {"float32", "int8", "bf16", "int8_bf16"}) {
    const json& t = ct["types"][name];
    std::printf("  %-10s  linears: %s; tables %s; %s of inference weights\n", name,
                t["linears"].get<std::string>().c_str(), t["tables"].get<std::string>().c_str(),
                human_bytes(t["inference_bytes"].get<uintmax_t>()).c_str());
  }
}

// `qkv info --system`: the machine as qkv sees it. A QKV_ISA this CPU cannot run is an error here as
// in every command (check_cpu_kernel_level throws it).
json describe_system() {
  ops::check_cpu_kernel_level();
  const char* isa_env = std::getenv("QKV_ISA");
  json gpus = json::array();
  for (int i = 0; i < cuda::device_count(); ++i) gpus.push_back(cuda::describe(Device::cuda(i)));
  return {{"version", QKV_VERSION},
          {"cpu",
           {{"model", cpu_features().model},
            {"microarchitecture", cpu_features().microarchitecture},
            {"family", cpu_features().family},
            {"model_number", cpu_features().model_number},
            {"stepping", cpu_features().stepping},
            {"features", cpu_features().summary()}}},
          {"kernels",
           {{"level", ops::cpu_kernel_level()},
            {"QKV_ISA", isa_env ? isa_env : ""},
            {"float32_linears", ops::linear_kernel_description(DType::F32)},
            {"int8_linears", ops::linear_kernel_description(DType::I8)},
            {"bf16_linears", ops::linear_kernel_description(DType::BF16)},
            {"bf16_training_products", ops::bf16_product_kernel()}}},
          {"threads", num_threads()},
          {"cuda", {{"built", cuda::kBuilt}, {"devices", gpus}}}};
}

void print_system_text(const json& j) {
  const json& k = j["kernels"];
  std::printf("qkv           %s\n", j["version"].get<std::string>().c_str());
  const json& cpu = j["cpu"];
  const std::string core = cpu["microarchitecture"].get<std::string>();
  std::printf("cpu           %s (%s%sfamily %d, model %d, stepping %d)\n", cpu["model"].get<std::string>().c_str(),
              core.c_str(), core.empty() ? "" : ": ", cpu["family"].get<int>(), cpu["model_number"].get<int>(),
              cpu["stepping"].get<int>());
  std::printf("  features    %s\n", cpu["features"].get<std::string>().c_str());
  std::printf("kernels       %s\n", k["level"].get<std::string>().c_str());
  std::printf("  float32 linears     %s\n", k["float32_linears"].get<std::string>().c_str());
  std::printf("  int8 linears        %s\n", k["int8_linears"].get<std::string>().c_str());
  std::printf("  bf16 linears        %s\n", k["bf16_linears"].get<std::string>().c_str());
  std::printf("  bf16 training       %s (--precision bf16)\n", k["bf16_training_products"].get<std::string>().c_str());
  std::printf("threads       %d (--threads, OMP_NUM_THREADS)\n", j["threads"].get<int>());
  const json& c = j["cuda"];
  if (!c["built"].get<bool>()) {
    std::printf("cuda          not built (-DQKV_CUDA=ON)\n");
  } else if (c["devices"].empty()) {
    std::printf("cuda          built; no GPU visible\n");
  } else {
    for (size_t i = 0; i < c["devices"].size(); ++i)
      std::printf("cuda:%-9zu %s\n", i, c["devices"][i].get<std::string>().c_str());
  }
}
}  // namespace

Runner add_info_command(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  auto system = std::make_shared<bool>(false);
  auto* checkpoint =
      app.add_option("checkpoint,--checkpoint", *dir, "Checkpoint directory (--checkpoint DIR or positional)");
  auto* system_flag = app.add_flag("--system", *system,
                                   "Describe this machine instead of a checkpoint: the CPU, the kernels chosen for it "
                                   "(QKV_ISA), the threads and the GPUs of a CUDA build");
  checkpoint->excludes(system_flag);
  app.add_flag("--json", *as_json, "Print one JSON object instead of text");
  app.callback([checkpoint, system_flag] {
    if (checkpoint->count() == 0 && system_flag->count() == 0)
      throw CLI::ValidationError("a checkpoint directory is required (--checkpoint DIR or positional), or --system");
  });
  return [dir, as_json, system]() {
    if (*system) {
      const json j = describe_system();
      if (*as_json) {
        std::cout << j.dump(2) << "\n";
      } else {
        print_system_text(j);
      }
      return 0;
    }
    const json j = describe(*dir);
    if (*as_json) {
      std::cout << j.dump(2) << "\n";
    } else {
      print_text(j);
    }
    return 0;
  };
}

}  // namespace qkv::cli
