#include "qkv/models/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/io/atomic_file.h"

namespace qkv::models {

using nlohmann::json;

float TransformerConfig::mask_fill_value() const {
  return mask_fill == "-inf" ? -std::numeric_limits<float>::infinity() : -1e9f;
}

namespace {
// The size fields and their bounds (all at least 1). Ids (pad_id, bos_id, eos_id) are bounded by
// the vocabularies instead.
struct SizeField {
  const char* name;
  int64_t TransformerConfig::*member;
  int64_t max;
};
constexpr SizeField kSizeFields[] = {
    {"src_vocab_size", &TransformerConfig::src_vocab_size, kMaxVocabSize},
    {"tgt_vocab_size", &TransformerConfig::tgt_vocab_size, kMaxVocabSize},
    {"d_model", &TransformerConfig::d_model, kMaxWidth},
    {"num_heads", &TransformerConfig::num_heads, kMaxWidth},
    {"num_layers", &TransformerConfig::num_layers, kMaxLayers},
    {"d_ff", &TransformerConfig::d_ff, kMaxWidth},
    {"max_seq_length", &TransformerConfig::max_seq_length, kMaxSeqLength},
};

// One part of the model's floats, worded for a message.
struct SizePart {
  std::string source;
  double floats;
};

// The floats the model holds (parameters and the positional table) by the fields they grow with;
// within a few thousand floats of the exact count (pre-LN's final norms are left out). Doubles, so
// that no product of bounded fields overflows.
std::vector<SizePart> size_parts(const TransformerConfig& c) {
  const double d = static_cast<double>(c.d_model), ff = static_cast<double>(c.d_ff);
  const double src_vocab = static_cast<double>(c.src_vocab_size), tgt_vocab = static_cast<double>(c.tgt_vocab_size);
  const double attention = 4 * (d * d + d), feed_forward = 2 * d * ff + ff + d, norm = 2 * d;
  const double encoder_layer = attention + feed_forward + 2 * norm, decoder_layer = 2 * attention + feed_forward + 3 * norm;
  const auto n = [](int64_t v) { return std::to_string(v); };
  const std::string by_d_model = " x d_model " + n(c.d_model);
  const std::string layers = "num_layers " + n(c.num_layers) + " x (d_model " + n(c.d_model) + ", d_ff " + n(c.d_ff) + ")";
  const SizePart positions{"max_seq_length " + n(c.max_seq_length) + by_d_model + " (positional table)",
                           static_cast<double>(c.max_seq_length) * d};
  if (c.decoder_only())
    return {{"vocab_size " + n(c.tgt_vocab_size) + by_d_model, tgt_vocab * d * (c.tie_output_embedding ? 1 : 2)},
            {layers, static_cast<double>(c.num_layers) * encoder_layer},
            positions};
  if (c.encoder_only())
    return {{"vocab_size " + n(c.tgt_vocab_size) + by_d_model,
             tgt_vocab * d * (c.mlm_head && !c.tie_output_embedding ? 2 : 1) + (c.mlm_head ? tgt_vocab : 0)},
            {layers, static_cast<double>(c.num_layers) * encoder_layer},
            positions,
            {"type_vocab_size " + n(c.type_vocab_size) + by_d_model, static_cast<double>(c.type_vocab_size) * d},
            {n(static_cast<int64_t>(c.labels.size())) + " labels" + by_d_model, static_cast<double>(c.labels.size()) * d}};
  return {
      {"src_vocab_size " + n(c.src_vocab_size) + by_d_model, c.share_embeddings ? 0.0 : src_vocab * d},
      {"tgt_vocab_size " + n(c.tgt_vocab_size) + by_d_model +
           (c.tie_output_embedding ? "" : " (embedding and output layer)"),
       tgt_vocab * d * (c.tie_output_embedding ? 1 : 2) + tgt_vocab},
      {layers, static_cast<double>(c.num_layers) * (encoder_layer + decoder_layer)},
      {positions.source, positions.floats * (c.positions == "learned" ? 2 : 1)},  // learned: a table per stack
  };
}

void check_model_size(const TransformerConfig& c) {
  const std::vector<SizePart> parts = size_parts(c);
  double total = 0;
  for (const SizePart& p : parts) total += p.floats;
  if (total <= static_cast<double>(kMaxModelFloats)) return;
  const SizePart& largest =
      *std::max_element(parts.begin(), parts.end(), [](const SizePart& a, const SizePart& b) { return a.floats < b.floats; });
  std::ostringstream os;
  os << std::setprecision(3) << "config: the model would hold " << total << " floats, more than the " << kMaxModelFloats
     << " (2^34, 64 GiB) allowed; the largest part comes from " << largest.source;
  throw Error(os.str());
}

void check_fraction(const char* name, float v, bool one_allowed) {
  QKV_CHECK(std::isfinite(v) && v >= 0.f && (one_allowed ? v <= 1.f : v < 1.f),
            "config: " << name << " must be in [0, 1" << (one_allowed ? "]" : ")") << ", got " << v);
}

void check_id(const char* name, int64_t id, int64_t vocab, bool none_allowed) {
  QKV_CHECK((none_allowed && id == -1) || (id >= 0 && id < vocab),
            "config: " << name << " " << id << " must be " << (none_allowed ? "-1 (none) or " : "")
                       << "an id of the vocabulary (vocab_size " << vocab << ")");
}

// T5's bucketing: half the buckets (all of them in a causal stack) are exact offsets 0, 1, ...;
// the rest grow logarithmically up to max_distance. Fewer than 4 buckets leaves a bidirectional
// stack no logarithmic ones.
void validate_relative_positions(const TransformerConfig& c) {
  QKV_CHECK(c.relative_attention_num_buckets >= 4 && c.relative_attention_num_buckets <= 1024,
            "config: relative_attention_num_buckets must be in [4, 1024], got " << c.relative_attention_num_buckets);
  QKV_CHECK(c.relative_attention_max_distance > c.relative_attention_num_buckets / 2 &&
                c.relative_attention_max_distance <= kMaxSeqLength,
            "config: relative_attention_max_distance must be in (relative_attention_num_buckets / 2 = "
                << c.relative_attention_num_buckets / 2 << ", " << kMaxSeqLength << "], got "
                << c.relative_attention_max_distance);
}

void validate_encoder_only(const TransformerConfig& c) {
  QKV_CHECK(c.norm == NormPosition::Post, "config: an encoder-only model is post-LN (BERT)");
  QKV_CHECK(c.src_vocab_size == c.tgt_vocab_size, "config: an encoder-only model has one vocabulary (vocab_size)");
  check_id("pad_id", c.pad_id, c.tgt_vocab_size, true);
  check_id("cls_id", c.cls_id, c.tgt_vocab_size, false);
  check_id("sep_id", c.sep_id, c.tgt_vocab_size, false);
  check_id("mask_id", c.mask_id, c.tgt_vocab_size, true);
  QKV_CHECK(c.type_vocab_size >= 0 && c.type_vocab_size <= kMaxTypeVocabSize,
            "config: type_vocab_size must be in [0, " << kMaxTypeVocabSize << "], got " << c.type_vocab_size);
  QKV_CHECK(c.labels.empty() || c.pooler, "config: a classification head (labels) reads the pooler: set pooler true");
  QKV_CHECK(c.labels.size() <= static_cast<size_t>(kMaxLabels),
            "config: " << c.labels.size() << " labels, at most " << kMaxLabels << " are allowed");
  std::set<std::string> seen;
  for (const std::string& label : c.labels) {
    QKV_CHECK(!label.empty() && label.find_first_of("\t\n\r") == std::string::npos,
              "config: labels must be non-empty and hold no tab or line break, got \"" << label << "\"");
    QKV_CHECK(seen.insert(label).second, "config: label \"" << label << "\" is given twice");
  }
}
}  // namespace

void TransformerConfig::validate() const {
  for (const SizeField& f : kSizeFields) {
    const int64_t v = this->*f.member;
    QKV_CHECK(v >= 1 && v <= f.max, "config: " << f.name << " must be in [1, " << f.max << "], got " << v);
  }
  QKV_CHECK(head_dim >= 0 && head_dim <= kMaxWidth && head_dim * num_heads <= kMaxWidth,
            "config: head_dim must be 0 (d_model / num_heads) or in [1, " << kMaxWidth << "] with head_dim x num_heads at "
                                                                          "most " << kMaxWidth << ", got " << head_dim);
  QKV_CHECK(head_dim > 0 || num_heads <= d_model,
            "config: num_heads " << num_heads << " must not exceed d_model " << d_model);
  QKV_CHECK(head_dim > 0 || d_model % num_heads == 0,
            "config: d_model " << d_model << " must be divisible by num_heads " << num_heads);
  QKV_CHECK(head_dim == 0 || encoder_decoder(), "config: head_dim is for encoder-decoder models (T5's d_kv)");
  check_fraction("dropout", dropout, false);
  check_fraction("attention_dropout", attention_dropout, false);
  check_fraction("ffn_dropout", ffn_dropout, false);
  QKV_CHECK(architecture == kEncoderDecoder || architecture == kDecoderOnly || architecture == kEncoderOnly,
            "config: architecture must be \"encoder-decoder\", \"decoder-only\" or \"encoder-only\", got \""
                << architecture << "\"");
  if (encoder_only()) {
    validate_encoder_only(*this);
  } else if (decoder_only()) {
    QKV_CHECK(norm == NormPosition::Pre, "config: a decoder-only model is pre-LN (norm \"pre\")");
    QKV_CHECK(src_vocab_size == tgt_vocab_size, "config: a decoder-only model has one vocabulary (vocab_size)");
    QKV_CHECK(pad_id >= -1 && pad_id < tgt_vocab_size,
              "config: pad_id " << pad_id << " must be -1 (none) or an id of the vocabulary");
  } else {
    QKV_CHECK(positions == "sinusoidal" || positions == "sinusoidal_halves" || positions == "sinusoidal_fairseq" ||
                  positions == "relative" || positions == "learned",
              "config: positions \"" << positions
                                     << "\" is not one of an encoder-decoder model's (\"sinusoidal\", "
                                        "\"sinusoidal_halves\", \"sinusoidal_fairseq\", \"relative\", \"learned\")");
    QKV_CHECK(positions != "sinusoidal_fairseq" || d_model >= 4,
              "config: positions \"sinusoidal_fairseq\" needs d_model >= 4 (its frequencies divide by d_model / 2 - 1), "
              "got " << d_model);
    check_id("forced_bos_id", forced_bos_id, tgt_vocab_size, true);
    validate_relative_positions(*this);
    QKV_CHECK(pad_id >= 0 && pad_id < src_vocab_size && pad_id < tgt_vocab_size,
              "config: pad_id " << pad_id << " must be a valid id of both vocabularies");
    QKV_CHECK(!share_embeddings || src_vocab_size == tgt_vocab_size,
              "config: share_embeddings needs one joint vocabulary, but src_vocab_size is "
                  << src_vocab_size << " and tgt_vocab_size " << tgt_vocab_size);
  }
  QKV_CHECK(encoder_decoder() || (!embedding_norm && forced_bos_id == -1),
            "config: embedding_norm and forced_bos_id are for encoder-decoder models (BART's, mBART's)");
  QKV_CHECK(encoder_decoder() || !share_embeddings,
            "config: share_embeddings is for encoder-decoder models (a" << (encoder_only() ? "n " : " ") << architecture
                                                                        << " model has one token embedding)");
  QKV_CHECK(positions == "sinusoidal" || positions == "learned" ||
                (encoder_decoder() && (positions == "sinusoidal_halves" || positions == "sinusoidal_fairseq" ||
                                       positions == "relative")),
            "config: positions must be \"sinusoidal\" or \"learned\", got \"" << positions << "\"");
  QKV_CHECK(encoder_only() || (bos_id >= 0 && bos_id < tgt_vocab_size && eos_id >= 0 && eos_id < tgt_vocab_size),
            "config: bos_id " << bos_id << " and eos_id " << eos_id << " must be ids of the target vocabulary");
  QKV_CHECK(activation == "relu" || activation == "gelu" || activation == "gelu_tanh" || activation == "silu",
            "config: activation must be \"relu\", \"gelu\", \"gelu_tanh\" or \"silu\", got \"" << activation << "\"");
  QKV_CHECK(layer_norm == "standard" || layer_norm == "seed003" || (encoder_decoder() && layer_norm == "rms"),
            "config: layer_norm must be " << (encoder_decoder() ? "\"standard\", \"seed003\" or \"rms\""
                                                                : "\"standard\" or \"seed003\"")
                                           << ", got \"" << layer_norm << "\"");
  QKV_CHECK(layer_norm != "seed003" || d_model >= 2,
            "config: layer_norm \"seed003\" needs d_model >= 2 (it divides by the unbiased std of d_model values), got "
                << d_model);
  QKV_CHECK(mask_fill == "-1e9" || mask_fill == "-inf", "config: mask_fill must be \"-1e9\" or \"-inf\", got \"" << mask_fill << "\"");
  QKV_CHECK(std::isfinite(layer_norm_eps) && layer_norm_eps > 0.f,
            "config: layer_norm_eps must be a positive finite number, got " << layer_norm_eps);
  check_model_size(*this);
}

std::string config_to_json(const TransformerConfig& c) {
  json j = {{"format_version", kConfigFormatVersion}, {"architecture", c.architecture}};
  if (c.single_vocabulary()) {
    j["vocab_size"] = c.tgt_vocab_size;
  } else {
    j["src_vocab_size"] = c.src_vocab_size;
    j["tgt_vocab_size"] = c.tgt_vocab_size;
  }
  j["d_model"] = c.d_model;
  j["num_heads"] = c.num_heads;
  j["num_layers"] = c.num_layers;
  j["d_ff"] = c.d_ff;
  j["max_seq_length"] = c.max_seq_length;
  j["dropout"] = c.dropout;
  j["pad_id"] = c.pad_id;
  if (c.encoder_only()) {
    j["cls_id"] = c.cls_id;
    j["sep_id"] = c.sep_id;
    j["mask_id"] = c.mask_id;
    j["type_vocab_size"] = c.type_vocab_size;
    j["pooler"] = c.pooler;
    j["mlm_head"] = c.mlm_head;
    j["labels"] = c.labels;
  } else {
    j["bos_id"] = c.bos_id;
    j["eos_id"] = c.eos_id;
  }
  if (c.single_vocabulary()) {
    j["positions"] = c.positions;
  } else {
    j["norm"] = c.norm == NormPosition::Post ? "post" : "pre";
    j["share_embeddings"] = c.share_embeddings;
    // Written only where they leave the seed's choice, so that the seed's configs keep their bytes.
    if (c.positions != "sinusoidal") j["positions"] = c.positions;
    if (!c.target_query_mask) j["target_query_mask"] = false;
    if (c.positions == "relative") {
      j["relative_attention_num_buckets"] = c.relative_attention_num_buckets;
      j["relative_attention_max_distance"] = c.relative_attention_max_distance;
    }
    if (!c.scale_attention_scores) j["scale_attention_scores"] = false;
    if (!c.linear_bias) j["linear_bias"] = false;
    if (c.gated_feed_forward) j["gated_feed_forward"] = true;
    if (c.scale_decoder_output) j["scale_decoder_output"] = true;
    if (c.head_dim > 0) j["head_dim"] = c.head_dim;
    if (c.embedding_norm) j["embedding_norm"] = true;
    if (c.forced_bos_id >= 0) j["forced_bos_id"] = c.forced_bos_id;
  }
  j["activation"] = c.activation;
  j["layer_norm_eps"] = c.layer_norm_eps;
  j["layer_norm"] = c.layer_norm;
  j["ffn_dropout"] = c.ffn_dropout;
  j["scale_embeddings"] = c.scale_embeddings;
  j["tie_output_embedding"] = c.tie_output_embedding;
  j["mask_fill"] = c.mask_fill;
  j["attention_dropout"] = c.attention_dropout;
  return j.dump(2) + "\n";
}

TransformerConfig decoder_only_defaults() {
  TransformerConfig c;
  c.architecture = kDecoderOnly;
  c.src_vocab_size = c.tgt_vocab_size;
  c.norm = NormPosition::Pre;
  c.activation = "gelu_tanh";
  c.positions = "learned";
  c.tie_output_embedding = true;
  c.pad_id = -1;
  return c;
}

TransformerConfig encoder_only_defaults() {
  TransformerConfig c;
  c.architecture = kEncoderOnly;
  c.src_vocab_size = c.tgt_vocab_size;
  c.norm = NormPosition::Post;
  c.activation = "gelu";
  c.positions = "learned";
  c.max_seq_length = 512;
  c.layer_norm_eps = 1e-12f;
  c.attention_dropout = 0.1f;
  c.tie_output_embedding = true;
  return c;
}

namespace {
Error field_error(const std::string& src, const std::string& key, const std::string& problem) {
  return Error(src + ": field \"" + key + "\" " + problem);
}

template <class T>
void read_field(const json& j, const char* key, T& out, const std::string& src) {
  if (!j.contains(key)) return;  // absent: keep the seed's default
  try {
    out = j.at(key).get<T>();
  } catch (const json::exception&) {
    throw field_error(src, key, "has the wrong type (" + j.at(key).dump() + ")");
  }
}

// An integer field in [min, max] (min >= 0). The range is checked on the number as written, before
// any conversion could wrap it: nlohmann keeps 9223372036854775808 as an unsigned integer, and the
// message shows it as such.
bool integer_in_range(const json& value, int64_t min, int64_t max) {
  if (value.is_number_unsigned())
    return value.get<uint64_t>() >= static_cast<uint64_t>(min) && value.get<uint64_t>() <= static_cast<uint64_t>(max);
  if (value.is_number_integer()) return value.get<int64_t>() >= min && value.get<int64_t>() <= max;
  return value.get<double>() >= static_cast<double>(min) && value.get<double>() <= static_cast<double>(max);
}

void read_integer(const json& j, const char* key, int64_t min, int64_t max, int64_t& out, const std::string& src) {
  if (!j.contains(key)) return;
  const json& value = j.at(key);
  if (!value.is_number()) throw field_error(src, key, "has the wrong type (" + value.dump() + "), expected an integer");
  if (value.is_number_float() && value.get<double>() != std::floor(value.get<double>()))
    throw field_error(src, key, "must be an integer, got " + value.dump());
  if (!integer_in_range(value, min, max))
    throw field_error(src, key, "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " + value.dump());
  out = value.is_number_float() ? static_cast<int64_t>(value.get<double>()) : value.get<int64_t>();
}

// pad_id of a decoder-only model: an id or -1 (no padding id).
void read_integer_allowing_none(const json& j, const char* key, int64_t max, int64_t& out, const std::string& src) {
  if (j.contains(key) && j.at(key).is_number_integer() && j.at(key).get<int64_t>() == -1) {
    out = -1;
    return;
  }
  read_integer(j, key, 0, max, out, src);
}

void read_id(const json& j, const char* key, int32_t& out, const std::string& src) {
  int64_t id = out;
  read_integer(j, key, 0, kMaxVocabSize - 1, id, src);
  out = static_cast<int32_t>(id);
}

// A float field: a JSON number whose value is finite as a float ("nan" is a string: wrong type).
void read_float(const json& j, const char* key, float& out, const std::string& src) {
  if (!j.contains(key)) return;
  const json& value = j.at(key);
  if (!value.is_number()) throw field_error(src, key, "has the wrong type (" + value.dump() + "), expected a number");
  const double v = value.get<double>();
  if (!std::isfinite(v) || std::fabs(v) > std::numeric_limits<float>::max())
    throw field_error(src, key, "must be a finite number, got " + value.dump());
  out = static_cast<float>(v);
}

// nlohmann keeps the last of repeated keys; two values for one field are refused instead, since
// either could be the one meant.
json parse_refusing_duplicate_keys(const std::string& text, const std::string& src) {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  const json::parser_callback_t track_keys = [&](int depth, json::parse_event_t event, json& parsed) {
    // config.json is flat; deep nesting is refused while parsing, because printing or copying a
    // value nested 200,000 levels deep recurses once per level (a stack overflow found by fuzzing).
    constexpr int kMaxDepth = 16;
    QKV_CHECK(depth <= kMaxDepth || (event != json::parse_event_t::object_start &&
                                     event != json::parse_event_t::array_start),
              src << ": JSON nested more than " << kMaxDepth << " levels deep");
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      open_objects.pop_back();
    } else if (event == json::parse_event_t::key && duplicate.empty() &&
               !open_objects.back().insert(parsed.get<std::string>()).second) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text, track_keys);
  } catch (const json::exception& e) {  // a syntax error, or a number beyond double (1e999)
    throw Error(src + ": not valid JSON: " + e.what());
  }
  QKV_CHECK(duplicate.empty(), src << ": field \"" << duplicate << "\" is given more than once");
  return j;
}
}  // namespace

namespace {
const std::vector<std::string> kEncoderOnlyFields = {"type_vocab_size", "pooler", "mlm_head", "labels",
                                                     "cls_id",          "sep_id", "mask_id"};

// The fields config.json may not hold for c's family.
std::vector<std::string> foreign_fields(const TransformerConfig& c) {
  std::vector<std::string> foreign;
  if (c.single_vocabulary())
    foreign = {"src_vocab_size", "tgt_vocab_size", "norm", "share_embeddings", "target_query_mask",
               "relative_attention_num_buckets", "relative_attention_max_distance", "scale_attention_scores",
               "linear_bias", "gated_feed_forward", "scale_decoder_output", "head_dim", "embedding_norm",
               "forced_bos_id"};
  else foreign = {"vocab_size"};
  if (c.encoder_only()) foreign.insert(foreign.end(), {"bos_id", "eos_id"});
  else foreign.insert(foreign.end(), kEncoderOnlyFields.begin(), kEncoderOnlyFields.end());
  return foreign;
}

// Read first: a newer format or another family must be refused before any of its fields is read
// with this version's meaning.
void read_format_and_architecture(const json& j, TransformerConfig& c, const std::string& src) {
  if (j.contains("format_version")) {
    const json& v = j.at("format_version");
    QKV_CHECK(v.is_number_integer() && v.get<int64_t>() >= 1,
              src << ": field \"format_version\" must be a positive integer, got " << v.dump());
    QKV_CHECK(v.get<int64_t>() <= kConfigFormatVersion,
              src << ": format_version " << v.get<int64_t>() << " is newer than this qkv reads ("
                  << kConfigFormatVersion << "); upgrade qkv");
  }
  read_field(j, "architecture", c.architecture, src);
  QKV_CHECK(c.architecture == kEncoderDecoder || c.architecture == kDecoderOnly || c.architecture == kEncoderOnly,
            src << ": architecture \"" << c.architecture
                << "\" is not supported by this qkv (it builds \"encoder-decoder\", \"decoder-only\" and "
                   "\"encoder-only\" models)");
  if (c.architecture == kDecoderOnly) c = decoder_only_defaults();
  if (c.architecture == kEncoderOnly) c = encoder_only_defaults();
  // Fields of another family are refused by name rather than ignored.
  for (const std::string& key : foreign_fields(c)) {
    if (!j.contains(key)) continue;
    std::string why;
    if (key == "norm") why = c.decoder_only() ? " (decoder-only models are always pre-LN)" : " (encoder-only models are post-LN)";
    if (key == "share_embeddings") why = " (it has one token embedding)";
    if (c.encoder_only() && (key == "bos_id" || key == "eos_id")) why = " (it names its special tokens cls_id and sep_id)";
    throw Error(src + ": field \"" + key + "\" does not apply to a" + (c.encoder_only() || c.encoder_decoder() ? "n " : " ") +
                c.architecture + " model" + why);
  }
}
}  // namespace

namespace {
void read_encoder_only_fields(const json& j, TransformerConfig& c, const std::string& src) {
  read_id(j, "cls_id", c.cls_id, src);
  read_id(j, "sep_id", c.sep_id, src);
  int64_t mask = c.mask_id;
  read_integer_allowing_none(j, "mask_id", kMaxVocabSize - 1, mask, src);
  c.mask_id = static_cast<int32_t>(mask);
  read_integer(j, "type_vocab_size", 0, kMaxTypeVocabSize, c.type_vocab_size, src);
  read_field(j, "pooler", c.pooler, src);
  read_field(j, "mlm_head", c.mlm_head, src);
  read_field(j, "labels", c.labels, src);
}
}  // namespace

TransformerConfig config_from_json(const std::string& text, const std::string& src) {
  const json j = parse_refusing_duplicate_keys(text, src);
  QKV_CHECK(j.is_object(), src << ": expected a JSON object");
  static const std::set<std::string> known = {
      "src_vocab_size", "tgt_vocab_size", "d_model", "bos_id", "eos_id",        "num_heads",        "num_layers",
      "d_ff",           "max_seq_length", "dropout",        "pad_id",           "norm",
      "activation",     "layer_norm_eps", "scale_embeddings", "tie_output_embedding", "mask_fill",
      "attention_dropout", "layer_norm", "ffn_dropout", "format_version", "architecture", "vocab_size", "positions",
      "type_vocab_size", "pooler", "mlm_head", "labels", "cls_id", "sep_id", "mask_id", "share_embeddings",
      "target_query_mask", "relative_attention_num_buckets", "relative_attention_max_distance",
      "scale_attention_scores", "linear_bias", "gated_feed_forward", "scale_decoder_output", "head_dim",
      "embedding_norm", "forced_bos_id"};
  for (auto it = j.begin(); it != j.end(); ++it)
    QKV_CHECK(known.count(it.key()), src << ": unknown field \"" << it.key() << "\"");
  TransformerConfig c;
  read_format_and_architecture(j, c, src);
  for (const SizeField& f : kSizeFields) read_integer(j, f.name, 1, f.max, c.*f.member, src);
  if (c.single_vocabulary()) {
    read_integer(j, "vocab_size", 1, kMaxVocabSize, c.tgt_vocab_size, src);
    c.src_vocab_size = c.tgt_vocab_size;
    int64_t pad = c.pad_id;
    read_integer_allowing_none(j, "pad_id", kMaxVocabSize - 1, pad, src);
    c.pad_id = static_cast<int32_t>(pad);
    if (c.encoder_only()) read_encoder_only_fields(j, c, src);
  } else {
    read_id(j, "pad_id", c.pad_id, src);
  }
  read_id(j, "bos_id", c.bos_id, src);
  read_id(j, "eos_id", c.eos_id, src);
  read_float(j, "dropout", c.dropout, src);
  std::string norm = c.norm == NormPosition::Post ? "post" : "pre";
  read_field(j, "norm", norm, src);
  read_field(j, "positions", c.positions, src);
  QKV_CHECK(norm == "post" || norm == "pre", src << ": field \"norm\" must be \"post\" or \"pre\", got \"" << norm << "\"");
  c.norm = norm == "post" ? NormPosition::Post : NormPosition::Pre;
  read_field(j, "activation", c.activation, src);
  read_float(j, "layer_norm_eps", c.layer_norm_eps, src);
  read_field(j, "layer_norm", c.layer_norm, src);
  read_float(j, "ffn_dropout", c.ffn_dropout, src);
  read_field(j, "scale_embeddings", c.scale_embeddings, src);
  read_field(j, "tie_output_embedding", c.tie_output_embedding, src);
  read_field(j, "share_embeddings", c.share_embeddings, src);
  read_field(j, "target_query_mask", c.target_query_mask, src);
  read_integer(j, "relative_attention_num_buckets", 1, 1024, c.relative_attention_num_buckets, src);
  read_integer(j, "relative_attention_max_distance", 1, kMaxSeqLength, c.relative_attention_max_distance, src);
  QKV_CHECK(c.positions == "relative" || (!j.contains("relative_attention_num_buckets") &&
                                          !j.contains("relative_attention_max_distance")),
            src << ": relative_attention_num_buckets and relative_attention_max_distance apply to positions "
                   "\"relative\" only");
  read_field(j, "scale_attention_scores", c.scale_attention_scores, src);
  read_field(j, "linear_bias", c.linear_bias, src);
  read_field(j, "gated_feed_forward", c.gated_feed_forward, src);
  read_field(j, "scale_decoder_output", c.scale_decoder_output, src);
  read_integer(j, "head_dim", 0, kMaxWidth, c.head_dim, src);
  read_field(j, "embedding_norm", c.embedding_norm, src);
  read_id(j, "forced_bos_id", c.forced_bos_id, src);
  read_field(j, "mask_fill", c.mask_fill, src);
  read_float(j, "attention_dropout", c.attention_dropout, src);
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(src + ": " + e.what());
  }
  return c;
}

TransformerConfig load_config(const std::string& path) {
  std::ifstream in(path);
  QKV_CHECK(in, path << ": cannot open config file");
  std::stringstream ss;
  ss << in.rdbuf();
  return config_from_json(ss.str(), path);
}

void save_config(const std::string& path, const TransformerConfig& config) {
  io::write_file_atomic(path, config_to_json(config));
}

}  // namespace qkv::models
