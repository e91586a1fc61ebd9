// Token ids as text, for the commands' --ids modes: space-separated decimal ids on a line.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace qkv::cli {

// The ids of `line`, each checked to be in [0, vocab); `where` names the line in messages
// ("FILE:3", "--prompt").
std::vector<int32_t> parse_ids(const std::string& line, const std::string& where, int64_t vocab);
std::string join_ids(const std::vector<int32_t>& ids);

}  // namespace qkv::cli
