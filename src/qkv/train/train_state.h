// train_state.json: everything beyond weights and optimizer moments that an exact resume needs, in
// one format for every kind of training (synthetic ids, translation, later language modelling):
//
//   {"format": "qkv-train-state", "format_version": 1, "kind": "translation", "step": 1200,
//    "generator": {"seed": 0, "offset": 123456},        dropout RNG position
//    "data": {...},                                     the data source's position (TrainingData::state)
//    "hyper": {"schedule": "inverse_sqrt", "lr": 5e-4, "warmup": 4000, "clip_norm": 1.0,
//              "label_smoothing": 0.1, "micro_batch": 0, "max_memory": -1, "beta1": 0.9, "beta2": 0.98,
//              "eps": 1e-9, "precision": "float32"}       max_memory: bytes, 0 no limit, -1 auto (absent: 0);
//                                                   precision absent: float32
//    "best": 21.3, "bad_validations": 0, "elapsed_seconds": 3600.5}
//
// Files written by earlier versions (two formats: synthetic and corpus) are read too.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "qkv/train/memory_budget.h"
#include "qkv/train/schedule.h"

namespace qkv::train {

// The optimisation settings a run was started with; a resumed run continues with them unless the
// caller overrides them explicitly.
struct Hyper {
  Schedule schedule{"constant", 1e-4, 4000, 512};
  double clip_norm = 0.0;  // 0: no clipping
  float label_smoothing = 0.f;
  int64_t micro_batch = 0;  // > 0: chunks of this many rows (--micro-batch; overrides max_memory)
  // --max-memory in bytes: batches whose estimated step exceeds it run in micro-batches chosen from
  // the shapes (train/memory_budget.h); 0: no limit; kAutoMemory: the default budget.
  int64_t max_memory = kAutoMemory;
  double beta1 = 0.9, beta2 = 0.98, eps = 1e-9;
  std::string optimizer = "adam";  // "adam" (seed 000) or "adamw" (decoupled weight decay)
  double weight_decay = 0.0;       // adamw: on 2-D weight matrices only (nanoGPT's rule)
  // The products of linear layers and matmuls (ops/precision.h): "float32", or "bf16" operands with
  // float32 sums (mixed precision: weights, gradients and Adam's moments stay float32).
  std::string precision = "float32";
};

struct TrainState {
  std::string kind;  // "synthetic" | "translation" | "language-model"
  int64_t step = 0;
  uint64_t gen_seed = 0, gen_offset = 0;
  nlohmann::json data = nlohmann::json::object();
  Hyper hyper;
  bool has_hyper = false;  // false for files of earlier versions that did not record them all
  double best = -1e300;    // best dev score so far (BLEU, or -loss without BLEU)
  int64_t bad_validations = 0;
  double elapsed = 0;  // training seconds of earlier runs
};

std::string train_state_to_json(const TrainState& state);
// Throws qkv::Error naming the file and the field.
TrainState read_train_state(const std::string& path);

}  // namespace qkv::train
