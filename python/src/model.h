// The Python view of a model: who keeps it alive (a Model loaded from Python owns it; one taken
// from a Translator, Generator or Encoder keeps that object alive instead).
#pragma once
#include <cstring>
#include <memory>
#include <optional>

#include "common.h"
#include "qkv/models/model.h"

namespace qkv::python {

struct PyModel {
  models::Model* model = nullptr;
  std::shared_ptr<models::Model> owned;  // set when Python owns the model
  py::object owner;                      // else the Python object that holds it
};

py::dict model_parameters(const PyModel& m);

}  // namespace qkv::python
