// All-or-nothing checkpoint directories.
//
// A checkpoint is a set of files (config, weights, optimizer state, training state, tokenizer
// models) that must agree with each other. Replacing them one by one leaves a mixed set when the
// process is killed in between, so a checkpoint is written whole into a private staging directory
// beside its target and swapped into place with one renameat2(RENAME_EXCHANGE): at every instant the
// target path holds either the complete old set or the complete new one. (A plain rename cannot
// replace a non-empty directory.)
//
// The last file written is manifest.json: the step and, for every file, its size and CRC-32.
// Loading verifies it, so a set mixed by other means (files copied by hand, a disk that lost a
// write, a checkpoint written in place by an older qkv) is refused naming the file that differs.
// Directories without a manifest (written before it existed) still load.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace qkv::io {

inline constexpr const char* kManifestFile = "manifest.json";

class StagedDirectory {
 public:
  // Prepares PARENT/.NAME.staging-PID for `target` = PARENT/NAME. Leftovers of earlier saves that
  // were killed (staging directories of processes no longer alive, *.tmp.PID files) are removed.
  // Refuses a `target` that exists and is neither a directory with a manifest nor one that looks
  // like a checkpoint (config.json present) nor empty: a typo must not wipe out a user's folder.
  explicit StagedDirectory(std::string target);
  ~StagedDirectory();  // removes the staging directory unless committed
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;

  // Path of file `name` inside the staging directory (write it there before commit()).
  std::string path(const std::string& name) const;
  void write(const std::string& name, const std::string& contents);
  void copy_from(const std::string& name, const std::string& source_path);

  // Writes manifest.json (step: -1 for none), fsyncs every file and the directory, and swaps the
  // staging directory into place; the old set is then deleted.
  void commit(int64_t step = -1);

  const std::string& target() const { return target_; }

 private:
  std::string target_, staging_;
  bool committed_ = false;
};

struct ManifestCheck {
  bool has_manifest = false;
  int64_t step = -1;
};
// Verifies DIR/manifest.json against the files: every listed file present with its size and CRC-32.
// Throws qkv::Error naming the file that differs ("mixed or damaged checkpoint"). config.json is
// not verified: people edit it by hand (dropout, ids), and a config that does not fit the weights
// is refused by the strict shape checks of loading anyway.
ManifestCheck verify_manifest(const std::string& dir);

// CRC-32 (zlib's polynomial) of a whole file.
uint32_t file_crc32(const std::string& path);

}  // namespace qkv::io
