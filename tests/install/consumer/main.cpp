// Builds a small decoder-only model with the installed library, saves it, loads it back and
// generates from it: the headers, the static library and its dependencies all resolve.
#include <cstdio>
#include <filesystem>

#include "qkv/api/generator.h"
#include "qkv/models/checkpoint.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  try {
    qkv::models::TransformerConfig c = qkv::models::decoder_only_defaults();
    c.src_vocab_size = c.tgt_vocab_size = 32;
    c.d_model = 16;
    c.num_heads = 2;
    c.num_layers = 1;
    c.d_ff = 32;
    c.max_seq_length = 16;
    c.bos_id = c.eos_id = 1;
    const auto model = qkv::models::make_model(c, 7);
    qkv::models::save_model(argv[1], *model);
    const qkv::api::Generator generator(argv[1]);
    qkv::api::GenerationOptions o;
    o.decode.max_new_tokens = 5;
    o.decode.stop_at_eos = false;
    const auto out = generator.generate_ids({{1, 2, 3}}, o);
    std::printf("generated %zu tokens with qkv %s\n", out[0].size(), QKV_VERSION);
    return out[0].size() == 5 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
