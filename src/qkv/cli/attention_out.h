// --attention-out DIR of `qkv translate` and `qkv generate`: one attention file per input line,
// DIR/NNNN.npz (the 1-based line number, 4 digits or more), and PNG heatmaps of it drawn by
// python/qkv/plot.py (python_plot.h). The .npz (np.load(path) reads it without pickle) holds:
//   translation: source_pieces (S,), target_pieces (T,) = the output's pieces and "</s>",
//     decoder_input_pieces (T,) = "<s>" and the output's pieces, and float32 arrays
//     cross_attention (L, H, T, S), decoder_self_attention (L, H, T, T),
//     encoder_self_attention (L, H, S, S);
//   generation: pieces (T,) = the tokens the model read (prompt and new tokens fed back) and
//     self_attention (L, H, T, T).
// Rows are queries, columns keys, each row a softmax (see decoding/attention.h).
#pragma once
#include <string>
#include <vector>

#include "qkv/decoding/attention.h"

namespace qkv::cli {

// DIR/NNNN.npz for input line `line` (1-based).
std::string attention_file(const std::string& dir, size_t line);

void write_translation_attention(const std::string& path, const std::vector<std::string>& source_pieces,
                                 const std::vector<std::string>& target_pieces,
                                 const std::vector<std::string>& decoder_input_pieces,
                                 const decoding::AttentionWeights& weights);
void write_generation_attention(const std::string& path, const std::vector<std::string>& pieces,
                                const decoding::AttentionWeights& weights);

// Creates `dir` (and its parents) if needed; an existing non-directory is an error.
void make_attention_dir(const std::string& dir);

// Draws the attention files `files` into PNGs in `dir` (DIR/NNNN-KIND-layerL.png; translation: the
// cross-attention of every layer, generation: the self-attention), a grid of every head each.
// When they cannot be drawn (no python3 with matplotlib, ...) the error says the files are there.
void draw_attention_files(const std::string& dir, const std::vector<std::string>& files);

}  // namespace qkv::cli
