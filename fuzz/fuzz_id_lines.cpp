// Fuzz target: token-id files (qkv/data/id_lines.h) and the batch helpers that consume them.
// Input: byte 0 picks the vocabulary size (1..256, so out-of-range ids are common), the rest is
// the file.
// Invariants of an accepted file: one IdLine per line, every id in [0, vocab); padding and the
// teacher-forcing shift keep every id and put pad ids only at row ends.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/data/id_lines.h"

namespace {

using qkv::data::IdLine;

size_t count_lines(std::string_view text) {
  size_t lines = 0;
  for (char c : text) lines += c == '\n';
  return lines + (!text.empty() && text.back() != '\n' ? 1 : 0);
}

void check_padded_batch(const std::vector<IdLine>& rows, int32_t pad_id) {
  const qkv::Tensor batch = qkv::data::pad_batch(rows, pad_id);
  const int64_t width = batch.size(1);
  for (size_t r = 0; r < rows.size(); ++r) {
    for (int64_t c = 0; c < width; ++c) {
      const int32_t got = batch.i32()[static_cast<int64_t>(r) * width + c];
      const bool in_row = static_cast<size_t>(c) < rows[r].size();
      QKV_FUZZ_REQUIRE(got == (in_row ? rows[r][static_cast<size_t>(c)] : pad_id));
    }
  }
  if (width < 2) return;  // shift_target needs two columns (refused with a qkv::Error otherwise)
  const qkv::data::TeacherForcing tf = qkv::data::shift_target(batch);
  QKV_FUZZ_REQUIRE(tf.input.size(1) == width - 1 && tf.labels.numel() == batch.size(0) * (width - 1));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int64_t vocab_size = int64_t{data[0]} + 1;
  const std::string_view text = qkv::fuzz::as_text(data + 1, size - 1);
  static const std::string path = qkv::fuzz::scratch_path("ids.txt");
  qkv::fuzz::write_file(path, text);
  std::vector<IdLine> rows;
  try {
    rows = qkv::data::read_id_lines(path, vocab_size);
  } catch (const qkv::Error&) {
    return 0;
  }
  QKV_FUZZ_REQUIRE(rows.size() == count_lines(text));
  for (const IdLine& row : rows)
    for (int32_t id : row) QKV_FUZZ_REQUIRE(id >= 0 && id < vocab_size);
  if (!rows.empty()) check_padded_batch(rows, 0);
  return 0;
}
