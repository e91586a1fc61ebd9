// GPT-2's byte-level BPE tokenizer, read from a Hugging Face tokenizer.json and encoding exactly as
// the `tokenizers` package does (tests/python/make_bpe_refs.py makes the reference data).
//
// What is read: model "BPE" (vocab, merges as "a b" strings or [["a","b"]] lists, ignore_merges),
// pre_tokenizer "ByteLevel" (add_prefix_space, use_regex), decoder "ByteLevel", post_processor
// null, "ByteLevel" (it adds no tokens) or "RobertaProcessing" (BART's: with_special_tokens adds
// cls before and sep after), normalizer null, and added_tokens (e.g. <|endoftext|>; BART's <mask>
// with lstrip: the whitespace before it is part of the match, as rstrip takes the whitespace after).
// Anything else - another model, normalizer or pre-tokenizer, BPE dropout, an unk token, added
// tokens with single_word, padding or truncation - is refused by name. Ids must be 0..N-1, each
// given once.
//
// Encoding, as `tokenizers` does it:
//   1. added tokens are cut out of the text first, leftmost-longest, wherever they occur (they are
//      whole tokens, never split or merged);
//   2. each remaining segment gets a leading space if add_prefix_space and it starts with none,
//      and is split by GPT-2's pattern (gpt2_pretokenizer.h);
//   3. each piece's bytes become the byte-level alphabet (GPT-2's byte-to-unicode map: printable
//      bytes stand for themselves, the others for U+0100.., so ' ' is "Ġ"), and merges apply,
//      lowest rank first, leftmost first among equal ranks.
// Any bytes encode, not only UTF-8; a byte whose symbol the vocabulary lacks is dropped (what
// `tokenizers` does with no unk token).
//
// Decoding maps every token back through the byte map (added tokens too, when all their
// characters are in it; otherwise their text as is) and returns the bytes, so decode(encode(x)) ==
// x for any x whose bytes are all in the vocabulary. Unlike Tokenizer.decode, which by default
// skips special tokens and replaces invalid UTF-8 with U+FFFD, it keeps both (it equals
// decode(ids, skip_special_tokens=False) for ids that decode to valid UTF-8).
//
// encode() is thread-safe; it caches the ids of short pieces (a mutex guards the cache).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace qkv::text {

class ByteLevelBpe {
 public:
  // Throws qkv::Error naming the path and the field for an unreadable, damaged or unsupported file.
  static ByteLevelBpe load(const std::string& tokenizer_json_path);

  ByteLevelBpe(ByteLevelBpe&&) noexcept;
  ByteLevelBpe& operator=(ByteLevelBpe&&) noexcept;
  ~ByteLevelBpe();

  std::vector<int32_t> encode(std::string_view text) const;
  // Throws qkv::Error for an id outside [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids) const;
  // `ids` with the post-processor's tokens for one sequence: RobertaProcessing's cls ids sep;
  // unchanged for the others.
  std::vector<int32_t> with_special_tokens(std::vector<int32_t> ids) const;

  // Model vocabulary and added tokens together.
  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
  // The id of a token as written in tokenizer.json ("Ġthe", "<|endoftext|>"), or -1.
  int32_t token_to_id(std::string_view token) const;
  // The id of an added token ("<|endoftext|>"), or -1 for any other string.
  int32_t added_token_id(std::string_view token) const;
  // The token as written in tokenizer.json. Throws qkv::Error for an id out of range.
  std::string id_to_token(int32_t id) const;
  bool add_prefix_space() const { return add_prefix_space_; }

 private:
  struct AddedToken {
    std::string content;
    int32_t id;
    bool lstrip = false, rstrip = false;  // the match takes the whitespace before / after it
  };
  struct Merge {
    int32_t rank;    // position in the merges list: lower merges first
    int32_t new_id;  // the id of the two tokens joined
  };
  struct Segment {
    std::string_view text;
    int32_t added_id;  // >= 0: the segment is this added token; -1: text to tokenize
  };
  struct WordCache;

  ByteLevelBpe();
  friend class ByteLevelBpeLoader;

  std::vector<Segment> split_added_tokens(std::string_view text) const;
  void encode_segment(std::string_view segment, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  std::vector<int32_t> merge_piece(std::string_view piece) const;
  const Merge* find_merge(int32_t left, int32_t right) const;

  std::vector<std::string> tokens_;                 // id -> token as written in the file
  std::vector<std::string> token_bytes_;            // id -> the bytes it decodes to
  std::unordered_map<std::string, int32_t> ids_;    // token as written -> id
  std::array<int32_t, 256> byte_ids_{};             // byte -> id of its one-symbol token, or -1
  std::unordered_map<uint64_t, Merge> merges_;      // (left id << 32 | right id) -> merge
  // Added tokens matched in the raw text first (normalized: false), then in what remains (true);
  // with no normalizer the two passes differ only when tokens of the two kinds overlap.
  std::vector<AddedToken> added_raw_;
  std::vector<AddedToken> added_normalized_;
  bool add_prefix_space_ = false;
  bool use_regex_ = true;
  bool ignore_merges_ = false;  // a piece that is a whole vocabulary token is not merged
  int32_t cls_id_ = -1, sep_id_ = -1;  // RobertaProcessing's, or -1
  std::unique_ptr<WordCache> cache_;
};

}  // namespace qkv::text
