// SentencePiece subword models (Debian's libsentencepiece, 0.1.97): training on text files and
// encoding/decoding text to token ids.
//
// Special ids are fixed for qkv-trained models: pad 0 "<pad>", unk 1 "<unk>", bos 2 "<s>",
// eos 3 "</s>". With byte fallback (the default) ids 4..259 are the byte pieces <0x00>..<0xFF>,
// so text with characters never seen in training still encodes without <unk> and decodes back
// exactly; the learned pieces follow.
//
// Normalization is SentencePiece's default, "nmt_nfkc": NFKC plus a few NMT-specific rules
// (e.g. control characters removed), and whitespace is canonicalised: leading and trailing
// whitespace dropped, runs of spaces collapsed to one. So decode(encode(x)) == x exactly when x is
// already NFKC-normalized with single spaces between words and none at the ends; otherwise it is
// the normalized form of x (e.g. "ﬁ" -> "fi", "a   b " -> "a b").
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}  // namespace sentencepiece

namespace qkv::text {

// The longest line train_sentencepiece accepts: 1 MiB. Training time grows with the text, but
// SentencePiece's seed-piece search is quadratic in the longest substring repeated *within* one
// line: a 1 MiB line of ordinary text trains as fast as 1 MiB of short lines, a 1 MiB line made of
// one paragraph repeated takes minutes.
inline constexpr size_t kMaxTrainingLineBytes = size_t{1} << 20;

struct SpmTrainOptions {
  int vocab_size = 8000;
  std::string model_type = "unigram";  // "unigram", "bpe", "word" or "char"
  double character_coverage = 1.0;     // in (0, 1]; characters outside the coverage become <unk>/bytes
  // Train on a random sample of this many non-empty lines (0: all lines). The sample is drawn by
  // qkv (reservoir sampling with `seed`), not by SentencePiece, whose 0.1.97 sampler ignores seeds.
  int64_t input_sentence_size = 0;
  uint64_t seed = 0;
  int num_threads = 2;
  // Reserve the 256 byte pieces so unseen characters never become <unk> (needs vocab_size >= 260 +
  // the number of distinct characters kept).
  bool byte_fallback = true;
  // Pieces that are always one token and never split or learned (BERT's [CLS] [SEP] [MASK]): they
  // take the ids right after the four specials, in this order.
  std::vector<std::string> user_defined_symbols;
};

// What train_sentencepiece did, for the caller to report (the library prints nothing).
struct SpmTrainSummary {
  std::string model_type;
  int vocab_size = 0;
  bool byte_fallback = false;
  int64_t lines_used = 0;   // non-empty lines trained on (the sample, when one was drawn)
  int64_t lines_total = 0;  // non-empty lines in all inputs
  size_t files = 0;
  std::string model_prefix;
  double seconds = 0;
  // "sentencepiece: trained unigram model, vocab 400 (byte fallback), on 400 lines from 1 file ->
  // PREFIX.model, .vocab in 0.12 s"
  std::string line() const;
};

// Trains a model on the given text files (one sentence a line) and writes PREFIX.model and
// PREFIX.vocab (atomically; "piece<TAB>score" lines, for reading only).
// Lines are read with qkv::text::TextLineReader: a trailing '\r' is stripped and invalid UTF-8 is a
// qkv::Error naming file:line. Empty and whitespace-only lines are skipped. Lines of up to
// kMaxTrainingLineBytes are used whole (SentencePiece's own default limit, 4192 bytes, is raised
// to it); a longer line is a qkv::Error naming file:line and the limit. No non-empty line in all
// inputs is an error. The result is deterministic: the same inputs, options (including seed and
// num_threads) and library version give the same .model bytes. The .model does not record the
// input paths or the prefix.
SpmTrainSummary train_sentencepiece(const std::vector<std::string>& inputs, const std::string& model_prefix,
                                    const SpmTrainOptions& options);

// A loaded model. Encoding and decoding are const and safe to call from several threads.
class SentencePiece {
 public:
  // Throws qkv::Error naming the path if the file is missing, empty or not a SentencePiece model.
  // Models trained elsewhere load too: the *_id() accessors return their ids (-1 if undefined).
  explicit SentencePiece(const std::string& model_path);
  // Loads a model from its serialized bytes (what a .model file holds); `name` stands for the path
  // in error messages and path(). Same checks as the path constructor.
  static SentencePiece from_bytes(const std::string& bytes, const std::string& name);
  ~SentencePiece();
  SentencePiece(SentencePiece&&) noexcept;
  SentencePiece& operator=(SentencePiece&&) noexcept;

  // Token ids of `text` (normalized as described above); no BOS/EOS added. Invalid UTF-8 is a
  // qkv::Error.
  std::vector<int32_t> encode(std::string_view text) const;
  // Text of `ids`; pad, bos and eos ids are skipped, unk decodes to " ⁇ ". An id outside
  // [0, vocab_size()) is a qkv::Error.
  std::string decode(const std::vector<int32_t>& ids) const;

  // The pieces of `text` ("▁the"), as encode's ids name them; and the text of pieces, as
  // SentencePiece's DecodePieces gives it (a piece the model lacks reads as itself): what Hugging
  // Face's Marian tokenizer calls, whose ids come from its own vocabulary file, not the model's.
  std::vector<std::string> encode_pieces(std::string_view text) const;
  std::string decode_pieces(const std::vector<std::string>& pieces) const;

  int32_t vocab_size() const;
  int32_t pad_id() const;
  int32_t unk_id() const;
  int32_t bos_id() const;
  int32_t eos_id() const;
  // The id of a piece, or -1 when the vocabulary does not have it.
  int32_t piece_id(std::string_view piece) const;
  // The piece string of `id` ("▁" marks a word start); an id out of range is a qkv::Error.
  std::string piece(int32_t id) const;
  const std::string& path() const { return path_; }

 private:
  explicit SentencePiece(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp, std::string path);
  void load_serialized(const std::string& bytes);

  std::string path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace qkv::text
