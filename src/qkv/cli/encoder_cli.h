// What the commands of encoder-only models share (embed, similar): the checkpoint with its
// tokenizer and pooling, and input lines turned into [CLS] ... [SEP] ids.
#pragma once
#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "qkv/api/encoder.h"
#include "qkv/cli/compute_type_option.h"

namespace qkv::cli {

struct EncoderTextOptions {
  std::string checkpoint;
  std::string input = "-";
  int64_t batch_size = 32;
  int64_t max_tokens = 0;  // 0: the checkpoint's (sentence_embedding.json, else max_seq_length)
  std::string too_long = "truncate";
  bool ids = false;
  ComputeTypeOption compute;
};

using EncoderSession = api::Encoder;

// --checkpoint, --input (when input_help is not empty), --batch-size, --max-input-length, --too-long, --ids,
// --compute-type.
void add_encoder_text_options(CLI::App& app, EncoderTextOptions& o, const std::string& input_help);
// Loads the encoder-only checkpoint (another family is refused naming `use`) and its tokenizer.
std::unique_ptr<EncoderSession> open_encoder(const EncoderTextOptions& o, const char* use);
// The ids of every line of `path` ('-' = stdin).
std::vector<std::vector<int32_t>> read_encoder_lines(const EncoderSession& s, const EncoderTextOptions& o,
                                                     const std::string& path);
inline std::vector<std::vector<int32_t>> read_encoder_lines(const EncoderSession& s, const EncoderTextOptions& o) {
  return read_encoder_lines(s, o, o.input);
}
// The ids of one text (a query).
std::vector<int32_t> encoder_line_ids(const EncoderSession& s, const EncoderTextOptions& o, const std::string& text,
                                      const std::string& where);

}  // namespace qkv::cli
