// Adam as torch.optim.Adam (PyTorch 1.13, single-tensor path), defaults from seed 000:
// lr 1e-4, betas (0.9, 0.98), eps 1e-9; or AdamW as torch.optim.AdamW (decoupled weight decay:
// p *= 1 - lr * weight_decay before the Adam update), decaying only parameters of 2 or more
// dimensions (weight matrices and embeddings, not biases or norms: nanoGPT's two param groups).
// State (moments, step) saves to its own safetensors file so a resumed run continues exactly.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "qkv/autograd/var.h"

namespace qkv::train {

struct AdamOptions {
  double lr = 1e-4;
  double beta1 = 0.9;
  double beta2 = 0.98;
  double eps = 1e-9;
  double weight_decay = 0.0;            // Adam: L2 added to the gradient of every parameter
  bool decoupled_weight_decay = false;  // AdamW: decoupled, on parameters with dim() >= 2 only
};

class Adam {
 public:
  // named_params: (state_dict name, parameter); a parameter listed twice (tied) is updated once.
  Adam(const std::vector<std::pair<std::string, Var>>& named_params, AdamOptions options = {});
  // One update of every parameter that has a gradient.
  void step();
  void zero_grad();
  int64_t steps() const { return step_; }
  double lr() const { return options_.lr; }
  void set_lr(double lr) { options_.lr = lr; }
  const AdamOptions& options() const { return options_; }

  // "exp_avg.<name>", "exp_avg_sq.<name>", metadata {"step": ...}; atomic write.
  void save(const std::string& path) const;
  // Fails naming the tensor if one is missing or mis-shaped.
  void load(const std::string& path);

 private:
  struct Slot {
    std::string name;
    Var param;
    Tensor exp_avg, exp_avg_sq;
  };
  std::vector<Slot> slots_;
  AdamOptions options_;
  int64_t step_ = 0;
};

}  // namespace qkv::train
