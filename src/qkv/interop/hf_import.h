// `qkv import --from hf DIR --out CKPT`: the family by config.json's model_type ("gpt2" ->
// decoder-only, hf_gpt2.h; "bert" -> encoder-only, hf_bert.h; "marian" -> encoder-decoder,
// hf_marian.h); any other type is refused by name.
#pragma once
#include <string>

#include "qkv/interop/hf_common.h"

namespace qkv::interop {

HfConversion import_hf(const std::string& hf_dir, const std::string& out_dir);

}  // namespace qkv::interop
