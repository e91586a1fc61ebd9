#include "qkv/interop/hf_import.h"

#include "qkv/interop/hf_bart.h"
#include "qkv/interop/hf_bert.h"
#include "qkv/interop/hf_gpt2.h"
#include "qkv/interop/hf_m2m100.h"
#include "qkv/interop/hf_marian.h"
#include "qkv/interop/hf_t5.h"
#include "qkv/models/checkpoint.h"

namespace qkv::interop {

HfConversion import_hf(const std::string& hf_dir, const std::string& out_dir) {
  hf_weights_path(hf_dir);  // the directory's checks first: a missing config.json is named as such
  const std::string config_path = hf_dir + "/" + kHfConfigFile;
  const HfConfigReader r(config_path, parse_hf_config(config_path));
  QKV_CHECK(r.has("model_type"), config_path << ": field \"model_type\" is missing (qkv imports \"gpt2\", \"bert\", \"marian\", \"t5\", \"bart\", \"mbart\" and \"m2m_100\")");
  const std::string type = r.string("model_type", "");
  if (type == "gpt2") return import_hf_gpt2(hf_dir, out_dir);
  if (type == "bert") return import_hf_bert(hf_dir, out_dir);
  if (type == "marian") return import_hf_marian(hf_dir, out_dir);
  if (type == "t5" || type == "mt5") return import_hf_t5(hf_dir, out_dir);
  if (type == "bart" || type == "mbart") return import_hf_bart(hf_dir, out_dir);
  if (type == "m2m_100") return import_hf_m2m100(hf_dir, out_dir);  // M2M100 and NLLB-200
  r.fail("model_type", "is \"" + type + "\": not supported (qkv imports model_type \"gpt2\", \"bert\", \"marian\", "
                       "\"t5\", \"bart\", \"mbart\" and \"m2m_100\")");
}

HfConversion export_hf(const std::string& checkpoint_dir, const std::string& out_dir) {
  models::check_checkpoint_dir(checkpoint_dir);
  const models::TransformerConfig c = models::load_config(checkpoint_dir + "/config.json");
  // Encoder-decoder layouts by their positions, the one choice no two types share; each exporter
  // refuses by name what its type cannot express.
  if (is_t5_layout(c)) return export_hf_t5(checkpoint_dir, out_dir);
  if (is_bart_layout(c)) return export_hf_bart(checkpoint_dir, out_dir);
  if (is_m2m100_layout(c)) return export_hf_m2m100(checkpoint_dir, out_dir);
  if (c.encoder_decoder()) return export_hf_marian(checkpoint_dir, out_dir);
  QKV_CHECK(!c.encoder_only(), "export --to hf: " << checkpoint_dir << " is an encoder-only model; qkv exports "
                                                     "decoder-only models (GPT-2) and encoder-decoder models (Marian, "
                                                     "T5, BART, mBART, M2M100)");
  return export_hf_gpt2(checkpoint_dir, out_dir);
}

}  // namespace qkv::interop
