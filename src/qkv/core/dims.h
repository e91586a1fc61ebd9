// Dims: a tensor shape or stride list stored inline (no heap), at most kMaxDims entries.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

#include "qkv/core/error.h"

namespace qkv {

constexpr int kMaxDims = 6;

class Dims {
 public:
  Dims() = default;
  Dims(std::initializer_list<int64_t> values) {
    QKV_CHECK(values.size() <= kMaxDims, "tensor rank " << values.size() << " exceeds " << kMaxDims);
    for (int64_t v : values) d_[n_++] = v;
  }
  template <class It>
  static Dims from_range(It begin, It end) {
    Dims out;
    for (It it = begin; it != end; ++it) out.push_back(static_cast<int64_t>(*it));
    return out;
  }
  int size() const { return n_; }
  int64_t operator[](int i) const { return d_[i]; }
  int64_t& operator[](int i) { return d_[i]; }
  // Negative index counts from the back, as in PyTorch: back(-1) is the last dim.
  int64_t at(int i) const { return d_[i < 0 ? n_ + i : i]; }
  void push_back(int64_t v) {
    QKV_CHECK(n_ < kMaxDims, "tensor rank exceeds " << kMaxDims);
    d_[n_++] = v;
  }
  int64_t numel() const {
    int64_t p = 1;
    for (int i = 0; i < n_; ++i) p *= d_[i];
    return p;
  }
  const int64_t* begin() const { return d_; }
  const int64_t* end() const { return d_ + n_; }
  bool operator==(const Dims& o) const {
    if (n_ != o.n_) return false;
    for (int i = 0; i < n_; ++i)
      if (d_[i] != o.d_[i]) return false;
    return true;
  }
  bool operator!=(const Dims& o) const { return !(*this == o); }
  // "(64, 100, 512)", as PyTorch prints a size.
  std::string str() const {
    std::string s = "(";
    for (int i = 0; i < n_; ++i) {
      if (i) s += ", ";
      s += std::to_string(d_[i]);
    }
    s += ")";
    return s;
  }

 private:
  int64_t d_[kMaxDims] = {};
  int n_ = 0;
};

inline std::ostream& operator<<(std::ostream& os, const Dims& d) { return os << d.str(); }

}  // namespace qkv
