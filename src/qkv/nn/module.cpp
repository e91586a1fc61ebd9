#include "qkv/nn/module.h"

#include <unordered_set>

namespace qkv::nn {

Var& Module::register_parameter(const std::string& name, Tensor value) {
  params_.emplace_back(name, Var(std::move(value), /*requires_grad=*/true, name));
  return params_.back().second;
}

void Module::replace_parameter(const std::string& name, const Var& var) {
  for (auto& [n, v] : params_)
    if (n == name) {
      v = var;
      return;
    }
  throw Error("replace_parameter: no parameter named " + name);
}

void Module::collect(const std::string& prefix, std::vector<std::pair<std::string, Var>>& out) const {
  for (const auto& [name, var] : params_) out.emplace_back(prefix + name, var);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

std::vector<std::pair<std::string, Var>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Var>> out;
  collect("", out);
  return out;
}

std::vector<Var> Module::parameters() const {
  std::vector<Var> out;
  std::unordered_set<const GradCell*> seen;
  for (auto& [name, var] : named_parameters())
    if (seen.insert(var.cell().get()).second) out.push_back(var);
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::to(Device device) {
  for (auto& [name, var] : params_) {
    // In place: the module's members, the optimizer and tied modules hold copies of this handle.
    var.value().move_storage_to(device);
    if (Tensor* grad = var.grad_slot(); grad && grad->defined()) grad->move_storage_to(device);
  }
  move_buffers(device);
  for (auto& [name, child] : children_) child->to(device);
}

const Var* Module::first_parameter() const {
  if (!params_.empty()) return &params_.front().second;
  for (const auto& [name, child] : children_)
    if (const Var* p = child->first_parameter()) return p;
  return nullptr;
}

// Called at every decoding step: walks to the first parameter, builds no list.
Device Module::device() const {
  const Var* p = first_parameter();
  return p ? p->value().device() : Device::cpu();
}

void Module::zero_grad() {
  for (auto& [name, var] : params_) var.zero_grad();
  for (auto& [name, child] : children_) child->zero_grad();
}

}  // namespace qkv::nn
