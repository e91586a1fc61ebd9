// `qkv import --from hf DIR --out CKPT`: the family by config.json's model_type ("gpt2" ->
// decoder-only, hf_gpt2.h; "bert" -> encoder-only, hf_bert.h; "marian" -> encoder-decoder,
// hf_marian.h); any other type is refused by name.
#pragma once
#include <string>

#include "qkv/interop/hf_common.h"

namespace qkv::interop {

HfConversion import_hf(const std::string& hf_dir, const std::string& out_dir);

// `qkv export --to hf CKPT --out DIR`, by the checkpoint's family: decoder-only -> GPT-2
// (hf_gpt2.h), encoder-decoder -> Marian (hf_marian.h); encoder-only models are refused.
HfConversion export_hf(const std::string& checkpoint_dir, const std::string& out_dir);

}  // namespace qkv::interop
