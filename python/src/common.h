// What the binding files share: tensors as NumPy arrays without copies, token-id lists, and
// running library code with the GIL released.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/models/model.h"
#include "qkv/nn/compute_type.h"

namespace qkv::python {

namespace py = pybind11;

// A NumPy view of `t`'s storage (no copy): the array holds a reference to the storage, so it stays
// valid after the model or result it came from is gone, and writing into it writes into `t`.
py::array tensor_to_numpy(const Tensor& t);

// Copies a NumPy array (any numeric dtype, cast to float32) into `t`, whose shape it must have;
// errors name `what`.
void copy_numpy_into(const py::array& source, Tensor& t, const std::string& what);

// A list of lists of ints (or a 2-D integer array) as token-id lines; errors name `what`.
std::vector<std::vector<int32_t>> to_id_lines(const py::handle& lines, const std::string& what);

// compute_type= of Translator, Generator, Encoder and score: a name of nn/compute_type.h
// ("float32", "bf16", "int8", "int8_bf16"); anything else is a ValueError naming the choices.
nn::ComputeType compute_type_from_name(const std::string& name);

// quantize= as a compute type: "none" float32, "int8"; anything else is a ValueError naming it.
nn::ComputeType compute_type_of_quantize(const std::string& quantize);

// The older per-call quantize= (None: the loaded compute type; "none": float32; "int8"). A value that
// changes the model's compute type switches it, for this call and the ones after, with a
// DeprecationWarning pointing at compute_type= at load.
void apply_quantize_argument(models::Model& model, const py::object& quantize);

// Registers the exception translation: qkv::NotFoundError -> FileNotFoundError,
// qkv::OutOfMemoryError -> MemoryError, qkv::Error -> ValueError; anything else keeps pybind11's mapping (std::bad_alloc -> MemoryError,
// std::exception -> RuntimeError).
void register_errors(py::module_& m);

void bind_model(py::module_& m);
void bind_translator(py::module_& m);
void bind_generator(py::module_& m);
void bind_encoder(py::module_& m);
void bind_trainer(py::module_& m);

}  // namespace qkv::python
