// Comparisons shared by the model agreement tests (seed, GPT, BERT against PyTorch/transformers).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv::testing {

// max |a - b| / max |b| over two equally long value lists: a relative error that is meaningful
// when some reference values are ~0.
inline double max_rel_error(const std::vector<float>& x, const std::vector<float>& y) {
  EXPECT_EQ(x.size(), y.size());
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(x[i]) - y[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(y[i])));
  }
  return diff / scale;
}

inline double max_rel_error(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  return max_rel_error(a.to_vector(), b.to_vector());
}

inline double max_abs(const Tensor& t) {
  double m = 0;
  for (float v : t.to_vector()) m = std::max(m, static_cast<double>(std::fabs(v)));
  return m;
}

// The gradient of parameter `name` of a model's (name, parameter) list; fails the test if absent.
template <typename NamedVars>
Tensor grad_by_name(const NamedVars& named, const std::string& name) {
  for (const auto& [n, v] : named)
    if (n == name) return v.grad();
  ADD_FAILURE() << "no parameter " << name;
  return Tensor();
}

// Names of one attention's key bias, and of the neighbours whose gradients give its scale.
struct KeyBiasNames {
  std::string key_bias, query_bias, key_weight;
};

// "…W_k.bias" (qkv) or "…attention.self.key.bias" (Hugging Face BERT); nullopt-like empty
// key_bias for any other parameter.
inline KeyBiasNames key_bias_names(const std::string& name) {
  const auto swap_tail = [&](const std::string& tail, const std::string& q_bias, const std::string& k_weight) {
    const std::string stem = name.substr(0, name.size() - tail.size());
    return KeyBiasNames{name, stem + q_bias, stem + k_weight};
  };
  if (name.ends_with("W_k.bias")) return swap_tail("W_k.bias", "W_q.bias", "W_k.weight");
  if (name.ends_with("attention.self.key.bias")) return swap_tail("key.bias", "query.bias", "key.weight");
  return {};
}

inline bool is_key_bias(const std::string& name) { return !key_bias_names(name).key_bias.empty(); }

// The key projection's bias has a gradient that is exactly zero in real arithmetic. With scores
// s_ij = q_i . k_j / sqrt(d) and k_j = W_k x_j + b_k, softmax's backward gives
//   ds_ij = p_ij (dp_ij - sum_l p_il dp_il),   sum_j ds_ij = 0 for every query row i,
// so db_k = sum_j dk_j = sum_i (q_i / sqrt(d)) sum_j ds_ij = 0: softmax ignores a shift shared by a
// row of scores. What float32 leaves there is rounding: each row sum keeps ~u sum_j |ds_ij| and
// summing dk over R key rows adds ~u per row, so |db_k| <~ c u R S with u = 2^-24 and S the size of
// one row's contribution, dk_j = sum_i ds_ij q_i / sqrt(d). S is not visible from outside the
// attention, but its neighbours are: dq_i = sum_j ds_ij k_j / sqrt(d) is the same product with q
// and k swapped, and the query bias's gradient sum_i dq_i and the key weight's sum_j dk_j x_j^T
// (x LayerNorm'd, elements of order 1) are sums of the same terms without the cancellation. So
//   S = max(max |d b_q|, max |d W_k|),   bound = kKeyBiasRoundingFactor u R S.
// Measured on a Zen 4 (make_*_refs.py models, qkv and PyTorch alike): |db_k| at most 0.10 of the
// bound (model_variants), so the factor 1 leaves a margin of 10x. A softmax backward whose row sum
// loses its last 8 of 24 mantissa bits (relative error 2^-16, as a careless bf16 accumulation
// would) exceeds it in all six training-agreement tests, by up to 16x; the old checks (|db_k| <= 1e-6
// and, after 10 Adam steps, 2 * 10 * lr) let four of the six pass.
constexpr double kKeyBiasRoundingFactor = 1.0;

struct KeyBiasCheck {
  double gradient = 0;  // max |db_k|
  double bound = 0;     // kKeyBiasRoundingFactor u R S
};

// Checks one key bias's gradient against its rounding bound; `grad_of` finds a parameter's
// gradient by name, `rows` is the number of key rows summed (batch * sequence length).
inline KeyBiasCheck expect_key_bias_gradient_is_rounding(const std::string& name,
                                                         const std::function<Tensor(const std::string&)>& grad_of,
                                                         int64_t rows, const std::string& who) {
  const KeyBiasNames n = key_bias_names(name);
  const double scale = std::max(max_abs(grad_of(n.query_bias)), max_abs(grad_of(n.key_weight)));
  const double u = std::numeric_limits<float>::epsilon() / 2;
  KeyBiasCheck c;
  c.gradient = max_abs(grad_of(n.key_bias));
  c.bound = kKeyBiasRoundingFactor * u * static_cast<double>(rows) * scale;
  EXPECT_GT(scale, 0) << who << ": " << n.query_bias << " and " << n.key_weight << " have no gradient";
  EXPECT_LE(c.gradient, c.bound) << who << ": " << name << "'s gradient should be zero up to rounding (u R S = "
                                 << c.bound / kKeyBiasRoundingFactor << ")";
  return c;
}

// Prints the worst ratio |db_k| / bound seen (kept well below 1 by the margin above).
inline void print_key_bias_margin(const std::string& who, double worst_ratio) {
  std::printf("%s: key bias gradients at most %.3g of their rounding bound\n", who.c_str(), worst_ratio);
}

}  // namespace qkv::testing
