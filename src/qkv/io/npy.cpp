#include "qkv/io/npy.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <regex>

#include "qkv/core/error.h"
#include "qkv/io/atomic_file.h"

namespace qkv::io {

namespace {
constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
}  // namespace

std::string npy_bytes(const Tensor& t_in) {
  QKV_CHECK(t_in.dtype() == DType::F32, "npy: only float32 tensors are written, got " << t_in.describe());
  const Tensor t = t_in.contiguous();
  std::string shape = "(";
  for (int64_t i = 0; i < t.dim(); ++i) shape += std::to_string(t.size(i)) + (t.dim() == 1 || i + 1 < t.dim() ? "," : "");
  shape += ")";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  // The header (with magic, version and length) is padded with spaces to a multiple of 64 bytes
  // and ends with a newline, as NumPy writes it.
  const size_t prefix = kMagicSize + 2 + 2;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out(kMagic, kMagicSize);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>((header.size() >> 8) & 0xff);
  out += header;
  out.append(reinterpret_cast<const char*>(t.f32()), sizeof(float) * static_cast<size_t>(t.numel()));
  return out;
}

void write_npy(const std::string& path, const Tensor& t) { write_file_atomic(path, npy_bytes(t)); }

Tensor read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  QKV_CHECK(in, path << ": cannot open for reading");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  QKV_CHECK(bytes.size() >= 10 && bytes.compare(0, kMagicSize, kMagic, kMagicSize) == 0,
            path << ": not a .npy file (no \\x93NUMPY magic)");
  QKV_CHECK(bytes[6] == 1, path << ": .npy version " << int(bytes[6]) << " is not supported (1.0 is)");
  const size_t header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
  QKV_CHECK(10 + header_len <= bytes.size(), path << ": truncated header");
  const std::string header = bytes.substr(10, header_len);
  QKV_CHECK(header.find("'descr': '<f4'") != std::string::npos && header.find("'fortran_order': False") != std::string::npos,
            path << ": expected a little-endian float32 array in C order ('<f4'), header " << header);
  std::smatch m;
  QKV_CHECK(std::regex_search(header, m, std::regex("'shape': \\(([0-9, ]*)\\)")), path << ": no shape in header");
  Dims shape;
  const std::string dims = m[1].str();
  static const std::regex kNumber("[0-9]+");
  std::sregex_iterator it(dims.begin(), dims.end(), kNumber), end;
  int64_t numel = 1;
  for (; it != end; ++it) {
    const int64_t d = std::stoll(it->str());
    QKV_CHECK(d >= 0 && d < (int64_t{1} << 40), path << ": dimension " << d << " out of range");
    shape.push_back(d);
    numel *= d;
  }
  const size_t data = 10 + header_len;
  QKV_CHECK(bytes.size() - data == sizeof(float) * static_cast<size_t>(numel),
            path << ": " << bytes.size() - data << " data bytes for " << numel << " floats");
  Tensor t = Tensor::empty(shape);
  std::memcpy(t.f32(), bytes.data() + data, sizeof(float) * static_cast<size_t>(numel));
  return t;
}

}  // namespace qkv::io
