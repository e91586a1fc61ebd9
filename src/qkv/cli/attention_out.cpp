#include "qkv/cli/attention_out.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "qkv/cli/python_plot.h"
#include "qkv/core/error.h"
#include "qkv/io/npy.h"

namespace qkv::cli {
namespace {

// Per-layer (H, Q, K) tensors stacked into one (L, H, Q, K) array.
std::string stacked(const std::vector<Tensor>& layers, const std::string& what) {
  QKV_CHECK(!layers.empty(), "attention: no " << what << " weights were captured");
  const Dims one = layers[0].shape();
  Tensor all = Tensor::empty(Dims{static_cast<int64_t>(layers.size()), one[0], one[1], one[2]});
  const int64_t n = layers[0].numel();
  for (size_t l = 0; l < layers.size(); ++l) {
    QKV_CHECK(layers[l].shape() == one, "attention: " << what << " layer " << l << " is " << layers[l].shape()
                                                      << ", layer 0 " << one);
    const Tensor c = layers[l].contiguous();
    std::memcpy(all.f32() + static_cast<int64_t>(l) * n, c.f32(), sizeof(float) * static_cast<size_t>(n));
  }
  return io::npy_bytes(all);
}

}  // namespace

std::string attention_file(const std::string& dir, size_t line) {
  char name[32];
  std::snprintf(name, sizeof name, "%04zu.npz", line);
  return dir + "/" + name;
}

void write_translation_attention(const std::string& path, const std::vector<std::string>& source_pieces,
                                 const std::vector<std::string>& target_pieces,
                                 const std::vector<std::string>& decoder_input_pieces,
                                 const decoding::AttentionWeights& w) {
  io::write_npz(path, {{"source_pieces", io::npy_string_bytes(source_pieces)},
                       {"target_pieces", io::npy_string_bytes(target_pieces)},
                       {"decoder_input_pieces", io::npy_string_bytes(decoder_input_pieces)},
                       {"cross_attention", stacked(w.cross, "cross-attention")},
                       {"decoder_self_attention", stacked(w.decoder_self, "decoder self-attention")},
                       {"encoder_self_attention", stacked(w.encoder_self, "encoder self-attention")}});
}

void write_generation_attention(const std::string& path, const std::vector<std::string>& pieces,
                                const decoding::AttentionWeights& w) {
  io::write_npz(path, {{"pieces", io::npy_string_bytes(pieces)}, {"self_attention", stacked(w.decoder_self, "self-attention")}});
}

void make_attention_dir(const std::string& dir) {
  std::error_code ec;
  QKV_CHECK(!std::filesystem::exists(dir, ec) || std::filesystem::is_directory(dir, ec),
            "--attention-out " << dir << ": exists and is not a directory");
  std::filesystem::create_directories(dir, ec);
  QKV_CHECK(!ec, "--attention-out " << dir << ": cannot create the directory (" << ec.message() << ")");
}

void draw_attention_files(const std::string& dir, const std::vector<std::string>& files) {
  constexpr size_t kFilesPerRun = 200;  // one python3 start per 200 files keeps argv short
  try {
    for (size_t begin = 0; begin < files.size(); begin += kFilesPerRun) {
      std::vector<std::string> args{"attention", "--quiet", "--out", dir, "--"};
      args.insert(args.end(), files.begin() + static_cast<std::ptrdiff_t>(begin),
                  files.begin() + static_cast<std::ptrdiff_t>(std::min(files.size(), begin + kFilesPerRun)));
      run_plot_script(args);
    }
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (the attention weights are written: " + std::to_string(files.size()) +
                " .npz file(s) in " + dir + ")");
  }
}

}  // namespace qkv::cli
