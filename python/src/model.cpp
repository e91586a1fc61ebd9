// qkv.Model: a checkpoint's model with its weights as NumPy arrays; qkv.load_checkpoint; qkv.score.
#include "model.h"

#include "qkv/autograd/graph.h"
#include "qkv/models/checkpoint.h"
#include "qkv/train/step.h"

namespace qkv::python {

namespace {
int64_t count_parameters(const models::Model& m) {
  int64_t n = 0;
  for (const Var& p : m.parameters()) n += p.value().numel();
  return n;
}

Var* find_parameter(std::vector<std::pair<std::string, Var>>& named, const std::string& name) {
  for (auto& [n, v] : named)
    if (n == name) return &v;
  return nullptr;
}

PyModel load_checkpoint(const std::string& dir) {
  std::shared_ptr<models::Model> model;
  {
    py::gil_scoped_release release;
    models::check_checkpoint_dir(dir);
    model = models::load_model(dir);
    model->eval();
  }
  return PyModel{model.get(), model, py::none()};
}

py::dict score(const PyModel& m, const py::object& tgt, const py::object& src, int64_t batch_size,
               const py::object& quantize, const py::object& compute_type) {
  QKV_CHECK(quantize.is_none() || compute_type.is_none(), "score: give compute_type= or quantize=, not both");
  std::optional<models::ScopedComputeType> for_this_call;
  if (!compute_type.is_none()) {
    const nn::ComputeType type = compute_type_from_name(compute_type.cast<std::string>());
    py::gil_scoped_release release;
    for_this_call.emplace(*m.model, type);
  } else if (!quantize.is_none() &&
             compute_type_of_quantize(quantize.cast<std::string>()) == nn::ComputeType::Int8) {
    py::gil_scoped_release release;  // "none": the model's own, as before
    for_this_call.emplace(*m.model, nn::ComputeType::Int8);
  }
  const auto tgt_lines = to_id_lines(tgt, "tgt line");
  const auto src_lines = src.is_none() ? std::vector<std::vector<int32_t>>{} : to_id_lines(src, "src line");
  QKV_CHECK(batch_size >= 1, "batch_size must be at least 1, got " << batch_size);
  train::ScoreResult r;
  {
    py::gil_scoped_release release;
    r = train::score(*m.model, src_lines, tgt_lines, batch_size);
  }
  py::dict d;
  d["line_log_prob"] = r.line_log_prob;
  d["loss"] = r.mean_loss();
  d["tokens"] = r.tokens;
  return d;
}
}  // namespace

py::dict model_parameters(const PyModel& m) {
  py::dict d;
  for (const auto& [name, var] : m.model->named_parameters()) d[py::str(name)] = tensor_to_numpy(var.value());
  return d;
}

void bind_model(py::module_& m) {
  py::class_<PyModel>(m, "Model",
                      "A qkv model (any family) with its weights. Parameters are NumPy views of the model's own "
                      "storage: reading them copies nothing, and writing into them (or set_parameter) changes "
                      "the model.")
      .def_property_readonly("architecture", [](const PyModel& p) { return p.model->config().architecture; },
                             "'encoder-decoder', 'decoder-only' or 'encoder-only'.")
      .def_property_readonly(
          "config",
          [](const PyModel& p) {
            return py::module_::import("json").attr("loads")(models::config_to_json(p.model->config()));
          },
          "config.json as a dict.")
      .def_property_readonly("num_parameters", [](const PyModel& p) { return count_parameters(*p.model); })
      .def_property_readonly("parameters", &model_parameters,
                             "Parameter name -> float32 NumPy array (a writable view, PyTorch's state_dict names).")
      .def(
          "set_parameter",
          [](PyModel& p, const std::string& name, const py::array& value) {
            auto named = p.model->named_parameters();
            Var* v = find_parameter(named, name);
            if (!v) throw py::key_error("no parameter named '" + name + "'");
            copy_numpy_into(value, v->value(), name);
            if (const auto type = p.model->compute_type()) {  // its inference form follows the new values
              py::gil_scoped_release release;
              p.model->set_compute_type(*type);
            }
          },
          py::arg("name"), py::arg("value"),
          "Copies an array of the parameter's shape into it (and prepares the compute type's weights again).")
      .def_property_readonly(
          "compute_type",
          [](const PyModel& p) -> py::object {
            const auto type = p.model->compute_type();
            return type ? py::object(py::str(nn::compute_type_name(*type))) : py::object(py::none());
          },
          "The compute type inference runs in ('float32', 'int8', 'bf16', 'int8_bf16'), or None: the float32 "
          "weights themselves (a model from load_checkpoint).")
      .def(
          "set_compute_type",
          [](PyModel& p, const py::object& compute_type) {
            if (compute_type.is_none()) {
              p.model->clear_compute_type();
              return;
            }
            const nn::ComputeType type = compute_type_from_name(compute_type.cast<std::string>());
            py::gil_scoped_release release;
            p.model->set_compute_type(type);
          },
          py::arg("compute_type"),
          "Prepares the weights for inference in a compute type (None: back to the float32 weights). Call it again "
          "after writing into the parameters' NumPy views, which the prepared weights do not follow.")
      .def(
          "save",
          [](const PyModel& p, const std::string& dir) {
            py::gil_scoped_release release;
            models::save_model(dir, *p.model);
          },
          py::arg("dir"), "Writes config.json and model.safetensors (all-or-nothing) to a checkpoint directory.")
      .def(
          "logits",
          [](const PyModel& p, const py::array_t<int32_t, py::array::c_style | py::array::forcecast>& input,
             const std::optional<py::array_t<int32_t, py::array::c_style | py::array::forcecast>>& src) {
            QKV_CHECK(input.ndim() == 2, "input: expected a (batch, length) array of token ids, got " << input.ndim()
                                                                                                  << " dimensions");
            Tensor in = Tensor::empty({input.shape(0), input.shape(1)}, DType::I32);
            std::memcpy(in.i32(), input.data(), sizeof(int32_t) * static_cast<size_t>(input.size()));
            Tensor s = Tensor::empty({0, 0}, DType::I32);
            if (src) {
              QKV_CHECK(src->ndim() == 2, "src: expected a (batch, length) array of token ids");
              s = Tensor::empty({src->shape(0), src->shape(1)}, DType::I32);
              std::memcpy(s.i32(), src->data(), sizeof(int32_t) * static_cast<size_t>(src->size()));
            }
            Tensor out;
            {
              py::gil_scoped_release release;
              const NoGradGuard no_grad;
              out = p.model->teacher_forced_logits(s, in).value();
            }
            return tensor_to_numpy(out);
          },
          py::arg("input"), py::arg("src") = py::none(),
          "Teacher-forced logits (batch, length, vocab) in eval mode: a decoder-only or encoder-only model reads "
          "`input`; an encoder-decoder model reads `src` and the target input.")
      .def("__repr__", [](const PyModel& p) {
        const auto& c = p.model->config();
        return "<qkv.Model " + c.architecture + ", d_model " + std::to_string(c.d_model) + ", " +
               std::to_string(c.num_layers) + " layers, " + std::to_string(count_parameters(*p.model)) + " parameters>";
      });

  m.def("load_checkpoint", &load_checkpoint, py::arg("dir"),
        "Loads a qkv checkpoint directory (config.json + model.safetensors) of any family, strictly, in eval mode.");
  m.def("score", &score, py::arg("model"), py::arg("tgt"), py::arg("src") = py::none(), py::arg("batch_size") = 32,
        py::arg("quantize") = py::none(), py::arg("compute_type") = py::none(),
        "Teacher-forced log-probabilities, as `qkv score`: for an encoder-decoder model, (src, tgt) id lines with "
        "tgt holding BOS and EOS; for a decoder-only model, tgt lines alone, each token scored given the ones before. "
        "Returns {'line_log_prob': [...], 'loss': mean over tokens, 'tokens': n}. compute_type (or the older "
        "quantize='int8'): score in that compute type for this call (default: the model's own).");
}

}  // namespace qkv::python
