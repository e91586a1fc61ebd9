// qkv.Encoder over api::Encoder: sentence embeddings and class probabilities as NumPy arrays.
#include "model.h"
#include "qkv/api/encoder.h"

namespace qkv::python {

void bind_encoder(py::module_& m) {
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
           py::arg("checkpoint"), py::arg("max_tokens") = 0, py::arg("truncate") = true,
           py::arg("compute_type") = "float32", py::arg("device") = "cpu",
           "max_tokens: tokens per sentence at most, [CLS] and [SEP] included (0: the checkpoint's); truncate=False "
           "makes a longer sentence a ValueError. compute_type: how the model computes, chosen once here: 'float32' "
           "(default), 'int8', 'bf16' or 'int8_bf16' (as --compute-type). device: 'cpu' (default), 'cuda' or "
           "'cuda:N' (as --device).")
      .def_property_readonly("compute_type",
                             [](const api::Encoder& e) { return nn::compute_type_name(e.compute_type()); })
      .def_property_readonly("device", [](const api::Encoder& e) { return e.device().name(); })
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
      .def_property_readonly("labels", &api::Encoder::labels, "The classifier's labels (config.json \"labels\").")
      .def_property_readonly("dim", [](const api::Encoder& e) { return e.model().config().d_model; })
      .def_property_readonly("max_tokens", [](const api::Encoder& e) { return e.pooling().max_seq_length; })
      .def_property_readonly("model", [](py::object self) {
        return PyModel{&self.cast<api::Encoder&>().model(), nullptr, self};
      });
}

}  // namespace qkv::python
