// qkv bleu REF [REF...] [-i HYP] [--json] [-w N] < HYP
// qkv chrf REF [REF...] [-i HYP] [--json] [-w N] [--eps-smoothing] < HYP
//
// Corpus BLEU / chrF with sacreBLEU 2.x's defaults, in the shape of its command line (`sacrebleu REF
// [REF...] < HYP`): one segment a line, one file per reference stream, all as long as the hypotheses.
// Prints sacreBLEU's score line (str(score): "BLEU = 48.53 82.4/50.0/... (BP = ...)", "chrF2 = 59.73")
// or, with --json, what `sacrebleu -f json` prints. --width sets the score's decimals (sacreBLEU's
// -w; 2 here as in str(score), `sacrebleu` itself defaults to 1).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "qkv/cli/commands.h"
#include "qkv/cli/validators.h"
#include "qkv/core/error.h"
#include "qkv/eval/bleu.h"
#include "qkv/eval/chrf.h"
#include "qkv/eval/tokenizer_13a.h"

namespace qkv::cli {

namespace {
struct MetricOptions {
  std::vector<std::string> refs;
  std::string input;  // empty: standard input
  bool json = false;
  int width = 2;
  bool eps_smoothing = false;
};

struct Corpus {
  std::vector<std::string> hyps;
  std::vector<std::vector<std::string>> refs;
};

void add_common_options(CLI::App& app, MetricOptions& o) {
  app.add_option("refs", o.refs, "Reference files, one segment a line (one file per reference stream)")->required();
  app.add_option("-i,--input", o.input, "Hypotheses file (default: standard input), one segment a line");
  app.add_flag("--json", o.json, "Print sacreBLEU's JSON (`sacrebleu -f json`) instead of the score line");
  app.add_option("-w,--width", o.width, "Decimals of the score (sacreBLEU's -w)")
      ->check(FiniteRange(0, 20))
      ->capture_default_str();
}

std::string read_stdin() {
  std::string text;
  char buf[1 << 16];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) text.append(buf, n);
  QKV_CHECK(!std::ferror(stdin), "cannot read the hypotheses from standard input");
  return text;
}

// Every file is checked before standard input is read, so a typo fails at once instead of waiting
// for input.
Corpus read_corpus(const MetricOptions& o) {
  namespace fs = std::filesystem;
  for (const std::string& r : o.refs) QKV_CHECK(fs::exists(r), "reference file " << r << " does not exist");
  if (!o.input.empty()) QKV_CHECK(fs::exists(o.input), "hypothesis file " << o.input << " does not exist");
  Corpus c;
  for (const std::string& r : o.refs) c.refs.push_back(eval::read_text_lines(r));
  const std::string hyp_name = o.input.empty() ? "<stdin>" : o.input;
  c.hyps = o.input.empty() ? eval::split_text_lines(read_stdin(), hyp_name) : eval::read_text_lines(o.input);
  for (std::size_t k = 0; k < o.refs.size(); ++k)
    QKV_CHECK(c.refs[k].size() == c.hyps.size(), "the hypotheses (" << hyp_name << ") have " << c.hyps.size()
                                                     << " lines but reference " << o.refs[k] << " has "
                                                     << c.refs[k].size() << " lines");
  return c;
}
}  // namespace

Runner add_bleu_command(CLI::App& app) {
  auto o = std::make_shared<MetricOptions>();
  add_common_options(app, *o);
  return [o]() {
    const Corpus c = read_corpus(*o);
    const eval::BleuScore s = eval::corpus_bleu(c.hyps, c.refs);
    const std::string out = o->json ? s.format_json(static_cast<int>(c.refs.size()), o->width) : s.format(o->width);
    std::printf("%s\n", out.c_str());
    return 0;
  };
}

Runner add_chrf_command(CLI::App& app) {
  auto o = std::make_shared<MetricOptions>();
  add_common_options(app, *o);
  app.add_flag("--eps-smoothing", o->eps_smoothing,
               "chrF++.py-style epsilon smoothing (sacreBLEU's --chrf-eps-smoothing; default: effective order)");
  return [o]() {
    const Corpus c = read_corpus(*o);
    const eval::ChrfScore s = eval::corpus_chrf(c.hyps, c.refs, o->eps_smoothing);
    const std::string out = o->json ? s.format_json(static_cast<int>(c.refs.size()), o->width) : s.format(o->width);
    std::printf("%s\n", out.c_str());
    return 0;
  };
}

}  // namespace qkv::cli
