// qkv.Trainer: `qkv train` from Python through the same library run (train/run.h). Keyword
// arguments are the CLI's flags with underscores (`--valid-every` -> valid_every).
//
// The GIL is released while qkv computes and taken back for the callback. Ctrl-C: while fit() runs
// in the main thread, SIGINT asks the trainer to stop after the current step; it saves the last
// checkpoint and fit() raises KeyboardInterrupt (Python's own handler is put back afterwards).
#include <csignal>
#include <functional>
#include <map>

#include "common.h"
#include "qkv/core/threads.h"
#include "qkv/train/run.h"

namespace qkv::python {

namespace {
std::atomic<bool> g_sigint{false};
std::atomic<std::atomic<bool>*> g_stop_flag{nullptr};  // the running fit's stop flag
extern "C" void on_sigint(int) {
  g_sigint.store(true);
  if (std::atomic<bool>* stop = g_stop_flag.load()) stop->store(true);
}

// While alive (and only in the main thread, where Python handles signals), SIGINT sets `stop`.
class SigintToStopFlag {
 public:
  SigintToStopFlag(bool main_thread, std::atomic<bool>& stop) : active_(main_thread) {
    if (!active_) return;
    g_sigint.store(false);
    g_stop_flag.store(&stop);
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &previous_);
  }
  ~SigintToStopFlag() {
    if (!active_) return;
    ::sigaction(SIGINT, &previous_, nullptr);
    g_stop_flag.store(nullptr);
  }
  bool interrupted() const { return active_ && g_sigint.load(); }

 private:
  bool active_;
  struct sigaction previous_ {};
};

using Setter = std::function<void(train::TrainRequest&, int&, const py::handle&)>;

template <class T>
Setter set(T train::TrainRequest::*field) {
  return [field](train::TrainRequest& r, int&, const py::handle& v) { r.*field = v.cast<T>(); };
}
template <class T>
Setter set_optional(std::optional<T> train::TrainRequest::*field) {
  return [field](train::TrainRequest& r, int&, const py::handle& v) {
    if (v.is_none())
      (r.*field).reset();
    else
      r.*field = v.cast<T>();
  };
}

const std::map<std::string, Setter>& setters() {
  using R = train::TrainRequest;
  static const std::map<std::string, Setter> table = {
      {"synthetic", set(&R::synthetic)}, {"preset", set(&R::preset)}, {"task", set(&R::task)},
      {"batch_size", set_optional(&R::batch)}, {"len", set_optional(&R::len)}, {"vocab", set_optional(&R::vocab)},
      {"config", set(&R::config_path)}, {"d_model", set_optional(&R::d_model)}, {"heads", set_optional(&R::heads)},
      {"layers", set_optional(&R::layers)}, {"d_ff", set_optional(&R::d_ff)}, {"max_seq_length", set_optional(&R::max_len)},
      {"dropout", set_optional(&R::dropout)}, {"steps", set_optional(&R::steps)}, {"warmup", set_optional(&R::warmup)},
      {"micro_batch", set_optional(&R::micro_batch)}, {"label_smoothing", set_optional(&R::label_smoothing)},
      {"lr", set_optional(&R::lr)}, {"clip_norm", set_optional(&R::clip_norm)},
      {"weight_decay", set_optional(&R::weight_decay)}, {"schedule", set_optional(&R::schedule)},
      {"optimizer", set_optional(&R::optimizer)},
      {"precision", set_optional(&R::precision)}, {"max_memory", set_optional(&R::max_memory)},
      {"recompute_ffn", set(&R::recompute_ffn)}, {"share_all_embeddings", set(&R::share_all_embeddings)},
      {"seed", set(&R::seed)},
      {"output_dir", set(&R::out)}, {"resume", set(&R::resume)}, {"metrics", set(&R::metrics)},
      {"save_every", set(&R::save_every)}, {"log_every", set_optional(&R::log_every)}, {"src", set(&R::src)},
      {"tgt", set(&R::tgt)}, {"tsv", set(&R::tsv)}, {"valid_src", set(&R::valid_src)},
      {"valid_tgt", set(&R::valid_tgt)}, {"too_long", set(&R::too_long)}, {"time_budget", set(&R::time_budget)},
      {"spm_vocab", set(&R::spm_vocab)}, {"valid_beam_size", set(&R::valid_beam)}, {"spm_sample", set(&R::spm_sample)},
      {"max_batch_tokens", set(&R::max_tokens)}, {"max_epochs", set(&R::max_epochs)}, {"valid_every", set(&R::valid_every)},
      {"valid_bleu_sentences", set(&R::valid_bleu_sentences)}, {"patience", set(&R::patience)},
      {"keep_checkpoints", set(&R::keep_checkpoints)}, {"arch", set(&R::arch)}, {"text", set(&R::text)},
      {"valid_text", set(&R::valid_text)}, {"block_size", set(&R::block_size)}, {"objective", set(&R::objective)},
      {"labelled", set(&R::labelled)}, {"valid_labelled", set(&R::valid_labelled)}, {"init", set(&R::init)},
      {"threads", [](R&, int& threads, const py::handle& v) { threads = v.cast<int>(); }},
  };
  return table;
}

py::dict step_dict(const train::StepReport& r) {
  py::dict d;
  d["event"] = "step";
  d["step"] = r.step;
  d["max_steps"] = r.max_steps;
  d["epoch"] = r.epoch;
  d["time"] = r.elapsed;
  d["loss"] = r.loss;
  d["lr"] = r.lr;
  d["grad_norm"] = r.grad_norm;
  d["tokens_per_second"] = r.tokens_per_second;
  d["tokens"] = r.tokens;
  d["eta"] = r.eta >= 0 ? py::object(py::float_(r.eta)) : py::object(py::none());
  return d;
}

py::dict validation_dict(const train::ValidationReport& v) {
  py::dict d;
  d["event"] = "validation";
  d["step"] = v.step;
  d["time"] = v.elapsed;
  d["loss"] = v.result.loss;
  d["perplexity"] = v.result.perplexity();
  d["best"] = v.best;
  if (v.result.bleu >= 0) d["bleu"] = v.result.bleu;
  if (v.result.accuracy >= 0) d["accuracy"] = v.result.accuracy;
  if (v.result.macro_f1 >= 0) d["macro_f1"] = v.result.macro_f1;
  if (!v.result.confusion.empty()) {  // as metrics.jsonl has them
    d["labels"] = v.result.labels;
    d["confusion"] = v.result.confusion;
  }
  return d;
}

// Keywords renamed with their flags (docs/cli.md): the old one still works, with a DeprecationWarning.
const std::map<std::string, std::string>& renamed_keywords() {
  static const std::map<std::string, std::string> table = {
      {"batch", "batch_size"}, {"max_len", "max_seq_length"}, {"out", "output_dir"},
      {"valid_beam", "valid_beam_size"}, {"max_tokens", "max_batch_tokens"}};
  return table;
}

// The keyword as the table of setters knows it; an old one warns.
std::string current_keyword(const std::string& name) {
  const auto renamed = renamed_keywords().find(name);
  if (renamed == renamed_keywords().end()) return name;
  const std::string message = "Trainer(" + name + "=) is deprecated; use " + renamed->second + "=";
  if (PyErr_WarnEx(PyExc_DeprecationWarning, message.c_str(), 1) != 0) throw py::error_already_set();
  return renamed->second;
}

class PyTrainer {
 public:
  explicit PyTrainer(const py::kwargs& kwargs) {
    for (const auto& [key, value] : kwargs) {
      const std::string name = current_keyword(key.cast<std::string>());
      const auto it = setters().find(name);
      if (it == setters().end()) throw py::type_error("Trainer() got an unexpected keyword argument '" + name + "'");
      try {
        it->second(request_, threads_, value);
      } catch (const py::cast_error&) {
        throw py::type_error("Trainer(): " + name + "=" + py::repr(value).cast<std::string>() + " has the wrong type");
      }
    }
  }

  // Runs to the end (or a limit, or Ctrl-C); `callback(metrics: dict)` hears every progress report
  // and validation, `on_info(message: str)` one-off facts. Returns the result as a dict.
  py::dict fit(const py::object& callback, const py::object& on_info) {
    const bool main_thread =
        py::module_::import("threading").attr("current_thread")().is(py::module_::import("threading").attr("main_thread")());
    std::optional<py::error_already_set> callback_error;
    std::atomic<bool> stop{false};  // set by SIGINT or by a callback that raised
    // Runs fn(make_argument()) with the GIL held; an exception stops training and is re-raised by fit.
    const auto call = [&](const py::object& fn, const std::function<py::object()>& make_argument) {
      const py::gil_scoped_acquire gil;
      if (fn.is_none() || callback_error) return;
      try {
        fn(make_argument());
      } catch (py::error_already_set& e) {
        callback_error.emplace(std::move(e));
        stop.store(true);
      }
    };
    train::TrainerEvents events;
    events.on_log = [&](const train::StepReport& r) { call(callback, [&] { return py::object(step_dict(r)); }); };
    events.on_validation = [&](const train::ValidationReport& v) {
      call(callback, [&] { return py::object(validation_dict(v)); });
    };
    events.on_info = [&](const std::string& message) { call(on_info, [&] { return py::object(py::str(message)); }); };
    train::TrainResult r;
    bool interrupted = false;
    {
      const SigintToStopFlag sigint(main_thread, stop);
      {
        py::gil_scoped_release release;
        set_num_threads(threads_);
        r = train::run_training(request_, events, &stop);
      }
      interrupted = sigint.interrupted();
    }
    if (callback_error) throw std::move(*callback_error);
    if (r.interrupted && interrupted) {
      PyErr_SetNone(PyExc_KeyboardInterrupt);
      throw py::error_already_set();
    }
    py::dict d;
    d["step"] = r.step;
    d["elapsed"] = r.elapsed;
    d["stop_reason"] = r.stop_reason;
    d["interrupted"] = r.interrupted;
    d["last_checkpoint"] = train::last_checkpoint_dir(request_);
    return d;
  }

  std::string last_checkpoint() const { return train::last_checkpoint_dir(request_); }

 private:
  train::TrainRequest request_;
  int threads_ = 0;
};
}  // namespace

void bind_trainer(py::module_& m) {
  py::class_<PyTrainer>(m, "Trainer",
                        "A training run as `qkv train` describes it: keyword arguments are its flags with underscores "
                        "(arch='decoder-only', text=..., output_dir=..., steps=..., valid_every=..., threads=...). Errors "
                        "name the CLI flag.")
      .def(py::init<const py::kwargs&>())
      .def("fit", &PyTrainer::fit, py::arg("callback") = py::none(), py::arg("on_info") = py::none(),
           "Trains. callback(metrics: dict) hears every progress report ({'event': 'step', 'step', 'epoch', 'loss', "
           "'lr', 'grad_norm', 'tokens_per_second', 'time', ...}) and validation ({'event': 'validation', 'loss', "
           "'perplexity', 'bleu'/'accuracy'/'macro_f1' when computed, a classifier's 'labels' and 'confusion' "
           "(dev counts, rows gold, columns predicted), 'best'}); an exception in it stops training "
           "(the last checkpoint is saved) and is re-raised. Ctrl-C saves the last checkpoint and raises "
           "KeyboardInterrupt. Returns {'step', 'elapsed', 'stop_reason', 'interrupted', 'last_checkpoint'}.")
      .def_property_readonly("last_checkpoint", &PyTrainer::last_checkpoint,
                             "Where the run keeps its last checkpoint (OUTPUT_DIR/last for text runs).");
}

}  // namespace qkv::python
