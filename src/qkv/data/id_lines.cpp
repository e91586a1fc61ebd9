#include "qkv/data/id_lines.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <limits>

namespace qkv::data {

std::vector<IdLine> read_id_lines(const std::string& path, int64_t vocab_size) {
  QKV_CHECK(vocab_size <= std::numeric_limits<int32_t>::max(),
            path << ": vocabulary size " << vocab_size << " does not fit 32-bit token ids");
  // A directory opens as a stream on Linux and only fails at the first read, as "read error".
  std::error_code ec;
  QKV_CHECK(!std::filesystem::is_directory(path, ec), path << ": is a directory, expected a file of token ids");
  std::ifstream in(path);
  QKV_CHECK(in, path << ": cannot open file");
  std::vector<IdLine> lines;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    IdLine ids;
    size_t pos = 0;
    while (pos < line.size()) {
      while (pos < line.size() && (line[pos] == ' ' || line[pos] == '\t')) ++pos;
      if (pos >= line.size()) break;
      size_t end = pos;
      while (end < line.size() && line[end] != ' ' && line[end] != '\t') ++end;
      int64_t value = 0;
      const auto [ptr, ec] = std::from_chars(line.data() + pos, line.data() + end, value);
      QKV_CHECK(ec == std::errc() && ptr == line.data() + end,
                path << ":" << line_no << ": '" << line.substr(pos, std::min<size_t>(end - pos, 40))
                     << "' is not a token id (expected space-separated integers)");
      QKV_CHECK(value >= 0 && value < vocab_size,
                path << ":" << line_no << ": id " << value << " out of range for vocabulary size " << vocab_size);
      ids.push_back(static_cast<int32_t>(value));
      pos = end;
    }
    lines.push_back(std::move(ids));
  }
  QKV_CHECK(!in.bad(), path << ": read error after line " << line_no);
  return lines;
}

Tensor pad_batch(const std::vector<IdLine>& rows, int32_t pad_id) {
  size_t width = 0;
  for (const IdLine& r : rows) width = std::max(width, r.size());
  Tensor t = Tensor::empty(Dims{static_cast<int64_t>(rows.size()), static_cast<int64_t>(width)}, DType::I32);
  int32_t* p = t.i32();
  for (size_t i = 0; i < rows.size(); ++i)
    for (size_t j = 0; j < width; ++j) p[i * width + j] = j < rows[i].size() ? rows[i][j] : pad_id;
  return t;
}

TeacherForcing shift_target(const Tensor& tgt_in) {
  QKV_CHECK(tgt_in.dim() == 2 && tgt_in.size(1) >= 2,
            "target batch must be (B, T) with T >= 2 (input tgt[:, :-1], labels tgt[:, 1:]), got " << tgt_in.shape());
  const Tensor tgt = tgt_in.contiguous();
  const int64_t B = tgt.size(0), T = tgt.size(1);
  TeacherForcing tf{Tensor::empty(Dims{B, T - 1}, DType::I32), Tensor::empty(Dims{B * (T - 1)}, DType::I32)};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t + 1 < T; ++t) {
      tf.input.i32()[b * (T - 1) + t] = tgt.i32()[b * T + t];
      tf.labels.i32()[b * (T - 1) + t] = tgt.i32()[b * T + t + 1];
    }
  return tf;
}

}  // namespace qkv::data
