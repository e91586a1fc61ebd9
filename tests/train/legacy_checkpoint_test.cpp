// Checkpoints written by qkv 0.1 (before manifest.json, format_version and the one train_state
// format) load and resume. tests/data/legacy_v0_1/ was written by that version (commit 0eb2222):
//   qkv train --synthetic --preset tiny --d-model 8 --heads 2 --layers 1 --d-ff 16 --vocab 12
//             --len 6 --dropout 0.1 --threads 1 --steps {3,5} --out synthetic_step{3,5}
// Two checks of resuming its step 3 to step 5 with today's Trainer:
// - against that version's own step 5, within bounds derived from rounding (below): its products
//   came from OpenBLAS, today's from qkv's own GEMM kernels, which sum in another order;
// - bit for bit against today's result (resumed_step5/, written by this test when
//   QKV_WRITE_LEGACY_GOLDEN=1), wherever the kernels are the same: the release build (sanitizer
//   builds compile other code) with OpenBLAS's AVX2 kernels (Haswell and Zen sum alike; CTest sets
//   OPENBLAS_CORETYPE=Haswell, which every x86-64-v3 CPU runs, AVX-512 ones included). qkv's own
//   kernels are compiled for x86-64-v3; the two chosen at run time (GELU, dropout) give the same
//   bits on every CPU (kernels/gelu_test, dropout_test). A kernel change that changes float32 bits
//   fails here until resumed_step5/ is written again, on purpose.
// Elsewhere (other OpenBLAS kernels, a sanitizer build) the second check uses the bounds too.
#include <cblas.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>

#include "qkv/core/threads.h"
#include "qkv/io/tensor_file.h"
#include "qkv/models/checkpoint.h"
#include "qkv/train/trainer.h"

namespace qkv::train {
namespace {
namespace fs = std::filesystem;

// OpenBLAS kernels that sum as the ones resumed_step5/ was written with.
bool blas_is_avx2() {
  const std::string core = openblas_get_corename();
  return core == "Haswell" || core == "Zen" || core == "haswell" || core == "zen";
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// Where the kernels differ, a gradient element differs by a few units of rounding of its
// tensor's largest terms (another summation order of the same products). Adam's moments are
// linear (exp_avg) and quadratic (exp_avg_sq) in the gradients, so each moment tensor is compared
// with its own scale: |a - b| <= kUlps u max|b|, u = 2^-24. Measured on a Zen 4 (today's kernels
// against qkv 0.1's and against resumed_step5/, OpenBLAS Haswell or Cooperlake): at most 5.8 u
// max|b| (0.09 of a 64 u bound); kUlps = 32 leaves 5x. An Adam step 10% too long (a schedule off
// by a little) is 7,000 times its bound; the old check (1e-3 absolute off Haswell) let it pass.
constexpr double kUlps = 32;
constexpr double kUnitRoundoff = 0x1p-24;
constexpr int kResumedSteps = 2;  // 3 -> 5
// Rows a key bias's gradient sums over: batch 32 x at most 8 positions (6 tokens, BOS/EOS).
constexpr double kRows = 32 * 8;

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

// "exp_avg.<p>.W_k.bias" -> "exp_avg.<p>.W_q.bias"; empty for any other name.
std::string query_bias_of_key_bias(const std::string& name) {
  const std::string tail = "W_k.bias";
  if (!name.ends_with(tail)) return "";
  return name.substr(0, name.size() - tail.size()) + "W_q.bias";
}

// A moment tensor's bound: kUlps of its own largest value. The key bias is the exception: its
// gradient is zero in real arithmetic (softmax ignores a shift shared by a row of scores, see
// tests/model/agreement_checks.h), so its moments hold rounding noise alone, whose size is set by
// the attention's gradients: u R times the query bias's moment (squared for exp_avg_sq).
std::vector<double> moment_bound(const std::string& name, const std::vector<float>& v, io::TensorFile& want) {
  const std::string query_bias = query_bias_of_key_bias(name);
  if (query_bias.empty()) return std::vector<double>(v.size(), kUlps * kUnitRoundoff * max_abs(v));
  const double noise = kUlps * kUnitRoundoff * kRows;
  const bool squared = name.starts_with("exp_avg_sq.");
  return std::vector<double>(v.size(), (squared ? noise * noise : noise) * max_abs(want.take(query_bias).to_vector()));
}

// A weight moves by lr m_hat / (sqrt(v_hat) + eps) a step. A moment error dm (moment_bound of
// its exp_avg) changes that by lr dm_hat / sqrt(v_hat): tiny where the gradient is large, up to
// 2 lr (a flipped sign) where it is as small as the noise (the key bias's everywhere). Per element,
// over the resumed steps: |dw| <= kUlps u max|w| + steps lr min(2, c dm / (sqrt(v) + eps)), c the
// bias corrections' ratio sqrt(1 - beta2^t) / (1 - beta1^t) at the first resumed step t (the largest).
std::vector<double> weight_bound(const std::vector<float>& w, double dm, const std::vector<float>& v, const Hyper& h,
                                 int64_t first_step) {
  const double t = static_cast<double>(first_step);
  const double c = std::sqrt(1 - std::pow(h.beta2, t)) / (1 - std::pow(h.beta1, t));
  std::vector<double> bound(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    const double flip = std::min(2.0, c * dm / (std::sqrt(static_cast<double>(v[i])) + h.eps));
    bound[i] = kUlps * kUnitRoundoff * max_abs(w) + kResumedSteps * h.schedule.lr * flip;  // constant schedule
  }
  return bound;
}

// Compares every tensor of `got` with `want`: bit for bit when `exact`, else within `bound_of`'s
// per-element bounds. Prints the largest difference in units of rounding of its tensor's largest
// value (u max|want|), and of its bound.
void expect_tensors(const std::string& want, const std::string& got, bool exact,
                    const std::function<std::vector<double>(const std::string&, const std::vector<float>&)>& bound_of) {
  io::TensorFile fw = io::load_tensors(want), fg = io::load_tensors(got);
  const io::StFile names = io::read_safetensors(want);
  double worst_ulps = 0, worst_of_bound = 0;
  std::string worst_name;
  for (const io::StTensor& t : names.tensors) {
    ASSERT_TRUE(fg.has(t.name)) << t.name;
    const std::vector<float> vw = fw.take(t.name).to_vector(), vg = fg.take(t.name).to_vector();
    ASSERT_EQ(vw.size(), vg.size()) << t.name;
    const std::vector<double> bound = exact ? std::vector<double>(vw.size(), 0.0) : bound_of(t.name, vw);
    double max_w = 0;
    for (float x : vw) max_w = std::max(max_w, static_cast<double>(std::fabs(x)));
    size_t beyond = 0, first = 0;
    for (size_t i = 0; i < vw.size(); ++i) {
      const double d = std::fabs(static_cast<double>(vw[i]) - vg[i]);
      const bool same_bits = std::memcmp(&vw[i], &vg[i], sizeof(float)) == 0;
      if (d / (kUnitRoundoff * max_w + 1e-45) > worst_ulps) worst_ulps = d / (kUnitRoundoff * max_w + 1e-45), worst_name = t.name;
      if (!exact) worst_of_bound = std::max(worst_of_bound, d / bound[i]);
      if (exact ? !same_bits : d > bound[i]) first = beyond++ ? first : i;
    }
    EXPECT_EQ(beyond, 0u) << t.name << " of " << got << ": " << beyond << " of " << vw.size() << " elements "
                          << (exact ? "differ" : "beyond their bound") << ", the first [" << first << "] "
                          << vg[first] << " vs " << vw[first] << " (OpenBLAS core " << openblas_get_corename() << ")";
  }
  std::printf("%s: largest difference %.3g u max|tensor| (%s)", got.c_str(), worst_ulps, worst_name.c_str());
  if (!exact) std::printf(", %.3g of its bound", worst_of_bound);
  std::printf("\n");
}

const std::string kLegacy = std::string(QKV_SOURCE_DIR) + "/tests/data/legacy_v0_1";

// Resumes a copy of the old version's step 3 to step 5 in `dir` (1 thread, as the old run).
TrainState resume_step3_to_step5(const std::string& dir) {
  fs::remove_all(dir);
  fs::copy(kLegacy + "/synthetic_step3", dir);
  EXPECT_FALSE(fs::exists(dir + "/manifest.json"));
  const TrainState saved = read_train_state(dir + "/train_state.json");
  EXPECT_EQ(saved.kind, "synthetic");
  EXPECT_EQ(saved.step, 3);
  EXPECT_EQ(saved.hyper.schedule.kind, "constant");  // weight_bound assumes one lr for every step
  set_num_threads(1);
  std::unique_ptr<models::Transformer> model = models::load_seq2seq(dir);
  EXPECT_EQ(model->config().architecture, "encoder-decoder");
  SyntheticData data("copy", 32, 6, 12, 0);
  TrainerOptions o;
  o.hyper = saved.hyper;  // constant lr 1e-3, as saved
  o.hyper.schedule.d_model = 8;
  o.last_dir = dir;
  o.max_steps = 5;
  Trainer trainer(*model, data, o);
  trainer.resume(dir, saved);
  EXPECT_EQ(trainer.run().step, 5);
  set_num_threads(0);
  EXPECT_EQ(io::verify_manifest(dir).step, 5);  // saved by today's version: with a manifest
  return saved;
}

// Compares the model and optimizer files of `got` with those of `want`: bit for bit, or within
// the rounding bounds above (the moments of `want` scale the weights' bounds).
void expect_checkpoint(const std::string& want, const std::string& got, bool exact, const TrainState& saved) {
  io::TensorFile moments = io::load_tensors(want + "/optimizer.safetensors");
  expect_tensors(want + "/optimizer.safetensors", got + "/optimizer.safetensors", exact,
                 [&](const std::string& name, const std::vector<float>& v) { return moment_bound(name, v, moments); });
  expect_tensors(want + "/model.safetensors", got + "/model.safetensors", exact,
                 [&](const std::string& name, const std::vector<float>& w) {
                   if (!moments.has("exp_avg." + name))  // a buffer (positional_encoding.pe): no optimizer state
                     return std::vector<double>(w.size(), kUlps * kUnitRoundoff * max_abs(w));
                   const std::vector<float> m = moments.take("exp_avg." + name).to_vector();
                   const double dm = moment_bound("exp_avg." + name, m, moments).front();
                   return weight_bound(w, dm, moments.take("exp_avg_sq." + name).to_vector(), saved.hyper,
                                       saved.step + 1);
                 });
}

std::string scratch_dir(const std::string& what) {
  return ::testing::TempDir() + "/qkv_legacy_" + what + "_" + std::to_string(::getpid());
}

TEST(LegacyCheckpoint, ResumesToTheOldVersionsNumbersWithinRounding) {
  const std::string dir = scratch_dir("old");
  const TrainState saved = resume_step3_to_step5(dir);
  std::printf("OpenBLAS core %s: against qkv 0.1's step 5, within rounding bounds\n", openblas_get_corename());
  expect_checkpoint(kLegacy + "/synthetic_step5", dir, /*exact=*/false, saved);
  fs::remove_all(dir);
}

TEST(LegacyCheckpoint, ResumesBitForBitWithTodaysKernels) {
  const std::string dir = scratch_dir("today");
  const TrainState saved = resume_step3_to_step5(dir);
  const std::string golden = kLegacy + "/resumed_step5";
  if (const char* write = std::getenv("QKV_WRITE_LEGACY_GOLDEN"); write && std::string(write) == "1") {
    ASSERT_TRUE(blas_is_avx2() && !kSanitized) << "write resumed_step5/ from a release build with OPENBLAS_CORETYPE=Haswell";
    fs::create_directories(golden);
    for (const char* f : {"/model.safetensors", "/optimizer.safetensors"})
      fs::copy_file(dir + f, golden + f, fs::copy_options::overwrite_existing);
  }
  const bool exact = blas_is_avx2() && !kSanitized;
  std::printf("OpenBLAS core %s, %s build: against today's kernels' step 5, %s\n", openblas_get_corename(),
              kSanitized ? "sanitizer" : "release", exact ? "bit for bit" : "within rounding bounds");
  expect_checkpoint(golden, dir, exact, saved);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qkv::train
