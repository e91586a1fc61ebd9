#include "qkv/train/adam.h"

#include <cmath>
#include <cstring>
#include <unordered_set>
#include <vector>

#include "qkv/io/tensor_file.h"
#include "qkv/ops/ops.h"

namespace qkv::train {

Adam::Adam(const std::vector<std::pair<std::string, Var>>& named_params, AdamOptions options) : options_(options) {
  std::unordered_set<const GradCell*> seen;
  for (const auto& [name, var] : named_params) {
    QKV_CHECK(var.requires_grad(), "Adam: parameter " << name << " does not require grad");
    if (!seen.insert(var.cell().get()).second) continue;
    const Device device = var.value().device();  // the moments live with their parameter
    slots_.push_back(
        {name, var, Tensor::zeros(var.shape(), DType::F32, device), Tensor::zeros(var.shape(), DType::F32, device)});
  }
}

void Adam::step() {
  ++step_;
  // Scalars as PyTorch computes them: in double (Python floats), rounded to float when applied.
  const double bc1 = 1.0 - std::pow(options_.beta1, static_cast<double>(step_));
  const double bc2 = 1.0 - std::pow(options_.beta2, static_cast<double>(step_));
  ops::AdamScalars s{static_cast<float>(options_.beta1),    static_cast<float>(1.0 - options_.beta1),
                     static_cast<float>(options_.beta2),    static_cast<float>(1.0 - options_.beta2),
                     static_cast<float>(options_.lr / bc1), static_cast<float>(std::sqrt(bc2)),
                     static_cast<float>(options_.eps),
                     static_cast<float>(options_.decoupled_weight_decay ? 0.0 : options_.weight_decay)};
  // torch.optim.AdamW: param.mul_(1 - lr * weight_decay), the factor computed in double and
  // applied in float.
  const float decay = static_cast<float>(1.0 - options_.lr * options_.weight_decay);
  // Every parameter in one call: on a GPU, a few launches instead of one a tensor.
  std::vector<ops::AdamTensors> tensors;
  for (Slot& slot : slots_) {
    const Tensor& g = slot.param.grad();
    if (!g.defined()) continue;  // as PyTorch: a parameter without a gradient is left alone
    const bool decays =
        options_.decoupled_weight_decay && options_.weight_decay != 0.0 && slot.param.value().dim() >= 2;
    // p * decay, the same float product, in the step's pass
    tensors.push_back({&slot.param.value(), &g, &slot.exp_avg, &slot.exp_avg_sq, decays ? decay : 1.f});
  }
  ops::adam_step_many(tensors, s);
}

void Adam::zero_grad() {
  for (Slot& slot : slots_) slot.param.zero_grad();
}

void Adam::save(const std::string& path) const {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const Slot& slot : slots_) {
    tensors.emplace_back("exp_avg." + slot.name, slot.exp_avg);
    tensors.emplace_back("exp_avg_sq." + slot.name, slot.exp_avg_sq);
  }
  io::save_tensors(path, tensors, {{"step", std::to_string(step_)}, {"lr", std::to_string(options_.lr)}});
}

void Adam::load(const std::string& path) {
  io::TensorFile file = io::load_tensors(path);
  for (Slot& slot : slots_) {
    file.take_into("exp_avg." + slot.name, slot.exp_avg);
    file.take_into("exp_avg_sq." + slot.name, slot.exp_avg_sq);
    for (const auto& [kind, t] : {std::pair<const char*, const Tensor*>{"exp_avg.", &slot.exp_avg},
                                  std::pair<const char*, const Tensor*>{"exp_avg_sq.", &slot.exp_avg_sq}}) {
      const Tensor host = t->to(Device::cpu());
      const float* p = host.f32();
      for (int64_t i = 0; i < t->numel(); ++i)
        QKV_CHECK(std::isfinite(p[i]), path << ": tensor '" << kind << slot.name << "' holds a non-finite value ("
                                            << p[i] << " at element " << i << "): the file is damaged");
    }
  }
  file.expect_all_taken();
  const std::string step = file.metadata_value("step");
  try {
    step_ = std::stoll(step);
  } catch (const std::exception&) {
    throw Error(path + ": optimizer metadata \"step\" is not an integer: '" + step + "'");
  }
}

}  // namespace qkv::train
