// Checkpoints written by qkv 0.1 (before manifest.json, format_version and the one train_state
// format) load and resume. tests/data/legacy_v0_1/ was written by that version (commit 0eb2222):
//   qkv train --synthetic --preset tiny --d-model 8 --heads 2 --layers 1 --d-ff 16 --vocab 12
//             --len 6 --dropout 0.1 --threads 1 --steps {3,5} --out synthetic_step{3,5}
// Resuming step 3 to step 5 with today's Trainer must give that version's step-5 weights and
// optimizer moments: bit for bit in the release build that wrote them. The sanitizer build
// (RelWithDebInfo) contracts floats differently; two Adam steps at lr 1e-3 turn that into
// differences of about 1e-4 on weights with tiny gradients, so there the test allows 1e-3.
// The same holds for OpenBLAS's kernels: the old version's products came from its AVX2 kernels
// (Haswell and Zen sum alike); on a CPU where OpenBLAS picks others (AVX-512: SkylakeX,
// Cooperlake) they round differently (8.8e-5 at most, measured on a Zen 4), so there too 1e-3.
#include <cblas.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "qkv/core/threads.h"
#include "qkv/io/tensor_file.h"
#include "qkv/models/checkpoint.h"
#include "qkv/train/trainer.h"

namespace qkv::train {
namespace {
namespace fs = std::filesystem;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// OpenBLAS kernels that sum the old version's products in its order.
bool blas_sums_as_the_old_version() {
  const std::string core = openblas_get_corename();
  return core == "Haswell" || core == "Zen" || core == "haswell" || core == "zen";
}

// The release build with the old version's BLAS kernels reproduces it exactly.
float tolerance() { return kSanitized || !blas_sums_as_the_old_version() ? 1e-3f : 0.f; }

const std::string kLegacy = std::string(QKV_SOURCE_DIR) + "/tests/data/legacy_v0_1";

void expect_same_tensors(const std::string& a, const std::string& b) {
  io::TensorFile fa = io::load_tensors(a), fb = io::load_tensors(b);
  const io::StFile names = io::read_safetensors(a);
  for (const io::StTensor& t : names.tensors) {
    ASSERT_TRUE(fb.has(t.name)) << t.name;
    const std::vector<float> va = fa.take(t.name).to_vector(), vb = fb.take(t.name).to_vector();
    ASSERT_EQ(va.size(), vb.size()) << t.name;
    float worst = 0;
    for (size_t i = 0; i < va.size(); ++i) worst = std::max(worst, std::abs(va[i] - vb[i]));
    EXPECT_LE(worst, tolerance()) << t.name << " of " << a << " (OpenBLAS core " << openblas_get_corename() << ")";
  }
}

TEST(LegacyCheckpoint, LoadsAndResumesToTheSameNumbersAsTheOldVersion) {
  const std::string dir = ::testing::TempDir() + "/qkv_legacy_" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::copy(kLegacy + "/synthetic_step3", dir);
  ASSERT_FALSE(fs::exists(dir + "/manifest.json"));
  const TrainState saved = read_train_state(dir + "/train_state.json");
  EXPECT_EQ(saved.kind, "synthetic");
  EXPECT_EQ(saved.step, 3);
  set_num_threads(1);  // as the old run
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
  expect_same_tensors(kLegacy + "/synthetic_step5/model.safetensors", dir + "/model.safetensors");
  expect_same_tensors(kLegacy + "/synthetic_step5/optimizer.safetensors", dir + "/optimizer.safetensors");
  EXPECT_EQ(io::verify_manifest(dir).step, 5);  // saved by today's version: with a manifest
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qkv::train
