// A guard in front of libsentencepiece's normalizer. A model's precompiled_charsmap is a darts
// double-array trie plus a blob of NUL-terminated replacement strings, and libsentencepiece reads
// both without bounds checks: a damaged map (one flipped bit, found by fuzzing) makes encoding read
// outside the model and crash. Before a model is used, every trie value must point inside the
// blob, every trie transition must stay inside the array, and the blob must end with NUL.
#pragma once
#include <string>

namespace qkv::text {

// Throws qkv::Error naming `where` when the normalizer or denormalizer map of the serialized
// ModelProto is malformed. Bytes that are not a well-formed protobuf are left to SentencePiece's
// own parser (which refuses them).
void check_normalizer_maps(const std::string& serialized_model, const std::string& where);

}  // namespace qkv::text
