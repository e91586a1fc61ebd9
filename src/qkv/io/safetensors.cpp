// Implementation of the safetensors reader/writer declared in safetensors.h.
//
// Reading validates the whole header before touching tensor data, then reads
// each tensor's bytes with pread() straight into its own buffer, so a file is
// never held in memory twice. Writing goes through a temporary file that is
// fsynced and renamed, so a crash never leaves a half-written checkpoint at
// the destination path.
#include "qkv/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <utility>

#include "qkv/core/dtype.h"

namespace qkv::io {
namespace {

// ordered_json keeps header keys in insertion order: the writer emits
// "__metadata__" first and then tensors in data order, like the HF package.
using Json = nlohmann::ordered_json;

constexpr uint64_t kLengthPrefixBytes = 8;
// Same limit as the reference implementation: refuse to parse absurd headers.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr uint64_t kDataAlignment = 8;
constexpr const char* kMetadataKey = "__metadata__";

struct DtypeInfo {
  StDtype dtype;
  const char* name;
  size_t size;
};

constexpr std::array<DtypeInfo, 7> kDtypes = {{
    {StDtype::F32, "F32", 4},
    {StDtype::I32, "I32", 4},
    {StDtype::I64, "I64", 8},
    {StDtype::F64, "F64", 8},
    {StDtype::F16, "F16", 2},
    {StDtype::BF16, "BF16", 2},
    {StDtype::I8, "I8", 1},
}};

bool is_half(StDtype dtype) { return dtype == StDtype::F16 || dtype == StDtype::BF16; }


const DtypeInfo& dtype_info(StDtype dtype) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.dtype == dtype) return info;
  }
  throw SafetensorsError("safetensors: invalid StDtype value " +
                         std::to_string(static_cast<int>(dtype)));
}

const DtypeInfo* find_dtype(std::string_view name) {
  for (const DtypeInfo& info : kDtypes) {
    if (name == info.name) return &info;
  }
  return nullptr;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw SafetensorsError("safetensors file '" + path + "': " + what);
}

// Call right after the failing syscall, before anything else can clobber errno.
std::string errno_text() { return std::strerror(errno); }

std::string format_shape(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ",";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

std::string format_range(uint64_t begin, uint64_t end) {
  std::string out = "[";  // built by appends: GCC 12 warns falsely (-Wrestrict) on "[" + std::string
  out += std::to_string(begin);
  out += ',';
  out += std::to_string(end);
  return out + ")";
}

// numel * elem_size, or false if the shape is too large for 64-bit arithmetic. The product of
// the non-zero dims times elem_size must fit in int64 even when another dim is 0 (so the byte
// size is 0): callers compute strides and element counts from these shapes in signed 64-bit
// arithmetic and in any order, so no partial product may overflow. Dims must be non-negative.
bool checked_byte_size(const std::vector<int64_t>& shape, StDtype dtype, uint64_t* out) {
  constexpr auto kLimit = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t nonzero_product = dtype_info(dtype).size;
  bool has_zero_dim = false;
  for (int64_t dim : shape) {
    const auto udim = static_cast<uint64_t>(dim);
    if (udim == 0) {
      has_zero_dim = true;
      continue;
    }
    if (nonzero_product > kLimit / udim) return false;
    nonzero_product *= udim;
  }
  *out = has_zero_dim ? 0 : nonzero_product;
  return true;
}

// Owns a file descriptor; closes it on scope exit.
class FdGuard {
 public:
  explicit FdGuard(int fd) : fd_(fd) {}
  FdGuard(FdGuard&& other) noexcept : fd_(other.release()) {}
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  FdGuard& operator=(FdGuard&&) = delete;
  ~FdGuard() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // Hands ownership back so the caller can check close()'s result.
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// ---------------------------------------------------------------- reading ---

// Everything an error message about the file needs, plus the parsed layout.
struct ReadContext {
  std::string path;
  uint64_t file_size = 0;
  uint64_t header_size = 0;
  uint64_t data_start = 0;  // file offset of the data buffer
  uint64_t data_size = 0;   // bytes after the header

  [[noreturn]] void fail_tensor(const std::string& name, const std::string& what) const {
    fail(path, "tensor '" + name + "' " + what);
  }
  std::string at_file_offset(uint64_t data_offset) const {
    return "file offset " + std::to_string(data_start + data_offset);
  }
};

// A header entry after validation, before its bytes are read.
struct TensorEntry {
  StTensor tensor;
  uint64_t begin = 0;
  uint64_t end = 0;
  size_t header_index = 0;  // breaks ties between empty tensors at the same offset
};

FdGuard open_for_reading(const std::string& path, uint64_t* size) {
  FdGuard fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail(path, "cannot open for reading: " + errno_text());
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail(path, "cannot stat: " + errno_text());
  if (S_ISDIR(st.st_mode)) fail(path, "is a directory, expected a safetensors file");
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

void read_exact(int fd, uint64_t offset, unsigned char* buffer, uint64_t count,
                const std::string& path, const std::string& what) {
  uint64_t done = 0;
  while (done < count) {
    const ssize_t got = ::pread(fd, buffer + done, count - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      fail(path, "read error in " + what + " at file offset " + std::to_string(offset + done) +
                     ": " + errno_text());
    }
    if (got == 0) {
      fail(path, "unexpected end of file in " + what + " at file offset " +
                     std::to_string(offset + done) + " (file changed while reading?)");
    }
    done += static_cast<uint64_t>(got);
  }
}

uint64_t decode_le_u64(const unsigned char* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

// Reads the length prefix and checks the header fits in the file.
void read_header_size(int fd, ReadContext* ctx) {
  if (ctx->file_size < kLengthPrefixBytes) {
    fail(ctx->path, "file is " + std::to_string(ctx->file_size) +
                        " bytes, shorter than the 8-byte header-length prefix");
  }
  unsigned char prefix[kLengthPrefixBytes];
  read_exact(fd, 0, prefix, kLengthPrefixBytes, ctx->path, "header-length prefix");
  const uint64_t header_size = decode_le_u64(prefix);
  if (header_size > kMaxHeaderBytes) {
    fail(ctx->path, "header length " + std::to_string(header_size) +
                        " (file offset 0) exceeds the " + std::to_string(kMaxHeaderBytes) +
                        "-byte limit (corrupt length prefix?)");
  }
  if (header_size > ctx->file_size - kLengthPrefixBytes) {
    fail(ctx->path, "header length " + std::to_string(header_size) +
                        " (file offset 0) is larger than the " +
                        std::to_string(ctx->file_size - kLengthPrefixBytes) +
                        " bytes that follow the prefix (file size " +
                        std::to_string(ctx->file_size) + ", truncated?)");
  }
  ctx->header_size = header_size;
  ctx->data_start = kLengthPrefixBytes + header_size;
  ctx->data_size = ctx->file_size - ctx->data_start;
}

std::string read_header_text(int fd, const ReadContext& ctx) {
  std::string text(ctx.header_size, '\0');
  read_exact(fd, kLengthPrefixBytes, reinterpret_cast<unsigned char*>(text.data()), ctx.header_size,
             ctx.path, "JSON header");
  return text;
}

// A parse callback for the header that watches for two things nlohmann accepts:
//  - duplicate keys: nlohmann silently keeps the last, which would let a second "data_offsets"
//    or a second tensor of the same name quietly win. The first key that repeats inside any one
//    object is recorded;
//  - deep nesting: copying and printing a parsed value recurse once per level, so a header of
//    nested brackets ("shape": [[[[...) would overflow the stack. The format needs 3 levels.
class HeaderParseWatch {
 public:
  explicit HeaderParseWatch(const std::string& path) : path_(path) {}

  bool operator()(int depth, Json::parse_event_t event, Json& parsed) {
    const auto level = static_cast<size_t>(depth);
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        level >= kMaxHeaderNesting) {
      fail(path_, "header nests JSON objects or arrays more than " +
                      std::to_string(kMaxHeaderNesting) + " levels deep");
    }
    if (event == Json::parse_event_t::object_start) {
      // The keys of the object that starts here are reported at depth + 1.
      if (keys_by_depth_.size() <= level + 1) keys_by_depth_.resize(level + 2);
      keys_by_depth_[level + 1].clear();
    } else if (event == Json::parse_event_t::key && duplicate_.empty()) {
      const std::string key = parsed.get<std::string>();
      if (level == 1) top_level_key_ = key;
      if (!keys_by_depth_[level].insert(key).second) {
        duplicate_ = key;
        duplicate_depth_ = level;
        duplicate_parent_ = top_level_key_;
      }
    }
    return true;
  }
  // Empty when no key repeats; otherwise what to say about the first repeat.
  std::string describe() const {
    if (duplicate_.empty()) return "";
    if (duplicate_depth_ == 1) return "duplicate tensor name '" + duplicate_ + "' in header";
    return "duplicate key \"" + duplicate_ + "\" inside header entry '" + duplicate_parent_ + "'";
  }

 private:
  static constexpr size_t kMaxHeaderNesting = 16;
  const std::string& path_;
  std::vector<std::set<std::string>> keys_by_depth_;
  std::string top_level_key_;
  std::string duplicate_;
  size_t duplicate_depth_ = 0;
  std::string duplicate_parent_;
};

// Parses the header: a JSON object that must start at its first byte (as the reference reader
// requires); trailing spaces (the writers' alignment padding) are allowed.
Json parse_header(const std::string& text, const ReadContext& ctx) {
  if (text.empty() || text.front() != '{') {
    fail(ctx.path, "header (file offset 8) does not start with '{' (corrupt length prefix or not "
                   "a safetensors file?)");
  }
  HeaderParseWatch watch(ctx.path);
  Json header;
  try {
    header = Json::parse(text, std::ref(watch));
  } catch (const Json::parse_error& e) {
    // e.byte is 1-based within the header text.
    const uint64_t error_offset = kLengthPrefixBytes + (e.byte > 0 ? e.byte - 1 : 0);
    fail(ctx.path, "header is not valid JSON (near file offset " + std::to_string(error_offset) +
                       "): " + e.what());
  } catch (const Json::exception& e) {  // e.g. out_of_range 406: a number like 1e999 overflows
    fail(ctx.path, std::string("header (file offset 8) is not valid JSON: ") + e.what());
  }
  // Starting with '{' and parsing, the header is an object.
  const std::string duplicate = watch.describe();
  if (!duplicate.empty()) fail(ctx.path, duplicate + " (file offset 8)");
  const size_t last = text.find_last_not_of(' ');
  if (text[last] != '}') {  // JSON allows trailing tabs and newlines; the format pads with spaces
    fail(ctx.path, "header pads the JSON object with a byte other than a space at file offset " +
                       std::to_string(kLengthPrefixBytes + last));
  }
  return header;
}

std::map<std::string, std::string> parse_metadata(const Json& value, const ReadContext& ctx) {
  if (!value.is_object()) {
    fail(ctx.path, std::string("\"__metadata__\" is a JSON ") + value.type_name() +
                       ", expected an object of strings");
  }
  std::map<std::string, std::string> metadata;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) {
      fail(ctx.path, "\"__metadata__\" value for key '" + key + "' is a JSON " + item.type_name() +
                         ", expected a string");
    }
    metadata[key] = item.get<std::string>();
  }
  return metadata;
}

const Json& required_field(const Json& entry, const char* field, const std::string& name,
                           const ReadContext& ctx) {
  const auto it = entry.find(field);
  if (it == entry.end()) ctx.fail_tensor(name, std::string("is missing \"") + field + "\"");
  return *it;
}

StDtype parse_dtype_field(const Json& entry, const std::string& name, const ReadContext& ctx,
                          const StReadOptions& options) {
  const Json& value = required_field(entry, "dtype", name, ctx);
  if (!value.is_string()) {
    ctx.fail_tensor(
        name, std::string("\"dtype\" is a JSON ") + value.type_name() + ", expected a string");
  }
  const std::string text = value.get<std::string>();
  const DtypeInfo* info = find_dtype(text);
  if (info == nullptr || (is_half(info->dtype) && !options.allow_half)) {
    ctx.fail_tensor(name, "has unknown dtype \"" + text + "\" (supported: F32, I32, I64, F64, I8" +
                              (options.allow_half ? ", F16, BF16)" : "; F16 and BF16 only by qkv import)"));
  }
  return info->dtype;
}

std::vector<int64_t> parse_shape_field(const Json& entry, const std::string& name,
                                       const ReadContext& ctx) {
  const Json& value = required_field(entry, "shape", name, ctx);
  if (!value.is_array()) {
    ctx.fail_tensor(name, std::string("\"shape\" is a JSON ") + value.type_name() +
                              ", expected an array of integers");
  }
  std::vector<int64_t> shape;
  for (const Json& dim : value) {
    if (!dim.is_number_integer()) {
      ctx.fail_tensor(name, "\"shape\" " + value.dump() + " contains a non-integer");
    }
    if (!dim.is_number_unsigned()) {
      ctx.fail_tensor(name, "has negative dim in shape " + value.dump());
    }
    const auto udim = dim.get<uint64_t>();
    if (udim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      ctx.fail_tensor(name, "has a dim too large for int64 in shape " + value.dump());
    }
    shape.push_back(static_cast<int64_t>(udim));
  }
  return shape;
}

std::pair<uint64_t, uint64_t> parse_offsets_field(const Json& entry, const std::string& name,
                                                  const ReadContext& ctx) {
  const Json& value = required_field(entry, "data_offsets", name, ctx);
  const bool two_unsigned = value.is_array() && value.size() == 2 &&
                            value[0].is_number_unsigned() && value[1].is_number_unsigned();
  if (!two_unsigned) {
    ctx.fail_tensor(
        name, "\"data_offsets\" " + value.dump() + " is not an array of two non-negative integers");
  }
  const auto begin = value[0].get<uint64_t>();
  const auto end = value[1].get<uint64_t>();
  if (end < begin) {
    ctx.fail_tensor(name, "data_offsets " + value.dump() + " have end < begin");
  }
  return {begin, end};
}

// Offsets must lie inside the data buffer and span exactly numel * elem_size bytes.
void check_extent(const TensorEntry& e, const ReadContext& ctx) {
  const std::string& name = e.tensor.name;
  if (e.end > ctx.data_size) {
    ctx.fail_tensor(name, "data_offsets " + format_range(e.begin, e.end) + " exceed data size " +
                              std::to_string(ctx.data_size) +
                              " (file truncated?); data buffer starts at file offset " +
                              std::to_string(ctx.data_start));
  }
  uint64_t expected = 0;
  if (!checked_byte_size(e.tensor.shape, e.tensor.dtype, &expected)) {
    ctx.fail_tensor(name, "shape " + format_shape(e.tensor.shape) +
                              " overflows 64-bit sizes (product of its dims times " +
                              std::to_string(st_dtype_size(e.tensor.dtype)) + " bytes)");
  }
  if (e.end - e.begin != expected) {
    ctx.fail_tensor(name, std::string("(") + st_dtype_name(e.tensor.dtype) + ", shape " +
                              format_shape(e.tensor.shape) + ") needs " + std::to_string(expected) +
                              " bytes but data_offsets " + format_range(e.begin, e.end) + " span " +
                              std::to_string(e.end - e.begin) + " bytes (at " +
                              ctx.at_file_offset(e.begin) + ")");
  }
}

TensorEntry parse_tensor_entry(const std::string& name, const Json& entry, size_t index,
                               const ReadContext& ctx, const StReadOptions& options) {
  if (!entry.is_object()) {
    ctx.fail_tensor(name, std::string("entry is a JSON ") + entry.type_name() +
                              ", expected an object with dtype/shape/data_offsets");
  }
  TensorEntry e;
  e.tensor.name = name;
  e.tensor.dtype = parse_dtype_field(entry, name, ctx, options);
  e.tensor.shape = parse_shape_field(entry, name, ctx);
  std::tie(e.begin, e.end) = parse_offsets_field(entry, name, ctx);
  e.header_index = index;
  check_extent(e, ctx);
  return e;
}

// The safetensors format requires the tensors to tile the data buffer: sorted by offset, the
// first begins at 0, each begins where the previous one ended, and the last ends at the end of
// the file. Anything else means the header and the data disagree (a wrong length prefix, bytes
// inserted or dropped), and every tensor after the damage would silently load shifted bytes.
// Sorting by (begin, end) puts an empty tensor before a non-empty one at the same offset, so
// empty tensors are legal exactly at tensor boundaries (as in the reference implementation).
void sort_and_check_tiling(std::vector<TensorEntry>* entries, const ReadContext& ctx) {
  std::sort(entries->begin(), entries->end(), [](const TensorEntry& a, const TensorEntry& b) {
    return std::tie(a.begin, a.end, a.header_index) < std::tie(b.begin, b.end, b.header_index);
  });
  uint64_t covered = 0;                   // the data buffer's bytes [0, covered) are accounted for
  const TensorEntry* previous = nullptr;  // the entry that ends at `covered`
  for (const TensorEntry& e : *entries) {
    if (e.begin > covered) {
      ctx.fail_tensor(e.tensor.name,
                      "data_offsets " + format_range(e.begin, e.end) + " leave a gap: data bytes " +
                          format_range(covered, e.begin) + " (from " + ctx.at_file_offset(covered) +
                          ") belong to no tensor" +
                          (previous ? " (previous tensor '" + previous->tensor.name + "' ends there)"
                                    : std::string(" (the first tensor must start at 0)")));
    }
    if (e.begin < covered) {
      ctx.fail_tensor(e.tensor.name, "data_offsets " + format_range(e.begin, e.end) +
                                         " overlap tensor '" + previous->tensor.name +
                                         "' data_offsets " +
                                         format_range(previous->begin, previous->end) + " (at " +
                                         ctx.at_file_offset(e.begin) + ")");
    }
    covered = e.end;
    previous = &e;
  }
  if (covered != ctx.data_size) {
    fail(ctx.path, std::to_string(ctx.data_size - covered) + " trailing bytes from " +
                       ctx.at_file_offset(covered) + " to the end of the file (size " +
                       std::to_string(ctx.file_size) + ") belong to no tensor" +
                       (previous ? " (the last tensor, '" + previous->tensor.name + "', ends at " +
                                       ctx.at_file_offset(covered) + ")"
                                 : std::string(" (the header lists no tensor)")) +
                       "; wrong header-length prefix or bytes inserted into the data?");
  }
}

std::vector<TensorEntry> parse_entries(const Json& header, const ReadContext& ctx,
                                       std::map<std::string, std::string>* metadata,
                                       const StReadOptions& options) {
  std::vector<TensorEntry> entries;
  size_t index = 0;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      *metadata = parse_metadata(value, ctx);
    } else {
      entries.push_back(parse_tensor_entry(key, value, index++, ctx, options));
    }
  }
  sort_and_check_tiling(&entries, ctx);
  return entries;
}

void read_tensor_bytes(int fd, TensorEntry* e, const ReadContext& ctx) {
  e->tensor.bytes.resize(e->end - e->begin);
  read_exact(fd, ctx.data_start + e->begin, e->tensor.bytes.data(), e->tensor.bytes.size(),
             ctx.path, "data of tensor '" + e->tensor.name + "'");
}

// ---------------------------------------------------------------- writing ---

void validate_for_write(const std::string& path, const StFile& file) {
  std::set<std::string> names;
  for (const StTensor& t : file.tensors) {
    if (t.name == kMetadataKey) fail(path, "tensor name '__metadata__' is reserved");
    if (!names.insert(t.name).second) fail(path, "duplicate tensor name '" + t.name + "'");
    for (int64_t dim : t.shape) {
      if (dim < 0)
        fail(path, "tensor '" + t.name + "' has negative dim in shape " + format_shape(t.shape));
    }
    uint64_t expected = 0;
    if (!checked_byte_size(t.shape, t.dtype, &expected) || t.bytes.size() != expected) {
      fail(path, "tensor '" + t.name + "' (" + st_dtype_name(t.dtype) + ", shape " +
                     format_shape(t.shape) + ") has " + std::to_string(t.bytes.size()) +
                     " bytes, expected " + std::to_string(expected));
    }
  }
}

std::vector<const StTensor*> sorted_by_name(const StFile& file) {
  std::vector<const StTensor*> sorted;
  for (const StTensor& t : file.tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const StTensor* a, const StTensor* b) { return a->name < b->name; });
  return sorted;
}

// Header JSON for tensors laid out contiguously in the given order, padded with
// spaces so that 8 + header size is a multiple of 8 (data buffer aligned).
std::string build_header(const std::string& path, const std::vector<const StTensor*>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  uint64_t offset = 0;
  for (const StTensor* t : tensors) {
    Json entry = Json::object();
    entry["dtype"] = st_dtype_name(t->dtype);
    entry["shape"] = t->shape;
    entry["data_offsets"] = {offset, offset + t->bytes.size()};
    header[t->name] = std::move(entry);
    offset += t->bytes.size();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const Json::type_error& e) {  // tensor names / metadata must be valid UTF-8
    fail(path, std::string("cannot encode header: ") + e.what());
  }
  const uint64_t misalignment = (kLengthPrefixBytes + text.size()) % kDataAlignment;
  if (misalignment != 0) text.append(kDataAlignment - misalignment, ' ');
  return text;
}

std::string encode_le_u64(uint64_t value) {
  std::string bytes(kLengthPrefixBytes, '\0');
  for (size_t i = 0; i < kLengthPrefixBytes; ++i) {
    bytes[i] = static_cast<char>((value >> (8 * i)) & 0xFF);
  }
  return bytes;
}

void write_all(int fd, const void* data, size_t count, const std::string& path,
               const std::string& tmp_path) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  size_t done = 0;
  while (done < count) {
    const ssize_t wrote = ::write(fd, bytes + done, count - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote < 0) fail(path, "write to '" + tmp_path + "' failed: " + errno_text());
    done += static_cast<size_t>(wrote);
  }
}

// Best effort: makes the rename itself durable. Some filesystems refuse to
// fsync directories; the data file is already synced, so that is not fatal.
void fsync_parent_directory(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// Writes the complete file to tmp_path and fsyncs it; throws on any failure.
void write_file_contents(const std::string& path, const std::string& tmp_path,
                         const std::string& header, const std::vector<const StTensor*>& tensors) {
  FdGuard fd(::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) {
    fail(path, "cannot create temporary file '" + tmp_path + "': " + errno_text());
  }
  const std::string prefix = encode_le_u64(header.size());
  write_all(fd.get(), prefix.data(), prefix.size(), path, tmp_path);
  write_all(fd.get(), header.data(), header.size(), path, tmp_path);
  for (const StTensor* t : tensors) {
    write_all(fd.get(), t->bytes.data(), t->bytes.size(), path, tmp_path);
  }
  if (::fsync(fd.get()) != 0) fail(path, "fsync of '" + tmp_path + "' failed: " + errno_text());
  // close() can report deferred write errors (e.g. on NFS), so check it.
  if (::close(fd.release()) != 0) {
    fail(path, "close of '" + tmp_path + "' failed: " + errno_text());
  }
}

}  // namespace

const StTensor* StFile::find(const std::string& name) const {
  for (const StTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

size_t st_dtype_size(StDtype dtype) { return dtype_info(dtype).size; }

const char* st_dtype_name(StDtype dtype) { return dtype_info(dtype).name; }

StFile read_safetensors(const std::string& path, const StReadOptions& options) {
  ReadContext ctx;
  ctx.path = path;
  FdGuard fd = open_for_reading(path, &ctx.file_size);
  read_header_size(fd.get(), &ctx);
  const Json header = parse_header(read_header_text(fd.get(), ctx), ctx);

  StFile file;
  std::vector<TensorEntry> entries = parse_entries(header, ctx, &file.metadata, options);
  file.tensors.reserve(entries.size());
  for (TensorEntry& e : entries) {
    read_tensor_bytes(fd.get(), &e, ctx);
    file.tensors.push_back(std::move(e.tensor));
  }
  return file;
}

void widen_half_to_f32(StTensor& tensor, const std::string& path) {
  if (!is_half(tensor.dtype)) return;
  uint64_t expected = 0;
  if (!checked_byte_size(tensor.shape, tensor.dtype, &expected) || tensor.bytes.size() != expected) {
    fail(path, "tensor '" + tensor.name + "' (" + st_dtype_name(tensor.dtype) + ", shape " +
                   format_shape(tensor.shape) + ") has " + std::to_string(tensor.bytes.size()) +
                   " bytes, expected " + std::to_string(expected));
  }
  const size_t count = tensor.bytes.size() / 2;
  std::vector<unsigned char> wide(count * 4);
  for (size_t i = 0; i < count; ++i) {
    const auto half = static_cast<uint16_t>(tensor.bytes[2 * i] | (tensor.bytes[2 * i + 1] << 8));
    // BF16 is the top half of a float32.
    const uint32_t bits = tensor.dtype == StDtype::F16 ? float_bits(f16_to_f32({half})) : uint32_t{half} << 16;
    for (int b = 0; b < 4; ++b) wide[4 * i + b] = static_cast<unsigned char>((bits >> (8 * b)) & 0xFF);
  }
  tensor.bytes = std::move(wide);
  tensor.dtype = StDtype::F32;
}

void write_safetensors(const std::string& path, const StFile& file) {
  validate_for_write(path, file);
  const std::vector<const StTensor*> tensors = sorted_by_name(file);
  const std::string header = build_header(path, tensors, file.metadata);
  const std::string tmp_path = path + ".tmp." + std::to_string(::getpid());
  try {
    write_file_contents(path, tmp_path, header, tensors);
    if (::rename(tmp_path.c_str(), path.c_str()) != 0) {
      fail(path, "rename of '" + tmp_path + "' over it failed: " + errno_text());
    }
  } catch (...) {
    ::unlink(tmp_path.c_str());  // never leave a stray temporary behind
    throw;
  }
  fsync_parent_directory(path);
}

}  // namespace qkv::io
