#include "qkv/io/checkpoint_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/io/atomic_file.h"

namespace qkv::io {
namespace fs = std::filesystem;

namespace {

// True when `name` ends in ".<pid>" of a process that no longer exists (or is us: a leftover of
// a save that threw).
bool owned_by_dead_process(const std::string& name) {
  const size_t dot = name.find_last_of(".-");
  if (dot == std::string::npos || dot + 1 >= name.size()) return false;
  const std::string digits = name.substr(dot + 1);
  if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) return false;
  const pid_t pid = static_cast<pid_t>(std::stol(digits));
  if (pid == ::getpid()) return true;
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  QKV_CHECK(fd >= 0, path << ": cannot open to sync: " << std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  QKV_CHECK(rc == 0, path << ": fsync failed: " << std::strerror(err));
}

// Removes what killed saves leave behind next to `target`: .NAME.staging-PID directories and
// *.tmp.PID files of dead processes. A fallback swap killed between its two renames leaves the
// previous set as .NAME.old-PID with no NAME: that one is put back, not deleted.
void clean_leftovers(const fs::path& parent, const std::string& name, const std::string& target) {
  std::error_code ec;
  if (!fs::is_directory(parent, ec)) return;
  const std::string staging_prefix = "." + name + ".staging-", old_prefix = "." + name + ".old-";
  for (const auto& entry : fs::directory_iterator(parent, ec)) {
    const std::string n = entry.path().filename().string();
    if (!owned_by_dead_process(n)) continue;
    if (n.rfind(old_prefix, 0) == 0 && !fs::exists(target)) {
      fs::rename(entry.path(), target, ec);
      continue;
    }
    if (n.rfind(staging_prefix, 0) == 0 || n.rfind(old_prefix, 0) == 0 || n.find(".tmp.") != std::string::npos)
      fs::remove_all(entry.path(), ec);
  }
}

void check_replaceable(const std::string& target) {
  std::error_code ec;
  if (!fs::exists(target, ec)) return;
  QKV_CHECK(fs::is_directory(target, ec), target << ": exists and is not a directory; refusing to replace it with a checkpoint");
  if (fs::exists(target + "/" + kManifestFile) || fs::exists(target + "/config.json")) return;
  QKV_CHECK(fs::is_empty(target, ec), target << ": exists, is not empty and is not a checkpoint (no config.json); "
                                             "refusing to replace it (choose another directory)");
}

}  // namespace

StagedDirectory::StagedDirectory(std::string target) : target_(std::move(target)) {
  while (target_.size() > 1 && target_.back() == '/') target_.pop_back();
  QKV_CHECK(!target_.empty(), "checkpoint directory name is empty");
  const fs::path t(target_);
  const fs::path parent = t.has_parent_path() ? t.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(parent, ec);
  QKV_CHECK(!ec, parent.string() << ": cannot create directory: " << ec.message());
  const std::string name = t.filename().string();
  clean_leftovers(parent, name, target_);
  check_replaceable(target_);
  staging_ = (parent / ("." + name + ".staging-" + std::to_string(::getpid()))).string();
  fs::remove_all(staging_, ec);
  fs::create_directory(staging_, ec);
  QKV_CHECK(!ec, staging_ << ": cannot create staging directory: " << ec.message());
}

StagedDirectory::~StagedDirectory() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(staging_, ec);
}

std::string StagedDirectory::path(const std::string& name) const { return staging_ + "/" + name; }

void StagedDirectory::write(const std::string& name, const std::string& contents) {
  write_file_atomic(path(name), contents);
}

void StagedDirectory::copy_from(const std::string& name, const std::string& source_path) {
  std::ifstream in(source_path, std::ios::binary);
  QKV_CHECK(in, source_path << ": cannot open to copy into the checkpoint");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  QKV_CHECK(!in.bad(), source_path << ": read error");
  write(name, bytes);
}

void StagedDirectory::commit(int64_t step) {
  QKV_CHECK(!committed_, staging_ << ": committed twice");
  nlohmann::json files = nlohmann::json::object();
  for (const auto& entry : fs::directory_iterator(staging_)) {
    const std::string n = entry.path().filename().string();
    if (n == kManifestFile || !entry.is_regular_file()) continue;
    fsync_path(entry.path().string(), false);
    char crc[9];
    std::snprintf(crc, sizeof crc, "%08x", file_crc32(entry.path().string()));
    files[n] = {{"bytes", entry.file_size()}, {"crc32", crc}};
  }
  nlohmann::json manifest = {{"format", "qkv-checkpoint"}, {"format_version", 1}, {"files", files}};
  if (step >= 0) manifest["step"] = step;
  write(kManifestFile, manifest.dump(2) + "\n");
  fsync_path(staging_, true);

  const std::string parent = fs::path(staging_).parent_path().string();
  if (!fs::exists(target_)) {
    QKV_CHECK(::rename(staging_.c_str(), target_.c_str()) == 0,
              target_ << ": cannot move the new checkpoint into place: " << std::strerror(errno));
  } else if (::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, target_.c_str(), RENAME_EXCHANGE) != 0) {
    // Filesystems without RENAME_EXCHANGE: two renames. A kill between them leaves the old set as
    // .NAME.old-PID, which the next StagedDirectory for this target moves back.
    QKV_CHECK(errno == EINVAL || errno == ENOSYS || errno == ENOTSUP,
              target_ << ": cannot swap in the new checkpoint: " << std::strerror(errno));
    const std::string old = parent + "/." + fs::path(target_).filename().string() + ".old-" + std::to_string(::getpid());
    QKV_CHECK(::rename(target_.c_str(), old.c_str()) == 0, target_ << ": cannot move aside: " << std::strerror(errno));
    QKV_CHECK(::rename(staging_.c_str(), target_.c_str()) == 0,
              target_ << ": cannot move the new checkpoint into place: " << std::strerror(errno));
    fs::remove_all(old);
    committed_ = true;
    fsync_path(parent, true);
    return;
  }
  committed_ = true;
  fsync_path(parent, true);
  std::error_code ec;
  fs::remove_all(staging_, ec);  // after the exchange it holds the previous set
}

uint32_t file_crc32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  QKV_CHECK(in, path << ": cannot open");
  std::vector<char> buf(1 << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize n = in.gcount();
    if (n > 0) crc = crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), static_cast<uInt>(n));
  }
  QKV_CHECK(!in.bad(), path << ": read error");
  return static_cast<uint32_t>(crc);
}

ManifestCheck verify_manifest(const std::string& dir) {
  ManifestCheck result;
  const std::string path = dir + "/" + kManifestFile;
  std::error_code ec;
  if (!fs::exists(path, ec)) return result;
  result.has_manifest = true;
  std::ifstream in(path);
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(in);
    // What commit() writes, and nothing else: a manifest of another format or a later version is
    // refused rather than half understood; numbers are checked before converting them (1e300 as an
    // integer is undefined behaviour).
    QKV_CHECK(m.is_object() && m.contains("format") && m.at("format") == "qkv-checkpoint",
              path << ": not a qkv checkpoint manifest (\"format\" is not \"qkv-checkpoint\")");
    const nlohmann::json& version = m.at("format_version");
    QKV_CHECK(version.is_number_unsigned() && version.get<uint64_t>() == 1,
              path << ": format_version " << version.dump() << " is not 1, the one this qkv reads");
    if (m.contains("step")) {
      const nlohmann::json& step = m.at("step");
      QKV_CHECK(step.is_number_unsigned() && step.get<uint64_t>() <= uint64_t{INT64_MAX},
                path << ": \"step\" must be a non-negative integer, got " << step.dump());
      result.step = step.get<int64_t>();
    }
    QKV_CHECK(m.at("files").is_object(), path << ": \"files\" must be an object of file names");
    for (const auto& [name, info] : m.at("files").items()) {
      // Files of this directory only: "../x" or "/x" would check (and report the CRC of) any file.
      QKV_CHECK(!name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
                    name.find('\0') == std::string::npos,
                path << ": lists \"" << name << "\", which is not a file name inside the checkpoint directory");
      if (name == "config.json") continue;  // editable by hand; see the header
      const std::string file = dir + "/" + name;
      QKV_CHECK(fs::is_regular_file(file, ec), file << ": listed in " << kManifestFile
                                                     << " but missing: incomplete checkpoint");
      QKV_CHECK(info.is_object() && info.contains("bytes") && info.at("bytes").is_number_unsigned(),
                path << ": \"bytes\" of " << name << " must be a non-negative integer");
      const uint64_t bytes = info.at("bytes").get<uint64_t>();
      QKV_CHECK(fs::file_size(file) == bytes, file << ": " << fs::file_size(file) << " bytes, but " << kManifestFile
                                                   << " records " << bytes
                                                   << ": mixed or damaged checkpoint (files from different saves)");
      char crc[9];
      std::snprintf(crc, sizeof crc, "%08x", file_crc32(file));
      QKV_CHECK(info.at("crc32").get<std::string>() == crc,
                file << ": checksum " << crc << " differs from " << info.at("crc32").get<std::string>() << " in "
                     << kManifestFile << ": mixed or damaged checkpoint (files from different saves)");
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": " + e.what());
  }
  return result;
}

}  // namespace qkv::io
