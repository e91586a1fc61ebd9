// Test harness for the op tests: random tensors, element-wise closeness checks, and a
// finite-difference gradient checker for functions of qkv::Var.
//
// gradcheck(f, inputs):
//   y = f(inputs);  L = sum_k y_k * R_k for a fixed random R (float32 values, summed in double);
//   analytic:  qkv::backward(y, R) gives dL/dx for every differentiable input x;
//   numeric:   for every element x_j, f is re-evaluated (under NoGradGuard) at x_j + t for the four
//              steps t in {-2h, -h, +h, +2h}, and dL/dx_j is the derivative at t = 0 of the cubic
//              through the four values of L (for exact steps that is the classic central stencil
//              (8 (L(h) - L(-h)) - (L(2h) - L(-2h))) / 12h);
//   the two are compared element by element.
//
// Why this stencil: a 2-point central difference has truncation error h^2/6 * |d3L/dx3|, about 2e-5
// for h = 1e-2 and O(1) curvature (gelu, softmax, layernorm): larger than the float32 rounding noise
// we want to resolve. The 4-point one has h^4/30 * |d5L/dx5|, about 3e-10.
// The steps actually taken are t = (float)(x + step) - x, so x + step not being representable in
// float32 adds no error. Each L(t) - L(0) is summed in double as sum_k R_k * (y_k(t) - y_k(0)):
// outputs that do not move cancel exactly, so constant outputs (masked_fill's -1e9) add no noise.
//
// Tolerance per gradient element j:
//   |numeric - analytic| <= atol + rtol * |analytic| + noise_j
//   noise_j = noise_ulps * u * |w| * sqrt(sum over moved outputs k of (R_k * m_k)^2)
// - u = 2^-24 (float32 unit roundoff); |w| is the 2-norm of the stencil weights (~0.95 / h); the
//   forward is float32, so each output y_k carries a rounding error of about u times its magnitude
//   or the magnitude of the terms it was summed from: m_k = max |y_k| over the stencil plus the rms
//   of the moved outputs (plus opt.magnitude_floor where an op cancels larger intermediates).
//   Errors of different outputs are independent (root-sum-square) and the stencil amplifies them
//   by |w|. noise_ulps = 4 allows a few ulps per output and the tail of the error distribution;
//   observed errors stay at or below 0.45 of the tolerance (print them with QKV_TEST_VERBOSE=1).
// - rtol = 2e-4: the analytic gradient is itself float32, computed in another order, and may lose
//   a few digits to cancellation (softmax's dy - <dy, y>); atol = 1e-6 is a floor for gradient
//   elements that are exactly or nearly zero.
// - Where f is not differentiable (relu at 0) inputs must stay further than 2h from the kink.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "qkv/autograd/functions.h"
#include "qkv/autograd/graph.h"
#include "qkv/core/tensor.h"

namespace qkv::test {

// Set QKV_TEST_VERBOSE=1 to print the observed errors of every check.
inline bool verbose() {
  const char* v = std::getenv("QKV_TEST_VERBOSE");
  return v && *v && *v != '0';
}

inline std::string current_test_name() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return info ? std::string(info->test_suite_name()) + "." + info->name() : "?";
}

// ---- random tensors ------------------------------------------------------------------------------

// N(shift, scale^2) entries from a caller-owned engine (fixed seed => reproducible test).
inline Tensor randn(const Dims& shape, std::mt19937_64& rng, float scale = 1.f, float shift = 0.f) {
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (float& x : v) x = shift + scale * dist(rng);
  return Tensor::from_vector(shape, v);
}

// Uniform magnitudes in [lo, hi] with random sign: keeps inputs away from 0 (e.g. relu's kink).
inline Tensor rand_away_from_zero(const Dims& shape, std::mt19937_64& rng, float lo, float hi) {
  std::uniform_real_distribution<float> mag(lo, hi);
  std::bernoulli_distribution sign(0.5);
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (float& x : v) x = sign(rng) ? mag(rng) : -mag(rng);
  return Tensor::from_vector(shape, v);
}

// i32 keep-mask (1 keep, 0 masked) from explicit rows.
inline Tensor mask_rows(const std::vector<std::vector<int32_t>>& rows) {
  std::vector<int32_t> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  return Tensor::from_ids(Dims{static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size())}, flat);
}

// ---- closeness -----------------------------------------------------------------------------------

struct Closeness {
  double max_abs = 0;  // max |got - want|
  double max_rel = 0;  // max |got - want| / |want| over elements with |want| >= rel_floor
  int64_t violations = 0;
  std::string first_violation;
};

// Element-wise |got - want| <= atol + rtol * |want|; NaN matches only NaN. Any strides.
inline Closeness closeness(const Tensor& got, const Tensor& want, double atol, double rtol, double rel_floor = 1e-3) {
  Closeness c;
  const std::vector<float> a = got.to_vector(), b = want.to_vector();
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const bool na = std::isnan(a[i]), nb = std::isnan(b[i]);
    double err;
    bool ok;
    if (na || nb) {
      ok = na && nb;
      err = ok ? 0.0 : std::numeric_limits<double>::infinity();
    } else {
      err = std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
      ok = err <= atol + rtol * std::abs(static_cast<double>(b[i]));
      if (std::abs(b[i]) >= rel_floor) c.max_rel = std::max(c.max_rel, err / std::abs(static_cast<double>(b[i])));
    }
    c.max_abs = std::max(c.max_abs, err);
    if (!ok && c.violations++ == 0) {
      std::ostringstream os;
      os.precision(9);
      os << "flat index " << i << ": got " << a[i] << ", want " << b[i] << " (|diff| " << err << " > "
         << atol + rtol * std::abs(static_cast<double>(b[i])) << ")";
      c.first_violation = os.str();
    }
  }
  return c;
}

// gtest predicate: EXPECT_TRUE(all_close(got, want, atol, rtol, "what")).
inline ::testing::AssertionResult all_close(const Tensor& got, const Tensor& want, double atol, double rtol,
                                            const std::string& what, Closeness* out = nullptr) {
  if (!got.defined()) return ::testing::AssertionFailure() << what << ": result is undefined";
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << what << ": shape " << got.shape() << " vs expected " << want.shape();
  const Closeness c = closeness(got, want, atol, rtol);
  if (out) *out = c;
  if (c.violations == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << " " << got.shape() << ": " << c.violations
                                       << " element(s) outside atol " << atol << " + rtol " << rtol << "; max |diff| "
                                       << c.max_abs << "; first: " << c.first_violation;
}

// ---- finite-difference gradient check ------------------------------------------------------------

struct GradcheckInput {
  std::string name;
  Tensor value;  // f32; perturbed element by element when differentiable
  bool differentiable = true;
};

struct GradcheckOptions {
  double h = 1e-2;     // inputs are O(1): truncation (~h^4) negligible, rounding (~u / h) small
  double rtol = 2e-4;  // see the header comment
  double atol = 1e-6;
  double noise_ulps = 4;
  // Added to every m_k, in units of y: for ops whose outputs are small differences of larger
  // intermediates, so their rounding error is u times that larger magnitude (gelu at x < 0).
  double magnitude_floor = 0;
  uint64_t seed = 12345;  // for R
};

using VarFn = std::function<Var(const std::vector<Var>&)>;

struct GradcheckResult {
  bool ok = true;
  std::string message;       // every failing input, with its first bad element
  double max_abs_err = 0;    // over all differentiable inputs
  double max_rel_err = 0;    // |num - an| / |an| over elements with |an| >= 1e-3
  double max_tol_ratio = 0;  // max |num - an| / tolerance: how close the check came to failing
};

namespace detail {
inline std::vector<float> eval_no_grad(const VarFn& f, const std::vector<Tensor>& values) {
  NoGradGuard guard;
  std::vector<Var> vars;
  for (const Tensor& t : values) vars.emplace_back(t, false);
  return f(vars).value().to_vector();
}

// d/dt at t = 0 of the Lagrange basis polynomials through the nodes t_i (none of them 0).
inline std::vector<double> derivative_weights(const std::vector<double>& t) {
  std::vector<double> w(t.size());
  for (size_t i = 0; i < t.size(); ++i) {
    double denom = 1, sum = 0;
    for (size_t m = 0; m < t.size(); ++m)
      if (m != i) denom *= t[i] - t[m];
    for (size_t m = 0; m < t.size(); ++m) {
      if (m == i) continue;
      double prod = 1;
      for (size_t n = 0; n < t.size(); ++n)
        if (n != i && n != m) prod *= -t[n];
      sum += prod;
    }
    w[i] = sum / denom;
  }
  return w;
}
}  // namespace detail

inline GradcheckResult gradcheck(const VarFn& f, const std::vector<GradcheckInput>& inputs,
                                 const GradcheckOptions& opt = {}) {
  GradcheckResult res;
  std::ostringstream msg;
  msg.precision(9);
  if (Graph::current().size() != 0) {
    res.ok = false;
    res.message = "the graph is not empty on entry (a previous test left nodes on it)";
    return res;
  }
  // Analytic gradients.
  std::vector<Var> vars;
  for (const GradcheckInput& in : inputs) vars.emplace_back(in.value.clone(), in.differentiable, in.name);
  const Var y = f(vars);
  if (!y.requires_grad()) {
    res.ok = false;
    res.message = "the output does not require grad";
    Graph::current().clear();
    return res;
  }
  std::mt19937_64 rng(opt.seed);
  const Tensor R = randn(y.shape(), rng);
  const std::vector<float> r = R.to_vector();
  backward(y, R);
  if (Graph::current().size() != 0) {
    res.ok = false;
    msg << "the graph holds " << Graph::current().size() << " node(s) after backward; ";
    Graph::current().clear();
  }

  // Numeric gradients.
  const double u = std::ldexp(1.0, -24);
  const double steps[4] = {-2 * opt.h, -opt.h, opt.h, 2 * opt.h};
  std::vector<Tensor> values;
  for (const GradcheckInput& in : inputs) values.push_back(in.value.clone());
  const std::vector<float> y0 = detail::eval_no_grad(f, values);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].differentiable) continue;
    const Tensor& analytic = vars[i].grad();
    if (!analytic.defined()) {
      res.ok = false;
      msg << "[" << inputs[i].name << "] no gradient arrived; ";
      continue;
    }
    if (analytic.shape() != inputs[i].value.shape()) {
      res.ok = false;
      msg << "[" << inputs[i].name << "] gradient shape " << analytic.shape() << " vs input " << inputs[i].value.shape()
          << "; ";
      continue;
    }
    const std::vector<float> an = analytic.to_vector();
    float* x = values[i].f32();
    int64_t bad = 0;
    std::ostringstream first;
    first.precision(9);
    for (int64_t j = 0; j < values[i].numel(); ++j) {
      const float x0 = x[j];
      std::vector<double> t(4);
      std::vector<std::vector<float>> ys(4);
      for (int s = 0; s < 4; ++s) {
        x[j] = static_cast<float>(static_cast<double>(x0) + steps[s]);
        t[s] = static_cast<double>(x[j]) - static_cast<double>(x0);
        ys[s] = detail::eval_no_grad(f, values);
      }
      x[j] = x0;
      const std::vector<double> w = detail::derivative_weights(t);
      double w2 = 0;
      for (double wi : w) w2 += wi * wi;
      // Numeric derivative over the outputs that moved; their rms is the magnitude floor.
      double num = 0, moved_sq = 0;
      std::vector<size_t> moved;
      for (size_t k = 0; k < y0.size(); ++k) {
        double dk = 0;
        bool changed = false;
        for (int s = 0; s < 4; ++s) {
          const double d = static_cast<double>(ys[s][k]) - static_cast<double>(y0[k]);
          changed = changed || d != 0 || std::isnan(d);
          dk += w[s] * d;
        }
        if (!changed) continue;
        num += static_cast<double>(r[k]) * dk;
        moved.push_back(k);
        moved_sq += static_cast<double>(y0[k]) * y0[k];
      }
      const double floor =
          opt.magnitude_floor + (moved.empty() ? 0.0 : std::sqrt(moved_sq / static_cast<double>(moved.size())));
      double rm2 = 0;
      for (size_t k : moved) {
        double m = std::abs(static_cast<double>(y0[k]));
        for (int s = 0; s < 4; ++s) m = std::max(m, std::abs(static_cast<double>(ys[s][k])));
        const double rm = static_cast<double>(r[k]) * (m + floor);
        rm2 += rm * rm;
      }
      const double noise = opt.noise_ulps * u * std::sqrt(w2) * std::sqrt(rm2);
      const double a = an[static_cast<size_t>(j)];
      const double err = std::abs(num - a);
      const double tol = opt.atol + opt.rtol * std::abs(a) + noise;
      res.max_abs_err = std::max(res.max_abs_err, err);
      if (std::abs(a) >= 1e-3) res.max_rel_err = std::max(res.max_rel_err, err / std::abs(a));
      res.max_tol_ratio = std::max(res.max_tol_ratio, err <= tol ? err / tol : std::max(1.0, err / tol));
      if (!(err <= tol) && bad++ == 0)
        first << "element " << j << ": numeric " << num << ", analytic " << a << ", |diff| " << err << " > tol " << tol;
    }
    if (bad) {
      res.ok = false;
      msg << "[" << inputs[i].name << " " << inputs[i].value.shape() << "] " << bad << " of " << values[i].numel()
          << " element(s) off, first " << first.str() << "; ";
    }
  }
  if (Graph::current().size() != 0) {
    res.ok = false;
    msg << "the no-grad evaluations recorded " << Graph::current().size() << " node(s); ";
    Graph::current().clear();
  }
  res.message = msg.str();
  return res;
}

// gtest predicate wrapper: EXPECT_TRUE(gradcheck_ok(f, inputs)).
inline ::testing::AssertionResult gradcheck_ok(const VarFn& f, const std::vector<GradcheckInput>& inputs,
                                               const GradcheckOptions& opt = {}, GradcheckResult* out = nullptr) {
  const GradcheckResult r = gradcheck(f, inputs, opt);
  if (out) *out = r;
  if (verbose())
    std::cout << "[gradcheck] " << current_test_name() << ": max abs err " << r.max_abs_err << ", max rel err "
              << r.max_rel_err << ", max err/tol " << r.max_tol_ratio << "\n";
  if (r.ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "gradcheck failed: " << r.message << "(max abs err " << r.max_abs_err
                                       << ", max rel err " << r.max_rel_err << ")";
}

}  // namespace qkv::test
