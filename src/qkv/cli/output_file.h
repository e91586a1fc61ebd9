// Where a command writes its results: `-o/--output FILE`, or stdout. The file is opened when the
// object is made, so a command makes it before loading a model: a path that cannot be written is an
// error at once, not after minutes of work. Writes go through one FILE*; flush() after each batch
// puts what is done in the file, so an interrupted job keeps it.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace qkv::cli {

// Adds -o/--output to `app` (default "-": stdout); `what` says what is written there.
CLI::Option* add_output_option(CLI::App& app, std::string& path, const std::string& what);

// Refuses (a usage error) an output that is one of the input files, by any path: opening it for
// writing would empty the input before it is read. `inputs` are flag and path pairs.
void check_output_is_no_input(const std::string& output,
                              const std::vector<std::pair<std::string, std::string>>& inputs);

class OutputFile {
 public:
  // "-" (or ""): stdout. Otherwise creates or truncates `path`; throws qkv::Error naming it when it
  // cannot.
  explicit OutputFile(const std::string& path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(const std::string& text);
  // printf into the output.
  void printf(const char* format, ...) __attribute__((format(printf, 2, 3)));
  // Hands what was written to the system; throws qkv::Error naming the file when writing failed
  // (a full disk), so that a failure is not found only at the end.
  void flush();
  // flush(), then closes a file (stdout stays open).
  void close();
  bool is_stdout() const { return file_ == stdout; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace qkv::cli
