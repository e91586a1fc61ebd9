// Every reader of an input file refuses a directory with an error that names it ("PATH: is a
// directory"). On Linux a directory opens as a stream and only the first read fails, so before
// these checks the readers said "read error after line 0", "basic_filebuf::underflow error
// reading the file: Is a directory", or (SentencePiece) a bare "read error".
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>

#include "qkv/core/error.h"
#include "qkv/data/id_lines.h"
#include "qkv/data/parallel.h"
#include "qkv/eval/tokenizer_13a.h"
#include "qkv/io/safetensors.h"
#include "qkv/io/tensor_file.h"
#include "qkv/text/sentencepiece.h"
#include "qkv/text/utf8.h"

namespace {

namespace fs = std::filesystem;

class DirectoryAsInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("qkv_dir_input_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `read` and checks it throws a qkv::Error containing "DIR: is a directory" or, for the
  // safetensors reader's message format, "'DIR': is a directory".
  void expect_directory_error(const std::function<void(const std::string&)>& read) const {
    const std::string dir = dir_.string();
    try {
      read(dir);
      ADD_FAILURE() << "reading the directory " << dir << " did not throw";
    } catch (const qkv::Error& e) {
      const std::string message = e.what();
      const bool named = message.find(dir + ": is a directory") != std::string::npos ||
                         message.find(dir + "': is a directory") != std::string::npos;
      EXPECT_TRUE(named) << message;
    }
  }

  fs::path dir_;
};

TEST_F(DirectoryAsInputTest, IdLines) {
  expect_directory_error([](const std::string& p) { qkv::data::read_id_lines(p, 100); });
}

TEST_F(DirectoryAsInputTest, ParallelText) {
  expect_directory_error([](const std::string& p) { qkv::data::read_parallel(p, p); });
  expect_directory_error([](const std::string& p) { qkv::data::read_parallel_tsv(p); });
}

TEST_F(DirectoryAsInputTest, Safetensors) {
  expect_directory_error([](const std::string& p) { qkv::io::read_safetensors(p); });
  expect_directory_error([](const std::string& p) { qkv::io::load_tensors(p); });
}

TEST_F(DirectoryAsInputTest, TextLines) {
  expect_directory_error([](const std::string& p) { qkv::text::read_text_lines(p); });
  expect_directory_error([](const std::string& p) { qkv::eval::read_text_lines(p); });
}

TEST_F(DirectoryAsInputTest, SentencePieceModel) {
  expect_directory_error([](const std::string& p) { qkv::text::SentencePiece model(p); });
}

}  // namespace
