#include "qkv/train/train_state.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <stdexcept>

#include "qkv/core/error.h"

namespace qkv::train {
using nlohmann::json;

namespace {
// 2 (2026-11-25): a translation run's data state names the length order of its batches
// ("length_order"); a version-1 state is read as source-then-target, the order of its day. An older
// qkv refuses version 2 rather than resume such a run in other batches than it was saved in.
constexpr int kFormatVersion = 2;

// A field whose value is wrong: read_train_state adds the file's name (a qkv::Error thrown here
// would not name it).
struct FieldError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Numbers are read exactly or refused, never converted into something else: an integer field takes
// a JSON integer that fits it, or a float with an integral value in range (1200.0); not a fraction
// (truncated), a negative number for an unsigned field (wrapped), or 1e300 (converting it to an
// integer is undefined behaviour). A float field takes any number within its type's range (a JSON
// number is finite; 1e39 as a float would be inf, which train_state_to_json writes as null).
int64_t int_field(const json& j, const char* key, int64_t min = std::numeric_limits<int64_t>::min()) {
  const json& v = j.at(key);
  const std::string name = std::string("\"") + key + "\"";
  int64_t value = 0;
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()})
      throw FieldError(name + " must be a 64-bit integer, got " + v.dump());
    value = v.get<int64_t>();
  } else if (v.is_number_integer()) {
    value = v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d != std::floor(d) || d < -0x1p63 || d >= 0x1p63) throw FieldError(name + " must be a 64-bit integer, got " + v.dump());
    value = static_cast<int64_t>(d);
  } else {
    throw FieldError(name + " must be an integer, got " + v.dump());
  }
  if (value < min) throw FieldError(name + " must be >= " + std::to_string(min) + ", got " + v.dump());
  return value;
}

uint64_t uint_field(const json& j, const char* key) {
  const json& v = j.at(key);
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_float() && v.get<double>() >= 0 && v.get<double>() < 0x1p64 && v.get<double>() == std::floor(v.get<double>()))
    return static_cast<uint64_t>(v.get<double>());
  throw FieldError(std::string("\"") + key + "\" must be an unsigned 64-bit integer, got " + v.dump());
}

double double_field(const json& j, const char* key) {
  const json& v = j.at(key);
  if (!v.is_number()) throw FieldError(std::string("\"") + key + "\" must be a number, got " + v.dump());
  return v.get<double>();
}

float float_field(const json& j, const char* key) {
  const double v = double_field(j, key);
  if (std::fabs(v) > std::numeric_limits<float>::max())
    throw FieldError(std::string("\"") + key + "\" is out of a float's range, got " + j.at(key).dump());
  return static_cast<float>(v);
}

json hyper_to_json(const Hyper& h) {
  return {{"schedule", h.schedule.kind}, {"lr", h.schedule.lr},        {"warmup", h.schedule.warmup},
          {"d_model", h.schedule.d_model}, {"clip_norm", h.clip_norm}, {"label_smoothing", h.label_smoothing},
          {"micro_batch", h.micro_batch}, {"beta1", h.beta1},          {"beta2", h.beta2},
          {"eps", h.eps},                 {"optimizer", h.optimizer},  {"weight_decay", h.weight_decay},
          {"precision", h.precision},
          {"max_memory", h.max_memory}, {"total_steps", h.schedule.total_steps}};
}

Hyper hyper_from_json(const json& j) {
  Hyper h;
  h.schedule = {j.at("schedule").get<std::string>(), double_field(j, "lr"), int_field(j, "warmup"),
                int_field(j, "d_model")};
  // Absent in files written before the linear and cosine schedules: no other schedule reads it.
  h.schedule.total_steps = j.contains("total_steps") ? int_field(j, "total_steps") : 0;
  h.clip_norm = double_field(j, "clip_norm");
  h.label_smoothing = float_field(j, "label_smoothing");
  h.micro_batch = int_field(j, "micro_batch");
  h.beta1 = double_field(j, "beta1");
  h.beta2 = double_field(j, "beta2");
  h.eps = double_field(j, "eps");
  // Absent in files written before AdamW existed: those runs used Adam without decay.
  if (j.contains("optimizer")) h.optimizer = j.at("optimizer").get<std::string>();
  if (j.contains("weight_decay")) h.weight_decay = double_field(j, "weight_decay");
  // Absent in files written before --precision existed: those runs multiplied in float32.
  if (j.contains("precision")) h.precision = j.at("precision").get<std::string>();
  if (h.precision != "float32" && h.precision != "bf16")
    throw FieldError("precision must be float32 or bf16, got " + h.precision);
  // Absent in files written before --max-memory existed: those runs never chunked on their own, and
  // must not start to on resume (the sums would change).
  h.max_memory = j.contains("max_memory") ? int_field(j, "max_memory") : 0;
  if (h.max_memory < 0 && h.max_memory != kAutoMemory)
    throw FieldError("max_memory must be >= 0 or -1 (auto), got " + std::to_string(h.max_memory));
  if (h.optimizer != "adam" && h.optimizer != "adamw")
    throw FieldError("optimizer must be adam or adamw, got " + h.optimizer);
  return h;
}

// qkv 0.1's `train --synthetic` state: step, generator, task/batch/len/data_seed, lr (constant).
TrainState from_legacy_synthetic(const json& j) {
  TrainState s;
  s.kind = "synthetic";
  s.step = int_field(j, "step", 0);
  s.gen_seed = uint_field(j, "generator_seed");
  s.gen_offset = uint_field(j, "generator_offset");
  s.data = {{"task", j.at("task")}, {"batch", j.at("batch")}, {"len", j.at("len")}, {"seed", j.at("data_seed")}};
  s.hyper.schedule = {"constant", double_field(j, "lr"), 4000, 512};
  s.hyper.max_memory = 0;  // qkv 0.1 never chunked a batch
  s.has_hyper = true;  // the synthetic trainer had no other settings (no clipping, no smoothing)
  return s;
}

// qkv 0.1's corpus state: step, batcher position, generator, best, patience counter, time.
TrainState from_legacy_corpus(const json& j) {
  TrainState s;
  s.kind = "translation";
  s.step = int_field(j, "step", 0);
  s.data = {{"epoch", j.at("epoch")}, {"index", j.at("batch_index")}, {"seed", j.at("batcher_seed")}};
  s.gen_seed = uint_field(j, "generator_seed");
  s.gen_offset = uint_field(j, "generator_offset");
  s.best = double_field(j, "best");
  s.bad_validations = int_field(j, "bad_validations");
  s.elapsed = double_field(j, "elapsed_seconds");
  s.hyper.max_memory = 0;  // qkv 0.1 never chunked a batch (the one setting taken from here: run.cpp)
  return s;
}
}  // namespace

std::string train_state_to_json(const TrainState& s) {
  const json j = {{"format", "qkv-train-state"},
                  {"format_version", kFormatVersion},
                  {"kind", s.kind},
                  {"step", s.step},
                  {"generator", {{"seed", s.gen_seed}, {"offset", s.gen_offset}}},
                  {"data", s.data},
                  {"hyper", hyper_to_json(s.hyper)},
                  {"best", s.best},
                  {"bad_validations", s.bad_validations},
                  {"elapsed_seconds", s.elapsed}};
  return j.dump(2) + "\n";
}

TrainState read_train_state(const std::string& path) {
  std::ifstream in(path);
  QKV_CHECK(in, path << ": missing (not a training checkpoint; was it written by qkv train --output-dir?)");
  try {
    const json j = json::parse(in);
    QKV_CHECK(j.is_object(), path << ": expected a JSON object");
    if (!j.contains("format")) return j.contains("task") ? from_legacy_synthetic(j) : from_legacy_corpus(j);
    QKV_CHECK(j.at("format") == "qkv-train-state", path << ": \"format\" is " << j.at("format").dump()
                                                       << ", expected \"qkv-train-state\"");
    // Compared as the unsigned integer it is: 4294967297 must not wrap to version 1 in an int.
    const json& version = j.at("format_version");
    QKV_CHECK(version.is_number_unsigned() && version.get<uint64_t>() >= 1,
              path << ": format_version " << version.dump() << " is not a version number");
    QKV_CHECK(version.get<uint64_t>() <= kFormatVersion, path << ": format_version " << version.dump()
                                                           << " is newer than this qkv reads (" << kFormatVersion
                                                           << "); upgrade qkv");
    TrainState s;
    s.kind = j.at("kind").get<std::string>();
    s.step = int_field(j, "step", 0);
    s.gen_seed = uint_field(j.at("generator"), "seed");
    s.gen_offset = uint_field(j.at("generator"), "offset");
    s.data = j.at("data");
    s.hyper = hyper_from_json(j.at("hyper"));
    s.has_hyper = true;
    s.best = double_field(j, "best");
    s.bad_validations = int_field(j, "bad_validations");
    s.elapsed = double_field(j, "elapsed_seconds");
    return s;
  } catch (const json::exception& e) {
    throw Error(path + ": " + e.what());
  } catch (const FieldError& e) {
    throw Error(path + ": " + e.what());
  }
}

}  // namespace qkv::train
