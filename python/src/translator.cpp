// qkv.Translator over api::Translator.
#include <optional>

#include "model.h"
#include "qkv/api/translator.h"

namespace qkv::python {

namespace {
// The search's keywords beyond the beam (transformers' names): sampling and the token rules.
struct TranslationExtras {
  bool do_sample = false;
  double temperature = 1.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;
  int64_t min_length = 0;
  float repetition_penalty = 1.0f;
  int64_t no_repeat_ngram_size = 0;
};

// beam_size None: 4, or 1 with do_sample (which draws one translation a sentence).
int beam_or_default(const std::optional<int>& beam, bool do_sample) { return beam ? *beam : do_sample ? 1 : 4; }

void apply_extras(const TranslationExtras& e, decoding::SearchOptions& o) {
  o.do_sample = e.do_sample;
  o.sampling.temperature = e.temperature;
  o.sampling.top_k = e.top_k;
  o.sampling.top_p = e.top_p;
  o.seed = e.seed;
  o.min_length = e.min_length;
  o.constraints.repetition_penalty = e.repetition_penalty;
  o.constraints.no_repeat_ngram_size = e.no_repeat_ngram_size;
}

api::TranslationOptions translation_options(int beam, int n_best, float length_penalty, float max_length_ratio,
                                            int64_t max_length_offset, int64_t batch_size, bool truncate,
                                            bool attention = false, const std::string& source_lang = "",
                                            const std::string& target_lang = "") {
  api::TranslationOptions o;
  o.source_lang = source_lang;
  o.target_lang = target_lang;
  o.search.attention = attention;
  o.search.beam_size = beam;
  o.search.n_best = n_best;
  o.search.length_penalty = length_penalty;
  o.search.max_length_ratio = max_length_ratio;
  o.search.max_length_offset = max_length_offset;
  o.batch_size = batch_size;
  o.truncate = truncate;
  return o;
}

py::list tensors_to_numpy(const std::vector<Tensor>& tensors) {
  py::list out;
  for (const Tensor& t : tensors) out.append(tensor_to_numpy(t));
  return out;
}

// n_best 1: one string (or id list) per input; more, or with attention: a list of Translation per input.
py::list results_to_python(const std::vector<std::vector<api::Translation>>& results, int n_best, bool ids,
                           bool attention = false) {
  py::list out;
  for (const auto& hyps : results) {
    if (n_best == 1 && !attention) {
      if (hyps.empty())
        out.append(ids ? py::object(py::list()) : py::object(py::str("")));
      else
        out.append(ids ? py::cast(hyps[0].tokens) : py::cast(hyps[0].text));
      continue;
    }
    out.append(py::cast(hyps));
  }
  return out;
}
// One source's hypotheses, best first, whatever the options: what translate_batch returns
// (CTranslate2's TranslationResult).
struct TranslationResult {
  std::vector<api::Translation> translations;
};

// A hypothesis' attention weights as Python sees them, or None when none were asked for: the keys
// are the .npz arrays' of --attention-out (cli/attention_out.h), so one name serves both; the
// dict (qkv._renamed.AttentionWeights) still answers the old keys for one release.
py::object attention_of(const api::Translation& t) {
  if (t.attention.empty()) return py::none();
  py::dict d;
  d["encoder_self_attention"] = tensors_to_numpy(t.attention.encoder_self);
  d["decoder_self_attention"] = tensors_to_numpy(t.attention.decoder_self);
  d["cross_attention"] = tensors_to_numpy(t.attention.cross);
  return py::module_::import("qkv._renamed").attr("AttentionWeights")(d);
}

template <class Field>
auto each(const TranslationResult& r, Field field) {
  std::vector<std::decay_t<decltype(field(r.translations[0]))>> out;
  for (const api::Translation& t : r.translations) out.push_back(field(t));
  return out;
}

std::vector<TranslationResult> typed_results(std::vector<std::vector<api::Translation>>&& results) {
  std::vector<TranslationResult> out;
  out.reserve(results.size());
  for (auto& hyps : results) out.push_back({std::move(hyps)});
  return out;
}

// translate()'s old forms (a list of Translation lists with n_best > 1 or attention) stay one release.
void warn_untyped_results(int n_best, bool attention) {
  if (n_best > 1 || attention)
    if (PyErr_WarnEx(PyExc_DeprecationWarning,
                     "translate(n_best=..., attention=...) returning lists of Translation is deprecated: use "
                     "translate_batch(texts, num_hypotheses=..., return_attention=...), which always returns "
                     "TranslationResult objects",
                     1) < 0)
      throw py::error_already_set();
}

void bind_translation_result(py::module_& m) {
  py::class_<TranslationResult>(m, "TranslationResult",
                                "One source's hypotheses, best first (translate_batch); indexing gives a Translation.")
      .def_property_readonly(
          "hypotheses",
          [](const TranslationResult& r) { return each(r, [](const api::Translation& t) { return t.text; }); },
          "The hypotheses' texts, best first.")
      .def_property_readonly(
          "tokens",
          [](const TranslationResult& r) { return each(r, [](const api::Translation& t) { return t.tokens; }); },
          "Their target ids, without BOS and EOS.")
      .def_property_readonly(
          "scores",
          [](const TranslationResult& r) { return each(r, [](const api::Translation& t) { return t.score; }); },
          "log_prob / length^length_penalty, the ranking.")
      .def_property_readonly(
          "log_probs",
          [](const TranslationResult& r) { return each(r, [](const api::Translation& t) { return t.log_prob; }); },
          "Sums of log p over the tokens and EOS.")
      .def_property_readonly(
          "attention",
          [](const TranslationResult& r) -> py::object {
            if (r.translations.empty() || r.translations[0].attention.empty()) return py::none();
            py::list out;
            for (const api::Translation& t : r.translations) out.append(attention_of(t));
            return out;
          },
          "With return_attention=True: each hypothesis' weights (Translation.attention); else None.")
      .def("__len__", [](const TranslationResult& r) { return r.translations.size(); })
      .def("__getitem__",
           [](const TranslationResult& r, int64_t i) {
             const int64_t n = static_cast<int64_t>(r.translations.size());
             if (i < 0) i += n;
             if (i < 0 || i >= n) throw py::index_error("hypothesis index out of range");
             return r.translations[static_cast<size_t>(i)];
           })
      .def(
          "__iter__",
          [](const TranslationResult& r) { return py::make_iterator(r.translations.begin(), r.translations.end()); },
          py::keep_alive<0, 1>())
      .def("__repr__", [](const TranslationResult& r) {
        std::string s = "TranslationResult(hypotheses=[";
        for (size_t i = 0; i < r.translations.size(); ++i)
          s += (i ? ", " : "") + py::repr(py::str(r.translations[i].text)).cast<std::string>();
        s += "], scores=[";
        for (size_t i = 0; i < r.translations.size(); ++i)
          s += (i ? ", " : "") + std::to_string(r.translations[i].score);
        return s + "])";
      });
}
}  // namespace

void bind_translator(py::module_& m) {
  bind_translation_result(m);
  py::class_<api::Translation>(m, "Translation", "One hypothesis: text, token ids, log-probability and score.")
      .def_readonly("text", &api::Translation::text)
      .def_readonly("tokens", &api::Translation::tokens, "Target ids without BOS and EOS.")
      .def_readonly("log_prob", &api::Translation::log_prob, "Sum of log p over the tokens and EOS.")
      .def_readonly("score", &api::Translation::score, "log_prob / length^length_penalty (the ranking).")
      .def_property_readonly(
          "attention", &attention_of,
          "With translate(..., attention=True): {'encoder_self_attention': [(H, S, S) per layer], "
          "'decoder_self_attention': [(H, T, T)], 'cross_attention': [(H, T, S)]} as float32 arrays (the names of "
          "--attention-out's .npz arrays; the old keys 'cross', 'decoder_self', 'encoder_self' still index it, "
          "deprecated); T = len(tokens) + 1 (the positions that chose the tokens and "
          "EOS). Label them with Translator.source_pieces and target_pieces; draw with qkv.plot.attention.")
      .def("__repr__", [](const api::Translation& t) {
        return "Translation(text=" + py::repr(py::str(t.text)).cast<std::string>() +
               ", log_prob=" + std::to_string(t.log_prob) + ", score=" + std::to_string(t.score) + ")";
      });

  py::class_<api::Translator>(m, "Translator",
                              "An encoder-decoder checkpoint with its tokenizers (qkv's SentencePiece models, or an "
                              "imported Marian model's): translates batches of sentences with beam or greedy search, "
                              "as `qkv translate`.")
      .def(py::init([](const std::string& checkpoint, const std::string& compute_type, const std::string& device) {
             const nn::ComputeType type = compute_type_from_name(compute_type);
             const Device on = parse_device(device);
             py::gil_scoped_release release;
             return std::make_unique<api::Translator>(checkpoint, type, on);
           }),
           py::arg("checkpoint"), py::arg("compute_type") = "float32", py::arg("device") = "cpu",
           "compute_type: how the model computes, chosen once here: 'float32' (default), 'int8', 'bf16' or "
           "'int8_bf16' (as --compute-type). device: 'cpu' (default), 'cuda' or 'cuda:N' (as --device).")
      .def_property_readonly(
          "compute_type", [](const api::Translator& t) { return nn::compute_type_name(t.compute_type()); })
      .def_property_readonly("device", [](const api::Translator& t) { return t.device().name(); })
      .def(
          "translate",
          [](api::Translator& t, const std::vector<std::string>& texts, std::optional<int> beam, int n_best, float length_penalty,
             float max_length_ratio, int64_t max_length_offset, int64_t batch_size, bool truncate, bool attention,
             const py::object& quantize, const std::string& source_lang, const std::string& target_lang, bool do_sample, double temperature, int64_t top_k, double top_p, uint64_t seed, int64_t min_length, float repetition_penalty, int64_t no_repeat_ngram_size) {
            auto o = translation_options(beam_or_default(beam, do_sample), n_best, length_penalty, max_length_ratio,
                                         max_length_offset, batch_size, truncate, attention, source_lang, target_lang);
            apply_extras(TranslationExtras{do_sample, temperature, top_k, top_p, seed, min_length, repetition_penalty, no_repeat_ngram_size}, o.search);
            warn_untyped_results(n_best, attention);
            apply_quantize_argument(t.model(), quantize);
            std::vector<std::vector<api::Translation>> r;
            {
              py::gil_scoped_release release;
              r = t.translate(texts, o);
            }
            return results_to_python(r, n_best, false, attention);
          },
          py::arg("texts"), py::arg("beam_size") = py::none(), py::arg("num_hypotheses") = 1, py::arg("length_penalty") = 1.0f,
          py::arg("max_length_ratio") = 2.0f, py::arg("max_length_offset") = 10, py::arg("batch_size") = 32,
          py::arg("truncate") = true, py::arg("attention") = false, py::arg("quantize") = py::none(),
          py::arg("source_lang") = "", py::arg("target_lang") = "",
          py::arg("do_sample") = false, py::arg("temperature") = 1.0, py::arg("top_k") = 0, py::arg("top_p") = 1.0,
          py::arg("seed") = 0, py::arg("min_length") = 0, py::arg("repetition_penalty") = 1.0f,
          py::arg("no_repeat_ngram_size") = 0,
          "Translates each text. num_hypotheses 1: a list of strings; num_hypotheses > 1 or attention=True: a list of "
          "lists of Translation, best first (with attention=True each carries its attention weights). beam_size 1 is greedy "
          "search (beam_size None: 4, or 1 with do_sample). do_sample=True draws each token as Generator.generate "
          "does (temperature, top_k, top_p; text i keyed by (seed, i)). min_length, repetition_penalty, "
          "no_repeat_ngram_size: transformers' token rules (as --min-length ...). "
          "A source over the model's max_seq_length is cut (truncate=False: ValueError naming it). "
          "source_lang / target_lang: a multilingual model's languages as its tokenizer names them (M2M100 'fr', "
          "NLLB 'fra_Latn', mBART 'fr_XX'; as --source-lang / --target-lang). "
          "quantize= is deprecated: choose compute_type= when loading.")
      .def(
          "translate_ids",
          [](api::Translator& t, const py::object& sources, std::optional<int> beam, int n_best, float length_penalty,
             float max_length_ratio, int64_t max_length_offset, int64_t batch_size, const py::object& quantize, bool do_sample, double temperature, int64_t top_k, double top_p, uint64_t seed, int64_t min_length, float repetition_penalty, int64_t no_repeat_ngram_size) {
            auto o = translation_options(beam_or_default(beam, do_sample), n_best, length_penalty, max_length_ratio,
                                         max_length_offset, batch_size, true, false);
            apply_extras(TranslationExtras{do_sample, temperature, top_k, top_p, seed, min_length, repetition_penalty, no_repeat_ngram_size}, o.search);
            warn_untyped_results(n_best, false);
            apply_quantize_argument(t.model(), quantize);
            const auto ids = to_id_lines(sources, "source");
            std::vector<std::vector<api::Translation>> r;
            {
              py::gil_scoped_release release;
              r = t.translate_ids(ids, o);
            }
            return results_to_python(r, n_best, true);
          },
          py::arg("sources"), py::arg("beam_size") = py::none(), py::arg("num_hypotheses") = 1, py::arg("length_penalty") = 1.0f,
          py::arg("max_length_ratio") = 2.0f, py::arg("max_length_offset") = 10, py::arg("batch_size") = 32,
          py::arg("quantize") = py::none(),
          py::arg("do_sample") = false, py::arg("temperature") = 1.0, py::arg("top_k") = 0, py::arg("top_p") = 1.0,
          py::arg("seed") = 0, py::arg("min_length") = 0, py::arg("repetition_penalty") = 1.0f,
          py::arg("no_repeat_ngram_size") = 0,
          "translate() on token ids: lists of source ids in, lists of target ids out (num_hypotheses 1) or Translation lists.")
      .def(
          "translate_batch",
          [](api::Translator& t, const std::vector<std::string>& texts, int beam_size, int num_hypotheses,
             float length_penalty, float max_length_ratio, int64_t max_length_offset, int64_t max_batch_size,
             bool truncate, bool return_attention, const std::string& source_lang, const std::string& target_lang) {
            const auto o = translation_options(beam_size, num_hypotheses, length_penalty, max_length_ratio,
                                               max_length_offset, max_batch_size, truncate, return_attention,
                                               source_lang, target_lang);
            std::vector<std::vector<api::Translation>> r;
            {
              py::gil_scoped_release release;
              r = t.translate(texts, o);
            }
            return typed_results(std::move(r));
          },
          py::arg("texts"), py::arg("beam_size") = 4, py::arg("num_hypotheses") = 1, py::arg("length_penalty") = 1.0f,
          py::arg("max_length_ratio") = 2.0f, py::arg("max_length_offset") = 10, py::arg("max_batch_size") = 32,
          py::arg("truncate") = true, py::arg("return_attention") = false, py::arg("source_lang") = "",
          py::arg("target_lang") = "",
          "Translates each text: a list of TranslationResult (hypotheses, tokens, scores, log_probs, attention), one "
          "per text, whatever the options (CTranslate2's names). beam_size 1 is greedy search; num_hypotheses <= "
          "beam_size. A source over the model's max_seq_length is cut (truncate=False: ValueError naming it). "
          "source_lang / target_lang: a multilingual model's languages (as translate()).")
      .def(
          "translate_ids_batch",
          [](api::Translator& t, const py::object& sources, int beam_size, int num_hypotheses, float length_penalty,
             float max_length_ratio, int64_t max_length_offset, int64_t max_batch_size) {
            const auto o = translation_options(beam_size, num_hypotheses, length_penalty, max_length_ratio,
                                               max_length_offset, max_batch_size, true, false);
            const auto ids = to_id_lines(sources, "source");
            std::vector<std::vector<api::Translation>> r;
            {
              py::gil_scoped_release release;
              r = t.translate_ids(ids, o);
            }
            return typed_results(std::move(r));
          },
          py::arg("sources"), py::arg("beam_size") = 4, py::arg("num_hypotheses") = 1, py::arg("length_penalty") = 1.0f,
          py::arg("max_length_ratio") = 2.0f, py::arg("max_length_offset") = 10, py::arg("max_batch_size") = 32,
          "translate_batch() on token ids: TranslationResult objects whose tokens are the target ids.")
      .def_property_readonly(
          "model", [](py::object self) { return PyModel{&self.cast<api::Translator&>().model(), nullptr, self}; },
          "The model (weights as NumPy views).")
      .def(
          "source_pieces",
          [](const api::Translator& t, const std::string& text) {
            std::vector<std::string> pieces;
            for (const int32_t id : t.encode_source(text, api::TranslationOptions{}, "text")) pieces.push_back(t.source_piece(id));
            return pieces;
          },
          py::arg("text"), "The source pieces a text is read as (the keys of cross-attention).")
      .def(
          "target_pieces",
          [](const api::Translator& t, const std::vector<int32_t>& tokens, bool eos) {
            std::vector<std::string> pieces;
            for (const int32_t id : tokens) pieces.push_back(t.target_piece(id));
            if (eos) pieces.push_back(t.target_piece(static_cast<int32_t>(t.config().eos_id)));
            return pieces;
          },
          py::arg("tokens"), py::arg("eos") = true,
          "The target pieces of a translation's tokens, with EOS (the queries of its attention).")
      .def_property_readonly("has_tokenizers", &api::Translator::has_tokenizers);
}

}  // namespace qkv::python
