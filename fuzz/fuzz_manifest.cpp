// Fuzz target: the checkpoint manifest reader (qkv/io/checkpoint_dir.h, verify_manifest: what
// loading a checkpoint, resuming and `qkv info` check first).
// Input: manifest.json, then up to three files split at NUL bytes: the contents of
// weights.safetensors, optimizer.safetensors and train_state.json in the checkpoint directory
// (a part not given: that file is absent).
// Invariants of an accepted manifest: it says "format": "qkv-checkpoint", "format_version": 1;
// its step is the input's (a non-negative integer) or -1 where it gives none; "files" is an object
// and every file it lists (config.json aside, which is not verified) is a plain file name inside
// the directory, present, with the listed size and lower-case CRC-32.
#include <zlib.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/io/checkpoint_dir.h"

namespace {

using nlohmann::json;

const std::array<std::string, 3> kFileNames = {"weights.safetensors", "optimizer.safetensors", "train_state.json"};

std::string crc_text(std::string_view bytes) {
  const auto crc = ::crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size()));
  char text[9];
  std::snprintf(text, sizeof text, "%08lx", static_cast<unsigned long>(crc));
  return text;
}

void check_accepted(const json& m, const qkv::io::ManifestCheck& result,
                    const std::vector<std::string_view>& parts) {
  QKV_FUZZ_REQUIRE(result.has_manifest);
  QKV_FUZZ_REQUIRE(m.is_object() && m.value("format", json()) == "qkv-checkpoint");
  QKV_FUZZ_REQUIRE(m.value("format_version", json()).is_number_integer() && m.at("format_version") == 1);
  if (m.contains("step")) {
    QKV_FUZZ_REQUIRE(m.at("step").is_number_integer() && m.at("step").get<int64_t>() >= 0);
    QKV_FUZZ_REQUIRE(result.step == m.at("step").get<int64_t>());
  } else {
    QKV_FUZZ_REQUIRE(result.step == -1);
  }
  QKV_FUZZ_REQUIRE(m.contains("files") && m.at("files").is_object());
  for (const auto& [name, info] : m.at("files").items()) {
    if (name == "config.json") continue;
    size_t index = 0;
    while (index < kFileNames.size() && kFileNames[index] != name) ++index;
    if (index >= kFileNames.size() || index + 1 >= parts.size()) {  // names no file we wrote
      std::fprintf(stderr, "accepted a listed file that is not in the directory: \"%s\"\n", name.c_str());
      QKV_FUZZ_REQUIRE(!"a listed file outside the directory's files");
    }
    const std::string_view content = parts[index + 1];
    QKV_FUZZ_REQUIRE(info.at("bytes").is_number_integer() && info.at("bytes") == content.size());
    QKV_FUZZ_REQUIRE(info.at("crc32") == crc_text(content));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  static const std::string dir = [] {
    const std::string d = qkv::fuzz::scratch_path("checkpoint");
    fs::create_directories(d);
    QKV_FUZZ_REQUIRE(!qkv::io::verify_manifest(d).has_manifest);  // no manifest: nothing to verify
    return d;
  }();
  const std::vector<std::string_view> parts = qkv::fuzz::split_at_nul(qkv::fuzz::as_text(data, size), 4);
  for (size_t i = 0; i < kFileNames.size(); ++i) {
    const std::string path = dir + "/" + kFileNames[i];
    if (i + 1 < parts.size()) {
      qkv::fuzz::write_file(path, parts[i + 1]);
    } else {
      fs::remove(path);
    }
  }
  qkv::fuzz::write_file(dir + "/" + qkv::io::kManifestFile, parts[0]);
  qkv::io::ManifestCheck result;
  try {
    result = qkv::io::verify_manifest(dir);
  } catch (const qkv::Error&) {
    return 0;
  }
  check_accepted(json::parse(parts[0]), result, parts);  // accepted, so it parses
  return 0;
}
