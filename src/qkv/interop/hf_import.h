// `qkv import --from hf DIR --out CKPT`: the family by config.json's model_type ("gpt2" ->
// decoder-only, hf_gpt2.h; "bert" -> encoder-only, hf_bert.h; "marian", "t5", "bart", "mbart",
// "m2m_100" -> encoder-decoder, hf_marian.h, hf_t5.h, hf_bart.h, hf_m2m100.h); any other type is
// refused by name.
#pragma once
#include <string>

#include "qkv/interop/hf_common.h"

namespace qkv::interop {

HfConversion import_hf(const std::string& hf_dir, const std::string& out_dir);

// `qkv export --to hf CKPT --out DIR`, by the checkpoint's family: decoder-only -> GPT-2
// (hf_gpt2.h); encoder-decoder by its positions: "relative" -> T5 (hf_t5.h), "learned" -> BART
// or, pre-LN, mBART (hf_bart.h), "sinusoidal_fairseq" -> M2M100 (hf_m2m100.h), others -> Marian
// (hf_marian.h, which refuses all but its own table); encoder-only models are refused.
HfConversion export_hf(const std::string& checkpoint_dir, const std::string& out_dir);

}  // namespace qkv::interop
