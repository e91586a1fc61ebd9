// Fuzz target: loading a Hugging Face tokenizer.json (qkv/text/tokenizer.h: WordPiece or
// byte-level BPE, chosen by model.type) and using what loaded.
// Input: the bytes of a tokenizer.json (seeds: a tiny WordPiece and a tiny byte-level BPE trained
// by `tokenizers`, fuzz/corpus/tokenizer_json/).
// Invariants of an accepted tokenizer: encoding fixed sentences gives ids every one of which has
// a token (id_to_token), with or without special tokens; decoding them works or is refused with a
// qkv::Error; special_token_id answers -1 or an id that has a token.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/text/tokenizer.h"

namespace {

void check_ids(const qkv::text::Tokenizer& tok, const std::vector<int32_t>& ids) {
  for (int32_t id : ids) {
    QKV_FUZZ_REQUIRE(id >= 0);
    bool has_token = true;
    try {
      tok.id_to_token(id);
    } catch (const qkv::Error&) {
      has_token = false;
    }
    QKV_FUZZ_REQUIRE(has_token);
  }
}

void exercise(const qkv::text::Tokenizer& tok) {
  for (const char* sentence : {"hello world", "In the beginning [MASK] created, naïve café!", "北京 🙂 \t ﬁ 123",
                               "", "x"}) {
    std::vector<int32_t> ids;
    try {
      ids = tok.encode(sentence);
    } catch (const qkv::Error&) {
      continue;  // e.g. a character the vocabulary cannot express, refused by name
    }
    check_ids(tok, ids);
    check_ids(tok, tok.with_special_tokens(ids));
    try {
      tok.decode(ids);
    } catch (const qkv::Error&) {
    }
  }
  for (const char* special : {"[CLS]", "[SEP]", "[MASK]", "[PAD]", "<|endoftext|>"}) {
    const int32_t id = tok.special_token_id(special);
    if (id != -1) check_ids(tok, {id});
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = qkv::fuzz::scratch_path("tokenizer") + ".json";
  qkv::fuzz::write_file(path, qkv::fuzz::as_text(data, size));
  try {
    const std::unique_ptr<qkv::text::Tokenizer> tok = qkv::text::load_tokenizer(path);
    exercise(*tok);
  } catch (const qkv::Error&) {
  }
  return 0;
}
