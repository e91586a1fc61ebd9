#include "qkv/cli/commands.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string_view>
#include <vector>

#include "qkv/cli/quiet.h"
#include "qkv/core/error.h"

namespace qkv::cli {
namespace {
std::vector<std::pair<CLI::App*, Runner>>& registry() {
  static std::vector<std::pair<CLI::App*, Runner>> r;
  return r;
}

// Parses a plain decimal integer ([+-]digits) into T; anything else, or a value outside T, is an
// error message. On success `text` becomes the canonical decimal form, which CLI11's base-0
// conversion reads as the same number (no octal "010").
template <class T>
std::string canonical_integer(std::string& text) {
  std::string_view digits = text;
  const bool negative = !digits.empty() && digits[0] == '-';
  if (!digits.empty() && (digits[0] == '+' || digits[0] == '-')) digits.remove_prefix(1);
  const bool all_digits =
      !digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!all_digits) return "expected an integer, got '" + text + "'";
  if (negative && std::is_unsigned_v<T>) return "must be a non-negative integer, got " + text;
  const std::string signed_digits = (negative ? "-" : "") + std::string(digits);
  T value{};
  const auto [end, ec] = std::from_chars(signed_digits.data(), signed_digits.data() + signed_digits.size(), value);
  if (ec != std::errc() || end != signed_digits.data() + signed_digits.size())
    return "out of range, got " + text + " (the limit is " +
           std::to_string(negative ? std::numeric_limits<T>::min() : std::numeric_limits<T>::max()) + ")";
  text = std::to_string(value);
  return {};
}

// Finite numbers that fit a float (the narrowest floating type of any flag).
std::string finite_number(const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(begin, &end);
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])) || end != begin + text.size())
    return "expected a number, got '" + text + "'";
  if (!std::isfinite(value)) return "must be a finite number, got '" + text + "'";
  if (std::fabs(value) > std::numeric_limits<float>::max()) return "out of range, got " + text;
  return {};
}

// "INT:in [1, 1024]" -> "INT": get_type_name() appends the validators' descriptions.
std::string base_type_name(const CLI::Option& option) {
  const std::string full = option.get_type_name();
  return full.substr(0, full.find(':'));
}
}  // namespace

void guard_numeric_options(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    if (option->get_items_expected_max() == 0) continue;  // a flag: takes no value
    const std::string type = base_type_name(*option);
    // transform() puts the guard in front of the option's own checks, so they see canonical text.
    if (type == "INT")
      option->transform(CLI::Validator([](std::string& s) { return canonical_integer<int64_t>(s); }, ""));
    else if (type == "UINT")
      option->transform(CLI::Validator([](std::string& s) { return canonical_integer<uint64_t>(s); }, ""));
    else if (type == "FLOAT")
      option->transform(CLI::Validator([](std::string& s) { return finite_number(s); }, ""));
  }
  for (CLI::App* sub : app.get_subcommands(std::function<bool(CLI::App*)>{})) guard_numeric_options(*sub);
}

void register_commands(CLI::App& app) {
  // A single-value flag given twice is an error, not "the last one wins"; subcommands copy this
  // default when they are created, so it must come first.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::Throw);
  auto add = [&](const char* name, const char* help, Runner (*make)(CLI::App&)) {
    CLI::App* sub = app.add_subcommand(name, help);
    registry().emplace_back(sub, make(*sub));
  };
  add("init", "Write a freshly initialised checkpoint from a config", add_init_command);
  add("train", "Train a model (--synthetic: seed 000's example or a copy task)", add_train_command);
  add("translate", "Translate text (or ids) with greedy or beam search", add_translate_command);
  add("generate", "Continue text (or ids) with a decoder-only model, greedy or sampled", add_generate_command);
  add("score", "Teacher-forced cross-entropy of id pairs (or a language model's --text) under a checkpoint", add_score_command);
  add("bleu", "Corpus BLEU of stdin against reference files (sacreBLEU 2.x defaults)", add_bleu_command);
  add("average", "Average the weights of several checkpoints of one run", add_average_command);
  add("info", "Show what a checkpoint holds (architecture, sizes, parameters, training step, files)", add_info_command);
  add("import", "Convert a Hugging Face GPT-2, BERT, Marian or T5 directory into a checkpoint (--from hf)", add_import_command);
  add("export", "Write a checkpoint as a Hugging Face directory: GPT-2, Marian or T5 (--to hf)", add_export_command);
  add("embed", "Sentence embeddings of text lines with an encoder-only model (JSON lines or .npy)", add_embed_command);
  add("similar", "Semantic search: the corpus lines closest to a query (encoder-only model, cached embeddings)",
      add_similar_command);
  add("classify", "Label text lines with an encoder-only classifier (label and probability per line)",
      add_classify_command);
  add("chrf", "Corpus chrF of stdin against reference files (sacreBLEU 2.x defaults)", add_chrf_command);
  add("tokenize", "Token ids (or --pieces) of text, one line per line, special tokens added", add_tokenize_command);
  add("plot", "Draw training runs' loss, dev score, learning rate and throughput, a classifier's confusion matrix "
      "and per-label F1 (PNG; needs python3-matplotlib)",
      add_plot_command);
#ifdef QKV_SERVE
  add("serve", "Serve models over HTTP (OpenAI-style completions and embeddings, translations, classifications)",
      add_serve_command);
#else
  add("serve", "Serve models over HTTP (not in this build: it needs cpp-httplib)", [](CLI::App& sub) -> Runner {
    sub.allow_extras();
    return [] {
      throw Error("qkv serve: this qkv was built without cpp-httplib; apt-get install libcpp-httplib-dev and rebuild");
      return 1;
    };
  });
#endif
  add_missing_quiet_flags(app);
  guard_numeric_options(app);
}

int run_selected(CLI::App& app) {
  for (auto& [sub, run] : registry())
    if (app.got_subcommand(sub)) return run();
  return 0;
}

void check_checkpoint_argument(const std::string& dir) {
  std::error_code ec;
  QKV_CHECK(!std::filesystem::exists(dir, ec) || std::filesystem::is_directory(dir, ec),
            dir << ": not a directory (a checkpoint is a directory with config.json and model.safetensors)");
}

}  // namespace qkv::cli
