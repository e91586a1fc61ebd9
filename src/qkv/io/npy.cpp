#include "qkv/io/npy.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <utility>

#include "qkv/core/error.h"
#include "qkv/io/atomic_file.h"

namespace qkv::io {

namespace {
constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
}  // namespace

namespace {
// Magic, version 1.0, header length and the header itself, padded as NumPy pads it.
std::string npy_header(const std::string& descr, const Dims& dims) {
  std::string shape = "(";
  for (int i = 0; i < dims.size(); ++i) shape += std::to_string(dims[i]) + (dims.size() == 1 || i + 1 < dims.size() ? "," : "");
  shape += ")";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
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
  return out;
}

// UTF-8 -> code points; a byte that does not start a valid sequence becomes U+FFFD.
std::u32string code_points(const std::string& s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xe ? 3 : (b >> 3) == 0x1e ? 4 : 0;
    char32_t cp = len == 1 ? b : len == 2 ? (b & 0x1f) : len == 3 ? (b & 0x0f) : (b & 0x07);
    bool ok = len > 0 && i + static_cast<size_t>(len) <= s.size();
    for (int k = 1; ok && k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      ok = (c >> 6) == 0x2;
      cp = (cp << 6) | (c & 0x3f);
    }
    if (!ok || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      out += U'\ufffd';
      ++i;
    } else {
      out += cp;
      i += static_cast<size_t>(len);
    }
  }
  return out;
}

void put16(std::string& out, uint32_t v) {
  out += static_cast<char>(v & 0xff);
  out += static_cast<char>((v >> 8) & 0xff);
}
void put32(std::string& out, uint32_t v) {
  put16(out, v & 0xffff);
  put16(out, v >> 16);
}
}  // namespace

std::string npy_bytes(const Tensor& t_in) {
  QKV_CHECK(t_in.dtype() == DType::F32, "npy: only float32 tensors are written, got " << t_in.describe());
  const Tensor t = t_in.contiguous();
  std::string out = npy_header("<f4", t.shape());
  out.append(reinterpret_cast<const char*>(t.f32()), sizeof(float) * static_cast<size_t>(t.numel()));
  return out;
}

std::string npy_string_bytes(const std::vector<std::string>& items) {
  std::vector<std::u32string> wide;
  size_t width = 1;  // NumPy's narrowest string type is <U1
  for (const std::string& s : items) {
    wide.push_back(code_points(s));
    width = std::max(width, wide.back().size());
  }
  std::string out = npy_header("<U" + std::to_string(width), Dims{static_cast<int64_t>(items.size())});
  for (const std::u32string& w : wide)
    for (size_t i = 0; i < width; ++i) put32(out, i < w.size() ? static_cast<uint32_t>(w[i]) : 0);
  return out;
}

std::string npz_bytes(const std::vector<std::pair<std::string, std::string>>& arrays) {
  // A zip archive of stored (uncompressed) members, dated 1980-01-01 00:00 as np.savez's are not
  // (they carry the time of writing): the same arrays give the same bytes.
  std::string out, directory;
  for (const auto& [name, data] : arrays) {
    const std::string member = name + ".npy";
    QKV_CHECK(data.size() < 0xffffffffu && out.size() < 0xffffffffu,
              "npz: array '" << name << "' makes the archive larger than 4 GiB (zip64 is not written)");
    const auto crc = static_cast<uint32_t>(::crc32(0L, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
    const auto offset = static_cast<uint32_t>(out.size()), size = static_cast<uint32_t>(data.size());
    auto common = [&](std::string& h) {  // version needed, flags, method, time, date, crc, sizes, name length
      put16(h, 20);
      put16(h, 0);
      put16(h, 0);
      put16(h, 0);
      put16(h, 0x21);
      put32(h, crc);
      put32(h, size);
      put32(h, size);
      put16(h, static_cast<uint32_t>(member.size()));
    };
    put32(out, 0x04034b50);  // local file header
    common(out);
    put16(out, 0);  // extra field length
    out += member;
    out += data;
    put32(directory, 0x02014b50);  // central directory header
    put16(directory, 20);          // version made by
    common(directory);
    for (int i = 0; i < 4; ++i) put16(directory, 0);  // extra, comment, disk, internal attributes
    put32(directory, 0);                              // external attributes
    put32(directory, offset);
    directory += member;
  }
  QKV_CHECK(out.size() + directory.size() < 0xffffffffu, "npz: the archive is larger than 4 GiB (zip64 is not written)");
  const auto directory_offset = static_cast<uint32_t>(out.size());
  out += directory;
  put32(out, 0x06054b50);  // end of central directory
  put16(out, 0);
  put16(out, 0);
  put16(out, static_cast<uint32_t>(arrays.size()));
  put16(out, static_cast<uint32_t>(arrays.size()));
  put32(out, static_cast<uint32_t>(directory.size()));
  put32(out, directory_offset);
  put16(out, 0);
  return out;
}

void write_npz(const std::string& path, const std::vector<std::pair<std::string, std::string>>& arrays) {
  write_file_atomic(path, npz_bytes(arrays));
}

void write_npy(const std::string& path, const Tensor& t) { write_file_atomic(path, npy_bytes(t)); }

namespace {
// What a message shows of a header: printable ASCII, at most 200 characters.
std::string shown(const std::string& header) {
  std::string out;
  for (char c : header.substr(0, 200)) out += c >= 0x20 && c < 0x7f ? c : '?';
  return header.size() > 200 ? out + "..." : out;
}

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  Dims shape;
};

// NumPy's header: a Python dict literal with exactly the keys 'descr' (a string), 'fortran_order'
// (True or False) and 'shape' (a tuple of non-negative integers), each once, in any order, then
// padding (spaces, a newline). Parsed by hand, as strictly as NumPy's own reader: no regex (whose
// backtracking recursed once per character) and no number conversion that can throw.
class NpyHeaderParser {
 public:
  NpyHeaderParser(const std::string& text, const std::string& path) : s_(text), path_(path) {}

  NpyHeader parse() {
    NpyHeader h;
    bool seen_descr = false, seen_order = false, seen_shape = false;
    expect('{');
    while (!peek('}')) {
      const std::string key = string_literal();
      expect(':');
      if (key == "descr" && !seen_descr) {
        h.descr = string_literal();
        seen_descr = true;
      } else if (key == "fortran_order" && !seen_order) {
        h.fortran_order = boolean();
        seen_order = true;
      } else if (key == "shape" && !seen_shape) {
        h.shape = tuple();
        seen_shape = true;
      } else {
        fail("key '" + key + "' is unknown or given twice");
      }
      if (!peek('}')) expect(',');
    }
    expect('}');
    skip_space();
    if (pos_ != s_.size()) fail("text after the dictionary");
    if (!seen_descr || !seen_order || !seen_shape) fail("it needs the keys 'descr', 'fortran_order' and 'shape'");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(path_ + ": not a valid .npy header (" + what + "): " + shown(s_));
  }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool peek(char c) {
    skip_space();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  void expect(char c) {
    if (!peek(c)) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string string_literal() {
    skip_space();
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) fail("expected a quoted string");
    const char quote = s_[pos_++];
    const size_t end = s_.find(quote, pos_);
    if (end == std::string::npos) fail("unterminated string");
    std::string out = s_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return out;
  }
  bool boolean() {
    skip_space();
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      if (s_.compare(pos_, std::strlen(word), word) == 0) {
        pos_ += std::strlen(word);
        return value;
      }
    }
    fail("'fortran_order' must be True or False");
  }
  // A dimension: decimal digits, below 2^40 (no array file holds more).
  int64_t dimension() {
    skip_space();
    const size_t begin = pos_;
    int64_t d = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      d = d * 10 + (s_[pos_++] - '0');
      if (d >= (int64_t{1} << 40)) fail("a dimension is 2^40 or more");
    }
    if (pos_ == begin) fail("expected a dimension");
    return d;
  }
  // (), (n,) or (n, m, ...) with an optional trailing comma; (n) is an integer, not a tuple.
  Dims tuple() {
    expect('(');
    Dims dims;
    bool comma = false;
    while (!peek(')')) {
      if (dims.size() == kMaxDims) fail("more than " + std::to_string(kMaxDims) + " dimensions");
      dims.push_back(dimension());
      comma = peek(',');
      if (!comma) break;
      ++pos_;
    }
    expect(')');
    if (dims.size() == 1 && !comma) fail("'shape' must be a tuple: (n,) for one dimension");
    return dims;
  }

  const std::string& s_;
  const std::string& path_;
  size_t pos_ = 0;
};
}  // namespace

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
  const NpyHeader h = NpyHeaderParser(header, path).parse();
  QKV_CHECK(h.descr == "<f4" && !h.fortran_order,
            path << ": expected a little-endian float32 array in C order ('<f4'), header " << shown(header));
  // Each dimension is below 2^40, and so must be the product of the non-zero ones: the shape of an
  // empty array too, or its element count (Dims::numel, strides) would overflow.
  const size_t data = 10 + header_len, data_bytes = bytes.size() - data;
  constexpr size_t kMaxElements = size_t{1} << 40;
  size_t nonzero = 1;
  bool empty = false;
  for (const int64_t d : h.shape) {
    empty = empty || d == 0;
    if (d == 0) continue;
    QKV_CHECK(nonzero <= kMaxElements / static_cast<size_t>(d),
              path << ": shape " << h.shape << " has more than 2^40 elements");
    nonzero *= static_cast<size_t>(d);
  }
  const size_t numel = empty ? 0 : nonzero;
  QKV_CHECK(data_bytes == sizeof(float) * numel, path << ": " << data_bytes << " data bytes for " << numel << " floats");
  Tensor t = Tensor::empty(h.shape);
  std::memcpy(t.f32(), bytes.data() + data, sizeof(float) * numel);
  return t;
}

}  // namespace qkv::io
