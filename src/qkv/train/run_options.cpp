#include "qkv/train/run_options.h"

#include <filesystem>

#include "qkv/models/checkpoint.h"
#include "qkv/train/vocabulary.h"

namespace qkv::train {

void on_rank0(dist::Communicator* comm, const std::function<void()>& f) {
  if (!comm || comm->size() == 1) return f();
  std::string error;
  if (comm->rank() == 0) try {
      f();
    } catch (const std::exception& e) {
      error = e.what();
      if (error.empty()) error = "failed";
    }
  dist::check_all_ranks(*comm, error);
}

std::string prepare_run_directory(const RunOptions& o, const std::string& tokenizer_file) {
  on_rank0(o.comm, [&] {
    std::filesystem::create_directories(o.out);
    remove_stale_vocabulary_files(o.out);
  });
  const std::string spm_path = o.out + "/" + tokenizer_file;
  if (o.resume) {
    models::check_checkpoint_dir(o.out + "/last");
    QKV_CHECK(std::filesystem::exists(spm_path), spm_path << ": missing; cannot resume without the run's tokenizer");
  }
  return spm_path;
}

TrainerOptions run_trainer_options(const RunOptions& o, int64_t d_model,
                                   std::vector<std::pair<std::string, std::string>> extra_files,
                                   const std::atomic<bool>* stop) {
  TrainerOptions t;
  t.hyper = o.hyper;
  t.hyper.schedule.d_model = d_model;
  t.last_dir = o.out + "/last";
  t.best_dir = o.out + "/best";
  t.run_dir = o.out;
  t.keep_checkpoints = o.keep_checkpoints;
  t.extra_files = std::move(extra_files);
  t.max_steps = o.max_steps;
  t.max_epochs = o.max_epochs;
  t.time_budget = o.time_budget;
  t.valid_every = o.valid_every;
  t.save_every = o.save_every;
  t.patience = o.patience;
  t.log_every = o.log_every;
  t.stop_flag = stop;
  t.comm = o.comm;
  t.bucket_bytes = o.bucket_bytes;
  t.overlap = o.overlap;
  t.nccl = o.nccl;
  t.device = o.device;
  return t;
}

}  // namespace qkv::train
