// What the Trainer's tests share: a translation model small enough to train in milliseconds, and a
// run of it on the copy task.
#pragma once
#include <memory>
#include <string>

#include "qkv/models/checkpoint.h"
#include "qkv/models/transformer.h"
#include "qkv/train/trainer.h"
#include "qkv/train/training_data.h"

namespace qkv::train {

inline models::TransformerConfig tiny_translation_config() {
  models::TransformerConfig c;
  c.src_vocab_size = c.tgt_vocab_size = 20;
  c.d_model = 16;
  c.num_heads = 2;
  c.num_layers = 1;
  c.d_ff = 32;
  c.max_seq_length = 16;
  c.dropout = 0.1f;  // dropout on: resume must restore the RNG
  return c;
}

// Trains the copy task to `steps` into `dir` on `device`, from scratch or resuming what `dir` holds.
inline TrainResult train_copy_task(const std::string& dir, int64_t steps, bool resume, double lr = 1e-3,
                              int64_t save_every = 0, const Schedule& schedule = {"constant", 0, 1, 16},
                              Device device = Device::cpu()) {
  std::unique_ptr<models::Transformer> model =
      resume ? models::load_seq2seq(dir) : std::make_unique<models::Transformer>(tiny_translation_config(), 5);
  SyntheticData data("copy", 4, 6, 20, 9);
  TrainerOptions o;
  o.hyper.schedule = schedule;
  o.hyper.schedule.lr = lr;
  o.last_dir = dir;
  o.max_steps = steps;
  o.save_every = save_every;
  o.device = device;
  Trainer trainer(*model, data, o);
  if (resume) trainer.resume(dir, read_train_state(dir + "/train_state.json"));
  return trainer.run();
}

}  // namespace qkv::train
