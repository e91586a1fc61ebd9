// qkv.Encoder over api::Encoder: sentence embeddings and class probabilities as NumPy arrays.
#include <algorithm>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "model.h"
#include "qkv/api/encoder.h"

namespace qkv::python {

namespace {
// One text's class, whatever the options: what classify_batch returns.
struct ClassificationResult {
  std::string label;
  float probability = 0.f;
  std::vector<std::pair<std::string, float>> top;  // the top_k labels with their probabilities, best first
};

std::vector<ClassificationResult> classification_results(const Tensor& probs, const std::vector<std::string>& labels,
                                                         int64_t top_k) {
  const int64_t rows = probs.size(0), classes = probs.size(1);
  const std::vector<float> p = probs.to_vector();
  std::vector<ClassificationResult> out;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int64_t> order(static_cast<size_t>(classes));
    std::iota(order.begin(), order.end(), 0);
    const float* row = p.data() + r * classes;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return row[a] > row[b]; });
    ClassificationResult c;
    for (int64_t k = 0; k < std::min(top_k, classes); ++k) {
      const auto j = static_cast<size_t>(order[static_cast<size_t>(k)]);
      c.top.emplace_back(j < labels.size() ? labels[j] : std::to_string(j), row[j]);
    }
    if (!c.top.empty()) std::tie(c.label, c.probability) = c.top.front();
    out.push_back(std::move(c));
  }
  return out;
}

void bind_classification_result(py::module_& m) {
  py::class_<ClassificationResult>(m, "ClassificationResult", "One text's class (classify_batch).")
      .def_readonly("label", &ClassificationResult::label, "The most probable label.")
      .def_readonly("probability", &ClassificationResult::probability, "Its probability.")
      .def_readonly("top", &ClassificationResult::top, "The top_k (label, probability) pairs, best first.")
      .def("__repr__", [](const ClassificationResult& c) {
        return "ClassificationResult(label=" + py::repr(py::str(c.label)).cast<std::string>() +
               ", probability=" + std::to_string(c.probability) + ")";
      });
}
}  // namespace

void bind_encoder(py::module_& m) {
  bind_classification_result(m);
  py::class_<api::Encoder>(m, "Encoder",
                           "An encoder-only checkpoint (BERT, an imported sentence-transformers model) with its "
                           "tokenizer and pooling: sentence embeddings as `qkv embed`, labels as `qkv classify`.")
      .def(py::init([](const std::string& checkpoint, int64_t max_tokens, bool truncate, const std::string& compute_type,
                       const std::string& device) {
             const nn::ComputeType type = compute_type_from_name(compute_type);
             const Device on = parse_device(device);
             std::unique_ptr<api::Encoder> e;
             {
               py::gil_scoped_release release;
               e = std::make_unique<api::Encoder>(checkpoint, "qkv.Encoder", type, on);
             }
             if (max_tokens > 0) e->set_max_tokens(max_tokens);
             e->set_too_long(truncate ? data::TooLong::Truncate : data::TooLong::Error);
             return e;
           }),
           py::arg("checkpoint"), py::arg("max_input_length") = 0, py::arg("truncate") = true,
           py::arg("compute_type") = "float32", py::arg("device") = "cpu",
           "max_input_length: tokens per sentence at most, [CLS] and [SEP] included (0: the checkpoint's); truncate=False "
           "makes a longer sentence a ValueError. compute_type: how the model computes, chosen once here: 'float32' "
           "(default), 'int8', 'bf16' or 'int8_bf16' (as --compute-type). device: 'cpu' (default), 'cuda' or "
           "'cuda:N' (as --device).")
      .def_property_readonly("compute_type",
                             [](const api::Encoder& e) { return nn::compute_type_name(e.compute_type()); })
      .def_property_readonly("device", [](const api::Encoder& e) { return e.device().name(); })
      .def(
          "embed",
          [](const api::Encoder& e, const std::string& text, int64_t batch_size) {
            Tensor out;
            {
              py::gil_scoped_release release;
              out = e.embed({text}, batch_size);
            }
            return tensor_to_numpy(out.reshape(Dims{out.size(1)}));
          },
          py::arg("text"), py::arg("batch_size") = 32,
          "One text's sentence embedding, a float32 vector (d_model,), as sentence-transformers' encode(str).")
      .def(
          "embed",
          [](const api::Encoder& e, const std::vector<std::string>& texts, int64_t batch_size) {
            Tensor out;
            {
              py::gil_scoped_release release;
              out = e.embed(texts, batch_size);
            }
            return tensor_to_numpy(out);
          },
          py::arg("texts"), py::arg("batch_size") = 32,
          "Sentence embeddings, a float32 array (len(texts), d_model), pooled and normalised as the checkpoint's "
          "sentence_embedding.json says (sentence-transformers' numbers).")
      .def(
          "embed_ids",
          [](const api::Encoder& e, const py::object& sentences, int64_t batch_size) {
            auto ids = to_id_lines(sentences, "sentence");
            Tensor out;
            {
              py::gil_scoped_release release;
              for (size_t i = 0; i < ids.size(); ++i) ids[i] = e.encode_ids(ids[i], "sentence " + std::to_string(i + 1));
              out = e.embed_ids(ids, batch_size);
            }
            return tensor_to_numpy(out);
          },
          py::arg("sentences"), py::arg("batch_size") = 32, "embed() on token ids ([CLS] and [SEP] are added).")
      .def(
          "classify",
          [](const api::Encoder& e, const std::vector<std::string>& texts, int64_t batch_size) {
            Tensor p;
            {
              py::gil_scoped_release release;
              p = e.classify(texts, batch_size);
            }
            return tensor_to_numpy(p);
          },
          py::arg("texts"), py::arg("batch_size") = 32,
          "Class probabilities, a float32 array (len(texts), len(labels)); column j is labels[j].")
      .def(
          "classify_batch",
          [](const api::Encoder& e, const std::vector<std::string>& texts, int64_t top_k, int64_t batch_size) {
            QKV_CHECK(top_k >= 1, "top_k must be at least 1, got " << top_k);
            Tensor p;
            {
              py::gil_scoped_release release;
              p = e.classify(texts, batch_size);
            }
            return classification_results(p, e.labels(), top_k);
          },
          py::arg("texts"), py::arg("top_k") = 1, py::arg("batch_size") = 32,
          "Each text's class: a list of ClassificationResult (label, probability, and the top_k (label, "
          "probability) pairs), one per text.")
      .def_property_readonly("labels", &api::Encoder::labels, "The classifier's labels (config.json \"labels\").")
      .def_property_readonly("dim", [](const api::Encoder& e) { return e.model().config().d_model; })
      .def_property_readonly("max_input_length", [](const api::Encoder& e) { return e.pooling().max_seq_length; })
      .def_property_readonly("max_tokens", [](const api::Encoder& e) { return e.pooling().max_seq_length; })
      .def_property_readonly("model", [](py::object self) {
        return PyModel{&self.cast<api::Encoder&>().model(), nullptr, self};
      });
}

}  // namespace qkv::python
