// Byte-level BPE tokenizer directories without tokenizer.json, as transformers' slow tokenizers
// (BartTokenizer, RobertaTokenizer) save them, and as transformers before 4.34 or
// save_pretrained(legacy_format=True) left them: vocab.json (token -> id), merges.txt ("#version"
// line, then one "a b" merge a line, rank by line), the special tokens in special_tokens_map.json
// or tokenizer_config.json, tokens added later in added_tokens.json.
//
// roberta_tokenizer_json makes of them the tokenizer.json that transformers' RobertaConverter
// (convert_slow_tokenizer.py) builds when BartTokenizerFast.from_pretrained finds no tokenizer.json:
// BPE without dropout, unk or affixes; ByteLevel pre-tokenizer (add_prefix_space from
// tokenizer_config.json, default false) and decoder; RobertaProcessing with cls_token and sep_token
// (<s> text </s>); the special tokens as added tokens at their vocab.json ids (mask_token given as a
// string strips the whitespace on its left, as BartTokenizer makes it). qkv's byte-level BPE reader
// (text/byte_level_bpe.h) then reads it as any tokenizer.json.
#pragma once
#include <string>

namespace qkv::text {

inline constexpr const char* kBpeVocabFile = "vocab.json";
inline constexpr const char* kBpeMergesFile = "merges.txt";

// Whether `dir` holds vocab.json and merges.txt.
bool legacy_bpe_files_present(const std::string& dir);

// The tokenizer.json (text) of the slow tokenizer files in `dir`. Errors name the file and the
// field or line: a merge whose parts or result are not in vocab.json, a special token that is not
// there, an added token whose id is taken.
std::string roberta_tokenizer_json(const std::string& dir);

}  // namespace qkv::text
