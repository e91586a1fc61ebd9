// Reading a Hugging Face tokenizer.json: the one parse that load_tokenizer (which looks at
// model.type) and the byte-level BPE and WordPiece loaders share, with the same errors; and what
// the loaders of the files beside a model share (whether one is there, SentencePiece's word mark).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace qkv::text {

// U+2581, the mark SentencePiece models (Marian, T5, NLLB, mBART) put at a word's start.
inline constexpr std::string_view kSentencePieceSpace = "\xE2\x96\x81";

// Whether `path` exists; false, not an exception, where it cannot be examined. Tokenizer loaders ask
// it of the optional files beside a model (special_tokens_map.json, added_tokens.json, ...).
bool file_exists(const std::string& path);

// The file's top-level JSON object; qkv::Error naming the file when it cannot be opened, is not
// valid JSON, or is not an object (then "not `what`", e.g. "a tokenizer.json").
nlohmann::json read_json_object(const std::string& path, const std::string& what);
inline nlohmann::json read_tokenizer_json(const std::string& path) { return read_json_object(path, "a tokenizer.json"); }
// object[key] as a boolean, `fallback` when absent or null; otherwise a qkv::Error
// "<where>: field \"key\" is <value>, expected true or false".
bool read_json_bool(const nlohmann::json& object, const char* key, bool fallback, const std::string& where);

}  // namespace qkv::text
