#include "qkv/cli/output_file.h"

#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <filesystem>

#include "qkv/cli/commands.h"

#include "qkv/core/error.h"

namespace qkv::cli {

CLI::Option* add_output_option(CLI::App& app, std::string& path, const std::string& what) {
  return app.add_option("-o,--output", path, what + " ('-' = stdout); written as it is made")->capture_default_str();
}

void check_output_is_no_input(const std::string& output,
                              const std::vector<std::pair<std::string, std::string>>& inputs) {
  if (output.empty() || output == "-") return;
  for (const auto& [flag, input] : inputs) {
    std::error_code ec;  // a file that does not exist (yet) is no other file
    if (!input.empty() && input != "-" && std::filesystem::equivalent(output, input, ec))
      throw UsageError("--output " + output + " is the " + flag + " file " + input +
                       " (writing would empty it before it is read)");
  }
}

OutputFile::OutputFile(const std::string& path) : path_(path) {
  if (path.empty() || path == "-") {
    file_ = stdout;
    return;
  }
  file_ = std::fopen(path.c_str(), "w");
  QKV_CHECK(file_, "--output " << path << ": cannot open for writing: " << std::strerror(errno));
}

OutputFile::~OutputFile() {
  if (file_ && file_ != stdout) std::fclose(file_);
}

void OutputFile::write(const std::string& text) { std::fwrite(text.data(), 1, text.size(), file_); }

void OutputFile::printf(const char* format, ...) {
  std::va_list args;
  va_start(args, format);
  std::vfprintf(file_, format, args);
  va_end(args);
}

void OutputFile::flush() {
  const bool ok = std::fflush(file_) == 0 && !std::ferror(file_);
  QKV_CHECK(ok, (is_stdout() ? std::string("<stdout>") : "--output " + path_) << ": write error: "
                                                                           << std::strerror(errno));
}

void OutputFile::close() {
  flush();
  if (is_stdout()) return;
  const int rc = std::fclose(file_);
  file_ = nullptr;
  QKV_CHECK(rc == 0, "--output " << path_ << ": write error: " << std::strerror(errno));
}

}  // namespace qkv::cli
