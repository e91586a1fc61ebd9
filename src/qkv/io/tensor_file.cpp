#include "qkv/io/tensor_file.h"

#include <cstring>

namespace qkv::io {

namespace {
// The file's dtype of each tensor dtype (safetensors names them all).
StDtype st_dtype_of(DType dtype) {
  switch (dtype) {
    case DType::F32: return StDtype::F32;
    case DType::I32: return StDtype::I32;
    case DType::BF16: return StDtype::BF16;
    case DType::F16: return StDtype::F16;
    case DType::I8: return StDtype::I8;
  }
  return StDtype::F32;
}
}  // namespace

void save_tensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                  const std::map<std::string, std::string>& metadata) {
  StFile file;
  file.metadata = metadata;
  for (const auto& [name, t] : tensors) {
    StTensor st;
    st.name = name;
    QKV_CHECK(t.layout() == Layout::Strided, path << ": tensor '" << name << "' " << t.describe()
                                                   << " is packed for a kernel; save the weight it was made from");
    st.dtype = st_dtype_of(t.dtype());
    st.shape.assign(t.shape().begin(), t.shape().end());
    const Tensor c = t.contiguous().to(Device::cpu());  // the same file from either device
    st.bytes.resize(static_cast<size_t>(c.nbytes()));
    if (!st.bytes.empty()) std::memcpy(st.bytes.data(), c.raw_data(), st.bytes.size());
    file.tensors.push_back(std::move(st));
  }
  write_safetensors(path, file);
}

// SafetensorsError is a qkv::Error, so read errors pass through unchanged.
TensorFile load_tensors(const std::string& path, const StReadOptions& options) {
  return TensorFile(path, read_safetensors(path, options));
}

namespace {
Dims dims_of(const StTensor& st) { return Dims::from_range(st.shape.begin(), st.shape.end()); }
}  // namespace

void TensorFile::take_into(const std::string& name, Tensor& dst) {
  const StTensor* st = file_.find(name);
  QKV_CHECK(st, path_ << ": missing tensor '" << name << "' (expected shape " << dst.shape() << ")");
  QKV_CHECK(st->dtype == StDtype::F32, path_ << ": tensor '" << name << "' has dtype " << st_dtype_name(st->dtype)
                                             << ", expected F32");
  QKV_CHECK(dims_of(*st) == dst.shape(), path_ << ": tensor '" << name << "' has shape " << dims_of(*st)
                                               << ", expected " << dst.shape());
  QKV_CHECK(dst.is_contiguous(), "take_into: destination of '" << name << "' is not contiguous");
  if (dst.device().is_cuda()) {  // a model or optimizer on a GPU: through the host
    Tensor host = Tensor::empty(dst.shape());
    if (!st->bytes.empty()) std::memcpy(host.f32(), st->bytes.data(), st->bytes.size());
    dst.copy_from(host.to(dst.device()));
  } else if (!st->bytes.empty()) {
    std::memcpy(dst.f32(), st->bytes.data(), st->bytes.size());
  }
  taken_.insert(name);
}

Tensor TensorFile::take(const std::string& name) {
  const StTensor* st = file_.find(name);
  QKV_CHECK(st, path_ << ": missing tensor '" << name << "'");
  DType dtype = DType::F32;
  bool known = false;
  for (DType d : {DType::F32, DType::I32, DType::BF16, DType::F16, DType::I8})
    if (st_dtype_of(d) == st->dtype) dtype = d, known = true;
  QKV_CHECK(known, path_ << ": tensor '" << name << "' has unsupported dtype " << st_dtype_name(st->dtype));
  Tensor t = Tensor::empty(dims_of(*st), dtype);
  QKV_CHECK(static_cast<size_t>(t.nbytes()) == st->bytes.size(),
            path_ << ": tensor '" << name << "' has " << st->bytes.size() << " bytes for " << t.describe());
  if (!st->bytes.empty()) std::memcpy(t.raw_data(), st->bytes.data(), st->bytes.size());
  taken_.insert(name);
  return t;
}

void TensorFile::expect_all_taken() const {
  std::string extra;
  for (const StTensor& st : file_.tensors)
    if (!taken_.count(st.name)) extra += (extra.empty() ? "'" : ", '") + st.name + "'";
  QKV_CHECK(extra.empty(), path_ << ": unexpected tensor(s) not in the model: " << extra);
}

std::string TensorFile::metadata_value(const std::string& key) const {
  auto it = file_.metadata.find(key);
  QKV_CHECK(it != file_.metadata.end(), path_ << ": metadata key \"" << key << "\" is missing");
  return it->second;
}

}  // namespace qkv::io
