// What the binding files share: tensors as NumPy arrays without copies, token-id lists, and
// running library code with the GIL released.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/nn/packed_linears.h"

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

// quantize= of Translator and Generator: "none" or "int8" (as the CLI's --quantize); anything
// else is a ValueError naming it.
nn::LinearPrecision precision_from_quantize(const std::string& quantize);

// Registers the exception translation: qkv::NotFoundError -> FileNotFoundError, qkv::Error ->
// ValueError; anything else keeps pybind11's mapping (std::bad_alloc -> MemoryError,
// std::exception -> RuntimeError).
void register_errors(py::module_& m);

void bind_model(py::module_& m);
void bind_translator(py::module_& m);
void bind_generator(py::module_& m);
void bind_encoder(py::module_& m);
void bind_trainer(py::module_& m);

}  // namespace qkv::python
