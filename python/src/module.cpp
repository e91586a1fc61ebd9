// qkv._core: the compiled part of the `qkv` Python package.
#include <algorithm>
#include <cstring>

#include "common.h"
#include "qkv/core/error.h"
#include "qkv/core/threads.h"
#include "qkv/interop/hf_import.h"
#include "qkv/io/npy.h"
#include "qkv/ops/precision.h"

namespace qkv::python {

py::array tensor_to_numpy(const Tensor& t) {
  QKV_CHECK(t.layout() == Layout::Strided, "a packed tensor " << t.describe() << " has no NumPy view");
  // NumPy has no bfloat16: such a tensor comes out widened to float32 (a copy).
  auto* keep = new Tensor(t.dtype() == DType::BF16 ? t.to(DType::F32) : t.contiguous());
  py::capsule owner(keep, [](void* p) { delete static_cast<Tensor*>(p); });
  std::vector<py::ssize_t> shape(keep->shape().begin(), keep->shape().end());
  switch (keep->dtype()) {
    case DType::I32: return py::array_t<int32_t>(shape, keep->i32(), owner);
    case DType::I8: return py::array_t<int8_t>(shape, keep->data<int8_t>(), owner);
    case DType::F16: return py::array(py::dtype("float16"), shape, keep->raw_data(), owner);
    default: return py::array_t<float>(shape, keep->f32(), owner);
  }
}

void copy_numpy_into(const py::array& source, Tensor& t, const std::string& what) {
  const auto a = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(source);
  if (!a) throw Error(what + ": expected a numeric array");
  const std::vector<int64_t> shape(a.shape(), a.shape() + a.ndim());
  if (static_cast<int>(shape.size()) != t.shape().size() || !std::equal(shape.begin(), shape.end(), t.shape().begin())) {
    std::string given, wanted;
    for (const auto d : shape) given += (given.empty() ? "" : ", ") + std::to_string(d);
    for (const auto d : t.shape()) wanted += (wanted.empty() ? "" : ", ") + std::to_string(d);
    throw Error(what + ": shape (" + given + ") does not match the parameter's (" + wanted + ")");
  }
  QKV_CHECK(t.dtype() == DType::F32, what << ": not a float32 tensor");
  Tensor src = Tensor::empty(t.shape());
  std::memcpy(src.f32(), a.data(), sizeof(float) * static_cast<size_t>(a.size()));
  t.copy_from(src);
}

std::vector<std::vector<int32_t>> to_id_lines(const py::handle& lines, const std::string& what) {
  std::vector<std::vector<int32_t>> out;
  size_t i = 0;
  for (const py::handle line : lines) {
    ++i;
    std::vector<int32_t> ids;
    for (const py::handle id : line) {
      const auto v = id.cast<int64_t>();
      QKV_CHECK(v >= 0 && v <= INT32_MAX, what << " " << i << ": token id " << v << " is out of range");
      ids.push_back(static_cast<int32_t>(v));
    }
    out.push_back(std::move(ids));
  }
  return out;
}

nn::ComputeType compute_type_from_name(const std::string& name) {
  return nn::parse_compute_type(name, "compute_type");  // qkv::Error -> ValueError
}

nn::ComputeType compute_type_of_quantize(const std::string& quantize) {
  if (quantize != "none" && quantize != "int8")
    throw py::value_error("quantize must be 'none' or 'int8', got '" + quantize + "'");
  return quantize == "int8" ? nn::ComputeType::Int8 : nn::ComputeType::Float32;
}

void apply_quantize_argument(models::Model& model, const py::object& quantize) {
  if (quantize.is_none()) return;
  const nn::ComputeType wanted = compute_type_of_quantize(quantize.cast<std::string>());
  if (model.compute_type() == wanted) return;
  const int raised = PyErr_WarnEx(PyExc_DeprecationWarning,
               ("quantize= is deprecated: choose the compute type once, at load (compute_type='" +
                std::string(nn::compute_type_name(wanted)) + "'); the model now runs in " +
                nn::compute_type_name(wanted) + " for this call and the ones after")
                   .c_str(),
               1);
  if (raised < 0) throw py::error_already_set();  // warnings turned into errors
  py::gil_scoped_release release;
  model.set_compute_type(wanted);
}

void register_errors(py::module_&) {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const NotFoundError& e) {
      PyErr_SetString(PyExc_FileNotFoundError, e.what());
    } catch (const OutOfMemoryError& e) {
      PyErr_SetString(PyExc_MemoryError, e.what());
    } catch (const DeviceError& e) {  // a GPU call failed: not bad input (PyTorch raises RuntimeError too)
      PyErr_SetString(PyExc_RuntimeError, e.what());
    } catch (const Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
}

namespace {
py::dict import_hf_checkpoint(const std::string& hf_dir, const std::string& out_dir) {
  interop::HfConversion c;
  {
    py::gil_scoped_release release;
    c = interop::import_hf(hf_dir, out_dir);
  }
  py::dict d;
  d["model_type"] = c.model_type;
  d["architecture"] = c.config.architecture;
  d["weights_dtype"] = c.weights_dtype;
  d["parameters"] = c.parameters;
  d["tokenizer"] = c.tokenizer;
  d["notes"] = c.notes;
  return d;
}
}  // namespace

}  // namespace qkv::python

PYBIND11_MODULE(_core, m) {
  using namespace qkv::python;
  m.doc() = "qkv's C++ core: translation, generation, sentence embeddings and training over qkv checkpoints";
  m.attr("__version__") = QKV_VERSION;
  register_errors(m);
  qkv::ops::check_cpu_kernel_level();  // a QKV_ISA this CPU cannot run fails the import, naming it
  m.def("kernels", [] { return qkv::ops::cpu_kernel_level(); },
        "The instruction set qkv's CPU kernels use and what chose it (QKV_ISA forces a lower one).");
  m.def("set_num_threads", &qkv::set_num_threads, py::arg("n"),
        "Threads for qkv's kernels and BLAS (n <= 0: $QKV_THREADS if set, else all cores).");
  m.def("num_threads", &qkv::num_threads, "The thread count qkv computes with.");
  m.def("import_hf", &import_hf_checkpoint, py::arg("hf_dir"), py::arg("output_dir"),
        "Converts a Hugging Face directory (GPT-2, BERT or a sentence-transformers BERT: config.json, "
        "model.safetensors, tokenizer.json) into a qkv checkpoint, as `qkv import --from hf`. Returns a summary dict.");
  bind_model(m);
  bind_translator(m);
  bind_generator(m);
  bind_encoder(m);
  bind_trainer(m);
  // Keywords renamed to docs/cli.md's names keep their old spelling for a release (qkv/_renamed.py).
  py::module_::import("qkv._renamed").attr("install")(m);
}
