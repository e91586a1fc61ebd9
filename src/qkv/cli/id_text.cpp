#include "qkv/cli/id_text.h"

#include <sstream>
#include <stdexcept>

#include "qkv/core/error.h"

namespace qkv::cli {

std::vector<int32_t> parse_ids(const std::string& line, const std::string& where, int64_t vocab) {
  std::vector<int32_t> ids;
  std::istringstream in(line);
  std::string tok;
  while (in >> tok) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(tok, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    QKV_CHECK(used == tok.size() && v >= 0 && v < vocab, where << ": '" << tok << "' is not a token id in [0, " << vocab << ")");
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ' ';
    s += std::to_string(ids[i]);
  }
  return s;
}

}  // namespace qkv::cli
