// Module: the base of every layer, as torch.nn.Module — owns parameters and child modules under
// names, so named_parameters() yields exactly PyTorch's state_dict keys
// ("encoder_layers.0.self_attn.W_q.weight", ...).
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "qkv/autograd/var.h"
#include "qkv/core/generator.h"

namespace qkv::nn {

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Parameters in registration order with dotted names; a parameter shared by two modules
  // (tied weights) appears under each name, as in PyTorch's state_dict.
  std::vector<std::pair<std::string, Var>> named_parameters() const;
  // Each distinct parameter once (what an optimizer updates).
  std::vector<Var> parameters() const;
  void train(bool on = true);
  void eval() { train(false); }
  bool training() const { return training_; }
  void zero_grad();
  // Moves every parameter (and its gradient, if any) and every buffer to `device`, in place
  // (Tensor::move_storage_to): every handle of a parameter, tied ones included, follows. Inference
  // forms (nn::Linear's prepared weight) are not moved: models::Model::to prepares them again.
  void to(Device device);
  // Where the parameters are (the first one's device; the CPU for a module without any).
  Device device() const;

 protected:
  // Tensors a module holds beside its parameters (a positional table): moved by to().
  virtual void move_buffers(Device) {}
  Var& register_parameter(const std::string& name, Tensor value);
  // Replaces a registered parameter by another Var (for tying one parameter to two modules).
  void replace_parameter(const std::string& name, const Var& var);
  template <class M>
  M& register_module(const std::string& name, std::unique_ptr<M> module) {
    M& ref = *module;
    children_.emplace_back(name, std::move(module));
    return ref;
  }

 private:
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Var>>& out) const;
  const Var* first_parameter() const;  // in registration order, children after own; null: none
  std::vector<std::pair<std::string, Var>> params_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
  bool training_ = true;
};

}  // namespace qkv::nn
