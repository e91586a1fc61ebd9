// qkv.Generator over api::Generator, with stream=True an iterator of text pieces.
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>

#include "model.h"
#include "qkv/api/generator.h"
#include "qkv/core/threads.h"

namespace qkv::python {

namespace {
api::GenerationOptions generation_options(int64_t max_new_tokens, bool sample, double temperature, int64_t top_k,
                                          double top_p, uint64_t seed, bool truncate_prompt, int64_t batch_size) {
  api::GenerationOptions o;
  o.decode.max_new_tokens = max_new_tokens;
  o.decode.sample = sample;
  o.decode.sampling.temperature = temperature;
  o.decode.sampling.top_k = top_k;
  o.decode.sampling.top_p = top_p;
  o.decode.seed = seed;
  o.decode.long_prompt = truncate_prompt ? decoding::LongPrompt::TruncateLeft : decoding::LongPrompt::Refuse;
  o.batch_size = batch_size;
  QKV_CHECK(max_new_tokens >= 1, "max_new_tokens must be at least 1, got " << max_new_tokens);
  decoding::validate_sampling_options(o.decode.sampling);
  return o;
}

// The search's keywords beyond sampling (transformers' names): beam search and the token rules.
struct GenerationExtras {
  int beam_size = 1;
  int num_hypotheses = 1;
  float length_penalty = 1.0f;
  int64_t min_new_tokens = 0;
  float repetition_penalty = 1.0f;
  int64_t no_repeat_ngram_size = 0;
};

// The n-best's own errors name the Python keywords (the library's would name the CLI flags).
void check_num_hypotheses(const GenerationExtras& e, bool sample) {
  const std::string n = "num_hypotheses=" + std::to_string(e.num_hypotheses);
  if (e.num_hypotheses < 1) throw py::value_error(n + ": must be at least 1");
  if (e.num_hypotheses > 1 && sample)
    throw py::value_error(n + ": do_sample=True draws one continuation a prompt; n-best needs beam search");
  if (e.num_hypotheses > e.beam_size)
    throw py::value_error(n + ": at most beam_size (" + std::to_string(e.beam_size) + ")");
}

api::GenerationOptions with_extras(api::GenerationOptions o, const GenerationExtras& e) {
  check_num_hypotheses(e, o.decode.sample);
  o.decode.beam_size = e.beam_size;
  o.decode.num_hypotheses = e.num_hypotheses;
  o.decode.length_penalty = e.length_penalty;
  o.decode.min_new_tokens = e.min_new_tokens;
  o.decode.constraints.repetition_penalty = e.repetition_penalty;
  o.decode.constraints.no_repeat_ngram_size = e.no_repeat_ngram_size;
  decoding::validate_generate_options(o.decode, std::numeric_limits<int64_t>::max());
  return o;
}

// Pieces of one prompt's continuation, produced by a worker thread while Python iterates; the GIL
// is released while the iterator waits. Dropping the iterator early stops generation at the next
// token.
class PieceStream {
 public:
  PieceStream(py::object owner, const api::Generator& g, std::vector<int32_t> prompt, api::GenerationOptions o)
      : owner_(std::move(owner)) {
    const int threads = num_threads();  // OpenMP's setting is per thread: hand it on
    worker_ = std::thread([this, &g, prompt = std::move(prompt), o, threads] {
      set_num_threads(threads);
      try {
        api::TextStream text(*g.tokenizer());
        g.generate_streaming(prompt, o, [&](int32_t token) {
          if (cancelled_) throw Cancelled{};
          push(text.push(token));
        });
        push(text.finish());
      } catch (const Cancelled&) {
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mutex_);
        error_ = std::current_exception();
      }
      const std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
      ready_.notify_all();
    });
  }
  ~PieceStream() {
    cancelled_ = true;
    if (worker_.joinable()) {
      py::gil_scoped_release release;
      worker_.join();
    }
  }

  std::string next() {
    std::unique_lock<std::mutex> lock(mutex_);
    {
      py::gil_scoped_release release;
      ready_.wait(lock, [&] { return !pieces_.empty() || done_; });
    }
    if (!pieces_.empty()) {
      std::string piece = std::move(pieces_.front());
      pieces_.pop_front();
      return piece;
    }
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    throw py::stop_iteration();
  }

 private:
  struct Cancelled {};
  void push(std::string piece) {
    if (piece.empty()) return;
    const std::lock_guard<std::mutex> lock(mutex_);
    pieces_.push_back(std::move(piece));
    ready_.notify_all();
  }
  py::object owner_;  // keeps the Generator alive
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::string> pieces_;
  bool done_ = false;
  std::exception_ptr error_;
  std::atomic<bool> cancelled_{false};
  std::thread worker_;
};
// Checks prompts (ids) against the context as `o` says; an error names "prompt N" and says how to
// turn truncation on.
void check_prompt_ids(const api::Generator& g, const std::vector<std::vector<int32_t>>& ids,
                      const api::GenerationOptions& o) {
  g.check_prompts(ids, o, [](size_t i) { return "prompt " + std::to_string(i + 1); },
                  "truncate_prompt=True keeps its last tokens");
}

// Each text prompt's ids (bos_id first), checked as above.
std::vector<std::vector<int32_t>> checked_prompt_ids(const api::Generator& g, const std::vector<std::string>& prompts,
                                                     const api::GenerationOptions& o) {
  std::vector<std::vector<int32_t>> ids;
  for (const std::string& p : prompts) ids.push_back(g.encode_prompt(p));
  check_prompt_ids(g, ids, o);
  return ids;
}

// A stream of one prompt's continuation (generate(stream=True) and generate_tokens), after the
// prompt's check; `self` is the Generator, kept alive by the stream.
py::object piece_stream(py::object self, const std::string& prompt, const api::GenerationOptions& o) {
  const auto& g = self.cast<const api::Generator&>();
  std::vector<int32_t> ids = g.encode_prompt(prompt);
  g.check_prompts({ids}, o, [](size_t) { return std::string("prompt"); }, "truncate_prompt=True keeps its last tokens");
  return py::cast(new PieceStream(std::move(self), g, std::move(ids), o), py::return_value_policy::take_ownership);
}

// One continuation of a beam search's n-best (Translation's sibling): what generate(num_hypotheses
// > 1) returns, best first, and GenerationResult.hypotheses.
struct Generation {
  std::string text;
  std::vector<int32_t> tokens;
  double log_prob = 0;
  double score = 0;
  std::string finish_reason;  // "stop": it ended with EOS; "length": the token budget or the context
};

// One prompt's continuation, whatever the options: what generate_batch returns.
struct GenerationResult {
  std::string text;
  std::vector<int32_t> tokens;
  std::string finish_reason;  // "stop": the model ended it (EOS); "length": max_new_tokens or the context
  std::vector<Generation> hypotheses;  // beam search's n-best, best first (the first is the above); else none
};

// "length" when the continuation used every token it was allowed (max_new_tokens, or the context
// after the prompt); else the model chose to stop.
std::string finish_reason_of(size_t produced, size_t prompt_tokens, const api::GenerationOptions& o,
                             int64_t context) {
  const int64_t room = std::max<int64_t>(0, context - static_cast<int64_t>(std::min<size_t>(prompt_tokens, context)));
  const int64_t allowed = std::min<int64_t>(o.decode.max_new_tokens, room);
  return static_cast<int64_t>(produced) >= allowed ? "length" : "stop";
}

// Each prompt's options.decode.num_hypotheses best continuations by beam search (the search `qkv
// generate --num-hypotheses` runs), best first; text decoded when the model has a tokenizer. The
// GIL is released while it searches.
std::vector<std::vector<Generation>> n_best(const api::Generator& g, const std::vector<std::vector<int32_t>>& prompts,
                                            const api::GenerationOptions& o) {
  py::gil_scoped_release release;
  std::vector<std::vector<Generation>> out;
  for (auto& hyps : g.generate_hypotheses_ids(prompts, o)) {
    std::vector<Generation> gens;
    for (decoding::Hypothesis& h : hyps)
      gens.push_back({g.tokenizer() ? g.decode(h.tokens) : std::string(), std::move(h.tokens), h.log_prob, h.score,
                      h.finished ? "stop" : "length"});
    out.push_back(std::move(gens));
  }
  return out;
}

bool beam_search(const api::GenerationOptions& o) { return o.decode.beam_size > 1 || o.decode.num_hypotheses > 1; }

void bind_generation(py::module_& m) {
  py::class_<Generation>(m, "Generation",
                         "One continuation of a beam search's n-best (generate(num_hypotheses=N)): text, token ids, "
                         "log-probability, score and finish_reason.")
      .def_readonly("text", &Generation::text, "The continuation's text (the prompt not repeated; '' from generate_ids "
                                               "of a model without a tokenizer).")
      .def_readonly("tokens", &Generation::tokens, "Its new token ids (no EOS).")
      .def_readonly("log_prob", &Generation::log_prob, "Sum of log p over the tokens and EOS when it ended with one.")
      .def_readonly("score", &Generation::score, "log_prob / length^length_penalty (the ranking).")
      .def_readonly("finish_reason", &Generation::finish_reason,
                    "'stop': it ended with EOS; 'length': it reached max_new_tokens or the context.")
      .def("__repr__", [](const Generation& g) {
        return "Generation(text=" + py::repr(py::str(g.text)).cast<std::string>() + ", log_prob=" +
               std::to_string(g.log_prob) + ", score=" + std::to_string(g.score) + ", finish_reason='" +
               g.finish_reason + "')";
      });
}

void bind_generation_result(py::module_& m) {
  py::class_<GenerationResult>(m, "GenerationResult", "One prompt's continuation (generate_batch).")
      .def_readonly("text", &GenerationResult::text, "The continuation's text (the prompt not repeated).")
      .def_readonly("tokens", &GenerationResult::tokens, "Its new token ids (no EOS).")
      .def_readonly("finish_reason", &GenerationResult::finish_reason,
                    "'stop': the model ended it with EOS; 'length': it reached max_new_tokens or the context.")
      .def_readonly("hypotheses", &GenerationResult::hypotheses,
                    "With beam search (beam_size > 1 or num_hypotheses > 1): the num_hypotheses best continuations "
                    "as Generation objects (text, tokens, log_prob, score), best first, the first being text/tokens; "
                    "greedy and sampled generation: [].")
      .def("__repr__", [](const GenerationResult& r) {
        return "GenerationResult(text=" + py::repr(py::str(r.text)).cast<std::string>() + ", tokens=" +
               std::to_string(r.tokens.size()) + ", finish_reason='" + r.finish_reason + "')";
      });
}
}  // namespace

void bind_generator(py::module_& m) {
  bind_generation(m);
  bind_generation_result(m);
  py::class_<PieceStream>(m, "PieceStream", "An iterator over the text pieces of a continuation, as they are produced.")
      .def("__iter__", [](PieceStream& s) -> PieceStream& { return s; })
      .def("__next__", &PieceStream::next);

  py::class_<api::Generator>(m, "Generator",
                             "A decoder-only checkpoint with its tokenizer: continues prompts, greedy or sampled, "
                             "as `qkv generate`.")
      .def(py::init([](const std::string& checkpoint, const std::string& compute_type, const std::string& device) {
             const nn::ComputeType type = compute_type_from_name(compute_type);
             const Device on = parse_device(device);
             py::gil_scoped_release release;
             return std::make_unique<api::Generator>(checkpoint, type, on);
           }),
           py::arg("checkpoint"), py::arg("compute_type") = "float32", py::arg("device") = "cpu",
           "compute_type: how the model computes, chosen once here: 'float32' (default), 'int8', 'bf16' or "
           "'int8_bf16' (as --compute-type). device: 'cpu' (default), 'cuda' or 'cuda:N' (as --device).")
      .def_property_readonly(
          "compute_type", [](const api::Generator& g) { return nn::compute_type_name(g.compute_type()); })
      .def_property_readonly("device", [](const api::Generator& g) { return g.device().name(); })
      .def(
          "generate",
          [](py::object self, const py::object& prompt, int64_t max_new_tokens, bool sample, double temperature,
             int64_t top_k, double top_p, uint64_t seed, bool truncate_prompt, int64_t batch_size,
             bool stream, const py::object& quantize, int beam_size, int num_hypotheses, float length_penalty, int64_t min_new_tokens, float repetition_penalty, int64_t no_repeat_ngram_size) -> py::object {
            apply_quantize_argument(self.cast<api::Generator&>().model(), quantize);
            const auto& g = self.cast<const api::Generator&>();
            const auto o = with_extras(generation_options(max_new_tokens, sample, temperature, top_k, top_p, seed,
                                                          truncate_prompt, batch_size),
                                       GenerationExtras{beam_size, num_hypotheses, length_penalty, min_new_tokens, repetition_penalty, no_repeat_ngram_size});
            const bool single = py::isinstance<py::str>(prompt);
            const std::vector<std::string> prompts =
                single ? std::vector<std::string>{prompt.cast<std::string>()} : prompt.cast<std::vector<std::string>>();
            if (stream) {
              QKV_CHECK(single, "stream=True takes one prompt (a str)");
              if (o.decode.num_hypotheses > 1)
                throw py::value_error("num_hypotheses=" + std::to_string(o.decode.num_hypotheses) +
                                      ": stream=True streams one continuation; n-best is known at the search's end");
              return piece_stream(self, prompts[0], o);
            }
            if (o.decode.num_hypotheses > 1) {
              auto hypotheses = n_best(g, checked_prompt_ids(g, prompts, o), o);
              return single ? py::cast(hypotheses[0]) : py::cast(hypotheses);
            }
            std::vector<std::string> out;
            {
              py::gil_scoped_release release;
              out = g.generate(prompts, o);
            }
            return single ? py::cast(out[0]) : py::cast(out);
          },
          py::arg("prompt"), py::arg("max_new_tokens") = 64, py::arg("do_sample") = false, py::arg("temperature") = 1.0,
          py::arg("top_k") = 0, py::arg("top_p") = 1.0, py::arg("seed") = 0, py::arg("truncate_prompt") = false,
          py::arg("batch_size") = 32, py::arg("stream") = false, py::arg("quantize") = py::none(),
          py::arg("beam_size") = 1, py::arg("num_hypotheses") = 1, py::arg("length_penalty") = 1.0f, py::arg("min_new_tokens") = 0,
          py::arg("repetition_penalty") = 1.0f, py::arg("no_repeat_ngram_size") = 0,
          "Continues `prompt` (a str: returns a str; a list of str: returns a list, batched). The prompt is not "
          "repeated; EOS ends a continuation. do_sample=True draws with temperature, top_k, top_p (prompt i keyed by "
          "(seed, i)). beam_size K > 1: beam search (the one Translator uses), ranked by log-prob / "
          "length^length_penalty; num_hypotheses N > 1 (<= beam_size, as --num-hypotheses): each prompt's N best "
          "continuations as a list of Generation (text, tokens, log_prob, score, finish_reason), best first, in place "
          "of its str. min_new_tokens, repetition_penalty, no_repeat_ngram_size: transformers' token "
          "rules (as --min-new-tokens ...). stream=True (one prompt): an iterator of text pieces as they are produced. quantize= is "
          "deprecated: choose compute_type= when loading.")
      .def(
          "generate_batch",
          [](const api::Generator& g, const std::vector<std::string>& prompts, int64_t max_new_tokens, bool do_sample,
             double temperature, int64_t top_k, double top_p, uint64_t seed, bool truncate_prompt,
             int64_t max_batch_size, int beam_size, int num_hypotheses, float length_penalty, int64_t min_new_tokens, float repetition_penalty, int64_t no_repeat_ngram_size) {
            const auto o = with_extras(generation_options(max_new_tokens, do_sample, temperature, top_k, top_p, seed,
                                                          truncate_prompt, max_batch_size),
                                       GenerationExtras{beam_size, num_hypotheses, length_penalty, min_new_tokens, repetition_penalty, no_repeat_ngram_size});
            const auto ids = checked_prompt_ids(g, prompts, o);
            std::vector<GenerationResult> results;
            if (beam_search(o)) {
              for (auto& hypotheses : n_best(g, ids, o)) {
                GenerationResult r{"", {}, "length", std::move(hypotheses)};
                if (!r.hypotheses.empty()) {  // (none: the context left no room for a new token)
                  r.text = r.hypotheses[0].text;
                  r.tokens = r.hypotheses[0].tokens;
                  r.finish_reason = r.hypotheses[0].finish_reason;
                }
                results.push_back(std::move(r));
              }
              return results;
            }
            std::vector<std::vector<int32_t>> out;
            {
              py::gil_scoped_release release;
              out = g.generate_ids(ids, o);
            }
            for (size_t i = 0; i < out.size(); ++i)
              results.push_back({g.decode(out[i]), out[i],
                                 finish_reason_of(out[i].size(), ids[i].size(), o, g.config().max_seq_length), {}});
            return results;
          },
          py::arg("prompts"), py::arg("max_new_tokens") = 64, py::arg("do_sample") = false,
          py::arg("temperature") = 1.0, py::arg("top_k") = 0, py::arg("top_p") = 1.0, py::arg("seed") = 0,
          py::arg("truncate_prompt") = false, py::arg("max_batch_size") = 32,
          py::arg("beam_size") = 1, py::arg("num_hypotheses") = 1, py::arg("length_penalty") = 1.0f, py::arg("min_new_tokens") = 0,
          py::arg("repetition_penalty") = 1.0f, py::arg("no_repeat_ngram_size") = 0,
          "Continues each prompt: a list of GenerationResult (text, tokens, finish_reason), one per prompt, batched "
          "(Hugging Face's and CTranslate2's names: do_sample, max_batch_size). do_sample=True draws with "
          "temperature, top_k, top_p (prompt i keyed by (seed, i)); beam_size K > 1 searches K beams, and "
          "GenerationResult.hypotheses holds the num_hypotheses best (Generation objects, best first); else greedy. "
          "The token rules as generate().")
      .def(
          "generate_tokens",
          [](py::object self, const std::string& prompt, int64_t max_new_tokens, bool do_sample, double temperature,
             int64_t top_k, double top_p, uint64_t seed, bool truncate_prompt) {
            const auto o = generation_options(max_new_tokens, do_sample, temperature, top_k, top_p, seed,
                                              truncate_prompt, 1);
            return piece_stream(self, prompt, o);
          },
          py::arg("prompt"), py::arg("max_new_tokens") = 64, py::arg("do_sample") = false,
          py::arg("temperature") = 1.0, py::arg("top_k") = 0, py::arg("top_p") = 1.0, py::arg("seed") = 0,
          py::arg("truncate_prompt") = false,
          "An iterator of one prompt's continuation, text piece by text piece as it is produced (the same text as "
          "generate_batch([prompt])[0].text); dropping it early stops generation.")
      .def(
          "generate_ids",
          [](api::Generator& g, const py::object& prompts, int64_t max_new_tokens, bool sample, double temperature,
             int64_t top_k, double top_p, uint64_t seed, bool truncate_prompt, int64_t batch_size,
             const py::object& quantize, int beam_size, int num_hypotheses, float length_penalty, int64_t min_new_tokens, float repetition_penalty, int64_t no_repeat_ngram_size) {
            apply_quantize_argument(g.model(), quantize);
            const auto o = with_extras(generation_options(max_new_tokens, sample, temperature, top_k, top_p, seed,
                                                          truncate_prompt, batch_size),
                                       GenerationExtras{beam_size, num_hypotheses, length_penalty, min_new_tokens, repetition_penalty, no_repeat_ngram_size});
            const auto ids = to_id_lines(prompts, "prompt");
            check_prompt_ids(g, ids, o);
            if (o.decode.num_hypotheses > 1) return py::cast(n_best(g, ids, o));
            std::vector<std::vector<int32_t>> out;
            {
              py::gil_scoped_release release;
              out = g.generate_ids(ids, o);
            }
            return py::cast(out);
          },
          py::arg("prompts"), py::arg("max_new_tokens") = 64, py::arg("do_sample") = false, py::arg("temperature") = 1.0,
          py::arg("top_k") = 0, py::arg("top_p") = 1.0, py::arg("seed") = 0, py::arg("truncate_prompt") = false,
          py::arg("batch_size") = 32, py::arg("quantize") = py::none(),
          py::arg("beam_size") = 1, py::arg("num_hypotheses") = 1, py::arg("length_penalty") = 1.0f, py::arg("min_new_tokens") = 0,
          py::arg("repetition_penalty") = 1.0f, py::arg("no_repeat_ngram_size") = 0,
          "generate() on token ids (each prompt starts with its own BOS if it wants one): lists of new ids, or with "
          "num_hypotheses > 1 lists of Generation (tokens: the ids).")
      .def(
          "generate_with_attention",
          [](const api::Generator& g, const std::string& prompt, int64_t max_new_tokens, bool sample, double temperature,
             int64_t top_k, double top_p, uint64_t seed, bool truncate_prompt) {
            const auto o = generation_options(max_new_tokens, sample, temperature, top_k, top_p, seed, truncate_prompt, 1);
            const std::vector<int32_t> ids = g.encode_prompt(prompt);
            g.check_prompts({ids}, o, [](size_t) { return std::string("prompt"); },
                            "truncate_prompt=True keeps its last tokens");
            std::vector<decoding::AttentionWeights> weights;
            std::vector<std::vector<int32_t>> out;
            {
              py::gil_scoped_release release;
              out = g.generate_ids({ids}, o, {}, 0, &weights);
            }
            py::list layers;
            for (const Tensor& t : weights[0].decoder_self) layers.append(tensor_to_numpy(t));
            const int64_t read = weights[0].decoder_self.empty() ? 0 : weights[0].decoder_self[0].size(1);
            std::vector<std::string> pieces;
            for (const int32_t id : g.tokens_read(ids, out[0], o, read)) pieces.push_back(g.piece(id));
            py::dict d;
            d["text"] = g.decode(out[0]);
            d["tokens"] = out[0];
            d["pieces"] = pieces;
            d["self_attention"] = layers;
            return d;
          },
          py::arg("prompt"), py::arg("max_new_tokens") = 64, py::arg("do_sample") = false, py::arg("temperature") = 1.0,
          py::arg("top_k") = 0, py::arg("top_p") = 1.0, py::arg("seed") = 0, py::arg("truncate_prompt") = false,
          "generate() of one prompt that also returns what the model attended to: {'text', 'tokens', 'pieces' (the T "
          "tokens the model read: BOS, the prompt, the new tokens it fed back), 'self_attention': [(H, T, T) per "
          "layer]}; draw with qkv.plot.attention(w, pieces, pieces).")
      .def_property_readonly(
          "model", [](py::object self) { return PyModel{&self.cast<api::Generator&>().model(), nullptr, self}; })
      .def_property_readonly("vocab_size", &api::Generator::vocab_size);
}

}  // namespace qkv::python
