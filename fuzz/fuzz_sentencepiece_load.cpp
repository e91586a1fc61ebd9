// Fuzz target: loading a SentencePiece model (qkv/text/sentencepiece.h, SentencePiece::from_bytes)
// and using what loaded.
// Input: the bytes of a .model file (seeds: tiny models written by fuzz_make_spm_seeds).
// Invariants of an accepted model: it has pieces; encoding fixed sentences gives ids inside the
// vocabulary; decoding them, and every id's piece, works or is refused with a qkv::Error.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/text/sentencepiece.h"

namespace {

void exercise_model(const qkv::text::SentencePiece& model) {
  const int32_t vocab = model.vocab_size();
  QKV_FUZZ_REQUIRE(vocab > 0);
  for (const char* sentence : {"hello world", "¿Qué tal, señor? ñandú", "a  b\tc ﬁ 123 <unk> </s>"}) {
    std::vector<int32_t> ids;
    try {
      ids = model.encode(sentence);
    } catch (const qkv::Error&) {
      continue;
    }
    for (int32_t id : ids) QKV_FUZZ_REQUIRE(id >= 0 && id < vocab);
    try {
      model.decode(ids);
    } catch (const qkv::Error&) {
    }
  }
  for (int32_t id = 0; id < vocab && id < 512; ++id) model.piece(id);
  try {
    model.decode({0, 1, 2, 3, vocab - 1});
  } catch (const qkv::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(qkv::fuzz::as_text(data, size));
  try {
    const qkv::text::SentencePiece model = qkv::text::SentencePiece::from_bytes(bytes, "fuzz.model");
    exercise_model(model);
  } catch (const qkv::Error&) {
  }
  return 0;
}
