#include "qkv/models/average.h"

#include "qkv/core/error.h"
#include "qkv/models/checkpoint.h"
#include "qkv/models/config.h"

namespace qkv::models {

std::unique_ptr<Model> average_checkpoints(const std::vector<std::string>& dirs) {
  QKV_CHECK(!dirs.empty(), "average: no checkpoints given");
  std::unique_ptr<Model> result = load_model(dirs[0]);
  const std::string config = config_to_json(result->config());
  // parameters() lists each distinct parameter once (a tied weight is averaged once).
  std::vector<Var> params = result->parameters();
  std::vector<std::vector<double>> sums;
  for (const Var& p : params) {
    const Tensor& t = p.value();
    sums.emplace_back(t.f32(), t.f32() + t.numel());
  }
  for (size_t d = 1; d < dirs.size(); ++d) {
    const std::unique_ptr<Model> other = load_model(dirs[d]);
    QKV_CHECK(config_to_json(other->config()) == config,
              "average: " << dirs[d] << "/config.json differs from " << dirs[0]
                          << "/config.json; only checkpoints of one model can be averaged");
    const std::vector<Var> other_params = other->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      const float* v = other_params[i].value().f32();
      for (size_t j = 0; j < sums[i].size(); ++j) sums[i][j] += v[j];
    }
  }
  const double n = static_cast<double>(dirs.size());
  for (size_t i = 0; i < params.size(); ++i) {
    float* v = params[i].value().f32();
    for (size_t j = 0; j < sums[i].size(); ++j) v[j] = static_cast<float>(sums[i][j] / n);
  }
  return result;
}

}  // namespace qkv::models
