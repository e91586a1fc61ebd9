#include "qkv/text/tokenizer_json.h"

#include <filesystem>
#include <fstream>

#include "qkv/core/error.h"

namespace qkv::text {

bool file_exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

nlohmann::json read_json_object(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  QKV_CHECK(in, path << ": cannot open the file");
  nlohmann::json top;
  try {
    top = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not valid JSON (" + e.what() + ")");
  }
  QKV_CHECK(top.is_object(), path << ": not " << what << " (the top level is not a JSON object)");
  return top;
}

bool read_json_bool(const nlohmann::json& object, const char* key, bool fallback, const std::string& where) {
  if (!object.contains(key) || object.at(key).is_null()) return fallback;
  QKV_CHECK(object.at(key).is_boolean(),
            where << ": field \"" << key << "\" is " << object.at(key).dump() << ", expected true or false");
  return object.at(key).get<bool>();
}

}  // namespace qkv::text
