#include "qkv/text/sentencepiece.h"
#include "qkv/text/spm_normalizer_check.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <random>
#include <sstream>
#include <unordered_map>

#include "qkv/core/error.h"
#include "qkv/io/atomic_file.h"
#include "qkv/text/utf8.h"

namespace qkv::text {

namespace {

namespace spm = sentencepiece;

bool blank(const std::string& s) {
  for (const char c : s)
    if (c != ' ' && c != '\t' && c != '\v' && c != '\f' && c != '\r') return false;
  return true;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
  return out;
}

// Streams the non-empty lines of several files. A line longer than kMaxTrainingLineBytes is an
// error naming file:line: SentencePiece would skip it silently (past its max_sentence_length, which
// we raise to that limit), and a line that long is hardly one sentence (a file without newlines).
// Errors (that one, and qkv::Error from TextLineReader: missing file, invalid UTF-8 at file:line)
// must not unwind through SentencePiece, so they end the iteration with an error status and are
// rethrown by the caller afterwards.
class LineSource : public spm::SentenceIterator {
 public:
  explicit LineSource(const std::vector<std::string>& paths) : paths_(paths) { advance(); }

  bool done() const override { return done_; }
  void Next() override { advance(); }
  const std::string& value() const override { return line_; }
  spm::util::Status status() const override {
    if (!error_) return {};
    return spm::util::Status(spm::util::StatusCode::kInternal, "qkv: input error");
  }

  void rethrow_if_error() const {
    if (error_) std::rethrow_exception(error_);
  }
  int64_t kept() const { return kept_; }

 private:
  void advance() {
    if (done_) return;
    try {
      for (;;) {
        if (!reader_) {
          if (next_file_ == paths_.size()) {
            done_ = true;
            return;
          }
          reader_ = std::make_unique<TextLineReader>(paths_[next_file_++]);
        }
        if (!reader_->next(line_)) {
          reader_.reset();
          continue;
        }
        if (blank(line_)) continue;
        QKV_CHECK(line_.size() <= kMaxTrainingLineBytes,
                  reader_->path() << ":" << reader_->line_no() << ": line of " << line_.size()
                                  << " bytes is longer than the " << kMaxTrainingLineBytes
                                  << " bytes SentencePiece training accepts (one sentence a line?)");
        ++kept_;
        return;
      }
    } catch (...) {
      error_ = std::current_exception();
      done_ = true;
    }
  }

  const std::vector<std::string>& paths_;
  size_t next_file_ = 0;
  std::unique_ptr<TextLineReader> reader_;
  std::string line_;
  bool done_ = false;
  std::exception_ptr error_;
  int64_t kept_ = 0;
};

class VectorSource : public spm::SentenceIterator {
 public:
  explicit VectorSource(const std::vector<std::string>& lines) : lines_(lines) {}
  bool done() const override { return i_ >= lines_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return lines_[i_]; }
  spm::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& lines_;
  size_t i_ = 0;
};

std::string shortest(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, ec == std::errc() ? end : buf);
}

}  // namespace

std::string SpmTrainSummary::line() const {
  std::ostringstream line;
  line << "sentencepiece: trained " << model_type << " model, vocab " << vocab_size
       << (byte_fallback ? " (byte fallback)" : "") << ", on ";
  if (lines_used < lines_total)
    line << lines_used << " sampled of " << lines_total;
  else
    line << lines_total;
  line << " lines from " << files << (files == 1 ? " file" : " files");
  line << " -> " << model_prefix << ".model, .vocab in " << std::fixed << std::setprecision(2) << seconds << " s";
  return line.str();
}

SpmTrainSummary train_sentencepiece(const std::vector<std::string>& inputs, const std::string& model_prefix,
                                    const SpmTrainOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string where = "train_sentencepiece(" + model_prefix + ")";
  QKV_CHECK(!inputs.empty(), where << ": no input files");
  QKV_CHECK(!model_prefix.empty(), "train_sentencepiece: empty model prefix");
  QKV_CHECK(o.model_type == "unigram" || o.model_type == "bpe" || o.model_type == "word" || o.model_type == "char",
            where << ": model_type '" << o.model_type << "' is not one of unigram, bpe, word, char");
  const int user = static_cast<int>(o.user_defined_symbols.size());
  const int reserved = 4 + user + (o.byte_fallback ? 256 : 0);
  QKV_CHECK(o.vocab_size > reserved, where << ": vocab_size " << o.vocab_size << " must exceed the " << reserved
                                           << " reserved ids (4 special"
                                           << (user ? " + " + std::to_string(user) + " user-defined" : "")
                                           << (o.byte_fallback ? " + 256 byte-fallback pieces" : "") << ")");
  for (const std::string& sym : o.user_defined_symbols)
    QKV_CHECK(!sym.empty() && sym.find(',') == std::string::npos && sym.find(' ') == std::string::npos,
              where << ": user-defined symbol '" << sym << "' must be non-empty without commas or spaces");
  QKV_CHECK(o.character_coverage > 0.0 && o.character_coverage <= 1.0,
            where << ": character_coverage " << o.character_coverage << " must be in (0, 1]");
  QKV_CHECK(o.input_sentence_size >= 0, where << ": input_sentence_size " << o.input_sentence_size << " < 0");
  QKV_CHECK(o.num_threads >= 1, where << ": num_threads " << o.num_threads << " < 1");
  const std::filesystem::path out_dir = std::filesystem::path(model_prefix).parent_path();
  std::error_code ec;
  QKV_CHECK(out_dir.empty() || std::filesystem::is_directory(out_dir, ec),
            where << ": output directory " << out_dir.string() << " does not exist");
  for (const std::string& path : inputs) TextLineReader probe(path);  // missing files fail before any work

  std::string user_symbols;
  for (const std::string& sym : o.user_defined_symbols) user_symbols += (user_symbols.empty() ? "" : ",") + sym;
  std::unordered_map<std::string, std::string> args = {
      {"vocab_size", std::to_string(o.vocab_size)},
      {"model_type", o.model_type},
      {"character_coverage", shortest(o.character_coverage)},
      {"num_threads", std::to_string(o.num_threads)},
      {"input_sentence_size", "0"},  // qkv samples (below); SentencePiece gets the sample
      {"shuffle_input_sentence", "false"},
      {"max_sentence_length", std::to_string(kMaxTrainingLineBytes)},  // default 4192; LineSource refuses longer
      {"pad_id", "0"},
      {"unk_id", "1"},
      {"bos_id", "2"},
      {"eos_id", "3"},
      {"pad_piece", "<pad>"},
      {"unk_piece", "<unk>"},
      {"bos_piece", "<s>"},
      {"eos_piece", "</s>"},
      {"byte_fallback", o.byte_fallback ? "true" : "false"},
      {"minloglevel", "2"},  // errors only; SentencePiece logs every EM iteration at INFO
  };
  if (!user_symbols.empty()) args["user_defined_symbols"] = user_symbols;

  LineSource source(inputs);
  std::vector<std::string> sample;
  int64_t total_lines = 0;
  std::string serialized;
  spm::util::Status status;
  if (o.input_sentence_size > 0) {
    // Reservoir sampling (Algorithm R) with a fixed, portable engine: same seed, same sample.
    std::mt19937_64 engine(o.seed);
    for (; !source.done(); source.Next()) {
      ++total_lines;
      if (static_cast<int64_t>(sample.size()) < o.input_sentence_size) {
        sample.push_back(source.value());
      } else {
        const uint64_t j = engine() % static_cast<uint64_t>(total_lines);
        if (j < sample.size()) sample[j] = source.value();
      }
    }
    source.rethrow_if_error();
    QKV_CHECK(!sample.empty(), where << ": no non-empty lines in " << join(inputs));
    VectorSource vs(sample);
    status = spm::SentencePieceTrainer::Train(args, &vs, &serialized);
  } else {
    status = spm::SentencePieceTrainer::Train(args, &source, &serialized);
    source.rethrow_if_error();
    total_lines = source.kept();
  }
  QKV_CHECK(total_lines > 0, where << ": no non-empty lines in " << join(inputs));
  QKV_CHECK(status.ok(), where << ": SentencePiece training failed: " << status.ToString());

  spm::SentencePieceProcessor sp;
  status = sp.LoadFromSerializedProto(serialized);
  QKV_CHECK(status.ok(), where << ": trained model does not load: " << status.ToString());
  std::ostringstream vocab;
  for (int id = 0; id < sp.GetPieceSize(); ++id) vocab << sp.IdToPiece(id) << "\t" << sp.GetScore(id) << "\n";
  io::write_file_atomic(model_prefix + ".model", serialized);
  io::write_file_atomic(model_prefix + ".vocab", vocab.str());

  SpmTrainSummary summary;
  summary.model_type = o.model_type;
  summary.vocab_size = sp.GetPieceSize();
  summary.byte_fallback = o.byte_fallback;
  summary.lines_total = total_lines;
  summary.lines_used = !sample.empty() && static_cast<int64_t>(sample.size()) < total_lines
                           ? static_cast<int64_t>(sample.size())
                           : total_lines;
  summary.files = inputs.size();
  summary.model_prefix = model_prefix;
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return summary;
}

SentencePiece::SentencePiece(const std::string& model_path)
    : path_(model_path), sp_(std::make_unique<spm::SentencePieceProcessor>()) {
  std::error_code ec;
  QKV_CHECK(!std::filesystem::is_directory(model_path, ec),
            model_path << ": is a directory, expected a SentencePiece model");
  std::ifstream in(model_path, std::ios::binary);
  QKV_CHECK(in.is_open(), model_path << ": cannot open SentencePiece model: " << std::strerror(errno));
  // istream::read, unlike istreambuf_iterator, turns a failing read into badbit instead of
  // letting libstdc++'s std::ios_base::failure escape.
  std::string bytes;
  char chunk[1 << 16];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) bytes.append(chunk, static_cast<size_t>(in.gcount()));
  QKV_CHECK(!in.bad(), model_path << ": read error: " << std::strerror(errno));
  load_serialized(bytes);
}

SentencePiece::SentencePiece(std::unique_ptr<spm::SentencePieceProcessor> sp, std::string path)
    : path_(std::move(path)), sp_(std::move(sp)) {}

SentencePiece SentencePiece::from_bytes(const std::string& bytes, const std::string& name) {
  SentencePiece model(std::make_unique<spm::SentencePieceProcessor>(), name);
  model.load_serialized(bytes);
  return model;
}

void SentencePiece::load_serialized(const std::string& bytes) {
  QKV_CHECK(!bytes.empty(), path_ << ": empty file, not a SentencePiece model");
  check_normalizer_maps(bytes, path_);  // libsentencepiece would read a damaged map out of bounds
  // Some malformed models make SentencePiece throw instead of returning a status: its darts_clone
  // trie throws on a piece that starts with NUL ("zero-length key").
  spm::util::Status status;
  try {
    status = sp_->LoadFromSerializedProto(bytes);
  } catch (const std::exception& e) {
    throw Error(path_ + ": not a valid SentencePiece model (" + e.what() + ")");
  }
  QKV_CHECK(status.ok(), path_ << ": not a valid SentencePiece model (" << status.ToString() << ")");
  QKV_CHECK(sp_->GetPieceSize() > 0, path_ << ": SentencePiece model has no pieces");
}

SentencePiece::~SentencePiece() = default;
SentencePiece::SentencePiece(SentencePiece&&) noexcept = default;
SentencePiece& SentencePiece::operator=(SentencePiece&&) noexcept = default;

std::vector<int32_t> SentencePiece::encode(std::string_view text) const {
  size_t bad = 0;
  QKV_CHECK(valid_utf8(text, &bad), "SentencePiece::encode: invalid UTF-8 at byte " << bad);
  std::vector<int> ids;
  const spm::util::Status status = sp_->Encode(text, &ids);
  QKV_CHECK(status.ok(), "SentencePiece::encode (" << path_ << "): " << status.ToString());
  return {ids.begin(), ids.end()};
}

std::string SentencePiece::decode(const std::vector<int32_t>& ids) const {
  const int32_t n = vocab_size(), pad = pad_id(), bos = bos_id(), eos = eos_id();
  std::vector<int> kept;
  kept.reserve(ids.size());
  for (const int32_t id : ids) {
    QKV_CHECK(id >= 0 && id < n,
              "SentencePiece::decode (" << path_ << "): id " << id << " out of range [0, " << n << ")");
    if (id != pad && id != bos && id != eos) kept.push_back(id);
  }
  std::string text;
  const spm::util::Status status = sp_->Decode(kept, &text);
  QKV_CHECK(status.ok(), "SentencePiece::decode (" << path_ << "): " << status.ToString());
  return text;
}

std::vector<std::string> SentencePiece::encode_pieces(std::string_view text) const {
  size_t bad = 0;
  QKV_CHECK(valid_utf8(text, &bad), "SentencePiece::encode: invalid UTF-8 at byte " << bad);
  std::vector<std::string> pieces;
  const spm::util::Status status = sp_->Encode(text, &pieces);
  QKV_CHECK(status.ok(), "SentencePiece::encode (" << path_ << "): " << status.ToString());
  return pieces;
}

std::string SentencePiece::decode_pieces(const std::vector<std::string>& pieces) const {
  std::string text;
  const spm::util::Status status = sp_->Decode(pieces, &text);
  QKV_CHECK(status.ok(), "SentencePiece::decode (" << path_ << "): " << status.ToString());
  return text;
}

int32_t SentencePiece::vocab_size() const { return sp_->GetPieceSize(); }
int32_t SentencePiece::piece_id(std::string_view piece) const {
  const int id = sp_->PieceToId(piece);
  // PieceToId answers unk_id for an unknown piece; only the unknown piece itself is unk.
  return id == sp_->unk_id() && piece != sp_->IdToPiece(id) ? -1 : id;
}

int32_t SentencePiece::pad_id() const { return sp_->pad_id(); }
int32_t SentencePiece::unk_id() const { return sp_->unk_id(); }
int32_t SentencePiece::bos_id() const { return sp_->bos_id(); }
int32_t SentencePiece::eos_id() const { return sp_->eos_id(); }

std::string SentencePiece::piece(int32_t id) const {
  QKV_CHECK(id >= 0 && id < vocab_size(),
            "SentencePiece::piece (" << path_ << "): id " << id << " out of range [0, " << vocab_size() << ")");
  return sp_->IdToPiece(id);
}

}  // namespace qkv::text
