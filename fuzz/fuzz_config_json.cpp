// Fuzz target: config.json parsing (qkv/models/config.h).
// Input: the text of a config.json file.
// Invariants of an accepted config: it validates; every field the input gave has that value in
// the config (nothing truncated, rounded to an integer or wrapped: an integer field equals the
// input number, a float field equals the input rounded to float), or, for the fields written only
// where they leave the seed's choice, is left out because it gave that choice; writing the config
// out and parsing that again gives the same JSON text.
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/models/config.h"

namespace {

using nlohmann::json;

// The input value of one field against the value the accepted config writes for it.
bool same_value(const json& given, const json& kept) {
  if (given.is_number() && kept.is_number_float()) {  // a float field: float precision
    return static_cast<float>(given.get<double>()) == static_cast<float>(kept.get<double>());
  }
  if (given.is_number_integer() && kept.is_number_integer()) {
    if (given.is_number_unsigned() != kept.is_number_unsigned() &&
        (given.get<int64_t>() < 0 || kept.get<int64_t>() < 0)) {
      return false;
    }
    return given.get<uint64_t>() == kept.get<uint64_t>();
  }
  if (given.is_number() && kept.is_number_integer()) {  // a float given for an integer field
    return given.get<double>() == kept.get<double>();
  }
  return given == kept;
}

// A field the writer leaves out where it keeps the seed's choice ("target_query_mask": true, ...):
// the given value must be that choice, i.e. adding it to the written config changes nothing.
bool omitted_as_default(const json& kept, const std::string& key, const json& value, const std::string& written) {
  json with_field = kept;
  with_field[key] = value;
  try {
    return qkv::models::config_to_json(qkv::models::config_from_json(with_field.dump(), "omitted field")) == written;
  } catch (const qkv::Error&) {
    return false;
  }
}

void check_fields_kept(const std::string& text, const std::string& written) {
  const json given = json::parse(text);  // accepted, so it parses
  const json kept = json::parse(written);
  for (const auto& [key, value] : given.items()) {
    if (!kept.contains(key)) {
      if (!omitted_as_default(kept, key, value, written)) {
        std::fprintf(stderr, "field \"%s\": input %s, left out of the written config\n", key.c_str(), value.dump().c_str());
        QKV_FUZZ_REQUIRE(!"an accepted field was dropped");
      }
      continue;
    }
    if (!same_value(value, kept.at(key))) {
      std::fprintf(stderr, "field \"%s\": input %s, config has %s\n", key.c_str(), value.dump().c_str(),
                   kept.at(key).dump().c_str());
      QKV_FUZZ_REQUIRE(!"an accepted field changed its value");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(qkv::fuzz::as_text(data, size));
  qkv::models::TransformerConfig config;
  try {
    config = qkv::models::config_from_json(text, "fuzz/config.json");
  } catch (const qkv::Error&) {
    return 0;
  }
  config.validate();  // accepted configs are valid; a qkv::Error escaping here is a finding
  const std::string written = qkv::models::config_to_json(config);
  check_fields_kept(text, written);
  const qkv::models::TransformerConfig reread = qkv::models::config_from_json(written, "round trip");
  QKV_FUZZ_REQUIRE(qkv::models::config_to_json(reread) == written);
  return 0;
}
