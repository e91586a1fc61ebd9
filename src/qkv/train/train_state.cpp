#include "qkv/train/train_state.h"

#include <fstream>

#include "qkv/core/error.h"

namespace qkv::train {
using nlohmann::json;

namespace {
// 2 (2026-11-25): a translation run's data state names the length order of its batches
// ("length_order"); a version-1 state is read as source-then-target, the order of its day. An older
// qkv refuses version 2 rather than resume such a run in other batches than it was saved in.
constexpr int kFormatVersion = 2;

json hyper_to_json(const Hyper& h) {
  return {{"schedule", h.schedule.kind}, {"lr", h.schedule.lr},        {"warmup", h.schedule.warmup},
          {"d_model", h.schedule.d_model}, {"clip_norm", h.clip_norm}, {"label_smoothing", h.label_smoothing},
          {"micro_batch", h.micro_batch}, {"beta1", h.beta1},          {"beta2", h.beta2},
          {"eps", h.eps},                 {"optimizer", h.optimizer},  {"weight_decay", h.weight_decay},
          {"max_memory", h.max_memory}, {"total_steps", h.schedule.total_steps}};
}

Hyper hyper_from_json(const json& j) {
  Hyper h;
  h.schedule = {j.at("schedule").get<std::string>(), j.at("lr").get<double>(), j.at("warmup").get<int64_t>(),
                j.at("d_model").get<int64_t>()};
  // Absent in files written before the linear and cosine schedules: no other schedule reads it.
  h.schedule.total_steps = j.value("total_steps", int64_t{0});
  h.clip_norm = j.at("clip_norm").get<double>();
  h.label_smoothing = j.at("label_smoothing").get<float>();
  h.micro_batch = j.at("micro_batch").get<int64_t>();
  h.beta1 = j.at("beta1").get<double>();
  h.beta2 = j.at("beta2").get<double>();
  h.eps = j.at("eps").get<double>();
  // Absent in files written before AdamW existed: those runs used Adam without decay.
  if (j.contains("optimizer")) h.optimizer = j.at("optimizer").get<std::string>();
  if (j.contains("weight_decay")) h.weight_decay = j.at("weight_decay").get<double>();
  // Absent in files written before --max-memory existed: those runs never chunked on their own, and
  // must not start to on resume (the sums would change).
  h.max_memory = j.contains("max_memory") ? j.at("max_memory").get<int64_t>() : 0;
  QKV_CHECK(h.max_memory >= 0 || h.max_memory == kAutoMemory, "max_memory must be >= 0 or -1 (auto), got " << h.max_memory);
  QKV_CHECK(h.optimizer == "adam" || h.optimizer == "adamw", "optimizer must be adam or adamw, got " << h.optimizer);
  return h;
}

// qkv 0.1's `train --synthetic` state: step, generator, task/batch/len/data_seed, lr (constant).
TrainState from_legacy_synthetic(const json& j) {
  TrainState s;
  s.kind = "synthetic";
  s.step = j.at("step").get<int64_t>();
  s.gen_seed = j.at("generator_seed").get<uint64_t>();
  s.gen_offset = j.at("generator_offset").get<uint64_t>();
  s.data = {{"task", j.at("task")}, {"batch", j.at("batch")}, {"len", j.at("len")}, {"seed", j.at("data_seed")}};
  s.hyper.schedule = {"constant", j.at("lr").get<double>(), 4000, 512};
  s.hyper.max_memory = 0;  // qkv 0.1 never chunked a batch
  s.has_hyper = true;  // the synthetic trainer had no other settings (no clipping, no smoothing)
  return s;
}

// qkv 0.1's corpus state: step, batcher position, generator, best, patience counter, time.
TrainState from_legacy_corpus(const json& j) {
  TrainState s;
  s.kind = "translation";
  s.step = j.at("step").get<int64_t>();
  s.data = {{"epoch", j.at("epoch")}, {"index", j.at("batch_index")}, {"seed", j.at("batcher_seed")}};
  s.gen_seed = j.at("generator_seed").get<uint64_t>();
  s.gen_offset = j.at("generator_offset").get<uint64_t>();
  s.best = j.at("best").get<double>();
  s.bad_validations = j.at("bad_validations").get<int64_t>();
  s.elapsed = j.at("elapsed_seconds").get<double>();
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
  QKV_CHECK(in, path << ": missing (not a training checkpoint; was it written by qkv train --out?)");
  try {
    const json j = json::parse(in);
    QKV_CHECK(j.is_object(), path << ": expected a JSON object");
    if (!j.contains("format")) return j.contains("task") ? from_legacy_synthetic(j) : from_legacy_corpus(j);
    QKV_CHECK(j.at("format") == "qkv-train-state", path << ": \"format\" is " << j.at("format").dump()
                                                       << ", expected \"qkv-train-state\"");
    const int version = j.at("format_version").get<int>();
    QKV_CHECK(version >= 1 && version <= kFormatVersion,
              path << ": format_version " << version << " is newer than this qkv reads (" << kFormatVersion
                   << "); upgrade qkv");
    TrainState s;
    s.kind = j.at("kind").get<std::string>();
    s.step = j.at("step").get<int64_t>();
    QKV_CHECK(s.step >= 0, path << ": \"step\" is negative");
    s.gen_seed = j.at("generator").at("seed").get<uint64_t>();
    s.gen_offset = j.at("generator").at("offset").get<uint64_t>();
    s.data = j.at("data");
    s.hyper = hyper_from_json(j.at("hyper"));
    s.has_hyper = true;
    s.best = j.at("best").get<double>();
    s.bad_validations = j.at("bad_validations").get<int64_t>();
    s.elapsed = j.at("elapsed_seconds").get<double>();
    return s;
  } catch (const json::exception& e) {
    throw Error(path + ": " + e.what());
  }
}

}  // namespace qkv::train
