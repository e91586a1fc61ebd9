// What the tests of an imported Hugging Face model share: its reference JSON, fresh temporary
// directories, id lists, and the checkpoint `qkv import` writes from a reference directory (once
// per process).
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/ref_dir.h"
#include "qkv/data/id_lines.h"
#include "qkv/interop/hf_import.h"
#include "qkv/io/safetensors.h"

namespace qkv::testing {

inline nlohmann::json read_ref_json(const std::string& name) {
  std::ifstream in(ref_path(name));
  return nlohmann::json::parse(in);
}

// An empty path under the test temp dir, unique to this process.
inline std::string fresh_temp_dir(const std::string& prefix, const std::string& name) {
  const std::string d = ::testing::TempDir() + "/" + prefix + "_" + std::to_string(::getpid()) + "_" + name;
  std::filesystem::remove_all(d);
  return d;
}

inline std::vector<data::IdLine> id_lines(const nlohmann::json& lists) {
  std::vector<data::IdLine> out;
  for (const nlohmann::json& l : lists) out.push_back(l.get<std::vector<int32_t>>());
  return out;
}

// Target lines as the decoder reads them: the decoder start `start`, then each list's ids (EOS
// included), as transformers' labels.
inline std::vector<data::IdLine> decoder_lines(const nlohmann::json& lists, int64_t start) {
  std::vector<data::IdLine> out;
  for (const nlohmann::json& t : lists) {
    data::IdLine line{static_cast<int32_t>(start)};
    for (const nlohmann::json& id : t) line.push_back(id.get<int32_t>());
    out.push_back(std::move(line));
  }
  return out;
}

// Each pair's log-probability within 1e-4 of transformers' (relative; absolute below 1).
inline void expect_log_probs_match(const std::vector<double>& got, const nlohmann::json& want_json,
                                   const std::string& what) {
  const std::vector<double> want = want_json.get<std::vector<double>>();
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-4 * std::max(1.0, std::fabs(want[i]))) << what << " pair " << i;
}

// The checkpoint `qkv import --from hf` writes from the reference directory `name`.
inline const std::string& imported_checkpoint(const std::string& name) {
  static std::map<std::string, std::string> done;
  auto it = done.find(name);
  if (it == done.end()) {
    const std::string out = fresh_temp_dir("qkv_import", name);
    interop::import_hf(ref_path(name), out);
    it = done.emplace(name, out).first;
  }
  return it->second;
}

// The bytes in front of a tensor that an import drops as never read: the two offset rows of BART's
// and mBART's position tables (embed_positions, (P + 2, D) float32); none elsewhere.
inline size_t unread_bytes(const io::StTensor& t) {
  const bool offset_table = t.name.find("embed_positions") != std::string::npos && t.shape.size() == 2;
  return offset_table ? static_cast<size_t>(2 * t.shape[1]) * sizeof(float) : 0;
}

// `qkv export --to hf` of the checkpoint imported from reference directory `name` gives back
// every tensor transformers saved there, same name, shape and bytes (but the unread_bytes, which
// the export writes as zeros), and nothing else; imported again, the same checkpoint. Returns the
// export's directory.
inline std::string expect_export_gives_back_tensors(const std::string& name) {
  const std::string out = fresh_temp_dir("qkv_export", name);
  interop::export_hf(imported_checkpoint(name), out);
  const io::StFile original = io::read_safetensors(ref_path(name) + "/model.safetensors");
  const io::StFile exported = io::read_safetensors(out + "/model.safetensors");
  EXPECT_EQ(exported.tensors.size(), original.tensors.size()) << name;
  for (const io::StTensor& t : original.tensors) {
    const auto it = std::find_if(exported.tensors.begin(), exported.tensors.end(),
                                 [&](const io::StTensor& e) { return e.name == t.name; });
    if (it == exported.tensors.end()) {
      ADD_FAILURE() << name << ": " << t.name << " is not exported";
      continue;
    }
    EXPECT_EQ(it->shape, t.shape) << name << ": " << t.name;
    const auto skip = static_cast<std::ptrdiff_t>(unread_bytes(t));
    const bool same_size = it->bytes.size() == t.bytes.size() && skip <= static_cast<std::ptrdiff_t>(t.bytes.size());
    EXPECT_TRUE(same_size && std::equal(t.bytes.begin() + skip, t.bytes.end(), it->bytes.begin() + skip))
        << name << ": " << t.name << " differs";
    if (same_size) {
      EXPECT_TRUE(std::all_of(it->bytes.begin(), it->bytes.begin() + skip, [](uint8_t b) { return b == 0; }))
          << name << ": " << t.name << ": the rows never read are not zeros";
    }
  }
  const std::string again = fresh_temp_dir("qkv_export_again", name);
  interop::import_hf(out, again);
  const io::StFile a = io::read_safetensors(imported_checkpoint(name) + "/model.safetensors");
  const io::StFile b = io::read_safetensors(again + "/model.safetensors");
  EXPECT_EQ(a.tensors.size(), b.tensors.size()) << name;
  for (size_t i = 0; i < std::min(a.tensors.size(), b.tensors.size()); ++i)
    EXPECT_TRUE(a.tensors[i].name == b.tensors[i].name && a.tensors[i].bytes == b.tensors[i].bytes)
        << name << ": " << a.tensors[i].name << " is not the same after export and import";
  return out;
}

}  // namespace qkv::testing
