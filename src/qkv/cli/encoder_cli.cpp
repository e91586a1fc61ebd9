#include "qkv/cli/encoder_cli.h"

#include <algorithm>

#include "qkv/cli/commands.h"
#include "qkv/cli/id_text.h"
#include "qkv/cli/validators.h"
#include "qkv/models/checkpoint.h"
#include "qkv/text/utf8.h"

namespace qkv::cli {

void add_encoder_text_options(CLI::App& app, EncoderTextOptions& o, const std::string& input_help) {
  app.add_option("--checkpoint", o.checkpoint, "Checkpoint directory (an encoder-only model)")->required();
  if (!input_help.empty()) app.add_option("--input", o.input, input_help)->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "Sentences run together")
      ->capture_default_str()
      ->check(FiniteRange(1, kMaxBatchSentences));
  app.add_option("--max-input-length", o.max_tokens,
                 "Tokens per sentence at most, [CLS] and [SEP] included (default: a sentence-embedding "
                 "checkpoint's sentence_embedding.json max_seq_length, else the model's position table)")
      ->check(FiniteRange(2, 1 << 20));
  app.add_option("--too-long", o.too_long, "A sentence over --max-input-length: truncate it, or error naming its line")
      ->capture_default_str()
      ->check(CLI::IsMember({"truncate", "error"}));
  app.add_flag("--ids", o.ids, "Lines are space-separated token ids (the checkpoint's tokenizer is not used)");
  add_compute_type_options(app, o.compute);
}

std::unique_ptr<EncoderSession> open_encoder(const EncoderTextOptions& o, const char* use) {
  check_checkpoint_argument(o.checkpoint);
  auto s = std::make_unique<EncoderSession>(o.checkpoint, use, chosen_compute_type(o.compute),
                                           chosen_device(o.compute.device));
  const int64_t positions = s->model().config().max_seq_length;
  if (o.max_tokens > positions)
    throw UsageError("--max-input-length " + std::to_string(o.max_tokens) + ": the model has " + std::to_string(positions) +
                     " positions");
  if (o.max_tokens > 0) s->set_max_tokens(o.max_tokens);
  s->set_too_long(o.too_long == "error" ? data::TooLong::Error : data::TooLong::Truncate);
  QKV_CHECK(o.ids || s->tokenizer(), o.checkpoint << ": no tokenizer (tokenizer.json or spm.model); give token ids with --ids");
  return s;
}

std::vector<int32_t> encoder_line_ids(const EncoderSession& s, const EncoderTextOptions& o, const std::string& line,
                                      const std::string& where) {
  if (o.ids) return s.encode_ids(parse_ids(line, where, s.model().config().tgt_vocab_size), where);
  return s.encode(line, where);
}

std::vector<std::vector<int32_t>> read_encoder_lines(const EncoderSession& s, const EncoderTextOptions& o,
                                                     const std::string& path) {
  const std::vector<std::string> lines = text::read_text_lines_or_stdin(path);
  const std::string name = path == "-" ? "<stdin>" : path;
  std::vector<std::vector<int32_t>> ids;
  ids.reserve(lines.size());
  for (size_t i = 0; i < lines.size(); ++i)
    ids.push_back(encoder_line_ids(s, o, lines[i], name + ":" + std::to_string(i + 1)));
  return ids;
}

}  // namespace qkv::cli
